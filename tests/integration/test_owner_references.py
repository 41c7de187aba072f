"""The operator's identity on a cluster that enforces owner references, as OpenShift does
(the OwnerReferencesPermissionEnforcement admission plugin): what kubeherd makes names its
CustomDaemonSet or SchedulerProfile as owner with blockOwnerDeletion, which the API server then
allows only to whoever may update that owner's finalizers. The session's cluster runs without
the plugin, so the chart's ClusterRole is proven for it here, on a cluster of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubeherd.meta import controller_reference
from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.helpers import REPO, OperatorProcess, eventually, service_account_kubeconfig
from tests.integration.daemonsets import FLUENTD, DaemonSets
from tests.integration.schedulers import scheduler_profile
from tests.integration.test_chart import CHART, helm

pytestmark = [pytest.mark.cluster]

NAMESPACE = "agents"


@pytest.fixture(scope="module")
def enforcing_cluster(binaries: Binaries) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        REPO / ".cluster" / "pytest-owner-references",
        binaries,
        nodes=1,
        admission_plugins=("OwnerReferencesPermissionEnforcement",),
    )
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def daemon_pod(owner: dict[str, Any]) -> dict[str, Any]:
    """A pod as the operator makes it for `owner`, as far as the plugin looks at it."""
    return {
        "metadata": {
            "generateName": "owned-",
            "ownerReferences": [controller_reference(owner, "CustomDaemonSet")],
        },
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def test_the_operators_identity_may_name_its_resources_as_blocking_owners(
    binaries: Binaries, enforcing_cluster: LocalCluster, tmp_path: Path
) -> None:
    kubeconfig = f"--kubeconfig={enforcing_cluster.kubeconfig}"
    api = config.new_client_from_config(config_file=str(enforcing_cluster.kubeconfig))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom, rbac = client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
    helm(binaries, kubeconfig, "install", "kubeherd", str(CHART), "-n", "ops", "--create-namespace")
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    daemonsets = DaemonSets(custom, core, apps, NAMESPACE)
    daemonsets.create(FLUENTD)
    owner = daemonsets.get(FLUENTD["metadata"]["name"])

    def plugin_knows_the_kind() -> bool:
        """The plugin maps the owner's kind to its resource from discovery, which it reads
        again at most every 30 s: until then a new CRD's kind is refused to everyone."""
        try:
            core.create_namespaced_pod(NAMESPACE, daemon_pod(owner), dry_run="All")
        except ApiException as refused:
            if "cannot find RESTMapping" not in str(refused.body):
                raise
            return False
        return True

    eventually(plugin_knows_the_kind, timeout=60, what="the plugin to map CustomDaemonSet")
    # The plugin is on: an identity that may create pods but not update the owner's
    # finalizers is refused the operator's owner reference.
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "pod-maker"}})
    rbac.create_namespaced_role(
        NAMESPACE,
        {
            "metadata": {"name": "pod-maker"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        NAMESPACE,
        {
            "metadata": {"name": "pod-maker"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-maker",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "pod-maker", "namespace": NAMESPACE}],
        },
    )
    pod_maker = client.CoreV1Api(
        config.new_client_from_config(
            config_file=str(
                service_account_kubeconfig(
                    enforcing_cluster, core, NAMESPACE, "pod-maker", tmp_path
                )
            )
        )
    )
    with pytest.raises(ApiException) as refused:
        pod_maker.create_namespaced_pod(NAMESPACE, daemon_pod(owner), dry_run="All")
    assert refused.value.status == 403
    assert "cannot set blockOwnerDeletion" in refused.value.body

    # The operator, as the chart's ServiceAccount, makes what both of its resources own.
    token = service_account_kubeconfig(enforcing_cluster, core, "ops", "kubeherd", tmp_path)
    operator = OperatorProcess(enforcing_cluster, name="operator", kubeconfig=token)
    try:
        operator.start()
        (node,) = (n.metadata.name for n in core.list_node().items)
        (pod,) = daemonsets.wait_for_nodes(FLUENTD["metadata"]["name"], {node})
        assert pod.metadata.owner_references[0].block_owner_deletion is True
        assert "FailedCreate" not in operator.output()

        profile = scheduler_profile("owned", {"schedulerName": "owned"}, replicas=1)
        custom.create_namespaced_custom_object(
            "kubeherd.io", "v1alpha1", NAMESPACE, "schedulerprofiles", profile
        )

        def deployment() -> Any:
            try:
                return apps.read_namespaced_deployment("owned", NAMESPACE)
            except ApiException as missing:
                if missing.status != 404:
                    raise
                return None

        made = eventually(deployment, timeout=60, what="the SchedulerProfile's Deployment")
        (reference,) = made.metadata.owner_references
        assert (reference.kind, reference.block_owner_deletion) == ("SchedulerProfile", True)
    finally:
        operator.stop()
