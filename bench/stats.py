"""Figures from timestamps. Pure: plain numbers in, plain numbers out."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (0 < fraction <= 1): a value that was actually measured."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class Rollout:
    """One rollout, in seconds from the moment the object was created."""

    pods: int
    all_created: float
    all_running: float
    # Seconds after the start at which each pod was created, and was first seen Running.
    created_at: tuple[float, ...]
    running_at: tuple[float, ...]

    @property
    def create_rate(self) -> float:
        """Pods created per second over the whole rollout."""
        return self.pods / self.all_created if self.all_created > 0 else math.inf


def rollout(start: float, created: Iterable[float], running: Iterable[float | None]) -> Rollout:
    created_at = tuple(sorted(time - start for time in created))
    running_at = tuple(sorted(time - start for time in running if time is not None))
    if not created_at or len(running_at) < len(created_at):
        raise ValueError("the rollout has not finished: some pods were never seen Running")
    return Rollout(len(created_at), created_at[-1], running_at[-1], created_at, running_at)


def delays(started: dict[str, float], reached: dict[str, float]) -> list[float]:
    """Per key in both: reached - started (for instance node creation to its pod's creation)."""
    return [reached[key] - started[key] for key in started if key in reached]


def growth_exponent(sizes: Sequence[float], times: Sequence[float]) -> float:
    """The slope of log(time) against log(size) by least squares: 1 is linear, 2 quadratic."""
    if len(sizes) != len(times) or len(sizes) < 2:
        raise ValueError("need at least two (size, time) pairs")
    xs = [math.log(size) for size in sizes]
    ys = [math.log(time) for time in times]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        raise ValueError("sizes must differ")
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
