"""The CustomDaemonSet controller's orchestration, pass by pass, against an in-memory cluster
at the `Kube` boundary and in virtual time: what it writes, the status and events a user sees,
and when it looks again."""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest

from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.core.overrides import OverrideRule
from kubeherd.daemonset.core.pods import REVISION_LABEL, target_node
from kubeherd.daemonset.core.revisions import revision_name
from kubeherd.daemonset.core.rollout import MAX_FIRST_WINDOW
from kubeherd.daemonset.core.spec import DaemonSetSpec
from kubeherd.daemonset.core.template import OperatorIdentity
from kubeherd.daemonset.shell import revision_writes as history
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.outcomes import Outcome
from kubeherd.meta import parse_time
from tests.unit.daemonset_cluster import NAMESPACE, FakeCluster
from tests.unit.virtual_time import run_virtually, wall_clock

OLD, NEW = "agent:1", "agent:2"


def agent(image: str = OLD, **spec: Any) -> dict[str, Any]:
    labels = {"app": "agent"}
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "agent", "image": image}]},
            },
            **spec,
        },
    }


def template(image: str) -> dict[str, Any]:
    return copy.deepcopy(agent(image)["spec"]["template"])


async def settle(seconds: float = 5.0) -> None:
    await asyncio.sleep(seconds)


def test_a_new_customdaemonset_gets_a_pod_per_node_without_any_node_event() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2", "n3")

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(cluster.pods_by_node()) == ["n1", "n2", "n3"]
    assert cluster.verbs().count("create ControllerRevision") == 1
    status = cluster.status()
    assert (status["desiredNumberScheduled"], status["numberAvailable"]) == (3, 3)
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"
    assert cluster.reasons().count("SuccessfulCreate") == 3
    assert "RolloutComplete" in cluster.reasons()


def test_a_revision_name_taken_by_someone_else_is_a_collision_and_hashes_again() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")
    taken = FakeCluster()
    # Whatever name the first hash gives, an object nobody owns holds it.
    original_create = cluster.create_controller_revision

    async def first_name_taken(namespace: str, body: dict[str, Any]) -> Outcome:
        if not taken.revisions:
            stranger = copy.deepcopy(body)
            stranger["metadata"].update(uid="uid-stranger", ownerReferences=[], labels={})
            taken.revisions[body["metadata"]["name"]] = stranger
            cluster.revisions[body["metadata"]["name"]] = stranger
            return Outcome(409, "AlreadyExists")
        return await original_create(namespace, body)

    cluster.create_controller_revision = first_name_taken  # type: ignore[method-assign]

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert cluster.status()["collisionCount"] == 1
    (ours,) = [r for r in cluster.revisions.values() if r["metadata"]["uid"] != "uid-stranger"]
    assert ours["metadata"]["name"] not in taken.revisions
    (pod,) = cluster.pods.values()
    assert (
        revision_name("agent", pod["metadata"]["labels"][REVISION_LABEL])
        == (ours["metadata"]["name"])
    )


def test_after_five_collisions_the_pass_gives_up_and_is_retried_with_a_growing_delay() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")
    attempts: list[float] = []

    async def always_taken(namespace: str, body: dict[str, Any]) -> Outcome:
        attempts.append(wall_clock())
        stranger = copy.deepcopy(body)
        stranger["metadata"].update(uid="uid-stranger", ownerReferences=[], labels={})
        cluster.revisions[body["metadata"]["name"]] = stranger
        return Outcome(409, "AlreadyExists")

    cluster.create_controller_revision = always_taken  # type: ignore[method-assign]

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle(10)
        await controller.stop()

    run_virtually(scenario)
    assert cluster.pods == {}
    passes = sorted({round(at - attempts[0]) for at in attempts})
    # Five attempts per pass; the passes 1, 2 and 4 s apart (the runner's retry backoff).
    assert len(attempts) >= 15
    assert len(attempts) % 5 == 0
    assert passes[:3] == [0, 1, 3]


