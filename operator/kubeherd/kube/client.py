"""The shared API client: every write kubeherd makes goes through here.

Writes pass a semaphore (requests in flight) and, if the user sets --qps, a token bucket. The
API server's priority and fairness paces them among its other clients; a throttled request (429,
or a 5xx with Retry-After), read or write, waits for the server's Retry-After and goes again.
So a rollout to thousands of nodes goes as fast as the server allows, and never has more than
a few requests of the server's capacity at once.
Responses are read as JSON and dropped: deserialising every created pod into generated model
classes would cost CPU and memory for nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import aiohttp

from kubeherd.kube import config
from kubeherd.kube.event_posting import EventPoster
from kubeherd.kube.http import FIELD_MANAGER, ApiSession
from kubeherd.kube.kinds import Kind, kind_of
from kubeherd.kube.limits import WriteLimits, pool_size
from kubeherd.kube.login import ConfigError, Login
from kubeherd.kube.outcomes import DryRun, KubeError, Outcome
from kubeherd.kube.ratelimit import TokenBucket
from kubeherd.kube.reflector import WATCH_SECONDS, GoneError
from kubeherd.kube.wire import api_message, encode_body, request_verb, retry_after, throttled
from kubeherd.metrics.health import API_REQUESTS, API_RETRIES
from kubeherd.names import GROUP, VERSION

APPLY_PATCH = "application/apply-patch+yaml"
# A request throttled (429, or 5xx with Retry-After) is sent again after the server's
# Retry-After, at most this many times.
MAX_THROTTLED_ATTEMPTS = 10
# A request, a listing page, and a watch (which the API server ends after WATCH_SECONDS; a read
# that long with not even a bookmark means the connection is dead). The API server gives up on
# a request after 60 s itself, APF queueing included.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(sock_connect=10.0, sock_read=90.0)
LIST_TIMEOUT = aiohttp.ClientTimeout(sock_connect=10.0, sock_read=60.0)
WATCH_TIMEOUT = aiohttp.ClientTimeout(sock_connect=10.0, sock_read=WATCH_SECONDS + 60.0)
# Objects per page of a LIST (the reflector's pages are its own; a caller may ask for fewer).
LIST_PAGE_SIZE = 100
# A review: a scraper waits for it, and gives up after its own scrape timeout (10 s by default).
REVIEW_TIMEOUT = aiohttp.ClientTimeout(sock_connect=5.0, sock_read=10.0)


class Session(Protocol):
    """Requests to the API server (kubeherd.kube.http.ApiSession)."""

    server_url: str

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse: ...

    async def close(self) -> None: ...


class Kube:
    def __init__(self, session: Session, limits: WriteLimits) -> None:
        self._session = session
        self._bucket = TokenBucket(limits.qps, limits.burst)
        self._slots = asyncio.Semaphore(max(1, limits.max_concurrent))
        self.limits = limits
        self._events = EventPoster(self)

    @classmethod
    def connect(cls, limits: WriteLimits, login: Login | None = None) -> Kube:
        """A client with its own transport (the CLI's): `login`, else as config.load finds it."""
        return cls(ApiSession(login or config.load(), pool_size(limits)), limits)

    @property
    def server_url(self) -> str:
        """The API server's URL, as the kubeconfig (or the pod's environment) gives it."""
        return self._session.server_url

    async def close(self) -> None:
        await self._events.drain()
        await self._session.close()

    async def write(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        with_version: bool = False,
    ) -> Outcome:
        """Any write, through the write limits and the throttling retries: every write verb
        below, and the door for the requests of one kind that a controller's shell keeps
        (daemonset/shell/api.py)."""
        for attempt in range(MAX_THROTTLED_ATTEMPTS):
            await self._bucket.acquire()
            async with self._slots:
                # Encoded in the slot, and dropped with it: writes waiting for a slot (every
                # CustomDaemonSet's pass has its own in flight) hold their objects, not also
                # their bytes.
                data = encode_body(body)
                try:
                    response = await self._call(
                        method,
                        path,
                        query=query,
                        data=data,
                        content_type=content_type,
                        wait_when_throttled=False,
                    )
                    try:
                        answer = await response.read()
                    finally:
                        response.release()
                except (TimeoutError, OSError, aiohttp.ClientError, ConfigError) as error:
                    return Outcome(status=0, message=f"request failed: {error}")
                finally:
                    del data
            if throttled(response) and attempt + 1 < MAX_THROTTLED_ATTEMPTS:
                API_RETRIES.labels(request_verb(method, path, query), "throttled").inc()
                # Throttled by the server's priority and fairness: wait as long as it asks,
                # outside the write slots, then send the same request again.
                await asyncio.sleep(retry_after(response.headers.get("Retry-After")))
                continue
            break
        if 200 <= response.status < 300:
            if with_version:
                version = (json.loads(answer).get("metadata") or {}).get("resourceVersion", "")
                return Outcome(status=response.status, resource_version=str(version))
            return Outcome(status=response.status)
        return Outcome(status=response.status, message=api_message(answer, response.status))

    async def _read(
        self,
        path: str,
        query: list[tuple[str, str]] | None = None,
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> dict[str, Any] | None:
        """A GET or LIST as plain JSON; None when not found. Reads skip the write limits."""
        response = await self._call("GET", path, query=query, timeout=timeout)
        try:
            body = await response.read()
        finally:
            response.release()
        if response.status == 404:
            return None
        if not 200 <= response.status < 300:
            raise KubeError(Outcome(response.status, api_message(body, response.status)))
        result: dict[str, Any] = json.loads(body)
        return result

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
        wait_when_throttled: bool = True,
    ) -> aiohttp.ClientResponse:
        """A request to any path, answered with the raw response (for _read and write). A
        throttled one is sent again after the server's Retry-After, unless the caller does
        that itself (writes wait outside their slots)."""
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        verb = request_verb(method, path, query)
        attempt = 1
        while True:
            try:
                response = await self._session.request(
                    method, path, query=query, headers=headers, data=data, timeout=timeout
                )
            except Exception:
                API_REQUESTS.labels(verb, "error").inc()
                raise
            API_REQUESTS.labels(verb, str(response.status)).inc()
            if not (wait_when_throttled and throttled(response)):
                return response
            if attempt >= MAX_THROTTLED_ATTEMPTS:
                return response
            response.release()
            API_RETRIES.labels(verb, "throttled").inc()
            await asyncio.sleep(retry_after(response.headers.get("Retry-After")))
            attempt += 1

    async def patch_object(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str = "application/json-patch+json",
    ) -> Outcome:
        """A JSON patch by default; its `test` operations make it fail if the object changed
        meanwhile."""
        return await self.write(
            "PATCH", kind.path(namespace, name), body=patch, content_type=content_type
        )

    # What a Reflector needs (kubeherd.kube.reflector.Transport) ---------------------------

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        found = await self._read(path, query, timeout=LIST_TIMEOUT)
        if found is None:
            raise KubeError(Outcome(404, f"{path} not found"))
        return found

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        response = await self._call("GET", path, query=query, timeout=WATCH_TIMEOUT)
        try:
            if response.status == 410:
                raise GoneError
            if not 200 <= response.status < 300:
                body = await response.read()
                raise KubeError(Outcome(response.status, api_message(body, response.status)))
            # The API server's JSON lines can be longer than aiohttp's line buffer, so lines
            # are cut here, from chunks.
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line
            if pending:
                yield pending
        finally:
            response.release()

    async def get_object(
        self, kind: Kind, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        return await self._read(kind.path(namespace, name))

    async def list_objects(
        self, kind: Kind, label_selector: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of `kind` with the labels, in `namespace` or (None) in all of them."""
        return [
            item async for page in self.list_pages(kind, label_selector, namespace) for item in page
        ]

    async def list_pages(
        self,
        kind: Kind,
        label_selector: str,
        namespace: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The same objects, `page_size` at a time: a caller that keeps less than each object
        never holds more than one page of them, however many there are."""
        token = ""
        while True:
            query = [("labelSelector", label_selector), ("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            listing = await self._read(kind.path(namespace), query, timeout=LIST_TIMEOUT) or {}
            token = str((listing.get("metadata") or {}).get("continue") or "")
            items = list(listing.get("items") or [])
            # Nothing of the page but the list handed on stays here while the next one is
            # read: a caller that empties it holds nothing of it meanwhile.
            del listing
            yield items
            if not token:
                return

    async def apply(self, manifest: Mapping[str, Any]) -> Outcome:
        """Server-side apply as kubeherd's field manager. Forced: callers apply only objects
        that are kubeherd's own (they check the owner label first)."""
        metadata = manifest["metadata"]
        return await self.write(
            "PATCH",
            kind_of(manifest).path(metadata.get("namespace"), metadata["name"]),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=dict(manifest),
            content_type=APPLY_PATCH,
        )

    async def replace_object(self, kind: Kind, manifest: Mapping[str, Any]) -> Outcome:
        """PUT: refused with 409 unless metadata.resourceVersion is still the current one."""
        metadata = manifest["metadata"]
        path = kind.path(metadata.get("namespace"), metadata["name"])
        return await self.write("PUT", path, body=manifest)

    async def dry_run_create(
        self, kind: Kind, namespace: str | None, manifest: Mapping[str, Any]
    ) -> DryRun:
        """What the API server answers to creating the object, without creating it: its status
        code and its Status (with the field of each refusal).

        Outside the write limits: an admission review waits for this, and the API server gives
        the whole review a few seconds; a rollout's queue of pod creates must not delay it."""
        try:
            response = await self._call(
                "POST",
                kind.path(namespace),
                query=[("dryRun", "All"), ("fieldValidation", "Strict")],
                data=encode_body(manifest),
            )
            try:
                body = await response.read()
            finally:
                response.release()
        except (TimeoutError, OSError, aiohttp.ClientError, ConfigError) as error:
            return DryRun(0, {"message": f"request failed: {error}"})
        try:
            status = json.loads(body)
        except ValueError:
            status = {"message": body[:200].decode(errors="replace")}
        return DryRun(response.status, status if isinstance(status, dict) else {})

    async def create_review(self, kind: Kind, review: Mapping[str, Any]) -> dict[str, Any]:
        """POST a review (a TokenReview, a SubjectAccessReview): the API server answers in the
        returned object's status and stores nothing. Outside the write limits, like a dry run:
        a request waits for the answer. KubeError when refused or unanswered (status 0)."""
        try:
            response = await self._call(
                "POST", kind.path(), data=encode_body(review), timeout=REVIEW_TIMEOUT
            )
            try:
                body = await response.read()
            finally:
                response.release()
        except (TimeoutError, OSError, aiohttp.ClientError, ConfigError) as error:
            raise KubeError(Outcome(0, f"request failed: {error}")) from error
        if not 200 <= response.status < 300:
            raise KubeError(Outcome(response.status, api_message(body, response.status)))
        answer: dict[str, Any] = json.loads(body)
        return answer

    async def create_object(self, kind: Kind, manifest: Mapping[str, Any]) -> Outcome:
        namespace = manifest["metadata"].get("namespace")
        return await self.write("POST", kind.path(namespace), body=manifest)

    async def delete_object(
        self, kind: Kind, namespace: str | None, name: str, uid: str
    ) -> Outcome:
        body = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
        return await self.write("DELETE", kind.path(namespace, name), body=body)

    async def server_version(self) -> str:
        """The API server's gitVersion, such as v1.37.2."""
        version = await self._read("/version")
        return str((version or {}).get("gitVersion") or "")

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> Outcome:
        return await self.write(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
            with_version=True,
        )

    async def json_patch(
        self, plural: str, namespace: str, name: str, operations: list[dict[str, Any]]
    ) -> Outcome:
        """A JSON patch of a kubeherd resource; `test` operations make it safe against
        concurrent changes (such as other controllers' finalizers)."""
        return await self.write(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}",
            body=operations,
            content_type="application/json-patch+json",
        )

    def post_event_soon(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str
    ) -> None:
        """Post an Event in the background (kube/event_posting.py), through the write limits."""
        self._events.post_soon(involved, type_=type_, reason=reason, message=message)
