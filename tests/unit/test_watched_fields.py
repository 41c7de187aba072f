"""The watches decode only the fields their records read (watched_fields): every field that
a pod's or a node's record, the pod watch's `keep` or the reflector reads must be among them,
and a record made from the decoded fields equals one made from the whole object."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from types import NoneType, UnionType
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import msgspec
import pytest

from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.in_place import IN_PLACE_ANNOTATION
from kubeherd.daemonset.core.pods import OWNER_LABEL, RESOURCE_OVERRIDE_ANNOTATION
from kubeherd.daemonset.shell.watched_fields import WatchedNode, WatchedPod
from kubeherd.daemonset.shell.watches import DaemonPod, Watches
from kubeherd.kube import reflector as reflector_module
from kubeherd.kube.reflector import Reflector

Path = tuple[str, ...]
SELECTOR = {"matchLabels": {OWNER_LABEL: "agent"}}
IN_PLACE_RECORD = {"revision": "r2", "restartCounts": {"agent": 1}, "resized": ["agent"]}
OWNER_REFERENCE = {
    "apiVersion": "kubeherd.io/v1alpha1",
    "kind": "CustomDaemonSet",
    "name": "agent",
    "uid": "uid-cds",
    "controller": True,
    "blockOwnerDeletion": True,
}
MANAGED_FIELDS = [
    {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {"f:phase": {}}}}
]


def running_pod_updated_in_place() -> dict[str, Any]:
    """A pod with every part a record may read: resized in place, restarted, overridden."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-abcde",
            "namespace": "default",
            "uid": "uid-1",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-27T10:00:00Z",
            "labels": {OWNER_LABEL: "agent", "controller-revision-hash": "r2", "zone": "a"},
            "annotations": {
                IN_PLACE_ANNOTATION: json.dumps(IN_PLACE_RECORD),
                RESOURCE_OVERRIDE_ANNOTATION: "big-nodes",
                "kubectl.kubernetes.io/last-applied-configuration": "{}" * 500,
            },
            "ownerReferences": [OWNER_REFERENCE],
            "managedFields": MANAGED_FIELDS,
        },
        "spec": {
            "nodeName": "node-1",
            "affinity": {"nodeAffinity": pinned_to("node-1")},
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}},
                }
            ],
            "tolerations": [{"operator": "Exists"}],
            "volumes": [{"name": "token", "projected": {"sources": []}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-27T10:01:00Z"},
                {"type": "PodResizeInProgress", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "agent",
                    "restartCount": 3,
                    "state": {"running": {"startedAt": "2026-11-27T10:02:00Z"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "sha256:abc",
                }
            ],
            "podIP": "10.0.0.7",
            "hostIP": "192.168.0.2",
        },
    }


def pinned_to(node: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}


def pending_pod_being_deleted() -> dict[str, Any]:
    """Not bound yet (its node is its affinity's), waiting, deleted, orphaned."""
    return {
        "metadata": {
            "name": "agent-fghij",
            "namespace": "default",
            "uid": "uid-2",
            "creationTimestamp": "2026-11-27T10:00:00Z",
            "deletionTimestamp": "2026-11-27T10:05:00Z",
            "labels": {OWNER_LABEL: "agent"},
            "managedFields": MANAGED_FIELDS,
        },
        "spec": {"affinity": {"nodeAffinity": pinned_to("node-2")}, "containers": []},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "agent", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                {"name": "sidecar", "state": {"terminated": {"reason": "Error"}}},
            ],
        },
    }


