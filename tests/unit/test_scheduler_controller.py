"""The SchedulerProfile controller at the Kube boundary: an in-memory API server stands in for
the real one (the integration tests run the real one), so the decisions about which ConfigMaps
go, what the status says runs, and who leads are checked pass by pass."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from typing import Any, cast

from kubeherd.kube.client import Kind, Kube, Outcome
from kubeherd.scheduler.controller import ProfileState, SchedulerProfileController
from kubeherd.scheduler.objects import CONFIG_HASH_ANNOTATION, OWNER_UID_LABEL
from kubeherd.scheduler.validation import Claim

SELECTOR = {"app.kubernetes.io/name": "kube-scheduler", "app.kubernetes.io/instance": "fast"}


class FakeKube:
    """Objects by (kind, namespace, name); label selectors of the `k=v,k=v` form."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.statuses: list[dict[str, Any]] = []

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
        self.objects.pop((kind.kind, namespace, name), None)
        return Outcome(200)

    async def apply(self, manifest: dict[str, Any]) -> Outcome:
        self.put(manifest["kind"], manifest["metadata"].get("namespace"), copy.deepcopy(manifest))
        return Outcome(200)

    async def server_version(self) -> str:
        return "v1.37.2"

    async def patch_status(self, plural: str, ns: str, name: str, status: Any) -> Outcome:
        self.statuses.append(status)
        return Outcome(200)

    async def json_patch(self, plural: str, ns: str, name: str, ops: Any) -> Outcome:
        return Outcome(200)

    def post_event_soon(self, involved: Any, **event: Any) -> None:
        pass


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