def test_a_deferred_status_goes_out_before_the_next_revision_is_recorded() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods(nodes=["n1"])  # its status goes out at once
        await asyncio.sleep(0.2)
        cluster.run_pods(nodes=["n2"])  # within the status interval: its status waits
        await asyncio.sleep(0.2)
        cluster.update_spec(template=template(NEW))
        await settle()
        await controller.stop()

    run_virtually(scenario)
    verbs = cluster.verbs()
    revisions = [i for i, verb in enumerate(verbs) if verb == "create ControllerRevision"]
    before = max(i for i in range(revisions[1]) if verbs[i] == "patch-status CustomDaemonSet")
    flushed = cluster.writes[before].body
    # The last status before the new revision says what the old spec reached: both ready.
    assert (flushed["observedGeneration"], flushed["numberReady"]) == (1, 2)


def test_after_a_restart_the_progress_deadline_runs_from_the_recorded_progress() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")

    async def scenario() -> None:
        controller = cluster.start(agent(progressDeadlineSeconds=60))
        await settle()
        cluster.run_pods()
        await settle()
        cluster.update_spec(template=template(NEW))
        await settle()
        cluster.run_pods(ready=False)  # the new pod never becomes ready
        await settle()
        await controller.stop()
        # The operator restarts 40 s after the rollout last moved.
        progress = parse_time(cluster.condition("Progressing")["lastUpdateTime"])
        assert progress is not None
        await asyncio.sleep(progress + 40 - wall_clock())
        restarted = cluster.start(cluster.daemonset)
        await asyncio.sleep(progress + 59 - wall_clock())
        assert "RolloutStuck" not in cluster.reasons()
        await asyncio.sleep(3)
        assert "RolloutStuck" in cluster.reasons()  # at 60 s, not 60 s after the restart
        await restarted.stop()

    run_virtually(scenario)
    assert cluster.condition("Progressing")["reason"] == "ProgressDeadlineExceeded"
    assert cluster.reasons().count("RolloutStuck") == 1


def test_in_a_terminating_namespace_creates_stop_without_a_warning_or_a_retry() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")
    terminating = Outcome(
        403,
        'pods "agent-x" is forbidden: unable to create new content in namespace ops '
        "because it is being terminated",
    )
    # Namespace admission refuses the dry run as it refuses the create.
    cluster.refuse("dry_run_pod", terminating)
    cluster.refuse("create_pod", terminating)

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle(120)
        await controller.stop()

    run_virtually(scenario)
    assert cluster.verbs().count("create Pod") == 1
    assert "FailedCreate" not in cluster.reasons()
    assert cluster.condition("ReplicaFailure") == {}


def times_of_creates(cluster: FakeCluster) -> list[float]:
    """When each pod create was sent, in virtual time, from now on."""
    created_at: list[float] = []
    original_create = cluster.create_pod

    async def create(namespace: str, pod: dict[str, Any]) -> Outcome:
        created_at.append(wall_clock())
        return await original_create(namespace, pod)

    cluster.create_pod = create  # type: ignore[method-assign]
    return created_at


def test_a_pod_name_already_taken_is_replaced_by_another_at_once() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2", "n3")
    cluster.refuse("create_pod", Outcome(409, 'pods "agent-x" already exists'))
    created_at = times_of_creates(cluster)

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(cluster.pods_by_node()) == ["n1", "n2", "n3"]
    assert len(created_at) == 4
    assert created_at[-1] - created_at[0] < 0.1
    assert "FailedCreate" not in cluster.reasons()
    names = [w.name for w in cluster.writes if (w.verb, w.kind) == ("create", "Pod")]
    assert len(set(names)) == 4


def test_refused_creates_warn_back_off_and_converge_once_allowed() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2", "n3")
    quota = Outcome(403, 'pods "agent-x" is forbidden: exceeded quota: pods')
    # The quota refuses the dry run as it refuses the creates (checked, not charged).
    cluster.refuse("dry_run_pod", quota)
    cluster.refuse("create_pod", *[quota] * 3)
    created_at = times_of_creates(cluster)

    async def scenario() -> None:
        controller = cluster.start(agent(), max_create_backoff=60)
        await asyncio.sleep(2)
        assert cluster.condition("ReplicaFailure")["reason"] == "FailedCreate"
        await settle(30)
        cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(cluster.pods_by_node()) == ["n1", "n2", "n3"]
    assert cluster.condition("ReplicaFailure") == {}
    assert cluster.reasons().count("FailedCreate") == 3
    # One create per refused pass (the window opens at 1 after a refusal), 1, 2, 4 s apart.
    start = created_at[0]
    assert [round(at - start) for at in created_at[:3]] == [0, 1, 3]


