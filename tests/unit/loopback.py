"""A loopback aiohttp server for the transport's unit tests: one handler for every path."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web


async def serving(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]],
    check: Callable[[str], Awaitable[None]],
    tls: ssl.SSLContext | None = None,
) -> None:
    """Run `check(url)` while `handle` answers every request on a free loopback port."""
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await check(f"{'https' if tls else 'http'}://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
