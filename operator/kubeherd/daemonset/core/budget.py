"""Int-or-percent budgets (maxUnavailable, maxSurge, a canary's replicas) against a number of
nodes. Pure."""

from __future__ import annotations

import math


def resolve_budget(value: int | str | None, desired: int, default: int) -> int:
    """An int-or-percent budget against `desired` nodes; percentages round up, as upstream."""
    if value is None:
        return default
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    if text.endswith("%"):
        return max(0, math.ceil(int(text[:-1]) * desired / 100))
    return max(0, int(text))
