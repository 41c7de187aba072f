"""The controller's pacing: retry backoff and the per-object event budget."""

from __future__ import annotations

from kubeherd.events import EventBudget
from kubeherd.kube.ratelimit import Backoff


def test_backoff_doubles_from_one_second_up_to_its_limit() -> None:
    backoff = Backoff(limit=10)

    assert [backoff.next_delay() for _ in range(6)] == [1, 2, 4, 8, 10, 10]


def test_a_reset_backoff_starts_again_at_one_second() -> None:
    backoff = Backoff(limit=900)
    for _ in range(5):
        backoff.next_delay()

    backoff.reset()

    assert backoff.next_delay() == 1


def test_events_pass_in_a_burst_then_trickle_per_object_and_reason() -> None:
    budget = EventBudget(burst=3, refill_seconds=10)
    key = ("ns", "agent")

    first = [budget.allow(key, "SuccessfulCreate", now=0) for _ in range(5)]

    assert first == [True, True, True, False, False]
    assert budget.allow(key, "FailedCreate", now=0)
    assert budget.allow(("ns", "other"), "SuccessfulCreate", now=0)
    assert not budget.allow(key, "SuccessfulCreate", now=5)
    assert budget.allow(key, "SuccessfulCreate", now=15)
