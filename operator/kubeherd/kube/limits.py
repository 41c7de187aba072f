"""How much of the API server kubeherd takes: its limits for writes, and the connections
they need."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WriteLimits:
    """Client-side limits for writes.

    By default there is no client-side rate: the API server's priority and fairness (APF) paces
    kubeherd among its other clients and answers 429 with Retry-After when it must, which
    `Kube` honours. controller-runtime made the same choice for Go operators. What bounds
    kubeherd's share of the server is the number of writes in flight.
    """

    qps: float = 0.0
    burst: int = 100
    max_concurrent: int = 32


def pool_size(limits: WriteLimits, namespaces: int = 1) -> int:
    """Connections to the API server: as many as writes in flight, plus reads, plus a watch
    each of kubeherd's and Kopf's per namespace watched."""
    return max(limits.max_concurrent, 4) + 32 + 8 * max(namespaces, 1)
