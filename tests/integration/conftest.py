"""Fixtures of the CustomDaemonSet and SchedulerProfile tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.integration.daemonsets import DaemonSets
from tests.integration.schedulers import LocalScheduler, SchedulerProfiles


@pytest.fixture(scope="session")
def custom_api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def daemonsets(
    custom_api: client.CustomObjectsApi,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
    namespace: str,
) -> DaemonSets:
    return DaemonSets(custom_api, core_v1, apps_v1, namespace)


@pytest.fixture
def schedulerprofiles(
    custom_api: client.CustomObjectsApi, core_v1: client.CoreV1Api, namespace: str
) -> Iterator[SchedulerProfiles]:
    profiles = SchedulerProfiles(custom_api, core_v1, namespace)
    yield profiles
    profiles.clean_up()


StartScheduler = Callable[..., LocalScheduler]


@pytest.fixture
def start_scheduler(
    binaries: Binaries, local_cluster: LocalCluster, core_v1: client.CoreV1Api, namespace: str
) -> Iterator[StartScheduler]:
    """Start kube-scheduler processes for a SchedulerProfile of the test; all stop at the end."""
    started: list[LocalScheduler] = []

    def start(profile: str, *, ready: bool = True) -> LocalScheduler:
        scheduler = LocalScheduler(
            binaries.path("kube-scheduler"),
            local_cluster,
            core_v1,
            local_cluster.logs / namespace,
            namespace=namespace,
            profile=profile,
        )
        started.append(scheduler)
        return scheduler.start(wait_until_ready=ready)

    yield start
    for scheduler in started:
        scheduler.stop()
