"""The SchedulerProfile controller at the Kube boundary: an in-memory API server stands in for
the real one (the integration tests run the real one), so the decisions about which ConfigMaps
go, what the status says runs, and who leads are checked pass by pass."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from typing import Any, cast

import pytest

from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import Kind
from kubeherd.kube.outcomes import Outcome
from kubeherd.scheduler.controller import SchedulerProfileController
from kubeherd.scheduler.core import converge as scheduler_converge
from kubeherd.scheduler.core.catalog import image_catalog
from kubeherd.scheduler.core.claims import Claim, claims_of
from kubeherd.scheduler.core.objects import CONFIG_HASH_ANNOTATION
from kubeherd.scheduler.core.owner import FINALIZER, OWNER_UID_LABEL
from kubeherd.scheduler.core.verdict import profile_verdict
from kubeherd.scheduler.state import ProfileState
from tests.unit.virtual_time import run_virtually, wall_clock

SELECTOR = {"app.kubernetes.io/name": "kube-scheduler", "app.kubernetes.io/instance": "fast"}


class FakeKube:
    """Objects by (kind, namespace, name); label selectors of the `k=v,k=v` form. It records
    statuses, finalizer patches and events, and refuses what a test queues in `refusals`
    (by verb: "apply", "delete")."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.statuses: list[dict[str, Any]] = []
        self.status_of: dict[str, dict[str, Any]] = {}
        self.finalizers: dict[str, list[str]] = {}
        self.events: list[tuple[str, str, str, str]] = []
        self.refusals: dict[str, list[Outcome]] = {}
        self.writes: list[tuple[str, str, str]] = []

    def refused(self, verb: str) -> Outcome | None:
        queue = self.refusals.get(verb)
        return queue.pop(0) if queue else None

    def put(self, kind: str, namespace: str | None, body: dict[str, Any]) -> None:
        metadata = body.setdefault("metadata", {})
        metadata.setdefault("uid", f"uid-{metadata['name']}")
        if namespace:
            metadata["namespace"] = namespace
        self.objects[(kind, namespace, body["metadata"]["name"])] = body

    async def get_object(self, kind: Kind, namespace: str | None, name: str) -> Any:
        return copy.deepcopy(self.objects.get((kind.kind, namespace, name)))

    async def list_objects(self, kind: Kind, selector: str, namespace: str | None = None) -> Any:
        wanted = dict(pair.split("=", 1) for pair in selector.split(","))
        return [
            copy.deepcopy(body)
            for (k, ns, _), body in self.objects.items()
            if k == kind.kind
            and (namespace is None or ns == namespace)
            and wanted.items() <= (body["metadata"].get("labels") or {}).items()
        ]

    async def delete_object(self, kind: Kind, namespace: str | None, name: str, uid: str) -> Any:
        self.writes.append(("delete", kind.kind, name))
        refused = self.refused("delete")
        if refused is not None:
            return refused
        self.objects.pop((kind.kind, namespace, name), None)
        return Outcome(200)

    async def apply(self, manifest: dict[str, Any]) -> Outcome:
        self.writes.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        refused = self.refused("apply")
        if refused is not None:
            return refused
        self.put(manifest["kind"], manifest["metadata"].get("namespace"), copy.deepcopy(manifest))
        return Outcome(200)

    async def server_version(self) -> str:
        return "v1.37.2"

    async def patch_status(self, plural: str, ns: str, name: str, status: Any) -> Outcome:
        self.statuses.append(status)
        self.status_of[name] = {**self.status_of.get(name, {}), **status}
        return Outcome(200)

    async def json_patch(self, plural: str, ns: str, name: str, ops: Any) -> Outcome:
        for operation in ops:
            if operation["path"] == "/metadata/finalizers":
                self.finalizers[name] = list(operation["value"])
        return Outcome(200)

    def post_event_soon(self, involved: Any, *, type_: str, reason: str, message: str) -> None:
        self.events.append((involved["name"], type_, reason, message))

    def reasons(self, name: str) -> list[str]:
        return [reason for who, _, reason, _ in self.events if who == name]

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        conditions = self.status_of.get(name, {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == type_), {})


class NoClaims:
    def claims(self) -> Iterable[Claim]:
        return []


