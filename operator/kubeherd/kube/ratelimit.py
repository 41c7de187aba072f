"""A client-side token bucket, like client-go's flowcontrol limiter, for asyncio.

Off by default: the API server's priority and fairness paces kubeherd (see kube.client). It is
there for whoever wants a hard ceiling on kubeherd's writes (`kubeherd run --qps`), for instance
on an API server without priority and fairness. Kopf has no QPS limiter of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass


class TokenBucket:
    """`qps` tokens per second, at most `burst` saved up. A qps of 0 or less disables limiting."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    def delay_for_next(self) -> float:
        """Take one token now; return how long to wait before using it (0 if one was saved)."""
        if self.qps <= 0:
            return 0.0
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        # Reserving under the lock and sleeping outside it keeps waiters in arrival order
        # without holding the lock through the sleep.
        async with self._lock:
            delay = self.delay_for_next()
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass
class Backoff:
    """Exponential delays: 1 s, 2 s, 4 s ... up to `limit`."""

    limit: float
    delay: float = 0.0

    def next_delay(self) -> float:
        self.delay = min(self.limit, max(1.0, self.delay * 2))
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0