def creates_sent(cluster: FakeCluster) -> int:
    return cluster.verbs().count("create Pod")


def test_a_quota_that_refuses_the_first_pod_costs_one_create_per_pass() -> None:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(50)))
    cluster.limits = WriteLimits(max_concurrent=32)
    cluster.create_latency = 0.05
    cluster.pod_quota = 0

    async def scenario() -> None:
        controller = cluster.start(agent(), max_create_backoff=60)
        await asyncio.sleep(0.5)  # the first pass over, its retry not due yet
        assert creates_sent(cluster) == 1
        await settle(40)
        await controller.stop()

    run_virtually(scenario)
    assert cluster.pods == {}
    # Each retry, backed off, is again one create: never a window's worth.
    assert creates_sent(cluster) == cluster.reasons().count("FailedCreate") <= 6


def test_a_quota_reached_mid_rollout_stops_the_creates_sent_after_its_first_refusal() -> None:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(40)))
    cluster.limits = WriteLimits(max_concurrent=32)
    cluster.create_latency = 0.05
    cluster.pod_quota = 5

    async def scenario() -> None:
        controller = cluster.start(agent(), max_create_backoff=60)
        await asyncio.sleep(0.5)
        await controller.stop()

    run_virtually(scenario)
    assert len(cluster.pods) == 5
    # The dry run was admitted (the quota had room), so the window opened at
    # MAX_FIRST_WINDOW: those creates are answered together, 5 accepted and the rest
    # refused, and nothing goes out after.
    assert creates_sent(cluster) == MAX_FIRST_WINDOW
    reasons = cluster.reasons()
    assert reasons.count("SuccessfulCreate") == 5
    assert reasons.count("FailedCreate") == MAX_FIRST_WINDOW - 5
    assert all("exceeded quota" in m for m in cluster.messages("FailedCreate"))
    assert "exceeded quota" in cluster.condition("ReplicaFailure")["message"]


def test_each_create_answered_lets_the_next_go_without_waiting_for_a_slow_one() -> None:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(20)))
    cluster.limits = WriteLimits(max_concurrent=32)
    cluster.create_latency = 0.1
    cluster.create_latencies = [0.1, 10.0]  # the second create is answered late
    created_at = times_of_creates(cluster)

    async def scenario() -> None:
        controller = cluster.start(agent())
        await asyncio.sleep(2)
        # Everything but the slow one is created long before it is answered.
        assert len(cluster.pods) == 19
        await settle(15)
        await controller.stop()

    run_virtually(scenario)
    assert len(cluster.pods_by_node()) == 20
    assert created_at[-1] - created_at[0] < 1
    assert cluster.reasons().count("SuccessfulCreate") == 20


def test_stopping_the_controller_stops_the_creates_in_flight_at_once() -> None:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(8)))
    cluster.create_latency = 0.1
    cluster.create_latencies = [0.1, 0.1, 0.1, 600.0]  # one answer never comes in time

    async def scenario() -> float:
        controller = cluster.start(agent())
        await asyncio.sleep(5)
        stopping = wall_clock()
        await controller.stop()
        return wall_clock() - stopping

    assert run_virtually(scenario) < 1
    # The others were created meanwhile: only the unanswered one is missing.
    assert len(cluster.pods) == 7


def test_the_next_pass_opens_its_window_where_the_last_creates_left_off() -> None:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(40)))
    cluster.limits = WriteLimits(max_concurrent=32)
    cluster.create_latency = 0.1

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        cluster.most_creates_in_flight = 0
        cluster.add_nodes(*(f"m{index}" for index in range(30)))
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert len(cluster.pods_by_node()) == 70
    # The new nodes' creates went out MAX_FIRST_WINDOW at once, not 1, 2, 4, ...
    assert cluster.most_creates_in_flight >= MAX_FIRST_WINDOW


