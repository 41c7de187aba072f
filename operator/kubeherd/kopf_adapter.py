"""What kubeherd relies on of Kopf beyond its documented API, in one place.

Two things: the type of `kopf.run`'s `identity`, which Kopf defines in a private module, and the
peering objects Kopf keeps (their group and kinds, and the entries of their status), which
kubeherd reads to learn whether another replica outranks this one. A Kopf release that changes
either is mended here, not across the operator.

Kopf itself is not imported: peering and `kubeherd rollout` use this module, and neither loads
Kopf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.kube.kinds import Kind
from kubeherd.meta import parse_time

PEERING_API_VERSION = "kopf.dev/v1"
CLUSTER_PEERING = Kind(
    f"/apis/{PEERING_API_VERSION}", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False
)
NAMESPACED_PEERING = Kind(f"/apis/{PEERING_API_VERSION}", "kopfpeerings", "KopfPeering")
# Kopf's own lifetime of an entry that does not say.
DEFAULT_LIFETIME = 60.0


def run_identity(name: str) -> Any:
    """`name` as `kopf.run(identity=...)` takes it. Kopf types it with a NewType of str that it
    exports only from a private module; the value is the string itself."""
    return name


def peering_manifest(kind: Kind, name: str, namespace: str | None) -> dict[str, Any]:
    """A peering object as Kopf expects to find it: empty; Kopf writes the entries."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": PEERING_API_VERSION, "kind": kind.kind, "metadata": metadata}


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    deadline: float


def live_peers(body: Mapping[str, Any] | None, now: float) -> list[Peer]:
    """The entries of a peering object (Kopf keeps them in its status) whose lifetime runs."""
    peers = []
    for identity, entry in ((body or {}).get("status") or {}).items():
        if not isinstance(entry, Mapping):
            continue
        last_seen = parse_time(entry.get("lastseen"))
        if last_seen is None:
            continue
        deadline = last_seen + float(entry.get("lifetime", DEFAULT_LIFETIME))
        if deadline > now:
            peers.append(Peer(str(identity), int(entry.get("priority", 0)), deadline))
    return peers
