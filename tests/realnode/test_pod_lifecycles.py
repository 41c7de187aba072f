"""Daemon pods that take their grace period to stop, on the real node: a kubelet runs the
containers' preStop hooks and holds the pods Terminating meanwhile. An observer polls every
100 ms, Terminating pods included."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets, revision_of
from tests.realnode.conftest import is_ready
from tests.realnode.workloads import box_daemonset

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

SLOW_STOP = {"lifecycle": {"preStop": {"exec": {"command": ["sleep", "3"]}}}}
READY_PROBE = {"exec": {"command": ["true"]}, "periodSeconds": 1}


class Observer:
    """Every 100 ms: all of a CustomDaemonSet's pods on the node, Terminating ones included."""

    def __init__(self, daemonsets: DaemonSets, name: str) -> None:
        self.daemonsets = daemonsets
        self.selector = f"kubeherd.io/customdaemonset={name}"
        # The most pods seen at once whose containers had not stopped.
        self.most_pods = 0
        self.saw_terminating = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def all_pods(self) -> list[Any]:
        return list(
            self.daemonsets.core.list_namespaced_pod(
                self.daemonsets.namespace, label_selector=self.selector
            ).items
        )

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.all_pods()
            # A pod whose containers have stopped (Succeeded or Failed, while the kubelet
            # finishes its deletion) runs nothing: the native controller no longer counts it.
            running = [p for p in pods if p.status.phase not in ("Succeeded", "Failed")]
            self.most_pods = max(self.most_pods, len(running))
            self.saw_terminating |= any(p.metadata.deletion_timestamp for p in pods)
            time.sleep(0.1)


def slow_stopping(name: str, strategy: dict[str, Any], **spec: Any) -> dict[str, Any]:
    manifest = box_daemonset(
        name, "sleep 3600", container={**SLOW_STOP, "readinessProbe": READY_PROBE}
    )
    manifest["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": strategy}
    manifest["spec"].update(spec)
    return manifest


def updated(manifest: dict[str, Any]) -> dict[str, Any]:
    template = manifest["spec"]["template"]
    template["metadata"].setdefault("annotations", {})["version"] = "2"
    return {"template": template}


def test_without_surge_the_new_pod_waits_for_the_old_one_to_stop(daemonsets: DaemonSets) -> None:
    manifest = slow_stopping("steady", {"maxUnavailable": 1, "maxSurge": 0})
    name = daemonsets.create(manifest)
    (old,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)

    with Observer(daemonsets, name) as observer:
        daemonsets.patch_spec(name, updated(manifest))
        (new,) = eventually(
            lambda: (
                [p for p in observer.all_pods() if revision_of(p) != revision_of(old)]
                if len(observer.all_pods()) == 1
                and is_ready(observer.all_pods()[0])
                and revision_of(observer.all_pods()[0]) != revision_of(old)
                else None
            ),
            timeout=120,
            what="the new pod alone and Ready",
        )

    assert observer.saw_terminating, "the old pod never showed as Terminating"
    assert observer.most_pods == 1
    assert new.metadata.name != old.metadata.name


def test_a_surge_pod_deleted_mid_way_is_replaced_and_min_ready_seconds_ends_the_rollout(
    daemonsets: DaemonSets,
) -> None:
    manifest = slow_stopping("surging", {"maxUnavailable": 0, "maxSurge": 1}, minReadySeconds=5)
    name = daemonsets.create(manifest)
    (old,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    before = daemonsets.wait_for_status(name, numberAvailable=1, timeout=60)["updateRevision"]

    daemonsets.patch_spec(name, updated(manifest))
    first = eventually(
        lambda: next(
            (p for p in daemonsets.pods(name) if revision_of(p) != revision_of(old)), None
        ),
        what="a surge pod",
    )
    daemonsets.core.delete_namespaced_pod(first.metadata.name, daemonsets.namespace)

    def replacement() -> Any:
        return next(
            (
                p
                for p in daemonsets.pods(name)
                if revision_of(p) != revision_of(old) and p.metadata.uid != first.metadata.uid
            ),
            None,
        )

    second = eventually(replacement, timeout=30, what="a new surge pod")
    assert second.metadata.name != first.metadata.name
    eventually(
        lambda: (
            daemonsets.get(name)["status"]["updateRevision"] != before
            and daemonsets.progressing(name).get("reason") == "RolloutComplete"
        ),
        timeout=90,
        what="the rollout complete, minReadySeconds after the new pod is Ready",
    )
    pods = daemonsets.pods(name)
    described = [(p.metadata.name, p.status.phase, revision_of(p)) for p in pods]
    assert [p.metadata.uid for p in pods] == [second.metadata.uid], described
    assert daemonsets.events(name, "RolloutStuck") == []