def profile(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "fast",
            "namespace": "ops",
            "uid": "sp-uid",
            "generation": generation,
            "resourceVersion": "1",
            "finalizers": ["kubeherd.io/scheduler-cleanup"],
        },
        "spec": {"profiles": [{"schedulerName": "fast"}], **spec},
    }


def finish_rollout(kube: FakeKube) -> dict[str, Any]:
    """What the Deployment controller and the kubelet do: a ReplicaSet of the template, its pod
    available."""
    deployment = kube.objects[("Deployment", "ops", "fast")]
    generation = deployment["metadata"].get("generation", 1)
    deployment["metadata"]["generation"] = generation
    template = deployment["spec"]["template"]
    config_hash = template["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    kube.put(
        "ReplicaSet",
        "ops",
        {
            "metadata": {
                "name": f"fast-{config_hash[:6]}",
                "labels": SELECTOR,
                "ownerReferences": [{"uid": deployment["metadata"]["uid"]}],
            },
            "spec": {"template": copy.deepcopy(template)},
        },
    )
    deployment["status"] = {
        "observedGeneration": generation,
        "replicas": 1,
        "updatedReplicas": 1,
        "availableReplicas": 1,
        "readyReplicas": 1,
    }
    return deployment


def config_maps(kube: FakeKube) -> set[str]:
    return {name for (kind, _, name) in kube.objects if kind == "ConfigMap"}


async def one_pass(controller: SchedulerProfileController, state: ProfileState) -> None:
    state.retry_at = 0.0
    await controller._pass(("ops", "fast"), state)


def test_the_status_names_a_configuration_once_it_runs_and_old_ones_go_with_their_rs() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        controller = SchedulerProfileController(cast(Kube, kube), NoClaims())
        state = ProfileState(body=profile())

        await one_pass(controller, state)
        (first,) = config_maps(kube)
        # Applied, not yet running: no configuration to name.
        assert "configHash" not in kube.statuses[-1]

        finish_rollout(kube)
        await one_pass(controller, state)
        assert f"fast-config-{kube.statuses[-1]['configHash']}" == first

        state.body = profile(generation=2, percentageOfNodesToScore=20)
        kube.objects[("Deployment", "ops", "fast")]["metadata"]["generation"] = 2
        await one_pass(controller, state)
        (second,) = config_maps(kube) - {first}
        # The old pods run the first configuration, and their ReplicaSet keeps it.
        assert f"fast-config-{kube.statuses[-1]['configHash']}" == first
        assert config_maps(kube) == {first, second}

        finish_rollout(kube)
        await one_pass(controller, state)
        assert f"fast-config-{kube.statuses[-1]['configHash']}" == second
        assert config_maps(kube) == {first, second}

        # The Deployment controller drops the first ReplicaSet from its history.
        del kube.objects[("ReplicaSet", "ops", f"fast-{first.rsplit('-', 1)[1][:6]}")]
        state.config_maps_pruned_at = -1000.0
        await one_pass(controller, state)
        assert config_maps(kube) == {second}

    asyncio.run(scenario())


def test_a_config_map_nothing_mounts_yet_is_kept_when_it_is_the_specs() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        controller = SchedulerProfileController(cast(Kube, kube), NoClaims())
        state = ProfileState(body=profile())
        await one_pass(controller, state)
        finish_rollout(kube)
        await one_pass(controller, state)
        # A ConfigMap of kubeherd's that no template mounts, as a failed apply leaves it.
        kube.put(
            "ConfigMap",
            "ops",
            {"metadata": {"name": "fast-config-stale", "labels": {OWNER_UID_LABEL: "sp-uid"}}},
        )
        state.rendered_hash = "stale"
        state.config_maps_pruned_at = -1000.0
        await one_pass(controller, state)
        assert "fast-config-stale" in config_maps(kube)

        state.rendered_hash = ""
        state.config_maps_pruned_at = -1000.0
        await one_pass(controller, state)
        assert "fast-config-stale" not in config_maps(kube)

    asyncio.run(scenario())


