"""LISTs come a page at a time, a page of revisions is dropped before the next is read, and
a write's body is encoded only once it has a slot."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest

from kubeherd.daemonset.core.revisions import build_revision
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.reads import claimed_revisions
from kubeherd.kube import client as kube_client
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import KINDS
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.wire import encode_body


class Answer:
    def __init__(self, body: Any) -> None:
        self.status = 200
        self.headers: dict[str, str] = {}
        self._body = json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class PagedServer:
    """Serves `items` `limit` at a time with continue tokens, and records each query."""

    server_url = "https://127.0.0.1:6443"

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.queries: list[dict[str, str]] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        query = dict(kwargs.get("query") or [])
        self.queries.append(query)
        start = int(query.get("continue") or 0)
        end = start + int(query["limit"])
        more = str(end) if end < len(self.items) else ""
        return Answer({"items": self.items[start:end], "metadata": {"continue": more}})

    async def close(self) -> None:
        pass


def test_a_list_is_read_in_pages_and_returns_every_object() -> None:
    items = [{"metadata": {"name": f"r{index}"}} for index in range(25)]
    server = PagedServer(items)
    kube = Kube(server, WriteLimits())

    async def read() -> tuple[list[dict[str, Any]], list[int]]:
        listed = await kube.list_objects(KINDS[("v1", "Pod")], "app=a", "ops")
        pages = [
            len(page)
            async for page in kube.list_pages(KINDS[("v1", "Pod")], "app=a", "ops", page_size=10)
        ]
        return listed, pages

    listed, pages = asyncio.run(read())

    assert listed == items
    assert pages == [10, 10, 5]
    assert all(query["labelSelector"] == "app=a" for query in server.queries)
    assert [query.get("continue", "") for query in server.queries[-3:]] == ["", "10", "20"]


def test_revisions_come_fewer_at_a_time_than_other_objects() -> None:
    server = PagedServer([])
    kube = Kube(server, WriteLimits())

    async def read() -> None:
        async for _ in DaemonSetApi(kube).controller_revision_pages("ops", "app=a"):
            pass

    asyncio.run(read())

    assert int(server.queries[0]["limit"]) < kube_client.LIST_PAGE_SIZE


class SlowServer:
    """Answers each write once `release` is set."""

    server_url = "https://127.0.0.1:6443"

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        await self.release.wait()
        return Answer({})

    async def close(self) -> None:
        pass


def test_writes_waiting_for_a_slot_are_not_encoded_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []

    def counting(body: Any) -> bytes | None:
        encoded.append(body)
        return encode_body(body)

    monkeypatch.setattr(kube_client, "encode_body", counting)

    async def scenario() -> int:
        server = SlowServer()
        kube = Kube(server, WriteLimits(max_concurrent=2))
        writes = [
            asyncio.create_task(
                DaemonSetApi(kube).create_pod("ops", {"metadata": {"name": f"p{index}"}})
            )
            for index in range(10)
        ]
        await asyncio.sleep(0.01)
        waiting = len(encoded)
        server.release.set()
        await asyncio.gather(*writes)
        return waiting

    assert asyncio.run(scenario()) == 2
    assert len(encoded) == 10


def alive_revisions() -> int:
    gc.collect()
    return sum(
        1
        for found in gc.get_objects()
        if isinstance(found, dict) and found.get("kind") == "ControllerRevision"
    )


class RevisionServer:
    """Serves ControllerRevisions `limit` at a time, kept as JSON (so that only what the
    client decoded is alive), and counts at each request the revisions still alive."""

    server_url = "https://127.0.0.1:6443"

    def __init__(self, revisions: list[dict[str, Any]]) -> None:
        self.encoded = [json.dumps(revision).encode() for revision in revisions]
        self.alive_at_request: list[int] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.alive_at_request.append(alive_revisions())
        query = dict(kwargs.get("query") or [])
        start = int(query.get("continue") or 0)
        end = start + int(query["limit"])
        more = str(end) if end < len(self.encoded) else ""
        answer = Answer({})
        answer._body = b'{"items":[%s],"metadata":{"continue":"%s"}}' % (
            b",".join(self.encoded[start:end]),
            more.encode(),
        )
        return answer

    async def close(self) -> None:
        pass


def test_a_page_of_revisions_is_dropped_before_the_next_is_read() -> None:
    # A revision holds a whole template: at a restart every CustomDaemonSet lists its own at
    # once, and a page held while waiting for the next was held by all of them together.
    cds = {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": "agent", "namespace": "ops", "uid": "uid-cds"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}},
    }
    revisions = [
        {
            **build_revision(cds, {"spec": {"containers": [{"image": f"a:{n}"}]}}, f"h{n}", n),
            "kind": "ControllerRevision",
        }
        for n in range(1, 26)
    ]
    for number, revision in enumerate(revisions, 1):
        revision["metadata"]["uid"] = f"uid-{number}"
    server = RevisionServer(revisions)
    kube = Kube(server, WriteLimits())
    del revisions, revision
    before = alive_revisions()

    records = asyncio.run(claimed_revisions(DaemonSetApi(kube), cds))

    assert [record.number for record in records] == list(range(1, 26))
    # Two queries (by label, by selector), of three pages each.
    assert server.alive_at_request == [before] * 6