def test_the_first_pass_waits_until_the_watches_say_the_pods_are_known() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")
    pods_known = asyncio.Event()

    async def ready() -> None:
        await pods_known.wait()

    async def scenario() -> None:
        controller = cluster.start(agent(), ready=ready)
        await settle()
        assert cluster.verbs() == []
        pods_known.set()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(cluster.pods_by_node()) == ["n1", "n2"]


def test_a_node_the_partition_keeps_back_gets_a_pod_of_the_previous_revision() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2", "n3")
    partition = {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}

    async def scenario() -> None:
        controller = cluster.start(agent(updateStrategy=partition))
        await settle()
        cluster.run_pods()
        await settle()
        cluster.update_spec(template=template(NEW))
        for _ in range(3):
            await settle()
            cluster.run_pods()
        assert cluster.images() == {"n1": NEW, "n2": NEW, "n3": OLD}
        (kept,) = cluster.pods_by_node()["n3"]
        cluster.delete_pod_now(kept["metadata"]["name"])
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert cluster.images() == {"n1": NEW, "n2": NEW, "n3": OLD}
    assert cluster.condition("Progressing")["reason"] == "PartitionRolledOut"
    # The previous template is not kept: it was read from its ControllerRevision for the pod.
    (old_revision,) = [
        name
        for name, revision in cluster.revisions.items()
        if revision["data"]["spec"]["template"]["spec"]["containers"][0]["image"] == OLD
    ]
    assert old_revision in cluster.revisions_read


def test_minready_seconds_wakes_the_controller_when_a_pod_turns_available() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")

    async def scenario() -> None:
        controller = cluster.start(agent(minReadySeconds=30))
        await settle()
        cluster.run_pods()
        await asyncio.sleep(10)
        assert cluster.status()["numberAvailable"] == 0
        await asyncio.sleep(25)
        await controller.stop()

    run_virtually(scenario)
    assert cluster.status()["numberAvailable"] == 1


def test_an_undo_renumbers_the_old_revision_in_place() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        first = dict(cluster.revisions)
        cluster.update_spec(template=template(NEW))
        await settle()
        cluster.run_pods()
        await settle()
        cluster.update_spec(template=template(OLD))  # what `kubeherd rollout undo` does
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await controller.stop()
        (name,) = first
        assert cluster.revisions[name]["metadata"]["uid"] == first[name]["metadata"]["uid"]
        assert cluster.revisions[name]["revision"] == 3

    run_virtually(scenario)
    assert cluster.verbs().count("create ControllerRevision") == 2
    assert cluster.verbs().count("patch ControllerRevision") == 1
    assert cluster.images() == {"n1": OLD}
    assert cluster.status()["updateRevision"] == next(iter(cluster.revisions))


def test_a_restart_on_a_settled_object_writes_nothing_and_asks_no_dry_run() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()
        assert cluster.dry_runs == 1
        writes = len(cluster.writes)
        restarted = cluster.start(cluster.daemonset)
        await settle()
        await restarted.stop()
        # Its status says this generation's template was accepted: nothing to ask or write.
        assert (cluster.dry_runs, len(cluster.writes)) == (1, writes)

    run_virtually(scenario)


def test_a_restarts_first_pass_on_a_settled_object_never_decodes_its_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At a restart every object's first pass runs at once: a decoded template takes about ten
    # times its JSON, so a tenant's large templates would all be held decoded together.
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")
    decoded: list[str] = []

    def spec_template(spec: DaemonSetSpec) -> dict[str, Any]:
        decoded.append("spec.template")
        loaded: dict[str, Any] = json.loads(spec.template_json)
        return loaded

    def history_loads(data: bytes) -> Any:
        decoded.append("revision template")
        return json.loads(data)

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()
        writes = len(cluster.writes)
        monkeypatch.setattr(DaemonSetSpec, "template", property(spec_template))
        monkeypatch.setattr(history, "json", SimpleNamespace(loads=history_loads))
        restarted = cluster.start(cluster.daemonset)
        await settle()
        assert (decoded, len(cluster.writes)) == ([], writes)
        # A new template is decoded to record its revision and to build its pods.
        cluster.update_spec(template=template(NEW))
        await settle()
        await restarted.stop()
        assert "revision template" in decoded
        assert "spec.template" in decoded
        assert NEW in cluster.images().values()

    run_virtually(scenario)


