"""A lean list-and-watch of one kind: the store of what exists now, kept whole across outages.

After its watch breaks for longer than the API server keeps history (410 Gone), or whenever the
stream's continuity is in doubt, the reflector lists again and replaces its store: what the new
listing lacks was deleted meanwhile and is reported as such. (Kopf's indices, used before, took
a new listing as events for the objects it holds and kept the ones it lacks for good.)

Each object is decoded once, into whatever small record the caller needs; the raw bodies are
dropped at once. A `keep` predicate can leave objects out of the store altogether (a label
selector cannot say everything); `fill` adds the ones it refused before and takes now.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kubeherd.readiness import WatchHealth

logger = logging.getLogger(__name__)

Record = TypeVar("Record")
# (namespace, name); the namespace is "" for cluster-scoped kinds.
ObjectKey = tuple[str, str]

PAGE_SIZE = 500
# The API server ends a watch after this long; the reflector then resumes where it was.
WATCH_SECONDS = 300
MAX_RETRY_DELAY = 30.0


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
    ) -> None:
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
        self.store: dict[ObjectKey, Record] = {}
        # Set once the first listing is in the store: nothing may act on a half-known cluster.
        self.listed = asyncio.Event()
        self._version = ""
        self._failures = 0
        # Listings so far: a `fill` that spans a new one leaves the store to it.
        self._listings = 0
        # While fills run: the objects the watch reported meanwhile, which it knows better.
        self._filling = 0
        self._reported: set[ObjectKey] = set()

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

    async def _relist(self) -> None:
        listed: dict[ObjectKey, Record] = {}
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
        changes = [
            Change(key, old, listed.get(key))
            for key, old in self.store.items()
            if listed.get(key) != old
        ]
        changes += [Change(key, None, new) for key, new in listed.items() if key not in self.store]
        # Replaced in place: views of the store stay views of the live one.
        self.store.clear()
        self.store.update(listed)
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
            event = json.loads(line)
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


def _key_of(body: Mapping[str, Any]) -> ObjectKey:
    metadata = body.get("metadata") or {}
    # Thousands of objects share a few namespaces: one string each.
    return (sys.intern(str(metadata.get("namespace") or "")), str(metadata.get("name") or ""))
