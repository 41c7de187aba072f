"""A SchedulerProfile's configurations over time: one immutable ConfigMap each, kept while a
ReplicaSet of the scheduler Deployment mounts it; `kubectl rollout undo` brings back a template
with its own configuration; the status names a configuration only once its pods are available;
who leads is one of its own pods or nobody. And the objects that keep standbys apart, a custom
image's extras, and the names the API refuses."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeherd.scheduler.core.config import CONFIG_KEY, configuration_hash
from tests.helpers import Kubectl, eventually
from tests.integration.conftest import StartScheduler
from tests.integration.schedulers import (
    SchedulerProfiles,
    condition,
    scheduler_profile,
    wait_briefly,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

HASH_ANNOTATION = "kubeherd.io/config-hash"


def unique(base: str, namespace: str) -> str:
    return f"{base}-{namespace.rsplit('-', 1)[-1]}"


def rolled_out(profiles: SchedulerProfiles, name: str) -> dict[str, Any]:
    profiles.wait_for(name, "Valid", "True")
    return profiles.wait_for(name, "Progressing", "True", reason="RolledOut")


def config_maps(core: client.CoreV1Api, namespace: str, name: str) -> set[str]:
    listed = core.list_namespaced_config_map(namespace).items
    return {c.metadata.name for c in listed if c.metadata.name.startswith(f"{name}-config-")}


def mounted(template: Any) -> str:
    (volume,) = (v for v in template.spec.volumes if v.config_map is not None)
    return str(volume.config_map.name)


def mounted_by_replica_sets(apps: client.AppsV1Api, namespace: str, name: str) -> set[str]:
    selector = f"app.kubernetes.io/instance={name}"
    return {
        mounted(rs.spec.template)
        for rs in apps.list_namespaced_replica_set(namespace, label_selector=selector).items
    }


def edit(profiles: SchedulerProfiles, name: str, percentage: int) -> str:
    """A new configuration; its hash once it runs."""
    profiles.patch(name, {"spec": {"percentageOfNodesToScore": percentage}})
    return str(rolled_out(profiles, name)["status"]["configHash"])


def test_each_configuration_keeps_its_config_map_while_a_replica_set_mounts_it(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
) -> None:
    schedulerprofiles.create(scheduler_profile("kept", {"schedulerName": unique("k", namespace)}))
    first = rolled_out(schedulerprofiles, "kept")["status"]["configHash"]
    second = edit(schedulerprofiles, "kept", 20)

    # The old ReplicaSet is in the history: its configuration stays, unchanged and immutable.
    assert config_maps(core_v1, namespace, "kept") == {
        f"kept-config-{first}",
        f"kept-config-{second}",
    }
    old = core_v1.read_namespaced_config_map(f"kept-config-{first}", namespace)
    assert old.immutable is True
    assert configuration_hash(old.data[CONFIG_KEY]) == first
    with pytest.raises(ApiException) as refused:
        core_v1.patch_namespaced_config_map(
            f"kept-config-{first}", namespace, {"data": {CONFIG_KEY: "changed"}}
        )
    assert refused.value.status == 422

    # revisionHistoryLimit 3: after three more configurations the first ReplicaSet is gone, and
    # so is its ConfigMap; every ConfigMap left is one a ReplicaSet mounts.
    hashes = [first, second, *(edit(schedulerprofiles, "kept", p) for p in (30, 40, 50))]

    def pruned() -> set[str] | None:
        left = config_maps(core_v1, namespace, "kept")
        in_use = mounted_by_replica_sets(apps_v1, namespace, "kept")
        return left if left == in_use and f"kept-config-{first}" not in left else None

    left = eventually(pruned, timeout=90, what="the first configuration's ConfigMap to go")
    assert f"kept-config-{hashes[-1]}" in left
    assert len(left) == 4  # the current ReplicaSet and the three of the history


def test_rollout_undo_brings_back_the_old_template_with_its_own_configuration(
    schedulerprofiles: SchedulerProfiles,
    kubectl: Kubectl,
    namespace: str,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
) -> None:
    schedulerprofiles.create(scheduler_profile("undone", {"schedulerName": unique("u", namespace)}))
    first = rolled_out(schedulerprofiles, "undone")["status"]["configHash"]
    second = edit(schedulerprofiles, "undone", 20)

    kubectl("-n", namespace, "rollout", "undo", "deployment/undone")

    def back() -> Any:
        template = apps_v1.read_namespaced_deployment("undone", namespace).spec.template
        return template if template.metadata.annotations[HASH_ANNOTATION] == first else None

    template = eventually(back, what="the Deployment's template of the first configuration")
    assert mounted(template) == f"undone-config-{first}"
    config_map = core_v1.read_namespaced_config_map(f"undone-config-{first}", namespace)
    assert configuration_hash(config_map.data[CONFIG_KEY]) == first
    assert yaml.safe_load(config_map.data[CONFIG_KEY])["percentageOfNodesToScore"] == 0
    body = schedulerprofiles.wait_for("undone", "Progressing", "False", "RolledBack")
    assert (
        f"configuration {first}, not the spec's {second}"
        in condition(body, "Progressing")["message"]
    )
    schedulerprofiles.wait_for_event("undone", "RolledBack", f"configuration {first}")
    eventually(
        lambda: schedulerprofiles.get("undone")["status"]["configHash"] == first or None,
        what="the status to name the configuration the undo brought back",
    )

    # kubeherd leaves the undo alone, and the next spec change rolls forward.
    wait_briefly(6)
    template = apps_v1.read_namespaced_deployment("undone", namespace).spec.template
    assert template.metadata.annotations[HASH_ANNOTATION] == first
    third = edit(schedulerprofiles, "undone", 30)
    template = apps_v1.read_namespaced_deployment("undone", namespace).spec.template
    assert mounted(template) == f"undone-config-{third}"


def test_the_status_names_a_configuration_only_once_its_pods_are_available(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    apps_v1: client.AppsV1Api,
) -> None:
    scheduler = unique("s", namespace)
    schedulerprofiles.create(scheduler_profile("slow", {"schedulerName": scheduler}))
    first = rolled_out(schedulerprofiles, "slow")["status"]["configHash"]

    # A new configuration whose pod no node can take: the rollout cannot finish.
    schedulerprofiles.patch(
        "slow",
        {"spec": {"percentageOfNodesToScore": 20, "nodeSelector": {"kubeherd.io/none": "x"}}},
    )

    body = schedulerprofiles.wait_for("slow", "Progressing", "True", "RollingOut")
    new = apps_v1.read_namespaced_deployment("slow", namespace).spec.template
    pending = new.metadata.annotations[HASH_ANNOTATION]
    assert pending != first
    assert body["status"]["configHash"] == first
    assert f"configuration {first} still runs" in condition(body, "Progressing")["message"]
    wait_briefly(4)
    assert schedulerprofiles.get("slow")["status"]["configHash"] == first

    schedulerprofiles.patch("slow", {"spec": {"nodeSelector": None}})

    body = rolled_out(schedulerprofiles, "slow")
    assert body["status"]["configHash"] not in ("", first)
    assert body["status"]["schedulerNames"] == scheduler


def test_a_lease_holder_that_is_not_one_of_its_pods_is_not_reported_leading(
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    schedulerprofiles.create(scheduler_profile("lead", {"schedulerName": unique("l", namespace)}))
    rolled_out(schedulerprofiles, "lead")
    now = datetime.datetime.now(datetime.UTC)
    client.CoordinationV1Api(api_client).create_namespaced_lease(
        namespace,
        {
            "metadata": {"name": "kubeherd-lead"},
            "spec": {
                "holderIdentity": "control-plane-1_7c1d",
                "leaseDurationSeconds": 3600,
                "acquireTime": now.isoformat(),
                "renewTime": now.isoformat(),
            },
        },
    )

    body = schedulerprofiles.wait_for("lead", "Available", "False", "LeaseHeldElsewhere")
    assert (
        "held by control-plane-1_7c1d, which is not a pod"
        in condition(body, "Available")["message"]
    )

    # Once the intruder is gone, the scheduler standing in for its pod takes the Lease.
    client.CoordinationV1Api(api_client).delete_namespaced_lease("kubeherd-lead", namespace)
    scheduler = start_scheduler("lead")
    eventually(scheduler.leads, what="the scheduler to lead")
    body = schedulerprofiles.wait_for("lead", "Available", "True", "Leading")
    assert body["status"]["leader"].startswith(scheduler.identity_prefix())


def test_standbys_get_a_disruption_budget_and_keep_to_separate_nodes(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    core_v1: client.CoreV1Api,
    api_client: client.ApiClient,
) -> None:
    policy = client.PolicyV1Api(api_client)
    schedulerprofiles.create(
        scheduler_profile("standby", {"schedulerName": unique("b", namespace)}, replicas=2)
    )
    rolled_out(schedulerprofiles, "standby")

    budget = policy.read_namespaced_pod_disruption_budget("standby", namespace)
    assert budget.spec.max_unavailable == 1
    selector = "app.kubernetes.io/instance=standby"
    pods = core_v1.list_namespaced_pod(namespace, label_selector=selector).items
    assert len({p.spec.node_name for p in pods}) == 2

    # Allowed on one node only: that node takes both (the others are no spreading domain).
    only = pods[0].spec.node_name
    schedulerprofiles.patch("standby", {"spec": {"nodeSelector": {"kubernetes.io/hostname": only}}})
    rolled_out(schedulerprofiles, "standby")

    def on_one_node() -> set[str] | None:
        pods = core_v1.list_namespaced_pod(namespace, label_selector=selector).items
        live = {p.spec.node_name for p in pods if p.metadata.deletion_timestamp is None}
        return live if len(pods) == 2 else None

    assert eventually(on_one_node, what="two scheduler pods") == {only}

    schedulerprofiles.patch("standby", {"spec": {"replicas": 1}})
    rolled_out(schedulerprofiles, "standby")

    def budget_gone() -> bool:
        return not policy.list_namespaced_pod_disruption_budget(namespace).items

    eventually(budget_gone, what="the budget of one replica to go")


def test_a_custom_images_pull_secrets_reach_the_pods_and_unbindable_roles_are_reported(
    schedulerprofiles: SchedulerProfiles,
    namespace: str,
    apps_v1: client.AppsV1Api,
) -> None:
    schedulerprofiles.create(
        scheduler_profile(
            "custom",
            {"schedulerName": unique("c", namespace)},
            image="registry.example.com/scheduler-plugins/kube-scheduler:v0.31.8",
            imagePullSecrets=["registry-login"],
        )
    )
    rolled_out(schedulerprofiles, "custom")
    template = apps_v1.read_namespaced_deployment("custom", namespace).spec.template
    assert [s.name for s in template.spec.image_pull_secrets] == ["registry-login"]

    # The chart gives kubeherd `bind` on no extra role by default: the API server refuses the
    # binding (RBAC's escalation check), and the status carries its message. (The test's
    # admin may bind it, so the admission policy lets the spec through.)
    schedulerprofiles.patch("custom", {"spec": {"extraClusterRoles": ["view"]}})

    body = schedulerprofiles.wait_for("custom", "Progressing", "False", "ApplyFailed")
    message = condition(body, "Progressing")["message"]
    assert f"ClusterRoleBinding kubeherd:{namespace}:custom:extra:view" in message
    assert "forbidden" in message


def test_a_name_longer_than_a_label_value_is_refused_at_apply(
    schedulerprofiles: SchedulerProfiles, namespace: str
) -> None:
    with pytest.raises(ApiException) as refused:
        schedulerprofiles.create(scheduler_profile("n" * 64, {"schedulerName": "long"}))

    assert refused.value.status == 422
    assert "metadata.name must be at most 63 characters" in str(refused.value.body)
    schedulerprofiles.created.clear()


def test_a_scheduler_without_leader_election_is_available_once_its_pod_is_ready(
    schedulerprofiles: SchedulerProfiles, namespace: str
) -> None:
    schedulerprofiles.create(
        scheduler_profile(
            "alone",
            {"schedulerName": unique("a", namespace)},
            leaderElection={"leaderElect": False},
        )
    )

    body = schedulerprofiles.wait_for("alone", "Available", "True", "Scheduling")

    assert body["status"]["leader"] == ""
