"""Object metadata both kinds share: owner references, conditions, timestamps. Pure."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kubeherd.names import API_VERSION


def iso_time(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time (as the API server writes it, fractions included) in epoch seconds."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def controller_reference(owner: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The owner reference that makes a kubeherd resource the controller of what it creates, so
    the garbage collector removes it with the resource."""
    metadata = owner["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def involved_object(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """What an Event about a kubeherd resource points at."""
    metadata = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", kind),
        "name": metadata["name"],
        "namespace": metadata["namespace"],
        "uid": metadata["uid"],
    }


def condition(
    previous: Mapping[str, Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> dict[str, Any]:
    """A status condition; `previous` holds the conditions written before, by type."""
    before = previous.get(type_, {})
    # The transition time moves only when the status flips, so a user can tell since when.
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
        "observedGeneration": generation,
    }


def conditions_by_type(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in status.get("conditions") or []}


def status_changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing `new` would change anything a user sees (no write when nothing did)."""
    return any(
        _without_nulls(previous.get(key)) != _without_nulls(value) for key, value in new.items()
    )


def _without_nulls(value: Any) -> Any:
    """A merge patch's nulls remove fields: the stored object never shows them."""
    if isinstance(value, Mapping):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value