def test_a_refused_template_is_judged_again_after_a_restart() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")
    cluster.refuse("dry_run_pod", Outcome(422, 'Pod "agent" is invalid: spec.containers: Required'))

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        await controller.stop()
        assert cluster.condition("TemplateValid")["reason"] == "InvalidTemplate"
        # Whatever refused it (a policy, a webhook) may have changed meanwhile.
        restarted = cluster.start(cluster.daemonset)
        await settle()
        await restarted.stop()

    run_virtually(scenario)
    assert cluster.dry_runs == 2
    assert sorted(cluster.pods_by_node()) == ["n1"]
    assert "TemplateValid" not in {c["type"] for c in cluster.status()["conditions"]}


def test_a_template_running_as_the_operators_service_account_is_refused_and_makes_no_pod() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1")
    identity = OperatorIdentity(NAMESPACE, "kubeherd", frozenset({"kubeherd-webhook-tls"}))

    async def operator() -> OperatorIdentity:
        return identity

    borrowing = agent()
    borrowing["spec"]["template"]["spec"]["serviceAccountName"] = "kubeherd"

    async def scenario() -> None:
        controller = cluster.start(borrowing, operator=operator)
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert cluster.pods_by_node() == {}
    # The API server would accept it: it is not even asked.
    assert cluster.dry_runs == 0
    condition = cluster.condition("TemplateValid")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidTemplate")
    assert "the kubeherd operator's own ServiceAccount" in condition["message"]
    assert "InvalidTemplate" in cluster.reasons()


def test_pods_are_built_and_sent_only_as_many_at_a_time_as_writes_may_be_in_flight() -> None:
    cluster = FakeCluster()
    nodes = [f"n{index}" for index in range(40)]
    cluster.add_nodes(*nodes)
    cluster.create_latency = 0.5

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle(30)
        await controller.stop()

    run_virtually(scenario)
    # Each body is built when its write may go: never a whole batch held at once.
    assert cluster.most_creates_in_flight == cluster.limits.max_concurrent
    assert sorted(cluster.pods_by_node()) == sorted(nodes)


def test_a_selector_stored_before_the_crd_refused_it_is_reported_once_and_touches_no_pod() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")
    # A key a label query would read as two requirements (`zz` and `team`).
    invalid = {"matchLabels": {"app": "agent"}, "matchExpressions": [
        {"key": "zz,team", "operator": "DoesNotExist"},
    ]}  # fmt: skip

    async def scenario() -> None:
        controller = cluster.start(agent())
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()
        stored = copy.deepcopy(cluster.daemonset)
        stored["spec"]["selector"] = invalid
        stored["metadata"]["generation"] += 1
        before = {name: pod["metadata"]["uid"] for name, pod in cluster.pods.items()}
        writes, events = len(cluster.writes), len(cluster.events)
        restarted = cluster.start(stored)
        cluster.add_nodes("n3")  # a node event brings another pass
        await settle(300)
        after_restart = cluster.verbs()[writes:]
        # The old pods stay, n3 gets none, and nothing is listed, claimed or retried: one status.
        assert {name: pod["metadata"]["uid"] for name, pod in cluster.pods.items()} == before
        assert after_restart == ["patch-status CustomDaemonSet"]
        assert [e.reason for e in cluster.events[events:]] == ["InvalidSelector"]
        assert "'zz,team' is not a label key" in cluster.events[-1].message
        condition = cluster.condition("SelectorValid")
        assert (condition["status"], condition["reason"]) == ("False", "InvalidSelector")
        assert "matchExpressions[0].key: 'zz,team' is not a label key" in condition["message"]
        assert cluster.status()["observedGeneration"] == stored["metadata"]["generation"]
        # A spec with a valid selector is acted on at once (the object's next version).
        cluster.update_spec(selector={"matchLabels": {"app": "agent"}}, template=template(NEW))
        for _ in range(3):  # one node at a time (maxUnavailable 1)
            await settle()
            cluster.run_pods()
        await settle()
        await restarted.stop()

    run_virtually(scenario)
    assert cluster.images() == {"n1": NEW, "n2": NEW, "n3": NEW}
    assert "SelectorValid" not in {c["type"] for c in cluster.status()["conditions"]}
    assert cluster.reasons().count("InvalidSelector") == 1


