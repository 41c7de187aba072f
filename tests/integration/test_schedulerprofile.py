"""A SchedulerProfile end to end: what kubeherd rolls out, and a real kube-scheduler running with
it (see schedulers.py: the configuration and ServiceAccount kubeherd made, as a local process)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeherd.scheduler.core.config import CONFIG_KEY, configuration_hash
from localcluster.nodes import fake_node_manifest
from tests.helpers import Operator, TrackedFakeNodes, eventually
from tests.integration.conftest import StartScheduler
from tests.integration.daemonsets import (
    load_example,
)
from tests.integration.schedulers import (
    SchedulerProfiles,
    condition,
    owned_by_uid,
    owned_versions,
    scheduled_by,
    scheduler_profile,
    wait_briefly,
    wait_for_binding,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

PAUSE = "registry.k8s.io/pause:3.10"


def unique(base: str, namespace: str) -> str:
    """Scheduler names are cluster-wide: each test gets its own."""
    return f"{base}-{namespace.rsplit('-', 1)[-1]}"


def pod(name: str, scheduler: str | None = None, **spec: Any) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "c", "image": PAUSE}], **spec}
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


def rolled_out(profiles: SchedulerProfiles, name: str) -> dict[str, Any]:
    """The resource once kubeherd validated it and its Deployment runs its configuration."""
    profiles.wait_for(name, "Valid", "True")
    return profiles.wait_for(name, "Progressing", "True", reason="RolledOut")


def test_a_schedulerprofile_rolls_out_its_configuration_rbac_and_deployment(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
    api_client: client.ApiClient,
) -> None:
    manifest = load_example("schedulerprofile-two-profiles.yaml")
    for profile in manifest["spec"]["profiles"]:
        profile["schedulerName"] = unique(profile["schedulerName"], namespace)
    uid = schedulerprofiles.create(manifest)["metadata"]["uid"]

    body = rolled_out(schedulerprofiles, "two-profiles")

    names = [p["schedulerName"] for p in manifest["spec"]["profiles"]]
    assert body["status"]["schedulerNames"] == ", ".join(names)
    config_hash = body["status"]["configHash"]
    config_map = core_v1.read_namespaced_config_map(f"two-profiles-config-{config_hash}", namespace)
    assert config_map.immutable is True
    configuration = yaml.safe_load(config_map.data[CONFIG_KEY])
    assert [p["schedulerName"] for p in configuration["profiles"]] == names
    lock = configuration["leaderElection"]
    assert (lock["resourceNamespace"], lock["resourceName"]) == (
        namespace,
        "kubeherd-two-profiles",
    )
    assert configuration_hash(config_map.data[CONFIG_KEY]) == config_hash

    deployment = apps_v1.read_namespaced_deployment("two-profiles", namespace)
    template = deployment.spec.template
    assert template.metadata.annotations["kubeherd.io/config-hash"] == config_hash
    assert deployment.metadata.owner_references[0].uid == uid
    assert template.spec.service_account_name == "two-profiles"
    (container,) = template.spec.containers
    version = client.VersionApi(api_client).get_code().git_version
    assert container.image == f"registry.k8s.io/kube-scheduler:{version}"
    assert container.command == ["kube-scheduler", "--config=/etc/kubernetes/kubeherd/config.yaml"]
    for probe, path in (
        (container.liveness_probe, "/livez"),
        (container.readiness_probe, "/readyz"),
    ):
        assert (probe.http_get.scheme, probe.http_get.port, probe.http_get.path) == (
            "HTTPS",
            10259,
            path,
        )
    assert template.spec.security_context.run_as_non_root is True
    assert template.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]

    rbac = client.RbacAuthorizationV1Api(api_client)
    subject = ("ServiceAccount", "two-profiles", namespace)
    prefix = f"kubeherd:{namespace}:two-profiles"
    for role in ("kube-scheduler", "volume-scheduler"):
        binding = rbac.read_cluster_role_binding(f"{prefix}:{role}")
        assert binding.role_ref.name == f"system:{role}"
        assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [subject]
    reader = rbac.read_namespaced_role_binding(f"{prefix}:authentication-reader", "kube-system")
    assert reader.role_ref.name == "extension-apiserver-authentication-reader"
    lease_role = rbac.read_namespaced_role(f"{prefix}:leader-election", namespace)
    assert [(r.verbs, r.resource_names) for r in lease_role.rules] == [
        (["create"], None),
        (["get", "update"], ["kubeherd-two-profiles"]),
    ]
    policy = client.NetworkingV1Api(api_client).read_namespaced_network_policy(
        "two-profiles", namespace
    )
    assert policy.spec.pod_selector.match_labels == deployment.spec.selector.match_labels
    assert len(owned_by_uid(api_client, uid)) == 9
    created = {e.message for e in schedulerprofiles.events("two-profiles", "Created")}
    assert f"created Deployment {namespace}/two-profiles" in created
    assert f"created ClusterRoleBinding {prefix}:kube-scheduler" in created


def test_pods_naming_a_profile_are_bound_by_its_scheduler_and_no_other(
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    namespace: str,
    core_v1: client.CoreV1Api,
) -> None:
    manifest = load_example("schedulerprofile-two-profiles.yaml")
    normal, no_scoring = (
        unique(p["schedulerName"], namespace) for p in manifest["spec"]["profiles"]
    )
    manifest["spec"]["profiles"][0]["schedulerName"] = normal
    manifest["spec"]["profiles"][1]["schedulerName"] = no_scoring
    schedulerprofiles.create(manifest)
    rolled_out(schedulerprofiles, "two-profiles")
    start_scheduler("two-profiles")

    for name, scheduler in (("a", normal), ("b", no_scoring), ("c", None)):
        core_v1.create_namespaced_pod(namespace, pod(name, scheduler))

    assert scheduled_by(core_v1, namespace, "a") == normal
    assert scheduled_by(core_v1, namespace, "b") == no_scoring
    assert scheduled_by(core_v1, namespace, "c") == "default-scheduler"
    body = schedulerprofiles.wait_for("two-profiles", "Available", "True")
    leader = body["status"]["leader"]
    assert leader
    schedulerprofiles.wait_for_event("two-profiles", "LeaderElected", leader)


def test_most_allocated_packs_pods_and_least_allocated_spreads_them_on_the_same_nodes(
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    fake_nodes: TrackedFakeNodes,
    namespace: str,
    core_v1: client.CoreV1Api,
) -> None:
    pool = {"kubeherd-test/pool": namespace}
    nodes = [f"{namespace[:40]}-{index}" for index in range(3)]
    taint = {"key": "kubeherd-test/pool", "value": namespace, "effect": "NoSchedule"}
    fake_nodes.create(
        [fake_node_manifest(n, zone="zone-a", labels=pool, taints=[taint]) for n in nodes]
    )
    manifest = load_example("schedulerprofile-packing.yaml")
    packing = unique("packing", namespace)
    spreading = unique("spreading", namespace)
    manifest["spec"]["profiles"][0]["schedulerName"] = packing
    manifest["spec"]["profiles"].append(
        {
            "schedulerName": spreading,
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {"scoringStrategy": {"type": "LeastAllocated"}},
                }
            ],
        }
    )
    schedulerprofiles.create(manifest)
    rolled_out(schedulerprofiles, "packing")
    start_scheduler("packing")
    # An eighth of a node's CPU and memory each (4 CPUs, 16 GiB).
    resources = {"requests": {"cpu": "500m", "memory": "2Gi"}}
    placement = {
        "nodeSelector": pool,
        "tolerations": [{**taint, "operator": "Equal"}],
    }

    def place(prefix: str, scheduler: str) -> set[str]:
        names = [f"{prefix}-{index}" for index in range(4)]
        for name in names:
            spec = pod(name, scheduler, **placement)
            spec["spec"]["containers"][0]["resources"] = resources
            core_v1.create_namespaced_pod(namespace, spec)
        return {wait_for_binding(core_v1, namespace, name) for name in names}

    packed = place("packed", packing)
    assert len(packed) == 1
    packed_pods = {f"packed-{index}" for index in range(4)}
    for name in packed_pods:
        core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    eventually(
        lambda: (
            not [
                p
                for p in core_v1.list_namespaced_pod(namespace).items
                if p.metadata.name in packed_pods
            ]
        ),
        what="the packed pods to go",
    )
    spread = place("spread", spreading)
    assert spread == set(nodes)


def test_one_of_two_schedulers_leads_on_the_configured_lease_and_the_other_takes_over(
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    namespace: str,
    core_v1: client.CoreV1Api,
    api_client: client.ApiClient,
) -> None:
    elected = unique("elected", namespace)
    election = {
        "leaderElect": True,
        "leaseDuration": "4s",
        "renewDeadline": "3s",
        "retryPeriod": "1s",
        "resourceName": "elected-lock",
    }
    schedulerprofiles.create(
        scheduler_profile(
            "elected", {"schedulerName": elected}, replicas=2, leaderElection=election
        )
    )
    rolled_out(schedulerprofiles, "elected")
    rbac = client.RbacAuthorizationV1Api(api_client)
    lease_role = f"kubeherd:{namespace}:elected:leader-election"
    assert rbac.read_namespaced_role(lease_role, namespace).rules[1].resource_names == [
        "elected-lock"
    ]

    schedulers = [start_scheduler("elected"), start_scheduler("elected")]
    leases = client.CoordinationV1Api(api_client)

    def holder() -> str | None:
        try:
            lease = leases.read_namespaced_lease("elected-lock", namespace)
        except ApiException:
            return None
        return lease.spec.holder_identity or None

    first_holder = eventually(holder, what=f"a holder of Lease {namespace}/elected-lock")
    wait_briefly(3)
    leaders = [s for s in schedulers if s.leads()]
    assert len(leaders) == 1
    schedulerprofiles.wait_for("elected", "Available", "True", leader=first_holder)

    leaders[0].kill()
    (follower,) = (s for s in schedulers if s is not leaders[0])
    eventually(follower.leads, timeout=30, what="the other scheduler to take the Lease")
    second_holder = eventually(
        lambda: h if (h := holder()) != first_holder else None, what="a new holder"
    )
    schedulerprofiles.wait_for("elected", "Available", "True", leader=second_holder)
    schedulerprofiles.wait_for_event("elected", "LeaderElected", second_holder)
    core_v1.create_namespaced_pod(namespace, pod("after-takeover", elected))
    assert scheduled_by(core_v1, namespace, "after-takeover") == elected


def test_an_edit_rolls_the_deployment_and_an_invalid_edit_leaves_the_scheduler_running(
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    namespace: str,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
) -> None:
    scheduler = unique("edited", namespace)
    schedulerprofiles.create(scheduler_profile("edited", {"schedulerName": scheduler}))
    first_hash = rolled_out(schedulerprofiles, "edited")["status"]["configHash"]

    schedulerprofiles.patch("edited", {"spec": {"percentageOfNodesToScore": 50}})

    body = rolled_out(schedulerprofiles, "edited")
    second_hash = body["status"]["configHash"]
    assert second_hash != first_hash
    deployment = apps_v1.read_namespaced_deployment("edited", namespace)
    assert deployment.spec.template.metadata.annotations["kubeherd.io/config-hash"] == second_hash
    assert deployment.metadata.generation == 2
    schedulerprofiles.wait_for_event("edited", "Updated", f"rolling to configuration {second_hash}")
    running = start_scheduler("edited")
    eventually(running.leads, what="the scheduler to lead")
    config_version = core_v1.read_namespaced_config_map(f"edited-config-{second_hash}", namespace)
    config_version = config_version.metadata.resource_version

    unknown_plugin = {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}
    schedulerprofiles.patch(
        "edited",
        {"spec": {"profiles": [{"schedulerName": scheduler, "plugins": unknown_plugin}]}},
    )

    invalid = schedulerprofiles.wait_for("edited", "Valid", "False")
    message = condition(invalid, "Valid")["message"]
    assert "spec.profiles[0].plugins.score.enabled[0]: NoSuchPlugin is not a plugin" in message
    assert f"configuration {second_hash} keeps running" in message
    warning = schedulerprofiles.wait_for_event("edited", "InvalidSpec", "NoSuchPlugin")
    assert warning.type == "Warning"
    wait_briefly(3)
    after = apps_v1.read_namespaced_deployment("edited", namespace)
    assert after.metadata.resource_version == deployment.metadata.resource_version
    config_map = core_v1.read_namespaced_config_map(f"edited-config-{second_hash}", namespace)
    assert config_map.metadata.resource_version == config_version
    assert schedulerprofiles.get("edited")["status"]["configHash"] == second_hash
    assert running.running()
    core_v1.create_namespaced_pod(namespace, pod("still-scheduled", scheduler))
    assert scheduled_by(core_v1, namespace, "still-scheduled") == scheduler


def test_deleting_a_schedulerprofile_removes_everything_it_made_cluster_scoped_included(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    election = {"resourceName": "lock"}
    body = schedulerprofiles.create(
        scheduler_profile(
            "doomed", {"schedulerName": unique("doomed", namespace)}, leaderElection=election
        )
    )
    rolled_out(schedulerprofiles, "doomed")
    made = owned_by_uid(api_client, body["metadata"]["uid"])
    assert f"Role {namespace}/kubeherd:{namespace}:doomed:leader-election" in made
    assert f"ClusterRoleBinding /kubeherd:{namespace}:doomed:kube-scheduler" in made
    assert f"RoleBinding kube-system/kubeherd:{namespace}:doomed:authentication-reader" in made
    assert len(made) == 9

    schedulerprofiles.delete("doomed")
    schedulerprofiles.wait_until_gone("doomed")

    assert owned_by_uid(api_client, body["metadata"]["uid"]) == []


def test_a_lock_in_another_namespace_is_refused_and_nothing_runs(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    other_namespace: str,
    api_client: client.ApiClient,
) -> None:
    # Its scheduler would get update rights on a Lease of a namespace its creator may not own.
    election = {"resourceName": "lock", "resourceNamespace": other_namespace}
    body = schedulerprofiles.create(
        scheduler_profile(
            "reaching", {"schedulerName": unique("reaching", namespace)}, leaderElection=election
        )
    )

    refused = schedulerprofiles.wait_for("reaching", "Valid", "False")

    message = condition(refused, "Valid")["message"]
    assert "spec.leaderElection.resourceNamespace: the Lease must be in" in message
    assert f"own namespace {namespace}, not {other_namespace}" in message
    assert owned_by_uid(api_client, body["metadata"]["uid"]) == []
    schedulerprofiles.patch("reaching", {"spec": {"leaderElection": {"resourceNamespace": None}}})
    rolled_out(schedulerprofiles, "reaching")


def test_a_scheduler_name_another_schedulerprofile_has_is_refused_until_it_is_free(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    other_namespace: str,
    apps_v1: client.AppsV1Api,
) -> None:
    shared = unique("shared", namespace)
    schedulerprofiles.create(scheduler_profile("first", {"schedulerName": shared}))
    rolled_out(schedulerprofiles, "first")
    later = SchedulerProfiles(schedulerprofiles.custom, schedulerprofiles.core, other_namespace)
    later.create(scheduler_profile("second", {"schedulerName": shared}))
    schedulerprofiles.created.append((other_namespace, "second"))

    refused = later.wait_for("second", "Valid", "False")

    message = condition(refused, "Valid")["message"]
    # Its author may not read the other namespace: the holder is not named.
    assert "already the scheduler name of a SchedulerProfile in another namespace" in message
    assert namespace not in message
    assert later.wait_for_event("second", "InvalidSpec", shared).type == "Warning"
    assert apps_v1.list_namespaced_deployment(other_namespace).items == []

    schedulerprofiles.delete("first")
    schedulerprofiles.wait_until_gone("first")
    later.wait_for("second", "Valid", "True")
    eventually(
        lambda: apps_v1.list_namespaced_deployment(other_namespace).items,
        what="the second resource's Deployment",
    )


def test_an_object_kubeherd_did_not_make_is_left_alone_and_reported(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    apps_v1: client.AppsV1Api,
) -> None:
    labels = {"app": "mine"}
    apps_v1.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "taken"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod("x")["spec"]},
            },
        },
    )
    schedulerprofiles.create(
        scheduler_profile("taken", {"schedulerName": unique("taken", namespace)})
    )

    body = schedulerprofiles.wait_for("taken", "Progressing", "False")

    progressing = condition(body, "Progressing")
    assert progressing["reason"] == "NameConflict"
    assert f"Deployment {namespace}/taken already exists" in progressing["message"]
    schedulerprofiles.wait_for_event("taken", "NameConflict", "kubeherd leaves it alone")
    mine = apps_v1.read_namespaced_deployment("taken", namespace)
    assert mine.metadata.generation == 1
    assert mine.spec.template.metadata.labels == labels


def test_seed_000_plugin_is_accepted_with_a_warning_only_from_a_custom_image(
    schedulerprofiles: SchedulerProfiles, namespace: str, apps_v1: client.AppsV1Api
) -> None:
    manifest = load_example("schedulerprofile-three-profiles.yaml")
    for profile in manifest["spec"]["profiles"]:
        profile["schedulerName"] = unique(profile["schedulerName"], namespace)
    custom_image = manifest["spec"]["image"]
    schedulerprofiles.create(manifest)

    rolled_out(schedulerprofiles, "three-profiles")
    warning = schedulerprofiles.wait_for_event(
        "three-profiles", "UnverifiedPlugin", "MyCustomPlugin"
    )
    assert warning.type == "Warning"
    deployment = apps_v1.read_namespaced_deployment("three-profiles", namespace)
    assert deployment.spec.template.spec.containers[0].image == custom_image

    schedulerprofiles.patch("three-profiles", {"spec": {"image": None}})

    refused = schedulerprofiles.wait_for("three-profiles", "Valid", "False")
    assert (
        "MyCustomPlugin is not a plugin of kube-scheduler" in condition(refused, "Valid")["message"]
    )
    running = apps_v1.read_namespaced_deployment("three-profiles", namespace)
    assert running.spec.template.spec.containers[0].image == custom_image


def test_a_deleted_deployment_is_made_again(
    schedulerprofiles: SchedulerProfiles, namespace: str, apps_v1: client.AppsV1Api
) -> None:
    schedulerprofiles.create(
        scheduler_profile("kept", {"schedulerName": unique("kept", namespace)})
    )
    rolled_out(schedulerprofiles, "kept")
    first = apps_v1.read_namespaced_deployment("kept", namespace).metadata.uid

    apps_v1.delete_namespaced_deployment("kept", namespace)

    def replaced() -> str | None:
        try:
            uid = apps_v1.read_namespaced_deployment("kept", namespace).metadata.uid
        except ApiException:
            return None
        return str(uid) if uid != first else None

    eventually(replaced, what="a new Deployment")
    rolled_out(schedulerprofiles, "kept")


def test_an_operator_restart_writes_nothing(
    schedulerprofiles: SchedulerProfiles,
    operator: Operator,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    body = schedulerprofiles.create(
        scheduler_profile("steady", {"schedulerName": unique("steady", namespace)})
    )
    rolled_out(schedulerprofiles, "steady")
    uid = body["metadata"]["uid"]

    def versions() -> dict[str, str]:
        found = owned_versions(api_client, uid)
        found["sp"] = schedulerprofiles.get("steady")["metadata"]["resourceVersion"]
        found["events"] = str(len(schedulerprofiles.events("steady")))
        return found

    wait_briefly(2)
    before = versions()
    assert len(before) == 11

    operator.stop()
    operator.start()
    wait_briefly(4)

    assert versions() == before


@pytest.mark.parametrize(
    ("name", "where", "election"),
    [
        # Named like the cluster's own scheduler, in kube-system, naming its Lease.
        (
            "kube-scheduler",
            "kube-system",
            {"leaderElect": True, "resourceName": "kube-scheduler"},
        ),
        # Any name, pointing its lock at the controller manager's Lease.
        (
            "borrower",
            None,
            {
                "leaderElect": True,
                "resourceName": "kube-controller-manager",
                "resourceNamespace": "kube-system",
            },
        ),
    ],
)
def test_a_lock_of_the_clusters_own_control_plane_is_refused_and_nothing_runs(
    schedulerprofiles: SchedulerProfiles,
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    where: str | None,
    election: dict[str, Any],
) -> None:
    created = schedulerprofiles.create(
        scheduler_profile(
            name, {"schedulerName": unique(name, namespace)}, leaderElection=election
        ),
        namespace=where,
    )

    refused = schedulerprofiles.wait_for(name, "Valid", "False", namespace=where)

    message = condition(refused, "Valid")["message"]
    assert "spec.leaderElection.resourceName" in message
    assert "belongs to the cluster's own" in message
    assert owned_by_uid(api_client, created["metadata"]["uid"]) == []


def test_a_lock_another_schedulerprofile_elects_on_is_refused_until_it_is_free(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    apps_v1: client.AppsV1Api,
) -> None:
    election = {"leaderElect": True, "resourceName": "shared-lock"}
    schedulerprofiles.create(
        scheduler_profile(
            "holder", {"schedulerName": unique("holder", namespace)}, leaderElection=election
        )
    )
    rolled_out(schedulerprofiles, "holder")
    schedulerprofiles.create(
        scheduler_profile(
            "borrower", {"schedulerName": unique("borrower", namespace)}, leaderElection=election
        )
    )

    refused = schedulerprofiles.wait_for("borrower", "Valid", "False")

    message = condition(refused, "Valid")["message"]
    assert f"Lease {namespace}/shared-lock is the lock of SchedulerProfile" in message
    assert f"{namespace}/holder" in message
    deployments = {d.metadata.name for d in apps_v1.list_namespaced_deployment(namespace).items}
    assert deployments == {"holder"}

    # The holder moves to a lock of its own: the Lease is free.
    schedulerprofiles.patch("holder", {"spec": {"leaderElection": {"resourceName": "own-lock"}}})
    schedulerprofiles.wait_for("borrower", "Valid", "True")


def test_an_official_image_of_a_minor_kubeherd_does_not_validate_for_is_refused(
    schedulerprofiles: SchedulerProfiles, namespace: str, apps_v1: client.AppsV1Api
) -> None:
    schedulerprofiles.create(
        scheduler_profile(
            "older",
            {"schedulerName": unique("older", namespace)},
            image="registry.k8s.io/kube-scheduler:v1.33.4",
        )
    )

    refused = schedulerprofiles.wait_for("older", "Valid", "False", "InvalidSpec")

    message = condition(refused, "Valid")["message"]
    assert "spec.image: kube-scheduler v1.33.4 is Kubernetes 1.33" in message
    assert "validates configurations for 1.34, 1.35, 1.36, 1.37" in message
    schedulerprofiles.wait_for_event("older", "InvalidSpec", "Kubernetes 1.33")
    with pytest.raises(ApiException) as missing:
        apps_v1.read_namespaced_deployment("older", namespace)
    assert missing.value.status == 404


def test_an_official_image_of_1_34_refuses_a_plugin_1_34_lacks_naming_the_minor(
    schedulerprofiles: SchedulerProfiles, namespace: str, apps_v1: client.AppsV1Api
) -> None:
    schedulerprofiles.create(
        scheduler_profile(
            "gang",
            {
                "schedulerName": unique("gang", namespace),
                "plugins": {"permit": {"enabled": [{"name": "GangScheduling"}]}},
            },
            image="registry.k8s.io/kube-scheduler:v1.34.4",
        )
    )

    refused = schedulerprofiles.wait_for("gang", "Valid", "False", "InvalidSpec")

    assert (
        "GangScheduling is not a plugin of kube-scheduler 1.34 (it is in 1.35, 1.36, 1.37)"
        in condition(refused, "Valid")["message"]
    )
    with pytest.raises(ApiException) as missing:
        apps_v1.read_namespaced_deployment("gang", namespace)
    assert missing.value.status == 404
