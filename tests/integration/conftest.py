"""Fixtures of the CustomDaemonSet and SchedulerProfile tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import is_ready
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets
from tests.integration.schedulers import LocalScheduler, SchedulerProfiles, scheduler_pods

# How much of the cluster's state a failed test shows: enough to tell a stuck node or kwok from a
# controller's fault, little enough to read in CI's output.
FAILURE_LINES = 12


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test shows the session cluster as it was at the failure: the nodes that are not
    Ready, the test's pods that are not Ready, and kwok's last errors. The cluster is gone once
    the session ends, and CI keeps only this output."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "teardown" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    cluster, core = funcargs.get("local_cluster"), funcargs.get("core_v1")
    if not isinstance(cluster, LocalCluster) or not isinstance(core, client.CoreV1Api):
        return
    try:
        text = cluster_at_failure(cluster, core, funcargs.get("namespace"))
    except Exception as error:  # the picture is a help, never a second failure
        text = f"(the cluster could not be read: {error})"
    report.sections.append(("cluster at the failure", text))


def cluster_at_failure(cluster: LocalCluster, core: client.CoreV1Api, namespace: object) -> str:
    nodes = core.list_node(_request_timeout=10).items
    not_ready = [node for node in nodes if not is_ready(node)]
    lines = [f"{len(nodes)} nodes, {len(not_ready)} not Ready"]
    for node in not_ready[:FAILURE_LINES]:
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        said = (
            f"{ready.status} {ready.reason}, heartbeat {ready.last_heartbeat_time}" if ready else ""
        )
        lines.append(f"  node {node.metadata.name}: {said or 'no Ready condition'}")
    if isinstance(namespace, str):
        pods = core.list_namespaced_pod(namespace, _request_timeout=10).items
        waiting = [pod for pod in pods if not is_ready(pod)]  # a pod's Ready reads as a node's
        lines.append(f"{len(pods)} pods in {namespace}, {len(waiting)} not Ready")
        for pod in waiting[:FAILURE_LINES]:
            node = pod.spec.node_name or "(not bound)"
            lines.append(f"  pod {pod.metadata.name} on {node}: {pod.status.phase}")
    kwok_errors = [
        line
        for line in (cluster.logs / "kwok.log").read_text(errors="replace").splitlines()
        if '"level":"ERROR"' in line
    ]
    lines.append(f"kwok: {len(kwok_errors)} errors logged, the last ones:")
    for line in kwok_errors[-FAILURE_LINES:]:
        entry = json.loads(line)
        lines.append(f"  {entry.get('time')} {entry.get('msg')}: {str(entry.get('err'))[:160]}")
    return "\n".join(lines)


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
