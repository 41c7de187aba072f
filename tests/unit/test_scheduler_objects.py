"""The objects that run a SchedulerProfile's scheduler, built from plain data."""

from __future__ import annotations

from typing import Any

from kubeherd.scheduler.config import Lock
from kubeherd.scheduler.objects import (
    CONFIG_HASH_ANNOTATION,
    MANIFEST_HASH_ANNOTATION,
    OWNER_UID_LABEL,
    Owner,
    deployment,
    owned_objects,
)

OWNER = Owner("fast", "ops", "uid-1")


HOME_LOCK = Lock("fast", "ops")


def objects(spec: dict[str, Any] | None = None, lock: Lock = HOME_LOCK) -> list[Any]:
    return owned_objects(
        spec or {"profiles": [{"schedulerName": "fast"}]},
        OWNER,
        lock,
        image="registry.k8s.io/kube-scheduler:v1.37.2",
        configuration_text="kind: KubeSchedulerConfiguration\n",
        config_hash="abc",
    )


def by_kind(manifests: list[Any]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for manifest in manifests:
        found.setdefault(manifest["kind"], []).append(manifest)
    return found


def test_the_deployment_comes_last_so_its_pods_start_with_config_and_rbac_in_place() -> None:
    kinds = [m["kind"] for m in objects()]

    assert kinds[:2] == ["ServiceAccount", "ConfigMap"]
    assert kinds[-1] == "Deployment"
    assert (
        sorted(kinds[2:-1])
        == ["ClusterRoleBinding", "ClusterRoleBinding", "Role"] + ["RoleBinding"] * 2
    )


def test_only_objects_in_the_resources_namespace_get_an_owner_reference() -> None:
    for manifest in objects(lock=Lock("fast", "elsewhere")):
        metadata = manifest["metadata"]
        owned = "ownerReferences" in metadata
        assert owned == (metadata.get("namespace") == "ops"), metadata["name"]
        assert metadata["labels"][OWNER_UID_LABEL] == "uid-1"


def test_names_outside_the_namespace_carry_the_namespace_so_two_resources_never_collide() -> None:
    cluster_wide = by_kind(objects())["ClusterRoleBinding"]

    assert [b["metadata"]["name"] for b in cluster_wide] == [
        "kubeherd:ops:fast:kube-scheduler",
        "kubeherd:ops:fast:volume-scheduler",
    ]
    assert [b["roleRef"]["name"] for b in cluster_wide] == [
        "system:kube-scheduler",
        "system:volume-scheduler",
    ]
    assert all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": "fast", "namespace": "ops"}]
        for b in cluster_wide
    )


def test_the_lease_role_is_in_the_locks_namespace_and_names_only_its_lease() -> None:
    kinds = by_kind(objects(lock=Lock("my-lock", "elsewhere")))
    (role,) = kinds["Role"]

    assert role["metadata"]["namespace"] == "elsewhere"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["my-lock"],
            "verbs": ["get", "update"],
        },
    ]
    reader, lease_binding = kinds["RoleBinding"]
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert lease_binding["metadata"]["namespace"] == "elsewhere"
    assert lease_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }


def test_the_deployment_runs_kube_scheduler_restricted_with_https_probes() -> None:
    built = deployment(
        {"replicas": 1}, OWNER, image="registry.k8s.io/kube-scheduler:v1.37.2", config_hash="abc"
    )
    template = built["spec"]["template"]
    (container,) = template["spec"]["containers"]

    assert container["command"] == [
        "kube-scheduler",
        "--config=/etc/kubernetes/kubeherd/config.yaml",
    ]
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/livez",
        "port": 10259,
        "scheme": "HTTPS",
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # kubeadm's 15 s: the default 1 s is short for a TLS handshake on a busy node.
    assert {
        container[probe]["timeoutSeconds"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    } == {15}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    assert template["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert template["metadata"]["annotations"] == {CONFIG_HASH_ANNOTATION: "abc"}
    assert template["spec"]["volumes"] == [{"name": "config", "configMap": {"name": "fast-config"}}]
    assert "affinity" not in template["spec"]


def test_the_users_placement_and_command_reach_the_scheduler_pods() -> None:
    spec = {
        "replicas": 2,
        "command": ["/bin/kube-scheduler"],
        "nodeSelector": {"role": "infra"},
        "tolerations": [{"key": "infra", "operator": "Exists"}],
        "priorityClassName": "system-cluster-critical",
        "resources": {"limits": {"memory": "256Mi"}},
    }
    pod = deployment(spec, OWNER, image="img", config_hash="abc")["spec"]["template"]["spec"]

    assert pod["nodeSelector"] == {"role": "infra"}
    assert pod["tolerations"] == [{"key": "infra", "operator": "Exists"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["containers"][0]["command"][0] == "/bin/kube-scheduler"
    assert pod["containers"][0]["resources"] == {"limits": {"memory": "256Mi"}}
    # Two replicas: the standby should not share the leader's node.
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_a_new_configuration_changes_the_manifest_hash_and_the_same_one_does_not() -> None:
    def hashes(config_hash: str) -> dict[str, str]:
        manifest = deployment({}, OWNER, image="img", config_hash=config_hash)
        return {manifest["kind"]: manifest["metadata"]["annotations"][MANIFEST_HASH_ANNOTATION]}

    assert hashes("abc") == hashes("abc")
    assert hashes("abc") != hashes("def")


def test_scheduler_pods_in_kube_system_are_cluster_critical_unless_the_spec_says() -> None:
    def priority(spec: dict[str, Any], namespace: str) -> Any:
        owner = Owner("fast", namespace, "uid-1")
        built = deployment(spec, owner, image="img", config_hash="abc")
        return built["spec"]["template"]["spec"].get("priorityClassName")

    assert priority({}, "kube-system") == "system-cluster-critical"
    assert priority({"priorityClassName": "mine"}, "kube-system") == "mine"
    # Elsewhere a critical class may be refused by quota: the cluster's default applies.
    assert priority({}, "ops") is None
