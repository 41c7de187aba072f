"""The `/metrics` endpoint, on the operator's event loop (prometheus_client's aiohttp handler)."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

logger = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets); ValueError with the reason otherwise."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 (all interfaces, as asked)


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, address: str) -> None:
        self.host, self.port = parse_address(address)
        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(registry))
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # With port 0 the system picks one: say which.
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        logger.info("Metrics at http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        await self._runner.cleanup()
