"""In-place updates (`rollingUpdateType: InPlaceIfPossible`): which pods may take a new template
without being replaced, the patch that updates one, and whether its kubelet has restarted it.

A template that differs from a pod's revision only in container images is updated in place:
the pod keeps its name, UID and node, and the kubelet restarts the containers whose image
changed. The patch records each changed container's restart count in an annotation; the update
is done once every one of them has restarted, and until then the pod counts as not Ready.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.core.pods import REVISION_LABEL, canonical_hash, canonical_json

IN_PLACE_ANNOTATION = "kubeherd.io/in-place-update"


def in_place_key(template: Mapping[str, Any]) -> str:
    """Equal for two templates exactly when they differ in container images at most."""
    shape = copy.deepcopy(dict(template))
    for container in (shape.get("spec") or {}).get("containers") or ():
        container.pop("image", None)
    return canonical_hash(canonical_json(shape))


def in_place_key_of_json(template_json: bytes) -> str:
    return in_place_key(json.loads(template_json))


def container_images(template: Mapping[str, Any]) -> dict[str, str]:
    containers = (template.get("spec") or {}).get("containers") or ()
    return {str(c.get("name")): str(c.get("image") or "") for c in containers}


def compatible_revisions(revisions: Iterable[tuple[str, str]], current_key: str) -> frozenset[str]:
    """Of the (hash, in-place key) of kept revisions, the hashes whose pods a template whose
    in-place key is `current_key` can update in place (its own revision among them)."""
    return frozenset(hash_ for hash_, key in revisions if key == current_key)


@dataclass(frozen=True)
class UpdateStatus:
    """What a pod's in-place update record says: whether its kubelet has not restarted every
    updated container yet, and when the last of them started."""

    pending: bool
    started_at: float | None


def update_status(body: Mapping[str, Any]) -> UpdateStatus | None:
    """None: the pod was not updated in place to its current revision."""
    metadata = body.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(IN_PLACE_ANNOTATION)
    if not text:
        return None
    try:
        record = json.loads(text)
        restart_counts = {str(k): int(v) for k, v in dict(record["restartCounts"]).items()}
        revision = str(record["revision"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if revision != (metadata.get("labels") or {}).get(REVISION_LABEL):
        return None
    statuses = {
        str(status.get("name")): status
        for status in (body.get("status") or {}).get("containerStatuses") or ()
    }
    pending, started = False, []
    for name, count in restart_counts.items():
        status = statuses.get(name) or {}
        if int(status.get("restartCount") or 0) <= count:
            pending = True
        running = (status.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            started.append(_timestamp(str(running["startedAt"])))
    return UpdateStatus(pending, max(started, default=None))


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def update_patch(
    pod: Mapping[str, Any], images: Mapping[str, str], revision: str
) -> list[dict[str, Any]] | None:
    """The JSON patch that updates `pod` in place to `images` and `revision`, or None when a
    container of the template is missing from it (it cannot be updated in place). Its test of
    the resourceVersion makes it fail if the pod changed since it was read."""
    metadata = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = {
        str(status.get("name")): status
        for status in (pod.get("status") or {}).get("containerStatuses") or ()
    }
    index = {str(container.get("name")): i for i, container in enumerate(containers)}
    if set(images) - set(index):
        return None
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]}
    ]
    restart_counts = {}
    for name, image in sorted(images.items()):
        if containers[index[name]].get("image") == image:
            continue
        operations.append(
            {"op": "replace", "path": f"/spec/containers/{index[name]}/image", "value": image}
        )
        restart_counts[name] = int((statuses.get(name) or {}).get("restartCount") or 0)
    record = json.dumps({"revision": revision, "restartCounts": restart_counts}, sort_keys=True)
    if "annotations" not in metadata:
        operations.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    operations += [
        {"op": "add", "path": f"/metadata/labels/{_pointer(REVISION_LABEL)}", "value": revision},
        {
            "op": "add",
            "path": f"/metadata/annotations/{_pointer(IN_PLACE_ANNOTATION)}",
            "value": record,
        },
    ]
    return operations


def _pointer(key: str) -> str:
    """A map key as one JSON pointer segment."""
    return key.replace("~", "~0").replace("/", "~1")
