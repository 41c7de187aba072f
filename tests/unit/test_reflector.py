"""The reflector against a scripted API: listings, watch events, and what an outage leaves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from kubeherd.kube import reflector as reflector_module
from kubeherd.kube.outcomes import KubeError, Outcome
from kubeherd.kube.reflector import Change, GoneError, Reflector


def node(name: str, version: str, zone: str = "a") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version, "labels": {"zone": zone}}}


def event(type_: str, body: Mapping[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": body}).encode()


def refuse_streaming_listings(query: list[tuple[str, str]]) -> None:
    """As an API server with the WatchList feature gate off answers a streaming list."""
    if dict(query).get("sendInitialEvents"):
        raise KubeError(Outcome(422, "sendInitialEvents is forbidden for watch"))


class ScriptedApi:
    """Answers listings from `listings` (each a list of pages) and watches from `watches`
    (each a list of lines, or an exception to raise), in order; records the queries. Unless it
    `streams`, it refuses streaming listings, as an API server without WatchList does, and
    does not record them."""

    def __init__(
        self,
        listings: list[list[dict[str, Any]]],
        watches: list[list[bytes] | Exception],
        *,
        streams: bool = False,
    ) -> None:
        self.listings = listings
        self.watches = watches
        self.streams = streams
        self.queries: list[dict[str, str]] = []
        self.done = asyncio.Event()

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        self.queries.append(dict(query))
        pages = self.listings[0]
        page = pages.pop(0)
        if not pages:
            self.listings.pop(0)
        return page

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        if not self.streams:
            refuse_streaming_listings(query)
        self.queries.append(dict(query))
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()  # the API server keeps the watch open
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for line in script:
            yield line


def page(items: list[dict[str, Any]], version: str, then: str = "") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version, "continue": then}, "items": items}


def zone_of(body: Mapping[str, Any]) -> str:
    return str(body["metadata"]["labels"]["zone"])


def end_of_objects(version: str) -> bytes:
    """The bookmark that ends a streaming listing's objects."""
    annotations = {"k8s.io/initial-events-end": "true"}
    return event("BOOKMARK", {"metadata": {"resourceVersion": version, "annotations": annotations}})


def run_until_done(api: ScriptedApi) -> tuple[Reflector[str], list[Change[str]]]:
    changes: list[Change[str]] = []
    reflector: Reflector[str] = Reflector(api, "/api/v1/nodes", zone_of, changes.append)

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(reflector.run())
        await asyncio.wait_for(api.done.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    return reflector, changes


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflector_module, "MAX_RETRY_DELAY", 0.0)


def test_a_paginated_listing_fills_the_store_and_the_watch_resumes_from_it() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "", then="next"), page([node("n2", "6")], "9")]],
        [],
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n1"): "a", ("", "n2"): "a"}
    assert reflector.listed.is_set()
    assert [(c.key, c.old, c.new) for c in changes] == [
        (("", "n1"), None, "a"),
        (("", "n2"), None, "a"),
    ]
    assert api.queries[1]["continue"] == "next"
    assert api.queries[2]["resourceVersion"] == "9"
    assert api.queries[2]["allowWatchBookmarks"] == "true"


def test_watch_events_change_the_store_and_bookmarks_move_the_resume_point() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "9")]],
        [
            [
                event("MODIFIED", node("n1", "10", zone="b")),
                event("ADDED", node("n2", "11")),
                event("DELETED", node("n1", "12", zone="b")),
                event("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
            ]
        ],
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n2"): "a"}
    assert [(c.key[1], c.old, c.new) for c in changes[1:]] == [
        ("n1", "a", "b"),
        ("n2", None, "a"),
        ("n1", "b", None),
    ]
    assert api.queries[-1]["resourceVersion"] == "20"


def test_an_unchanged_record_is_not_reported() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "9")]], [[event("MODIFIED", node("n1", "10", zone="a"))]]
    )

    _, changes = run_until_done(api)

    assert len(changes) == 1


