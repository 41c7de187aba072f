"""Rollouts whose old pods take their time to stop, as a kubelet's do during their grace period.

kwok deletes a pod at once, so these tests hold every daemon pod Terminating with a finalizer of
their own (copied from the template, as for any template finalizer) and release it a few
seconds after the deletion. An observer polls the pods every 100 ms, Terminating ones included,
and records what a user would object to. The native DaemonSet controller runs the same template
on the same nodes where that is the clearest assertion.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from tests.helpers import eventually
from tests.integration.daemonsets import (
    WORKERS,
    DaemonSets,
    agent,
    revision_of,
    target_node_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

HOLD = "kubeherd.test/hold"
# How long a deleted pod stays Terminating: a grace period, as a kubelet takes it.
GRACE_SECONDS = 3.0
NEW_IMAGE = "registry.k8s.io/pause:3.9"


def held(manifest: dict[str, Any], strategy: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`manifest` whose pods stay Terminating until released, with the given rolling update."""
    manifest = copy.deepcopy(manifest)
    manifest["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    manifest["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": strategy}
    manifest["spec"].update(spec)
    return manifest


def is_available(pod: Any) -> bool:
    """Ready and not being deleted (minReadySeconds aside)."""
    conditions = pod.status.conditions or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ready and pod.metadata.deletion_timestamp is None


@dataclass
class Observation:
    most_pods_on_a_node: int = 0
    most_nodes_unavailable: int = 0
    # Nodes seen with two pods at once, Terminating ones included.
    doubled: set[str] = field(default_factory=set)
    # Whether any pod was seen Terminating: the hold worked, so the test tested something.
    saw_terminating: bool = False


class Grace:
    """Plays the kubelet: releases a Terminating pod GRACE_SECONDS after it was deleted, and
    observes the pods of one selector every 100 ms until stopped."""

    def __init__(self, core: client.CoreV1Api, namespace: str, selector: str) -> None:
        self.core = core
        self.namespace = namespace
        self.selector = selector
        self.observation = Observation()
        self.held_back: set[str] = set()  # pod names not to release (yet)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def pods(self) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        )

    def __enter__(self) -> Grace:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.release_all()

    def release(self, pod: Any) -> None:
        try:
            self.core.patch_namespaced_pod(
                pod.metadata.name, self.namespace, {"metadata": {"finalizers": None}}
            )
        except client.ApiException as error:
            if error.status != 404:
                raise

    def release_all(self) -> None:
        for pod in self.pods():
            if pod.metadata.finalizers:
                self.release(pod)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.pods()
            self._observe(pods)
            now = time.time()
            for pod in pods:
                deleted = pod.metadata.deletion_timestamp
                if deleted is None or pod.metadata.name in self.held_back:
                    continue
                if now - deleted.timestamp() >= GRACE_SECONDS and pod.metadata.finalizers:
                    self.release(pod)
            time.sleep(0.1)

    def _observe(self, pods: list[Any]) -> None:
        per_node = Counter(target_node_of(pod) for pod in pods)
        seen = self.observation
        seen.most_pods_on_a_node = max(seen.most_pods_on_a_node, *per_node.values(), 0)
        seen.doubled |= {node for node, count in per_node.items() if count > 1}
        seen.saw_terminating |= any(pod.metadata.deletion_timestamp for pod in pods)
        available = {target_node_of(pod) for pod in pods if is_available(pod)}
        seen.most_nodes_unavailable = max(seen.most_nodes_unavailable, len(WORKERS - available))


@pytest.fixture
def grace(core_v1: client.CoreV1Api, daemonsets: DaemonSets) -> Iterator[type[Grace]]:
    """Grace observers for a test; every hold is released at the end, so the namespace goes."""
    started: list[Grace] = []

    def make(selector: str) -> Grace:
        observer = Grace(core_v1, daemonsets.namespace, selector)
        started.append(observer)
        return observer

    yield make  # type: ignore[misc]
    for observer in started:
        observer.release_all()


def native(manifest: dict[str, Any]) -> dict[str, Any]:
    """The same template as an apps/v1 DaemonSet, with labels of its own."""
    manifest = copy.deepcopy(manifest)
    labels = {"app": f"native-{manifest['metadata']['name']}"}
    manifest["spec"]["selector"] = {"matchLabels": labels}
    manifest["spec"]["template"]["metadata"]["labels"] = labels
    manifest["metadata"]["name"] = labels["app"]
    manifest["apiVersion"], manifest["kind"] = "apps/v1", "DaemonSet"
    for field_name in ("paused", "progressDeadlineSeconds"):
        manifest["spec"].pop(field_name, None)
    return manifest


def new_image(template: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(template["spec"])
    spec["containers"][0]["image"] = NEW_IMAGE
    return {"template": {"spec": spec}}


def test_without_surge_a_pod_never_starts_beside_a_terminating_one_like_native(
    daemonsets: DaemonSets, apps_v1: client.AppsV1Api, grace: Any
) -> None:
    manifest = held(agent("steady"), {"maxUnavailable": 1, "maxSurge": 0})
    twin = native(manifest)
    name = daemonsets.create(manifest)
    apps_v1.create_namespaced_daemon_set(daemonsets.namespace, twin)
    daemonsets.wait_for_status(name, numberAvailable=2)
    eventually(
        lambda: (
            apps_v1.read_namespaced_daemon_set(
                twin["metadata"]["name"], daemonsets.namespace
            ).status.number_available
            == 2
        ),
        what="the native DaemonSet available",
    )
    ours = grace(f"kubeherd.io/customdaemonset={name}")
    theirs = grace(f"app={twin['metadata']['name']}")

    with ours, theirs:
        daemonsets.patch_spec(name, new_image(manifest["spec"]["template"]))
        apps_v1.patch_namespaced_daemon_set(
            twin["metadata"]["name"],
            daemonsets.namespace,
            {"spec": new_image(twin["spec"]["template"])},
        )
        eventually(
            lambda: rolled_out(ours.pods()) and rolled_out(theirs.pods()),
            timeout=90,
            what="both rollouts done",
        )

    assert ours.observation.saw_terminating
    assert theirs.observation.saw_terminating
    assert theirs.observation.doubled == set(), "the observer is wrong: native never doubles"
    assert ours.observation.doubled == set()
    assert ours.observation.most_pods_on_a_node == 1
    assert ours.observation.most_nodes_unavailable <= 1
    assert theirs.observation.most_nodes_unavailable <= 1


def rolled_out(pods: list[Any]) -> bool:
    """One available pod of the new image per worker, and nothing else."""
    return (
        sorted(target_node_of(pod) for pod in pods) == sorted(WORKERS)
        and all(is_available(pod) for pod in pods)
        and all(pod.spec.containers[0].image == NEW_IMAGE for pod in pods)
    )


def test_a_surge_pod_deleted_while_terminating_is_replaced_and_the_rollout_ends(
    daemonsets: DaemonSets, grace: Any
) -> None:
    # minReadySeconds keeps the surge pod unavailable long enough to delete it mid-way.
    manifest = held(agent("surging"), {"maxUnavailable": 0, "maxSurge": 1}, minReadySeconds=8)
    name = daemonsets.create(manifest)
    daemonsets.wait_for_status(name, numberAvailable=2)
    old = {revision_of(pod) for pod in daemonsets.pods(name)}
    observer = grace(f"kubeherd.io/customdaemonset={name}")

    with observer:
        daemonsets.patch_spec(name, new_image(manifest["spec"]["template"]))

        def surge_pod() -> Any:
            return next((p for p in daemonsets.pods(name) if revision_of(p) not in old), None)

        first = eventually(surge_pod, what="a surge pod of the new template")
        # It stays Terminating (a long grace period) while its replacement should start.
        observer.held_back.add(first.metadata.name)
        daemonsets.core.delete_namespaced_pod(first.metadata.name, daemonsets.namespace)

        def replacement() -> Any:
            return next(
                (
                    p
                    for p in daemonsets.pods(name)
                    if revision_of(p) not in old
                    and target_node_of(p) == target_node_of(first)
                    and p.metadata.uid != first.metadata.uid
                ),
                None,
            )

        second = eventually(replacement, timeout=20, what="a replacement of the deleted surge pod")
        assert second.metadata.name != first.metadata.name
        observer.held_back.clear()
        eventually(lambda: rolled_out(observer.pods()), timeout=90, what="the rollout done")

    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="RolloutComplete",
    )
    # maxUnavailable 0 with surge: no node was ever without an available pod.
    assert observer.observation.most_nodes_unavailable == 0


def test_a_surge_rollout_with_min_ready_seconds_ends_when_the_pods_are_available(
    daemonsets: DaemonSets,
) -> None:
    manifest = agent("patient")
    manifest["spec"]["minReadySeconds"] = 5
    manifest["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    name = daemonsets.create(manifest)
    daemonsets.wait_for_status(name, numberAvailable=2)
    started = time.monotonic()

    daemonsets.patch_spec(name, new_image(manifest["spec"]["template"]))

    # Two nodes one after the other, 5 s each once Ready: far less than the 600 s deadline.
    eventually(
        lambda: (
            daemonsets.progressing(name).get("reason") == "RolloutComplete"
            and rolled_out(daemonsets.pods(name))
        ),
        timeout=60,
        what="the surge rollout complete",
    )
    assert time.monotonic() - started >= 2 * 5
    assert daemonsets.events(name, "RolloutStuck") == []
