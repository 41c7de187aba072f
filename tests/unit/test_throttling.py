"""Writes throttled by the API server's priority and fairness (429) wait and go again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.kube.client import MAX_THROTTLED_ATTEMPTS, Kube
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.outcomes import Outcome
from kubeherd.kube.wire import MAX_RETRY_AFTER, retry_after


class Answer:
    """What aiohttp hands back for a request sent with _preload_content=False."""

    def __init__(self, status: int, retry: str | None = None, body: bytes = b"{}") -> None:
        self.status = status
        self.headers = {"Retry-After": retry} if retry is not None else {}
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class Server:
    """A session to the API server that answers a write with each of `answers` in turn, and
    counts the requests."""

    server_url = "https://127.0.0.1:6443"

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests = 0

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def close(self) -> None:
        pass


def create_pod(kube: Kube) -> Outcome:
    return asyncio.run(DaemonSetApi(kube).create_pod("default", {"metadata": {"name": "agent"}}))


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return delays


def test_retry_after_takes_the_servers_seconds_within_bounds() -> None:
    assert retry_after("3") == 3.0
    assert retry_after(None) == 1.0
    assert retry_after("soon") == 1.0
    assert retry_after("nan") == 1.0
    assert retry_after("3600") == MAX_RETRY_AFTER
    assert retry_after("-2") == 0.0


def test_a_throttled_write_waits_as_asked_then_succeeds(slept: list[float]) -> None:
    server = Server(Answer(429, "2"), Answer(429), Answer(201))
    kube = Kube(server, WriteLimits())

    outcome = create_pod(kube)

    assert outcome.ok
    assert server.requests == 3
    assert slept == [2.0, 1.0]


def test_a_write_throttled_every_time_gives_up_with_the_servers_message(
    slept: list[float],
) -> None:
    message = b'{"message": "too many requests, please try again later"}'
    server = Server(Answer(429, "1", message))
    kube = Kube(server, WriteLimits())

    outcome = create_pod(kube)

    assert outcome.status == 429
    assert outcome.message == "too many requests, please try again later"
    assert server.requests == MAX_THROTTLED_ATTEMPTS


def test_other_refusals_are_not_retried(slept: list[float]) -> None:
    server = Server(Answer(403, body=b'{"message": "exceeded quota: node-agents"}'))
    kube = Kube(server, WriteLimits())

    outcome = create_pod(kube)

    assert (outcome.status, server.requests, slept) == (403, 1, [])