async def start_running(cluster: FakeCluster, manifest: dict[str, Any]) -> DaemonSetController:
    """The controller with `manifest`, its pods created, running and reported by the kubelets."""
    controller = cluster.start(manifest)
    await settle()
    cluster.run_pods()
    cluster.kubelets_catch_up()
    await settle()
    return controller


def created_pods(cluster: FakeCluster) -> list[str]:
    return [w.name for w in cluster.writes if (w.verb, w.kind) == ("create", "Pod")]


def test_an_image_change_updates_the_pods_in_place_one_node_at_a_time() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1", "n2", "n3")
    in_place = {
        "type": "RollingUpdate",
        "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible"},
    }
    patched_at_once: list[int] = []

    def images_patched() -> int:
        return sum(
            1
            for write in cluster.writes
            if write.verb == "patch" and any("image" in op["path"] for op in write.body)
        )

    async def scenario() -> None:
        controller = await start_running(cluster, agent(updateStrategy=in_place))
        cluster.update_spec(template=template(NEW))
        for _ in range(4):
            await settle()
            # No kubelet has restarted the patched pod yet: the budget (1) is spent on it.
            patched_at_once.append(images_patched())
            cluster.kubelets_catch_up()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    before = set(created_pods(cluster))
    pods = list(cluster.pods.values())
    assert {pod["metadata"]["name"] for pod in pods} == before  # the same pods, none replaced
    assert {pod["spec"]["containers"][0]["image"] for pod in pods} == {NEW}
    assert patched_at_once == [1, 2, 3, 3]
    assert "delete" not in {write.verb for write in cluster.writes}
    assert cluster.reasons().count("SuccessfulUpdatePodInPlace") == 3
    status = cluster.status()
    assert (status["updatedNumberScheduled"], status["numberAvailable"]) == (3, 3)
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_going_back_to_the_previous_images_updates_in_place_too() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1", "n2")
    in_place = {
        "type": "RollingUpdate",
        "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 2},
    }

    async def scenario() -> None:
        controller = await start_running(cluster, agent(updateStrategy=in_place))
        for image in (NEW, OLD):  # an update, then its undo
            cluster.update_spec(template=template(image))
            await settle()
            cluster.kubelets_catch_up()
            await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(created_pods(cluster)) == sorted(cluster.pods)
    assert {pod["spec"]["containers"][0]["image"] for pod in cluster.pods.values()} == {OLD}
    assert cluster.reasons().count("SuccessfulUpdatePodInPlace") == 4
    assert cluster.status()["numberAvailable"] == 2


def with_cpu(image: str, cpu: str) -> dict[str, Any]:
    shaped = template(image)
    shaped["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return shaped


IN_PLACE = {
    "type": "RollingUpdate",
    "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 2},
}


def test_new_cpu_requests_resize_the_pods_without_replacing_or_restarting_them() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1", "n2")

    async def scenario() -> None:
        controller = await start_running(
            cluster, agent(updateStrategy=IN_PLACE, template=with_cpu(OLD, "100m"))
        )
        cluster.update_spec(template=with_cpu(OLD, "250m"))
        await settle()
        assert cluster.status()["numberAvailable"] == 0  # not before the kubelets resized
        cluster.kubelets_catch_up()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert sorted(created_pods(cluster)) == sorted(cluster.pods)
    assert sorted(w.name for w in cluster.writes if w.verb == "resize") == sorted(cluster.pods)
    for pod in cluster.pods.values():
        assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "250m"}}
        assert [s["restartCount"] for s in pod["status"]["containerStatuses"]] == [0]
    assert cluster.status()["numberAvailable"] == 2
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_a_pod_the_api_server_will_not_resize_is_replaced() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1")

    async def scenario() -> None:
        controller = await start_running(
            cluster, agent(updateStrategy=IN_PLACE, template=with_cpu(OLD, "100m"))
        )
        cluster.refuse("resize_pod", Outcome(422, "Pod QoS is immutable"))
        cluster.update_spec(template=with_cpu(OLD, "250m"))
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    (pod,) = cluster.pods.values()
    created = created_pods(cluster)
    assert created[-1] == pod["metadata"]["name"] != created[0]
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "250m"}}
    assert any("cannot be resized in place" in m for m in cluster.messages("SuccessfulDelete"))


