"""In-place updates (`rollingUpdateType: InPlaceIfPossible`): which pods may take a new template
without being replaced, the writes that update one, and whether its kubelet has carried them out.

A template that differs from a pod's revision only in container images and in containers' CPU
and memory (with the same QoS class) is updated in place: the pod keeps its name, UID and node.
New resources go through the pod's `resize` subresource (the kubelet resizes the container, with
a restart only if its resizePolicy asks for one); new images through a patch of the pod, and the
kubelet restarts those containers. The patch records each restarted container's restart count
and the resized containers in an annotation; the update is done once every one of them has
restarted and the kubelet reports the new resources, and until then the pod counts as not Ready.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from kubeherd.daemonset.core.overrides import ResourceOverride
from kubeherd.daemonset.core.pods import (
    RESOURCE_OVERRIDE_ANNOTATION,
    REVISION_LABEL,
    canonical_hash,
    canonical_json,
)

IN_PLACE_ANNOTATION = "kubeherd.io/in-place-update"
# The resources a running container can be resized in.
RESIZABLE = ("cpu", "memory")
RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
_SUFFIXES = {
    **{suffix: Decimal(1000) ** power for power, suffix in enumerate(("", "k", "M", "G", "T"), 0)},
    **{suffix: Decimal(1024) ** power for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti"), 1)},
    "m": Decimal("0.001"),
    "P": Decimal(1000) ** 5,
    "E": Decimal(1000) ** 6,
    "Pi": Decimal(1024) ** 5,
    "Ei": Decimal(1024) ** 6,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: Any) -> Decimal | None:
    """A resource quantity ("100m", "64Mi", 2) as a number; None when it does not read as one."""
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        return None


def _resizable(resources: Mapping[str, Any] | None) -> dict[str, dict[str, Decimal | None]]:
    """A container's CPU and memory requests and limits, as numbers."""
    resources = resources or {}
    return {
        part: {
            name: quantity(value)
            for name, value in (resources.get(part) or {}).items()
            if name in RESIZABLE
        }
        for part in ("requests", "limits")
    }


def qos_class(pod_spec: Mapping[str, Any]) -> str:
    """The pod's QoS class as Kubernetes derives it from its containers' CPU and memory."""
    containers = [*(pod_spec.get("initContainers") or ()), *(pod_spec.get("containers") or ())]
    sizes = [_resizable(container.get("resources")) for container in containers]
    if not any(size["requests"] or size["limits"] for size in sizes):
        return "BestEffort"
    guaranteed = all(
        name in size["limits"]
        and size["requests"].get(name, size["limits"][name]) == size["limits"][name]
        for size in sizes
        for name in RESIZABLE
    )
    return "Guaranteed" if guaranteed else "Burstable"


def in_place_key(template: Mapping[str, Any]) -> str:
    """Equal for two templates exactly when they differ at most in container images and in
    containers' CPU and memory, with the same QoS class (which a running pod cannot change)."""
    shape = copy.deepcopy(dict(template))
    spec = shape.get("spec") or {}
    shape["qosClass"] = qos_class(spec)
    for container in spec.get("containers") or ():
        container.pop("image", None)
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            values = resources.get(part)
            if isinstance(values, dict):
                for name in RESIZABLE:
                    values.pop(name, None)
                if not values:
                    resources.pop(part)
        if not resources:
            container.pop("resources", None)
    return canonical_hash(canonical_json(shape))


def in_place_key_of_json(template_json: bytes) -> str:
    return in_place_key(json.loads(template_json))


@dataclass(frozen=True)
class Target:
    """What a pod's containers are updated to: each one's image and resources, and the key of
    the resource override those resources include ("" for none)."""

    images: Mapping[str, str]
    resources: Mapping[str, Mapping[str, Any]]
    override_key: str = ""

    @classmethod
    def of(cls, template: Mapping[str, Any], override: ResourceOverride | None = None) -> Target:
        containers = (template.get("spec") or {}).get("containers") or ()
        if override is not None:
            containers = override.apply(containers)
        return cls(
            {str(c.get("name")): str(c.get("image") or "") for c in containers},
            {str(c.get("name")): dict(c.get("resources") or {}) for c in containers},
            override.key if override is not None else "",
        )


