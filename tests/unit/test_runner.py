"""The keyed runner shared by both controllers, in virtual time."""

from __future__ import annotations

import asyncio

import pytest

from kubeherd.runner import KeyedRunner, Marks
from tests.unit.virtual_time import run_virtually


class Recorder:
    """A pass that records what it was asked and when; it can be told to fail or to take time."""

    def __init__(self, duration: float = 0.0) -> None:
        self.passes: list[tuple[float, str, bool, frozenset[str]]] = []
        self.duration = duration
        self.failures = 0
        self.running = 0
        self.most_running = 0

    async def __call__(self, key: str, marks: Marks) -> None:
        now = asyncio.get_running_loop().time()
        self.passes.append((now, key, marks.everything, frozenset(marks.nodes)))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.duration)
            if self.failures:
                self.failures -= 1
                raise RuntimeError("the API server said no")
        finally:
            self.running -= 1


def test_marks_made_during_a_pass_are_folded_into_one_next_pass() -> None:
    recorder = Recorder(duration=1.0)

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test")
        runner.mark("a", everything=True)
        await asyncio.sleep(0.5)  # the first pass runs now
        for node in ("n1", "n2", "n3"):
            runner.mark("a", nodes=[node])
        await asyncio.sleep(5)
        await runner.stop()

    run_virtually(scenario)
    assert [(p[2], p[3]) for p in recorder.passes] == [
        (True, frozenset()),
        (False, frozenset({"n1", "n2", "n3"})),
    ]
    assert recorder.most_running == 1


def test_objects_run_side_by_side() -> None:
    recorder = Recorder(duration=1.0)

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test")
        runner.mark("a", everything=True)
        runner.mark("b", everything=True)
        await asyncio.sleep(5)
        await runner.stop()

    run_virtually(scenario)
    assert sorted(p[1] for p in recorder.passes) == ["a", "b"]
    assert recorder.most_running == 2


def test_a_timer_set_again_replaces_or_with_merge_keeps_the_sooner_and_joins() -> None:
    recorder = Recorder()

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test")
        runner.wake_later("a", "deadline", 10, everything=True)
        runner.wake_later("a", "deadline", 30, everything=True)  # replaces: one pass, at 30
        runner.wake_later("a", "retry", 5, nodes=["n1"], merge=True)
        runner.wake_later("a", "retry", 20, nodes=["n2"], merge=True)  # joins: at 5, both
        await asyncio.sleep(60)
        await runner.stop()

    run_virtually(scenario)
    assert [(round(p[0]), p[3]) for p in recorder.passes] == [
        (5, frozenset({"n1", "n2"})),
        (30, frozenset()),
    ]


def test_a_cancelled_or_forgotten_timer_wakes_nothing() -> None:
    recorder = Recorder()

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test")
        runner.wake_later("a", "status", 5)
        runner.wake_later("b", "status", 5)
        runner.wake_later("b", "deadline", 7)
        runner.cancel("a", "status")
        runner.forget("b")
        assert not runner.pending("b", "deadline")
        await asyncio.sleep(60)
        await runner.stop()

    run_virtually(scenario)
    assert recorder.passes == []


def test_a_failing_pass_is_retried_with_a_doubling_delay_reset_by_a_success() -> None:
    recorder = Recorder()
    recorder.failures = 3

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test", max_retry_delay=60)
        runner.mark("a", nodes=["n1"])
        await asyncio.sleep(100)
        recorder.failures = 1
        runner.mark("a")
        await asyncio.sleep(100)
        await runner.stop()

    run_virtually(scenario)
    times = [round(p[0]) for p in recorder.passes]
    # Failing at 0, 1, 3: retried after 1, 2, 4 s. After the success the delay is 1 s again.
    assert times == [0, 1, 3, 7, 100, 101]
    assert all(p[2] for p in recorder.passes[1:4])  # a retry looks at everything


@pytest.mark.parametrize("coalesce", [0.05, 1.0])
def test_a_burst_of_marks_costs_one_pass(coalesce: float) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        runner = KeyedRunner(recorder, what="test", coalesce_seconds=coalesce)
        for index in range(100):
            runner.mark("a", nodes=[f"n{index}"])
            await asyncio.sleep(coalesce / 200)
        await asyncio.sleep(10)
        await runner.stop()

    run_virtually(scenario)
    assert len(recorder.passes) == 1
    assert len(recorder.passes[0][3]) == 100
