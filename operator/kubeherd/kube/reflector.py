"""A lean list-and-watch of one kind: the store of what exists now, kept whole across outages.

After its watch breaks for longer than the API server keeps history (410 Gone), or whenever the
stream's continuity is in doubt, the reflector lists again and replaces its store: what the new
listing lacks was deleted meanwhile and is reported as such.

A listing is a watch that starts with every object (the API server's streaming list,
`sendInitialEvents`, on by default since Kubernetes 1.34): the server sends objects as it
encodes them, the reflector decodes them as they come, and the same request goes on as the
watch. An API server that refuses it (the WatchList feature gate turned off) is listed a page
at a time instead, by this reflector from then on. (Kopf's indices, used before, took
a new listing as events for the objects it holds and kept the ones it lacks for good.)

Each object is decoded once, into whatever small record the caller needs; the raw bodies are
dropped at once. Given the fields its records read (a TypedDict), the reflector decodes only
those from each line the API server sends: the rest is skipped as it is parsed, never built.
A `keep` predicate can leave objects out of the store altogether (a label selector cannot say
everything); `fill` adds the ones it refused before and takes now.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypedDict, TypeVar

import msgspec

from kubeherd.kube.outcomes import KubeError
from kubeherd.kube.store import ObjectKey, Store
from kubeherd.readiness import WatchHealth

logger = logging.getLogger(__name__)

Record = TypeVar("Record")

PAGE_SIZE = 500
# The API server ends a watch after this long; the reflector then resumes where it was.
WATCH_SECONDS = 300
MAX_RETRY_DELAY = 30.0
# The bookmark annotation that ends a streaming list's objects.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# What an API server that does not take a streaming list answers it: the request is invalid.
STREAMING_LIST_REFUSALS = (400, 422)


class WatchEvent(TypedDict, Generic[Record], total=False):
    """One line of a watch: what happened (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) to the
    object."""

    type: str
    object: Record


class GoneError(Exception):
    """The resourceVersion to resume from is no longer kept: list again."""


class Transport(Protocol):
    """What a reflector needs of the API: a GET answered as JSON, and a GET streamed as lines."""

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]: ...

    def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]: ...


@dataclass(frozen=True, slots=True)
class Change(Generic[Record]):
    """One object's change: `old` is None when it appeared, `new` None when it went away."""

    key: ObjectKey
    old: Record | None
    new: Record | None