def node() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "node-1",
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": "node-1", "zone": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": MANAGED_FIELDS,
        },
        "spec": {
            "podCIDR": "10.0.1.0/24",
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        },
        "status": {
            "images": [{"names": [f"image-{n}"], "sizeBytes": n} for n in range(50)],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def bookmark_ending_a_listing() -> dict[str, Any]:
    """As the API server sends it: an empty pod, nulls and all."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "resourceVersion": "99",
            "creationTimestamp": None,
            "annotations": {reflector_module.INITIAL_EVENTS_END: "true"},
        },
        "spec": {"containers": None},
        "status": {},
    }


def expired() -> dict[str, Any]:
    return {"kind": "Status", "status": "Failure", "code": 410, "message": "too old", "reason": "x"}


class Recording(Mapping[str, Any]):
    """A body that notes the path of every field read from it (`*`: all of a map's keys)."""

    def __init__(self, data: Mapping[str, Any], path: Path, reads: set[Path]) -> None:
        self.data, self.path, self.reads = data, path, reads

    def __getitem__(self, key: str) -> Any:
        self.reads.add((*self.path, key))
        return recording(self.data[key], (*self.path, key), self.reads)

    def __iter__(self) -> Iterator[str]:
        self.reads.add((*self.path, "*"))
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def recording(value: Any, path: Path, reads: set[Path]) -> Any:
    if isinstance(value, Mapping):
        return Recording(value, path, reads)
    if isinstance(value, list):
        return [recording(item, (*path, "[]"), reads) for item in value]
    return value


def kept_by(schema: Any, path: Path) -> bool:
    """Whether decoding with the schema keeps the field at `path`."""
    for part in path:
        if get_origin(schema) is UnionType:  # a field that may be null
            (schema,) = (option for option in get_args(schema) if option is not NoneType)
        if schema is Any or get_origin(schema) is dict:
            return True  # the whole value is kept
        if get_origin(schema) is list:
            if part != "[]":
                return False
            schema = get_args(schema)[0]
            continue
        if not is_typeddict(schema):
            return False
        fields = get_type_hints(schema)
        if part not in fields:
            return False
        schema = fields[part]
    return True


def reads_of_a_pod(body: Mapping[str, Any]) -> set[Path]:
    reads: set[Path] = set()
    watches = Watches(transport=None)  # type: ignore[arg-type]
    watches._known.add(("default", "agent"))
    DaemonPod.watched(recording(body, (), reads), lambda _key: SELECTOR)
    watches._keeps_pod(recording(body, (), reads))
    reflector_module._key_of(recording(body, (), reads))
    reflector_module._version_of(recording(body, (), reads))
    return reads


def reads_of_the_reflector(body: Mapping[str, Any]) -> set[Path]:
    reads: set[Path] = set()
    reflector: Reflector[str] = Reflector(None, "/", lambda _body: "", lambda _change: None)  # type: ignore[arg-type]
    reflector_module._ends_initial_events(recording(body, (), reads))
    reflector_module._version_of(recording(body, (), reads))
    with pytest.raises((reflector_module.GoneError, RuntimeError)):
        reflector._apply("ERROR", recording(body, (), reads))
    return reads


@pytest.mark.parametrize("body", [running_pod_updated_in_place(), pending_pod_being_deleted()])
def test_every_field_a_daemon_pods_record_reads_is_decoded(body: dict[str, Any]) -> None:
    reads = reads_of_a_pod(body)
    assert ("status", "containerStatuses", "[]", "state", "running", "startedAt") in reads or (
        body["status"]["phase"] == "Pending"
    )
    assert {path for path in reads if not kept_by(WatchedPod, path)} == set()


def test_every_field_a_nodes_record_reads_is_decoded() -> None:
    reads: set[Path] = set()
    NodeInfo.from_body(recording(node(), (), reads))
    reflector_module._key_of(recording(node(), (), reads))
    assert ("spec", "taints", "[]", "effect") in reads
    assert {path for path in reads if not kept_by(WatchedNode, path)} == set()


@pytest.mark.parametrize("schema", [WatchedPod, WatchedNode])
@pytest.mark.parametrize("body", [bookmark_ending_a_listing(), expired()])
def test_every_field_the_reflector_reads_is_decoded(schema: Any, body: dict[str, Any]) -> None:
    reads = reads_of_the_reflector(body)
    assert {path for path in reads if not kept_by(schema, path)} == set()


def decoded(body: Mapping[str, Any], schema: Any) -> Any:
    return msgspec.json.decode(json.dumps(body), type=schema)


@pytest.mark.parametrize("body", [running_pod_updated_in_place(), pending_pod_being_deleted()])
def test_a_pod_decoded_in_part_makes_the_same_record(body: dict[str, Any]) -> None:
    part = decoded(body, WatchedPod)
    assert "managedFields" not in part["metadata"]
    assert set(part["metadata"].get("annotations", {})) <= {
        IN_PLACE_ANNOTATION,
        RESOURCE_OVERRIDE_ANNOTATION,
    }
    assert DaemonPod.watched(part, lambda _key: SELECTOR) == DaemonPod.watched(
        body, lambda _key: SELECTOR
    )


def test_a_node_decoded_in_part_makes_the_same_record() -> None:
    part = decoded(node(), WatchedNode)
    assert "status" not in part
    assert NodeInfo.from_body(part) == NodeInfo.from_body(node())


class OneEvent:
    """A streaming listing of one pod, then a watch with nothing to say."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        raise AssertionError("the listing streams")

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        yield json.dumps({"type": "ADDED", "object": self.body}).encode() + b"\n"
        yield json.dumps({"type": "BOOKMARK", "object": bookmark_ending_a_listing()}).encode()
        await asyncio.Event().wait()


def listed(body: Mapping[str, Any]) -> tuple[dict[tuple[str, str], str], list[Mapping[str, Any]]]:
    """A pod watch's store once it has listed the pod, and what its records were made from."""
    seen: list[Mapping[str, Any]] = []

    def decode(decoded: Mapping[str, Any]) -> str:
        seen.append(decoded)
        return str(decoded["metadata"]["name"])

    async def scenario() -> dict[tuple[str, str], str]:
        reflector: Reflector[str] = Reflector(
            OneEvent(body),
            "/api/v1/pods",
            decode,
            lambda _change: None,
            what="daemon pods",
            fields=WatchedPod,
        )
        task = asyncio.get_running_loop().create_task(reflector.run())
        await asyncio.wait_for(reflector.listed.wait(), 5)
        task.cancel()
        return dict(reflector.store)

    return asyncio.run(scenario()), seen


def test_the_reflector_hands_its_records_only_the_decoded_fields() -> None:
    store, seen = listed(running_pod_updated_in_place())

    assert store == {("default", "agent-abcde"): "agent-abcde"}
    assert set(seen[0]) == {"metadata", "spec", "status"}
    assert "podIP" not in seen[0]["status"]


def test_an_object_shaped_otherwise_is_decoded_whole_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    odd = running_pod_updated_in_place()
    odd["metadata"]["ownerReferences"] = {"not": "a list"}

    store, seen = listed(odd)

    assert store == {("default", "agent-abcde"): "agent-abcde"}
    assert "managedFields" in seen[0]["metadata"]
    assert "An object of the daemon pods watch is not shaped as expected" in caplog.text


class ExpiresOnce(OneEvent):
    """A streaming listing of one pod, then 410 Gone as the API server sends it: an ERROR event
    whose object is a Status, not a pod; then the same listing again."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        super().__init__(body)
        self.streams = 0

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        self.streams += 1
        if self.streams == 1:
            expired = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (2)",
                "reason": "Expired",
                "code": 410,
            }
            yield json.dumps({"type": "ADDED", "object": self.body}).encode() + b"\n"
            yield json.dumps({"type": "BOOKMARK", "object": bookmark_ending_a_listing()}).encode()
            yield b"\n" + json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n"
            return
        async for line in super().stream_lines(path, query):
            yield line


def test_a_watch_that_expires_lists_again_without_calling_its_status_oddly_shaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = ExpiresOnce(running_pod_updated_in_place())

    async def scenario() -> dict[tuple[str, str], str]:
        reflector: Reflector[str] = Reflector(
            transport,
            "/api/v1/pods",
            lambda decoded: str(decoded["metadata"]["name"]),
            lambda _change: None,
            what="daemon pods",
            fields=WatchedPod,
        )
        task = asyncio.get_running_loop().create_task(reflector.run())
        while transport.streams < 2 or not reflector.listed.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        return dict(reflector.store)

    caplog.set_level(logging.INFO)
    store = asyncio.run(asyncio.wait_for(scenario(), 5))

    assert store == {("default", "agent-abcde"): "agent-abcde"}
    assert "too old to resume" in caplog.text
    assert "not shaped as expected" not in caplog.text
