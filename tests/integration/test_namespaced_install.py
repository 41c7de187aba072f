"""The chart with `operator.namespace` set: the operator's rights on namespaced objects are a
Role in that namespace (and what a scheduler needs in kube-system), not a ClusterRole, and an
operator running with them manages that namespace's resources."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.helpers import REPO, Kubectl, Operator, OperatorProcess, service_account_kubeconfig
from tests.integration.daemonsets import WORKERS, DaemonSets, agent
from tests.integration.schedulers import SchedulerProfiles, scheduler_profile

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds_installed")]


@pytest.fixture
def namespaced_release(
    binaries: Binaries, local_cluster: LocalCluster, other_namespace: str, namespace: str
) -> Iterator[str]:
    """A second release of the chart in `other_namespace`, serving `namespace` only; the
    session's release keeps the CRDs."""
    release = f"kubeherd-ns-{secrets.token_hex(3)}"
    helm = [str(binaries.path("helm")), f"--kubeconfig={local_cluster.kubeconfig}"]
    subprocess.run(
        [
            *helm,
            "install",
            release,
            str(REPO / "charts" / "kubeherd"),
            f"--namespace={other_namespace}",
            f"--set=operator.namespace={namespace}",
            "--set=crds.install=false",
            "--set=webhook.enabled=false",
            "--set=metrics.enabled=false",
            "--set=rbac.aggregateToDefaultRoles=false",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    yield release
    subprocess.run(
        [*helm, "uninstall", release, f"--namespace={other_namespace}", "--wait"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def may(kubectl: Kubectl, user: str, verb: str, resource: str, namespace: str = "") -> bool:
    where = [f"--namespace={namespace}"] if namespace else []
    answer = kubectl("auth", "can-i", verb, resource, *where, f"--as={user}", check=False)
    return answer.stdout.strip() == "yes"


def test_the_operator_of_one_namespace_may_write_there_only(
    namespaced_release: str, kubectl: Kubectl, namespace: str, other_namespace: str
) -> None:
    operator = f"system:serviceaccount:{other_namespace}:{namespaced_release}"

    for resource in ("pods", "deployments.apps", "roles.rbac.authorization.k8s.io"):
        assert may(kubectl, operator, "create", resource, namespace)
        assert not may(kubectl, operator, "create", resource, "default")
    assert may(kubectl, operator, "create", "rolebindings.rbac.authorization.k8s.io", "kube-system")
    assert not may(kubectl, operator, "create", "roles.rbac.authorization.k8s.io", "kube-system")
    assert may(kubectl, operator, "list", "nodes")
    assert not may(kubectl, operator, "patch", "nodes")


@pytest.fixture
def namespaced_operator(
    namespaced_release: str,
    local_cluster: LocalCluster,
    core_v1: client.CoreV1Api,
    other_namespace: str,
    namespace: str,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """`kubeherd run --namespace` with the second release's token; the session's operator,
    which serves every namespace, stopped meanwhile."""
    session: Operator = request.getfixturevalue("operator")
    session.stop()
    kubeconfig = service_account_kubeconfig(
        local_cluster, core_v1, other_namespace, namespaced_release, local_cluster.logs / namespace
    )
    process = OperatorProcess(
        local_cluster,
        name=f"namespaced-{namespace}",
        arguments=(f"--namespace={namespace}",),
        kubeconfig=kubeconfig,
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()
        session.start()


def test_with_those_rights_it_runs_daemon_pods_and_a_scheduler(
    namespaced_operator: OperatorProcess,
    daemonsets: DaemonSets,
    schedulerprofiles: SchedulerProfiles,
    apps_v1: client.AppsV1Api,
    namespace: str,
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS, timeout=120)

    schedulerprofiles.create(scheduler_profile("extra", {"schedulerName": f"{namespace}-extra"}))
    schedulerprofiles.wait_for("extra", "Valid", "True")

    assert [d.metadata.name for d in apps_v1.list_namespaced_deployment(namespace).items] == [
        "extra"
    ]
