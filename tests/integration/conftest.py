"""Fixtures of the CustomDaemonSet and SchedulerProfile tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets
from tests.integration.schedulers import LocalScheduler, SchedulerProfiles, scheduler_pods


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

    def start(profile: str, *, ready: bool = True, pod: str | None = None) -> LocalScheduler:
        """As `pod`; default: one of the Deployment's pods that no scheduler stands in for."""
        if pod is None:
            taken = {s.pod for s in started if s.profile == profile}

            def free_pod() -> str | None:
                pods = scheduler_pods(core_v1, namespace, profile)
                return next((name for name in pods if name not in taken), None)

            pod = eventually(free_pod, what=f"a pod of {profile} to stand in for")
        scheduler = LocalScheduler(
            binaries.path("kube-scheduler"),
            local_cluster,
            core_v1,
            local_cluster.logs / namespace,
            namespace=namespace,
            profile=profile,
            pod=pod,
        )
        started.append(scheduler)
        return scheduler.start(wait_until_ready=ready)

    yield start
    for scheduler in started:
        scheduler.stop()