def unresizable_change(pod: Mapping[str, Any], target: Target) -> bool:
    """Whether the target changes a container's requests or limits other than CPU and memory
    (a resource override may set any): no resize gives those, so the pod is replaced."""

    def others(resources: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
        resources = resources or {}
        return {
            part: {k: v for k, v in (resources.get(part) or {}).items() if k not in RESIZABLE}
            for part in ("requests", "limits")
        }

    return any(
        others(container.get("resources")) != others(target.resources[container.get("name")])
        for container in (pod.get("spec") or {}).get("containers") or ()
        if container.get("name") in target.resources
    )


def compatible_revisions(revisions: Iterable[tuple[str, str]], current_key: str) -> frozenset[str]:
    """Of the (hash, in-place key) of kept revisions, the hashes whose pods a template whose
    in-place key is `current_key` can update in place (its own revision among them)."""
    return frozenset(hash_ for hash_, key in revisions if key == current_key)


@dataclass(frozen=True)
class UpdateStatus:
    """What a pod's in-place update record says: whether its kubelet has not carried out the
    update yet (a container to restart, or to resize), and when the last restarted one
    started."""

    pending: bool
    started_at: float | None
    # Each updated container's restartCount before the update.
    restart_counts: Mapping[str, int]


def update_status(body: Mapping[str, Any]) -> UpdateStatus | None:
    """None: the pod was not updated in place to its current revision."""
    metadata = body.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(IN_PLACE_ANNOTATION)
    if not text:
        return None
    try:
        record = json.loads(text)
        restart_counts = {str(k): int(v) for k, v in dict(record["restartCounts"]).items()}
        resized = [str(name) for name in record.get("resized") or ()]
        revision = str(record["revision"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if revision != (metadata.get("labels") or {}).get(REVISION_LABEL):
        return None
    status = body.get("status") or {}
    statuses = {str(s.get("name")): s for s in status.get("containerStatuses") or ()}
    pending, started = False, []
    for name, count in restart_counts.items():
        container = statuses.get(name) or {}
        if int(container.get("restartCount") or 0) <= count:
            pending = True
        running = (container.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            started.append(_timestamp(str(running["startedAt"])))
    if resized:
        resizing = any(
            c.get("type") in RESIZE_CONDITIONS and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        wanted = {
            str(c.get("name")): c.get("resources")
            for c in (body.get("spec") or {}).get("containers") or ()
        }
        pending |= resizing or any(
            _resizable((statuses.get(name) or {}).get("resources")) != _resizable(wanted.get(name))
            for name in resized
        )
    return UpdateStatus(pending, max(started, default=None), restart_counts)


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def resize_patch(pod: Mapping[str, Any], target: Target) -> dict[str, Any] | None:
    """The patch of the pod's `resize` subresource that gives its containers the target's CPU
    and memory, or None when they have them already."""
    containers = (pod.get("spec") or {}).get("containers") or []
    changed = [
        {"name": name, "resources": target.resources[name]}
        for name in sorted(target.resources)
        for container in containers
        if container.get("name") == name
        and _resizable(container.get("resources")) != _resizable(target.resources[name])
    ]
    return {"spec": {"containers": changed}} if changed else None


def update_patch(
    pod: Mapping[str, Any],
    target: Target,
    revision: str,
    resized: Iterable[str] = (),
    resource_version: str | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch that updates `pod` in place to the target's images, `revision` and
    resource override annotation, recording the containers to restart and the ones `resized`
    (by the resize subresource, which left the pod at `resource_version`). None when a
    container of the template is missing from the pod. Its test of the resourceVersion makes
    it fail if the pod changed since it was read."""
    metadata = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = {
        str(status.get("name")): status
        for status in (pod.get("status") or {}).get("containerStatuses") or ()
    }
    index = {str(container.get("name")): i for i, container in enumerate(containers)}
    if set(target.images) - set(index):
        return None
    version = resource_version or metadata["resourceVersion"]
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    ]
    restart_counts = {}
    for name, image in sorted(target.images.items()):
        if containers[index[name]].get("image") == image:
            continue
        operations.append(
            {"op": "replace", "path": f"/spec/containers/{index[name]}/image", "value": image}
        )
        restart_counts[name] = int((statuses.get(name) or {}).get("restartCount") or 0)
    record = {"revision": revision, "restartCounts": restart_counts}
    if resized := sorted(resized):
        record["resized"] = resized
    if "annotations" not in metadata:
        operations.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    operations += [
        {"op": "add", "path": f"/metadata/labels/{_pointer(REVISION_LABEL)}", "value": revision},
        {
            "op": "add",
            "path": f"/metadata/annotations/{_pointer(IN_PLACE_ANNOTATION)}",
            "value": json.dumps(record, sort_keys=True),
        },
    ]
    override_path = f"/metadata/annotations/{_pointer(RESOURCE_OVERRIDE_ANNOTATION)}"
    if target.override_key:
        operations.append({"op": "add", "path": override_path, "value": target.override_key})
    elif RESOURCE_OVERRIDE_ANNOTATION in (metadata.get("annotations") or {}):
        operations.append({"op": "remove", "path": override_path})
    return operations


def _pointer(key: str) -> str:
    """A map key as one JSON pointer segment."""
    return key.replace("~", "~0").replace("/", "~1")
