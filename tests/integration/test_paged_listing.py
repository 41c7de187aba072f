"""kubeherd on an API server that does not stream listings: its administrator turned the
WatchList feature gate off (on by default since Kubernetes 1.34).

kubeherd lists its nodes and daemon pods with a watch that starts with every object; such an
API server refuses that watch, and kubeherd lists them a page at a time instead, then watches
as before. A second local cluster runs with the gate off; the chart installs with its default
values, and the operator runs against it as a process, with the chart's ServiceAccount. What
the tests look at is what a user sees (daemon pods on the nodes, a joining node getting its
own), the operator's log, and what the API server's audit log recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import FakeNodes
from tests.conftest import RELEASE, RELEASE_NAMESPACE, on_kind, temporary_namespace
from tests.helpers import REPO, Kubectl, OperatorProcess, service_account_kubeconfig
from tests.integration.daemonsets import WORKERS, DaemonSets, agent
from tests.integration.test_chart import CHART, helm
from tests.integration.test_transport import Audit, resource_of, streaming_listings

pytestmark = [pytest.mark.cluster]

OPERATOR_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"


@pytest.fixture(scope="module")
def paged_cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    if on_kind(request.config):
        pytest.skip("a local cluster with a feature gate off: kind's API server is its own")
    cluster = LocalCluster(
        REPO / ".cluster" / "pytest-paged-listing",
        binaries,
        nodes=3,
        apiserver_feature_gates=("WatchList=false",),
    )
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def test_without_streaming_lists_nodes_and_pods_are_listed_in_pages_and_watched(
    paged_cluster: LocalCluster, binaries: Binaries
) -> None:
    api = config.new_client_from_config(config_file=str(paged_cluster.kubeconfig))
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    kubeconfig = f"--kubeconfig={paged_cluster.kubeconfig}"
    helm(binaries, kubeconfig, "upgrade", "--install", RELEASE, str(CHART),
         f"--namespace={RELEASE_NAMESPACE}", "--create-namespace")  # fmt: skip
    kubectl = Kubectl(binaries.path("kubectl"), paged_cluster.kubeconfig)
    for crd in ("customdaemonsets", "schedulerprofiles"):
        kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}.kubeherd.io")
    token = service_account_kubeconfig(
        paged_cluster, core, RELEASE_NAMESPACE, RELEASE, paged_cluster.logs / "operator"
    )
    audit = Audit(paged_cluster)
    operator = OperatorProcess(paged_cluster, name="kubeherd", kubeconfig=token)
    operator.start()
    try:
        with temporary_namespace(core, "paged-agents") as namespace:
            daemonsets = DaemonSets(custom, core, apps, namespace)
            name = daemonsets.create(agent())
            daemonsets.wait_for_nodes(name, WORKERS)
            # The watch that follows a listing in pages sees a node join.
            FakeNodes(core).add("joined-later")
            daemonsets.wait_for_nodes(name, WORKERS | {"joined-later"})
            daemonsets.delete(name)
        log = operator.output()
    finally:
        operator.stop()

    for what in ("nodes", "daemon pods"):
        assert f"The API server does not stream the {what} listing" in log, log[-3000:]
    events = audit.events(OPERATOR_USER)
    assert streaming_listings(events) == {"nodes": {422}, "pods": {422}}
    # Asked once each: from then on, listed in pages.
    assert sum("sendInitialEvents=true" in e["requestURI"] for e in events) == 2
    listed = {resource_of(e) for e in events if e["verb"] == "list"}
    assert {"nodes", "pods"} <= listed, listed