def test_leading_needs_the_lease_holder_to_be_one_of_its_pods() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        controller = SchedulerProfileController(cast(Kube, kube), NoClaims())
        state = ProfileState(body=profile())
        await one_pass(controller, state)
        finish_rollout(kube)
        kube.put("Pod", "ops", {"metadata": {"name": "fast-abc-x1", "labels": SELECTOR}})
        kube.put("Pod", "ops", {"metadata": {"name": "other-x1", "labels": {"app": "x"}}})

        def hold(holder: str) -> None:
            kube.put(
                "Lease",
                "ops",
                {
                    "metadata": {"name": "kubeherd-fast"},
                    "spec": {
                        "holderIdentity": holder,
                        "renewTime": "2099-01-01T00:00:00.000000Z",
                        "leaseDurationSeconds": 15,
                    },
                },
            )

        def available() -> tuple[str, str]:
            (found,) = (c for c in kube.statuses[-1]["conditions"] if c["type"] == "Available")
            return (found["status"], found["reason"])

        for holder, expected in (
            ("fast-abc-x1_1d2e", ("True", "Leading")),
            ("other-x1_1d2e", ("False", "LeaseHeldElsewhere")),
            ("gone-pod_1d2e", ("False", "LeaseHeldElsewhere")),
            ("fast-abc-x1_9f8e", ("True", "Leading")),
        ):
            hold(holder)
            await one_pass(controller, state)
            assert available() == expected, holder

    asyncio.run(scenario())


# Scenarios in virtual time: the controller as the handlers drive it, on the shared runner.