def test_after_gone_a_new_listing_reports_what_it_lacks_as_deleted() -> None:
    api = ScriptedApi(
        [
            [page([node("n1", "5"), node("n2", "6")], "9")],
            [page([node("n2", "30", zone="b"), node("n3", "31")], "40")],
        ],
        [[event("ERROR", {"code": 410, "message": "too old resource version"})]],
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n2"): "b", ("", "n3"): "a"}
    assert {(c.key[1], c.old, c.new) for c in changes[2:]} == {
        ("n1", "a", None),
        ("n2", "a", "b"),
        ("n3", None, "a"),
    }
    assert api.queries[-1]["resourceVersion"] == "40"


def test_a_410_answer_to_the_watch_itself_lists_again_too() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "9")], [page([], "40")]],
        [GoneError()],
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {}
    assert (changes[-1].key[1], changes[-1].new) == ("n1", None)


def test_a_broken_connection_resumes_from_where_the_watch_was() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "9")]],
        [[event("ADDED", node("n2", "11"))], OSError("connection reset")],
    )

    reflector, _ = run_until_done(api)

    assert set(reflector.store) == {("", "n1"), ("", "n2")}
    watches = [query for query in api.queries if query.get("watch")]
    assert [query["resourceVersion"] for query in watches] == ["9", "11", "11"]


class FillingApi(ScriptedApi):
    """A listing, then a watch whose events come while a fill's listing is on its way: the
    fill's answer (`filled`) waits until the watch has delivered them."""

    def __init__(
        self, listing: list[dict[str, Any]], events: list[bytes], filled: list[dict[str, Any]]
    ) -> None:
        super().__init__([[page(listing, "9")]], [])
        self.events = events
        self.filled = filled
        self.fill_started = asyncio.Event()
        self.delivered = asyncio.Event()

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        if path != "/fill":
            return await super().get_json(path, query)
        self.fill_started.set()
        await self.delivered.wait()
        return page(self.filled, "50")

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        refuse_streaming_listings(query)
        await self.fill_started.wait()
        for line in self.events:
            yield line
        self.delivered.set()
        await asyncio.Event().wait()