ZONE = "topology.kubernetes.io/zone"


def nodes_of_writes(cluster: FakeCluster, verb: str, since: int) -> set[str]:
    """The nodes whose pods were created or deleted by the writes from `since` on."""
    node_of = {
        w.name: str(target_node(w.body))
        for w in cluster.writes
        if (w.verb, w.kind) == ("create", "Pod")
    }
    return {node_of[w.name] for w in cluster.writes[since:] if (w.verb, w.kind) == (verb, "Pod")}


def test_a_rolling_update_by_zone_replaces_one_zone_at_a_time_nodes_without_one_last() -> None:
    cluster = FakeCluster()
    # Name order and zone order differ, so only the zones can explain the order.
    cluster.add_nodes("n1", "n4", **{ZONE: "z-b"})
    cluster.add_nodes("n3", "n5", **{ZONE: "z-a"})
    cluster.add_nodes("n2", **{ZONE: "z-c"})
    cluster.add_nodes("n0")
    by_zone = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2, "topologyKey": ZONE}}
    deleted_per_round: list[set[str]] = []
    messages: list[str] = []

    async def scenario() -> None:
        controller = await start_running(cluster, agent(updateStrategy=by_zone))
        cluster.update_spec(template=template(NEW))
        for _ in range(5):
            since = len(cluster.writes)
            await settle()
            deleted_per_round.append(nodes_of_writes(cluster, "delete", since))
            messages.append(cluster.condition("Progressing")["message"])
            cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert deleted_per_round == [{"n3", "n5"}, {"n1", "n4"}, {"n2"}, {"n0"}, set()]
    assert messages[0].endswith(f"; updating {ZONE}=z-a (1 of 4)")
    assert messages[3].endswith(f"; updating nodes without {ZONE} (4 of 4)")
    assert set(cluster.images().values()) == {NEW}
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_a_rollout_wave_moves_on_when_its_selector_is_edited() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n3", wave="1")
    cluster.add_nodes("n2", "n4", wave="2")

    def strategy(*waves: str) -> dict[str, Any]:
        selector = {"matchExpressions": [{"key": "wave", "operator": "In", "values": list(waves)}]}
        return {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 4, "selector": selector},
        }

    async def scenario() -> None:
        controller = await start_running(cluster, agent(updateStrategy=strategy("1")))
        cluster.update_spec(template=template(NEW))
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await settle()
        assert cluster.images() == {"n1": NEW, "n2": OLD, "n3": NEW, "n4": OLD}
        assert cluster.condition("Progressing")["reason"] == "WaveRolledOut"
        cluster.update_spec(updateStrategy=strategy("1", "2"))
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert set(cluster.images().values()) == {NEW}
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"
    assert cluster.reasons().count("WaveRolledOut") == 1


def test_a_node_labelled_into_the_wave_is_updated_without_a_spec_change() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", wave="1")
    cluster.add_nodes("n2")
    selector = {"matchLabels": {"wave": "1"}}
    wave = {"type": "RollingUpdate", "rollingUpdate": {"selector": selector}}

    async def scenario() -> None:
        controller = await start_running(cluster, agent(updateStrategy=wave))
        cluster.update_spec(template=template(NEW))
        for _ in range(2):
            await settle()
            cluster.run_pods()
        assert cluster.images() == {"n1": NEW, "n2": OLD}
        cluster.add_nodes("n2", wave="1")  # the Node event only: no spec change
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await controller.stop()

    run_virtually(scenario)
    assert cluster.images() == {"n1": NEW, "n2": NEW}


def memory_override(memory: str) -> list[dict[str, Any]]:
    resources = {"requests": {"memory": memory}}
    return [
        {
            "name": "large-nodes",
            "nodeSelector": {"matchLabels": {"size": "large"}},
            "containers": [{"name": "agent", "resources": resources}],
        }
    ]


def memory_requests(cluster: FakeCluster) -> dict[str, str | None]:
    return {
        node: (pods[0]["spec"]["containers"][0].get("resources") or {})
        .get("requests", {})
        .get("memory")
        for node, pods in cluster.pods_by_node().items()
    }


