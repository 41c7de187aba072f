"""The controller's pacing: retry backoff and the per-object event budget."""

from __future__ import annotations

from typing import Any

from kubeherd.events import EventBudget, EventRecorder
from kubeherd.kube.ratelimit import Backoff
from tests.helpers import ManualClock


def test_backoff_doubles_from_one_second_up_to_its_limit() -> None:
    backoff = Backoff(limit=10)

    assert [backoff.next_delay() for _ in range(6)] == [1, 2, 4, 8, 10, 10]


def test_a_reset_backoff_starts_again_at_one_second() -> None:
    backoff = Backoff(limit=900)
    for _ in range(5):
        backoff.next_delay()

    backoff.reset()

    assert backoff.next_delay() == 1


class PostedEvents:
    """An EventSink that keeps what would have been posted."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def post_event_soon(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str
    ) -> None:
        self.reasons.append(reason)


def cds(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"}}


def test_events_about_an_object_pass_25_at_once_then_one_every_5_minutes_as_client_go() -> None:
    posted, clock = PostedEvents(), ManualClock()
    recorder = EventRecorder(posted, "CustomDaemonSet", clock=clock)
    agent = cds("agent")

    for _ in range(30):
        recorder.record(agent, "Normal", "SuccessfulCreate", "Created pod")
    at_once = len(posted.reasons)
    clock.now = 299
    recorder.record(agent, "Normal", "SuccessfulCreate", "Created pod")
    before_five_minutes = len(posted.reasons)
    clock.now = 300
    recorder.record(agent, "Normal", "SuccessfulCreate", "Created pod")
    recorder.record(agent, "Normal", "SuccessfulCreate", "Created pod")

    assert (at_once, before_five_minutes, len(posted.reasons)) == (25, 25, 26)


def test_every_reason_of_one_object_and_type_draws_on_one_budget() -> None:
    posted = PostedEvents()
    recorder = EventRecorder(posted, "CustomDaemonSet", budget=EventBudget(burst=3))
    agent = cds("agent")

    for reason in ("SuccessfulCreate", "SuccessfulDelete", "SuccessfulCreate", "SuccessfulDelete"):
        recorder.record(agent, "Normal", reason, "")

    assert posted.reasons == ["SuccessfulCreate", "SuccessfulDelete", "SuccessfulCreate"]


def test_warnings_keep_their_budget_when_normal_events_used_theirs_up() -> None:
    posted = PostedEvents()
    recorder = EventRecorder(posted, "CustomDaemonSet", budget=EventBudget(burst=2))
    agent = cds("agent")

    for _ in range(3):
        recorder.record(agent, "Normal", "SuccessfulCreate", "")
    recorder.record(agent, "Warning", "FailedCreate", "")

    assert posted.reasons == ["SuccessfulCreate", "SuccessfulCreate", "FailedCreate"]


def test_each_object_has_a_budget_of_its_own() -> None:
    posted = PostedEvents()
    recorder = EventRecorder(posted, "CustomDaemonSet", budget=EventBudget(burst=1))

    for name in ("agent", "agent", "other"):
        recorder.record(cds(name), "Normal", "SuccessfulCreate", name)

    assert len(posted.reasons) == 2
