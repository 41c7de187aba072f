"""The objects that run a SchedulerProfile's scheduler, built from plain data."""

from __future__ import annotations

from typing import Any

from kubeherd.scheduler.core.config import Lock
from kubeherd.scheduler.core.objects import (
    CONFIG_HASH_ANNOTATION,
    SCHEDULER_NAMES_ANNOTATION,
    config_maps_in_use,
    deployment,
    owned_objects,
)
from kubeherd.scheduler.core.owner import MANIFEST_HASH_LABEL, OWNER_UID_LABEL, Owner

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
    assert sorted(kinds[2:-1]) == [
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "RoleBinding",
    ]


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
    assert template["spec"]["volumes"] == [
        {"name": "config", "configMap": {"name": "fast-config-abc"}}
    ]
    assert "topologySpreadConstraints" not in template["spec"]


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


def test_a_new_configuration_changes_the_manifest_hash_and_the_same_one_does_not() -> None:
    def hashes(config_hash: str) -> dict[str, str]:
        manifest = deployment({}, OWNER, image="img", config_hash=config_hash)
        return {manifest["kind"]: manifest["metadata"]["labels"][MANIFEST_HASH_LABEL]}

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


def test_each_configuration_has_an_immutable_config_map_the_pods_of_its_hash_mount() -> None:
    built = by_kind(objects())
    (config_map,) = built["ConfigMap"]
    (scheduler,) = built["Deployment"]

    assert config_map["metadata"]["name"] == "fast-config-abc"
    assert config_map["immutable"] is True
    assert config_map["data"] == {"config.yaml": "kind: KubeSchedulerConfiguration\n"}
    # What the status shows as schedulerNames once this configuration runs.
    assert config_map["metadata"]["annotations"] == {SCHEDULER_NAMES_ANNOTATION: "fast"}
    volumes = scheduler["spec"]["template"]["spec"]["volumes"]
    assert config_maps_in_use([scheduler["spec"]["template"]]) == {"fast-config-abc"}
    assert volumes[0]["configMap"]["name"] == config_map["metadata"]["name"]


def test_config_maps_in_use_are_those_any_template_mounts() -> None:
    def template(*names: str) -> dict[str, Any]:
        volumes = [{"name": n, "configMap": {"name": n}} for n in names]
        return {"spec": {"volumes": [*volumes, {"name": "scratch", "emptyDir": {}}]}}

    assert config_maps_in_use([template("a-config-1"), template("a-config-2"), {}]) == {
        "a-config-1",
        "a-config-2",
    }
    assert config_maps_in_use([]) == set()


def test_standbys_spread_over_nodes_surely_and_over_zones_if_they_can() -> None:
    manifest = deployment({"replicas": 3}, OWNER, image="img", config_hash="abc")
    pod = manifest["spec"]["template"]

    spread = pod["spec"]["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"], c["maxSkew"]) for c in spread] == [
        ("kubernetes.io/hostname", "DoNotSchedule", 1),
        ("topology.kubernetes.io/zone", "ScheduleAnyway", 1),
    ]
    for constraint in spread:
        assert constraint["labelSelector"] == manifest["spec"]["selector"]
        # Per ReplicaSet: a rollout's new pods spread among themselves.
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]
        # A node the pods may not use is no domain: one eligible node takes every replica.
        assert (constraint["nodeAffinityPolicy"], constraint["nodeTaintsPolicy"]) == (
            "Honor",
            "Honor",
        )


def test_standbys_get_a_budget_that_lets_a_drain_evict_one_scheduler_at_a_time() -> None:
    assert "PodDisruptionBudget" not in by_kind(objects())
    spec = {"profiles": [{"schedulerName": "fast"}], "replicas": 2}
    (budget,) = by_kind(objects(spec))["PodDisruptionBudget"]

    assert budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["namespace"] == "ops"
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "kube-scheduler",
                "app.kubernetes.io/instance": "fast",
            }
        },
    }


def test_the_network_policy_lets_the_scheduler_reach_out_and_the_kubelet_probe_it() -> None:
    (policy,) = by_kind(objects())["NetworkPolicy"]

    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "fast"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == [{}]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 10259}]}]


def test_a_custom_image_gets_its_pull_secrets_and_extra_cluster_roles() -> None:
    spec = {
        "profiles": [{"schedulerName": "fast"}],
        "image": "example.com/scheduler-plugins:v0.31",
        "imagePullSecrets": ["registry"],
        "extraClusterRoles": ["scheduler-plugins:podgroups", "x" * 250],
    }
    built = by_kind(objects(spec))
    pod = built["Deployment"][0]["spec"]["template"]["spec"]

    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    extra = [
        b for b in built["ClusterRoleBinding"] if b["roleRef"]["name"] in spec["extraClusterRoles"]
    ]
    assert [b["roleRef"]["name"] for b in extra] == spec["extraClusterRoles"]
    assert extra[0]["metadata"]["name"] == "kubeherd:ops:fast:extra:scheduler-plugins:podgroups"
    # A name that would pass 253 characters gets the role's hash instead.
    assert len(extra[1]["metadata"]["name"]) <= 253
    assert extra[1]["metadata"]["name"].startswith("kubeherd:ops:fast:")
    assert all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": "fast", "namespace": "ops"}]
        for b in extra
    )


def test_the_longest_names_the_api_allows_make_valid_object_names() -> None:
    owner = Owner("n" * 63, "s" * 63, "uid-1")
    manifests = owned_objects(
        {"profiles": [{"schedulerName": "fast"}], "replicas": 2},
        owner,
        Lock("kubeherd-" + "n" * 63, "s" * 63),
        image="img",
        configuration_text="",
        config_hash="0123456789abcdef",
    )
    for manifest in manifests:
        metadata = manifest["metadata"]
        assert len(metadata["name"]) <= 253, metadata["name"]
        assert all(len(value) <= 63 for value in metadata["labels"].values())


def test_the_default_memory_request_is_more_than_an_empty_scheduler_needs() -> None:
    pod = deployment({}, OWNER, image="img", config_hash="abc")["spec"]["template"]["spec"]

    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