def test_a_changed_resource_override_replaces_only_the_pods_of_its_nodes() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n3", size="large")
    cluster.add_nodes("n2", "n4")
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 4}}
    first: dict[str, str | None] = {}
    since = 0

    async def scenario() -> None:
        nonlocal since
        manifest = agent(updateStrategy=strategy, resourceOverrides=memory_override("1Gi"))
        controller = await start_running(cluster, manifest)
        first.update(memory_requests(cluster))
        since = len(cluster.writes)
        cluster.update_spec(resourceOverrides=memory_override("3Gi"))
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert first == {"n1": "1Gi", "n2": None, "n3": "1Gi", "n4": None}
    assert memory_requests(cluster) == {"n1": "3Gi", "n2": None, "n3": "3Gi", "n4": None}
    assert nodes_of_writes(cluster, "delete", since) == {"n1", "n3"}
    assert nodes_of_writes(cluster, "create", since) == {"n1", "n3"}
    assert cluster.status()["resourceOverrides"] == [{"name": "large-nodes", "nodes": 2}]
    # Overrides are not part of the template's revisions.
    assert cluster.verbs().count("create ControllerRevision") == 1
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_a_node_labelled_into_an_overrides_pool_gets_its_pod_replaced() -> None:
    cluster = FakeCluster()
    cluster.add_nodes("n1", "n2")
    before: dict[str, str | None] = {}

    async def scenario() -> None:
        manifest = agent(resourceOverrides=memory_override("1Gi"))
        controller = await start_running(cluster, manifest)
        await settle()
        before.update(memory_requests(cluster))
        cluster.add_nodes("n2", size="large")  # the Node event only: no spec change
        for _ in range(2):
            await settle()
            cluster.run_pods()
        await controller.stop()

    run_virtually(scenario)
    assert before == {"n1": None, "n2": None}
    assert memory_requests(cluster) == {"n1": None, "n2": "1Gi"}
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_with_in_place_updates_a_changed_override_resizes_only_its_nodes_pods() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1", size="large")
    cluster.add_nodes("n2")
    created_before: list[str] = []

    async def scenario() -> None:
        manifest = agent(updateStrategy=IN_PLACE, resourceOverrides=memory_override("1Gi"))
        controller = await start_running(cluster, manifest)
        created_before.extend(created_pods(cluster))
        cluster.update_spec(resourceOverrides=memory_override("3Gi"))
        await settle()
        assert cluster.status()["numberAvailable"] == 1  # n1 waits for its kubelet's resize
        cluster.kubelets_catch_up()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    assert created_pods(cluster) == created_before
    resized = [w.name for w in cluster.writes if w.verb == "resize"]
    (n1_pod,) = cluster.pods_by_node()["n1"]
    assert resized == [n1_pod["metadata"]["name"]]
    assert memory_requests(cluster) == {"n1": "3Gi", "n2": None}
    annotation = n1_pod["metadata"]["annotations"]["kubeherd.io/resource-override"]
    assert annotation == OverrideRule.of(memory_override("3Gi")).overrides[0].key
    assert cluster.condition("Progressing")["reason"] == "RolloutComplete"


def test_with_in_place_updates_an_override_of_other_resources_replaces_the_pod() -> None:
    cluster = FakeCluster()
    cluster.apply_pod_patches = True
    cluster.add_nodes("n1", size="large")

    def storage_override(size: str) -> list[dict[str, Any]]:
        overrides = memory_override("1Gi")
        overrides[0]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": size}}
        return overrides

    async def scenario() -> None:
        manifest = agent(updateStrategy=IN_PLACE, resourceOverrides=storage_override("1Gi"))
        controller = await start_running(cluster, manifest)
        cluster.update_spec(resourceOverrides=storage_override("2Gi"))
        await settle()
        cluster.run_pods()
        await settle()
        await controller.stop()

    run_virtually(scenario)
    (pod,) = cluster.pods.values()
    created = created_pods(cluster)
    assert created[-1] == pod["metadata"]["name"] != created[0]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"ephemeral-storage": "2Gi"}}
    assert any("cannot be resized in place" in m for m in cluster.messages("SuccessfulDelete"))