class Reflector(Generic[Record]):
    def __init__(
        self,
        transport: Transport,
        path: str,
        decode: Callable[[Mapping[str, Any]], Record],
        on_change: Callable[[Change[Record]], None],
        *,
        label_selector: str = "",
        what: str = "objects",
        keep: Callable[[Mapping[str, Any]], bool] = lambda _body: True,
        health: WatchHealth | None = None,
        fields: Any = None,
    ) -> None:
        """`fields`: a TypedDict of the parts of each object that `decode` and `keep` read (and
        that the reflector reads: metadata's name, namespace and resourceVersion, a bookmark's
        annotations, an error's code and message); None decodes every part."""
        self.transport = transport
        self.path = path
        self.decode = decode
        self.on_change = on_change
        self.label_selector = label_selector
        self.what = what
        # Which objects the store holds: any other is as if it did not exist.
        self.keep = keep
        # Where the readiness learns whether this watch has listed and whether it fails.
        self.health = health if health is not None else WatchHealth(what)
        self._whole_events: msgspec.json.Decoder[WatchEvent[Mapping[str, Any]]] = (
            msgspec.json.Decoder(WatchEvent[dict[str, Any]])
        )
        self._events = (
            msgspec.json.Decoder(WatchEvent[fields]) if fields is not None else self._whole_events
        )
        self._odd_shape_seen = False
        self.store: Store[Record] = Store()
        # Set once the first listing is in the store: nothing may act on a half-known cluster.
        self.listed = asyncio.Event()
        self._version = ""
        self._failures = 0
        # Listings so far: a `fill` that spans a new one leaves the store to it.
        self._listings = 0
        # While fills run: the objects the watch reported meanwhile, which it knows better.
        self._filling = 0
        self._reported: set[ObjectKey] = set()
        # Whether listings stream (until the API server refuses one).
        self.streams_listings = True

    def _query(self, **extra: str) -> list[tuple[str, str]]:
        query = [(name, value) for name, value in extra.items() if value]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        return query

    async def run(self) -> None:
        """List, then watch, for ever: cancel the task to stop."""
        while True:
            try:
                if not self._version:
                    if await self._stream_listing():
                        continue  # the watch it went on as ended: resume where it was
                    await self._relist()
                await self._watch()
                self._recovered()
            except GoneError:
                logger.info("The %s watch is too old to resume: listing again", self.what)
                self._version = ""
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure: wait, then try again
                await self._wait_after(error)

    async def _wait_after(self, error: Exception) -> None:
        self._failures += 1
        self.health.failed(error)
        if self._failures == 1:
            logger.warning("Watching %s failed (%s); retrying until it works", self.what, error)
        delay = min(MAX_RETRY_DELAY, 0.5 * 2 ** min(self._failures, 8))
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter only

    def _recovered(self) -> None:
        self.health.worked()
        if self._failures:
            logger.info("Watching %s works again", self.what)
        self._failures = 0

    async def _stream_listing(self) -> bool:
        """List by a watch that starts with every object, and go on watching: the store is
        replaced at the bookmark that ends the objects. False (nothing listed) when the API
        server does not take such a watch, now or before."""
        if not self.streams_listings:
            return False
        query = self._query(
            watch="1",
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_SECONDS),
        )
        listed: Store[Record] | None = Store()
        try:
            async for line in self.transport.stream_lines(self.path, query):
                if not line.strip():
                    continue
                event = self._decode(line)
                type_, body = str(event.get("type") or ""), event.get("object") or {}
                if listed is None:
                    self._apply(type_, body)
                    self._recovered()
                elif type_ == "BOOKMARK":
                    if _ends_initial_events(body):
                        self._replace_store(listed, _version_of(body))
                        listed = None
                elif type_ == "ERROR":
                    self._apply(type_, body)
                elif type_ == "DELETED" or not self.keep(body):
                    listed.pop(_key_of(body), None)
                else:
                    listed[_key_of(body)] = self.decode(body)
        except KubeError as error:
            if error.outcome.status not in STREAMING_LIST_REFUSALS:
                raise
            logger.info(
                "The API server does not stream the %s listing (%s): listing in pages",
                self.what,
                error,
            )
            self.streams_listings = False
            return False
        if listed is not None:
            raise RuntimeError(f"the {self.what} listing ended before its last object")
        return True

    def _decode(self, line: bytes) -> WatchEvent[Mapping[str, Any]]:
        """The event, with the object's fields that the records read; should the object not
        have the shape `fields` says (a field of another type), the whole object: the
        records take missing or odd values as empty, and the watch goes on."""
        try:
            return self._events.decode(line)
        except msgspec.ValidationError as error:
            event = self._whole_events.decode(line)
            # An ERROR event carries a Status (410 Gone, when the watch is too old), never an
            # object of the kind watched: that it is shaped otherwise is expected.
            if event.get("type") != "ERROR" and not self._odd_shape_seen:
                logger.warning(
                    "An object of the %s watch is not shaped as expected (%s): decoding such "
                    "objects whole",
                    self.what,
                    error,
                )
                self._odd_shape_seen = True
            return event

    async def _relist(self) -> None:
        listed: Store[Record] = Store()
        token = ""
        while True:
            page = await self.transport.get_json(
                self.path, self._query(limit=str(PAGE_SIZE), **{"continue": token})
            )
            for body in page.get("items") or ():
                if self.keep(body):
                    listed[_key_of(body)] = self.decode(body)
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                version = str(metadata.get("resourceVersion") or "")
                break
        self._replace_store(listed, version)

    def _replace_store(self, listed: Store[Record], version: str) -> None:
        """A whole listing in, as of `version`: what changed since the store's last view is
        reported, what the listing lacks as gone."""
        changes = [
            Change(key, old, listed.get(key))
            for key, old in self.store.items()
            if listed.get(key) != old
        ]
        changes += [Change(key, None, new) for key, new in listed.items() if key not in self.store]
        self.store.replace(listed)
        self._version = version
        self._listings += 1
        self._recovered()
        for change in changes:
            self.on_change(change)
        self.health.has_listed()
        self.listed.set()

    async def fill(self, path: str, label_selector: str) -> None:
        """Add to the store what a listing of `path` with the labels finds and `keep` now
        takes but the store lacks: objects it was refused for before.

        An object the watch reported while this listing was on its way is left as the watch
        has it (the watch is never behind for long, and every later change comes through it
        too); and a new full listing meanwhile (after 410 Gone) took `keep`'s current answers
        already. So a fill never brings back an object that is gone."""
        listings = self._listings
        self._filling += 1
        try:
            found: dict[ObjectKey, Record] = {}
            token = ""
            while True:
                query = [("labelSelector", label_selector), ("limit", str(PAGE_SIZE))]
                if token:
                    query.append(("continue", token))
                page = await self.transport.get_json(path, query)
                for body in page.get("items") or ():
                    if self.keep(body):
                        found[_key_of(body)] = self.decode(body)
                token = str((page.get("metadata") or {}).get("continue") or "")
                if not token:
                    break
            if listings != self._listings:
                return
            for key, new in found.items():
                if key not in self.store and key not in self._reported:
                    self.store[key] = new
                    self.on_change(Change(key, None, new))
        finally:
            self._filling -= 1
            if not self._filling:
                self._reported.clear()

    def evict(self, leaves: Callable[[ObjectKey, Record], bool]) -> None:
        """Drop the stored records `leaves` picks, reporting each as gone: `keep` no longer
        takes their objects."""
        for key in [key for key, record in self.store.items() if leaves(key, record)]:
            old = self.store.pop(key)
            self.on_change(Change(key, old, None))

    async def _watch(self) -> None:
        query = self._query(
            watch="1",
            resourceVersion=self._version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_SECONDS),
        )
        async for line in self.transport.stream_lines(self.path, query):
            if not line.strip():
                continue
            event = self._decode(line)
            self._apply(str(event.get("type") or ""), event.get("object") or {})
            self._recovered()

    def _apply(self, type_: str, body: Mapping[str, Any]) -> None:
        if type_ == "ERROR":
            if body.get("code") == 410:
                raise GoneError
            raise RuntimeError(str(body.get("message") or body))
        version = (body.get("metadata") or {}).get("resourceVersion")
        if type_ != "BOOKMARK":
            key = _key_of(body)
            old = self.store.get(key)
            if self._filling:
                self._reported.add(key)
            if type_ == "DELETED" or not self.keep(body):
                self.store.pop(key, None)
                new = None
            else:
                new = self.store[key] = self.decode(body)
            if old != new:
                self.on_change(Change(key, old, new))
        if version:
            self._version = str(version)


def _ends_initial_events(bookmark: Mapping[str, Any]) -> bool:
    annotations = (bookmark.get("metadata") or {}).get("annotations") or {}
    return annotations.get(INITIAL_EVENTS_END) == "true"


def _version_of(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def _key_of(body: Mapping[str, Any]) -> ObjectKey:
    metadata = body.get("metadata") or {}
    # Thousands of objects share a few namespaces: one string each.
    return (sys.intern(str(metadata.get("namespace") or "")), str(metadata.get("name") or ""))
