"""A small asyncio client for the benchmarks, on aiohttp with the cluster's admin certificate.

Responses are read as plain JSON: the benchmark process shares two cores with the whole control
plane, and generated client models would cost it CPU that the measured components then lack.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from localcluster.pki import Pki

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    def __init__(self, server: str, pki: Pki, *, connections: int = 64) -> None:
        self.server = server
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(pki.admin_cert, pki.admin_key)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        allow: tuple[int, ...] = (),
    ) -> Json:
        """The JSON answer; an ApiError for any status outside 2xx and `allow`."""
        data = json.dumps(body) if body is not None else None
        async with self._session.request(
            method,
            self.server + path,
            data=data,
            params=dict(params or {}),
            headers={"Content-Type": content_type, "Accept": "application/json"},
        ) as response:
            text = await response.text()
            if not (200 <= response.status < 300 or response.status in allow):
                raise ApiError(response.status, method, path, text)
            result: Json = json.loads(text) if text.startswith("{") else {}
            result.setdefault("code", response.status)
            return result

    async def get(self, path: str, **params: str) -> Json:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Json, *, allow: tuple[int, ...] = ()) -> Json:
        return await self.request("POST", path, body=body, allow=allow)

    async def patch(self, path: str, body: Json) -> Json:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete(self, path: str, **params: str) -> Json:
        return await self.request("DELETE", path, params=params, allow=(404,))

    async def text(self, path: str) -> str:
        async with self._session.get(self.server + path) as response:
            if response.status != 200:
                raise ApiError(response.status, "GET", path, await response.text())
            return await response.text()

    async def list_all(self, path: str, **params: str) -> tuple[list[Json], str]:
        """Every item (paged by 500) and the list's resourceVersion, to watch from."""
        items: list[Json] = []
        cont = ""
        while True:
            page = await self.get(
                path, limit="500", **({"continue": cont} if cont else {}), **params
            )
            items.extend(page.get("items") or [])
            cont = page["metadata"].get("continue") or ""
            if not cont:
                return items, str(page["metadata"]["resourceVersion"])

    async def watch(
        self, path: str, resource_version: str, **params: str
    ) -> AsyncIterator[tuple[str, Json]]:
        """Events from `resource_version` on, reconnecting when the server ends a watch."""
        while True:
            query = {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "600",
                **params,
            }
            async with self._session.get(self.server + path, params=query) as response:
                if response.status != 200:
                    raise ApiError(response.status, "WATCH", path, await response.text())
                async for line in response.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        raise ApiError(int(obj.get("code", 0)), "WATCH", path, json.dumps(obj))
                    resource_version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        yield kind, obj


async def wait_for(check: Any, *, timeout: float, what: str, interval: float = 0.5) -> None:
    """Poll an async `check()` until it returns true; TimeoutError naming `what` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise TimeoutError(f"{what}: not reached in {timeout:.0f}s")
        await asyncio.sleep(interval)