def fill_while_watching(
    api: FillingApi, kept: set[str]
) -> tuple[Reflector[str], list[Change[str]], dict[tuple[str, str], str]]:
    """Run the reflector with `keep` taking the zones in `kept`; once listed, take zone b too
    and fill. Returns the store as listed, and as filled."""
    changes: list[Change[str]] = []
    reflector: Reflector[str] = Reflector(
        api, "/nodes", zone_of, changes.append, keep=lambda body: zone_of(body) in kept
    )

    async def scenario() -> dict[tuple[str, str], str]:
        task = asyncio.get_running_loop().create_task(reflector.run())
        await asyncio.wait_for(reflector.listed.wait(), 5)
        listed = dict(reflector.store)
        kept.add("b")
        await asyncio.wait_for(reflector.fill("/fill", "zone=b"), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return listed

    listed = asyncio.run(scenario())
    return reflector, changes, listed


def test_objects_keep_refuses_are_not_stored_and_leave_when_it_stops_taking_them() -> None:
    api = FillingApi(
        [node("n1", "5"), node("n2", "6", zone="b")],
        [event("MODIFIED", node("n1", "10", zone="c")), event("ADDED", node("n3", "11", "c"))],
        [],
    )

    reflector, changes, listed = fill_while_watching(api, {"a"})

    assert listed == {("", "n1"): "a"}
    assert reflector.store == {}
    assert [(c.key[1], c.old, c.new) for c in changes] == [("n1", None, "a"), ("n1", "a", None)]


def test_a_fill_adds_what_was_refused_before_but_not_what_the_watch_changed_meanwhile() -> None:
    api = FillingApi(
        [node("n1", "5", zone="b"), node("n2", "6", zone="b")],
        [event("DELETED", node("n1", "12", zone="b"))],
        # The fill's listing is older than the watch's deletion of n1.
        [node("n1", "5", zone="b"), node("n2", "6", zone="b")],
    )

    reflector, changes, listed = fill_while_watching(api, {"a"})

    assert listed == {}
    assert reflector.store == {("", "n2"): "b"}
    assert [(c.key[1], c.old, c.new) for c in changes] == [("n2", None, "b")]


def test_a_streaming_listing_fills_the_store_at_its_end_and_goes_on_as_the_watch() -> None:
    api = ScriptedApi(
        [],
        [
            [
                event("ADDED", node("n1", "5")),
                event("ADDED", node("n2", "6")),
                end_of_objects("9"),
                event("MODIFIED", node("n1", "10", zone="b")),
            ]
        ],
        streams=True,
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n1"): "b", ("", "n2"): "a"}
    assert reflector.listed.is_set()
    assert [(c.key[1], c.old, c.new) for c in changes] == [
        ("n1", None, "a"),
        ("n2", None, "a"),
        ("n1", "a", "b"),
    ]
    listing, resumed = api.queries
    assert listing["sendInitialEvents"] == "true"
    assert listing["resourceVersionMatch"] == "NotOlderThan"
    assert listing["allowWatchBookmarks"] == "true"
    assert "resourceVersion" not in listing
    assert resumed["resourceVersion"] == "10"
    assert "sendInitialEvents" not in resumed


def test_a_streaming_listing_cut_before_its_end_stores_nothing_and_streams_again() -> None:
    api = ScriptedApi(
        [],
        [
            [event("ADDED", node("n1", "5"))],
            [event("ADDED", node("n2", "6")), end_of_objects("9")],
        ],
        streams=True,
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n2"): "a"}
    assert [(c.key[1], c.old, c.new) for c in changes] == [("n2", None, "a")]
    assert [q.get("sendInitialEvents") for q in api.queries] == ["true", "true", None]


def test_after_gone_a_streaming_listing_reports_what_it_lacks_as_deleted() -> None:
    api = ScriptedApi(
        [],
        [
            [event("ADDED", node("n1", "5")), event("ADDED", node("n2", "6")), end_of_objects("9")],
            [event("ERROR", {"code": 410, "message": "too old resource version"})],
            [event("ADDED", node("n2", "30", zone="b")), end_of_objects("40")],
        ],
        streams=True,
    )

    reflector, changes = run_until_done(api)

    assert reflector.store == {("", "n2"): "b"}
    assert {(c.key[1], c.old, c.new) for c in changes[2:]} == {("n1", "a", None), ("n2", "a", "b")}
    assert api.queries[-1]["resourceVersion"] == "40"


def test_a_server_that_refuses_streaming_is_listed_in_pages_from_then_on() -> None:
    api = ScriptedApi(
        [[page([node("n1", "5")], "9")], [page([node("n2", "30")], "40")]],
        [[event("ERROR", {"code": 410, "message": "too old resource version"})]],
    )

    reflector, _ = run_until_done(api)

    assert reflector.store == {("", "n2"): "a"}
    assert reflector.streams_listings is False
    # Two listings in pages, each followed by a watch from where it ended.
    assert [q.get("resourceVersion") for q in api.queries] == [None, "9", None, "40"]


def test_a_failed_streaming_listing_is_retried_as_one() -> None:
    api = ScriptedApi(
        [],
        [
            KubeError(Outcome(500, "etcd is not answering")),
            [event("ADDED", node("n1", "5")), end_of_objects("9")],
        ],
        streams=True,
    )

    reflector, _ = run_until_done(api)

    assert reflector.store == {("", "n1"): "a"}
    assert reflector.streams_listings is True
    assert [q.get("sendInitialEvents") for q in api.queries] == ["true", "true", None]
