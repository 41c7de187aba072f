"""Which kube-scheduler image a SchedulerProfile runs: the spec's, else the official one of the
cluster's release. Any other image may hold out-of-tree plugins. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OFFICIAL_IMAGE = "registry.k8s.io/kube-scheduler"


def scheduler_image(spec: Mapping[str, Any], version: str = "") -> str:
    """The spec's image, else the official one of `version` (the cluster's release)."""
    if spec.get("image"):
        return str(spec["image"])
    if not version:
        raise ValueError("no spec.image and no Kubernetes release: which kube-scheduler to run?")
    return f"{OFFICIAL_IMAGE}:{version}"


def is_custom_image(spec: Mapping[str, Any]) -> bool:
    """Any image but the official one may hold out-of-tree plugins."""
    image = spec.get("image")
    return bool(image) and not str(image).startswith(f"{OFFICIAL_IMAGE}:")


def official_release(image: str) -> str | None:
    """The tag of an official kube-scheduler image (its Kubernetes release), else None."""
    prefix = f"{OFFICIAL_IMAGE}:"
    return image[len(prefix) :] if image.startswith(prefix) else None
