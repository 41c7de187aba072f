"""The client-side write limiter."""

from __future__ import annotations

from kubeherd.kube.ratelimit import TokenBucket
from tests.helpers import ManualClock


def test_a_burst_passes_at_once_then_requests_are_spaced_by_the_rate() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)

    delays = [bucket.delay_for_next() for _ in range(5)]

    assert delays[:3] == [0, 0, 0]
    assert delays[3:] == [0.1, 0.2]


def test_tokens_refill_with_time_up_to_the_burst() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    for _ in range(2):
        bucket.delay_for_next()

    clock.now = 100.0

    assert [bucket.delay_for_next() for _ in range(3)] == [0, 0, 0.1]


def test_a_rate_of_zero_means_no_limit() -> None:
    bucket = TokenBucket(qps=0, burst=1, clock=ManualClock())

    assert [bucket.delay_for_next() for _ in range(100)] == [0] * 100