class Profiles:
    """The SchedulerProfiles of the cluster, as the handlers' index gives their claims."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict[str, Any]] = {}

    def claims(self) -> Iterable[Claim]:
        return [claim for body in self.bodies.values() for claim in claims_of(body)]


def named(name: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    body = profile(**spec)
    body["metadata"].update(name=name, uid=f"uid-{name}", creationTimestamp=created)
    body["metadata"]["finalizers"] = []
    body["spec"]["profiles"] = [{"schedulerName": name}]
    return body


def started(
    kube: FakeKube, profiles: Profiles, *bodies: dict[str, Any], cluster_wide: bool = True
) -> SchedulerProfileController:
    controller = SchedulerProfileController(
        cast(Kube, kube), profiles, status_interval=5.0, clock=wall_clock, cluster_wide=cluster_wide
    )
    for body in bodies:
        profiles.bodies[body["metadata"]["name"]] = body
        controller.profile_changed(body)
    return controller


def test_the_finalizer_goes_on_first_and_comes_off_after_a_cleanup_retried_until_done() -> None:
    kube, profiles = FakeKube(), Profiles()
    body = named("fast")

    async def scenario() -> None:
        controller = started(kube, profiles, body)
        await asyncio.sleep(1)
        assert kube.finalizers["fast"] == [FINALIZER]
        assert ("apply", "Deployment", "fast") in kube.writes

        deleting = copy.deepcopy(body)
        deleting["metadata"].update(
            finalizers=[FINALIZER], deletionTimestamp="2026-01-01T00:01:00Z", generation=1
        )
        kube.refusals["delete"] = [Outcome(500, "etcd is unhappy")] * 2
        controller.profile_changed(deleting)
        await asyncio.sleep(0.5)
        assert kube.finalizers["fast"] == [FINALIZER]  # something is left: the finalizer stays
        assert kube.reasons("fast").count("FailedDelete") == 2
        await asyncio.sleep(10)
        await controller.stop()

    run_virtually(scenario)
    assert kube.finalizers["fast"] == []
    assert not [key for key in kube.objects if key[0] not in ("Lease",)]


def test_an_operator_of_one_namespace_looks_for_its_rbac_objects_only_where_it_may() -> None:
    kube, profiles = FakeKube(), Profiles()
    body = named("fast")
    listed: list[tuple[str, str | None]] = []
    list_objects = kube.list_objects

    async def recording(kind: Kind, selector: str, namespace: str | None = None) -> Any:
        listed.append((kind.kind, namespace))
        return await list_objects(kind, selector, namespace)

    kube.list_objects = recording  # type: ignore[method-assign]

    async def scenario() -> None:
        controller = started(kube, profiles, body, cluster_wide=False)
        await asyncio.sleep(1)
        deleting = copy.deepcopy(body)
        deleting["metadata"].update(
            finalizers=[FINALIZER], deletionTimestamp="2026-01-01T00:01:00Z", generation=1
        )
        controller.profile_changed(deleting)
        await asyncio.sleep(1)
        await controller.stop()

    run_virtually(scenario)
    rbac = {(kind, namespace) for kind, namespace in listed if kind in ("Role", "RoleBinding")}
    namespace = body["metadata"]["namespace"]
    assert rbac == {
        ("Role", namespace),
        ("RoleBinding", namespace),
        ("RoleBinding", "kube-system"),
    }
    assert ("ClusterRoleBinding", None) in listed
    # Everything it made, in kube-system too, is gone with the resource.
    assert not [key for key in kube.objects if key[0] not in ("Lease",)]


def test_a_scheduler_name_held_by_an_older_profile_is_refused_until_it_lets_go() -> None:
    kube, profiles = FakeKube(), Profiles()
    first = named("fast", "2026-01-01T00:00:00Z")
    second = named("late", "2026-01-02T00:00:00Z")
    second["spec"]["profiles"] = [{"schedulerName": "fast"}]

    async def scenario() -> None:
        controller = started(kube, profiles, first, second)
        await asyncio.sleep(1)
        valid = kube.condition("late", "Valid")
        assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
        assert "ops/fast" in valid["message"]
        assert kube.reasons("late").count("InvalidSpec") == 1
        assert ("apply", "Deployment", "late") not in kube.writes

        del profiles.bodies["fast"]
        controller.profile_deleted(("ops", "fast"))
        await asyncio.sleep(1)
        await controller.stop()

    run_virtually(scenario)
    assert kube.condition("late", "Valid")["status"] == "True"
    assert ("apply", "Deployment", "late") in kube.writes


def test_an_object_of_the_same_name_not_ours_is_a_conflict_reported_once_and_retried() -> None:
    kube, profiles = FakeKube(), Profiles()
    kube.put("ServiceAccount", "ops", {"metadata": {"name": "fast", "labels": {}}})

    async def scenario() -> None:
        controller = started(kube, profiles, named("fast"))
        await asyncio.sleep(20)
        progressing = kube.condition("fast", "Progressing")
        assert (progressing["status"], progressing["reason"]) == ("False", "NameConflict")
        assert "ServiceAccount ops/fast already exists" in progressing["message"]
        # Someone removes the stranger: the next retry rolls out.
        del kube.objects[("ServiceAccount", "ops", "fast")]
        await asyncio.sleep(40)
        await controller.stop()

    run_virtually(scenario)
    assert kube.reasons("fast").count("NameConflict") == 1
    assert ("apply", "Deployment", "fast") in kube.writes
    assert kube.objects[("ServiceAccount", "ops", "fast")]["metadata"]["labels"]


def test_a_scheduler_deployment_someone_deleted_is_created_again() -> None:
    kube, profiles = FakeKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, named("fast"))
        await asyncio.sleep(1)
        assert ("Deployment", "ops", "fast") in kube.objects
        del kube.objects[("Deployment", "ops", "fast")]
        await asyncio.sleep(6)  # the next regular look finds it gone
        await controller.stop()

    run_virtually(scenario)
    assert ("Deployment", "ops", "fast") in kube.objects
    assert kube.reasons("fast").count("Created") > 1


def test_a_pass_that_raises_is_retried_with_backoff_and_spares_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube, profiles = FakeKube(), Profiles()
    calls: list[float] = []
    real_verdict = profile_verdict

    def verdict(body: Any, claims: Any, choice: Any) -> Any:
        if body["metadata"]["name"] == "broken":
            calls.append(wall_clock())
            if len(calls) <= 3:
                raise RuntimeError("a bug in validation")
        return real_verdict(body, claims, choice)

    monkeypatch.setattr(scheduler_converge, "profile_verdict", verdict)

    async def scenario() -> None:
        controller = started(kube, profiles, named("broken"), named("fine"))
        await asyncio.sleep(20)
        await controller.stop()

    run_virtually(scenario)
    assert ("apply", "Deployment", "fine") in kube.writes
    assert ("apply", "Deployment", "broken") in kube.writes
    # Raised at once, then 1 s and 2 s later; the fourth try 4 s after that works.
    assert [round(at - calls[0]) for at in calls[:4]] == [0, 1, 3, 7]


def test_a_profile_named_default_is_refused_even_when_stored_before_the_crd_refused_it() -> None:
    body = {
        "metadata": {"name": "default", "namespace": "team-a"},
        "spec": {"profiles": [{"schedulerName": "team-a-scheduler"}]},
    }

    verdict = profile_verdict(body, [], image_catalog("registry.k8s.io/kube-scheduler:v1.37.2"))

    assert [problem.field for problem in verdict.errors] == ["metadata.name"]
    assert "every pod of the namespace without one would run as it" in verdict.summary()
