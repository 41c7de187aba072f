"""The `/metrics` endpoint. The page is collected in a worker thread (metrics.scrape): the
event loop only serves the request."""

from __future__ import annotations

import logging

from aiohttp import hdrs, web
from prometheus_client.exposition import gzip_accepted
from prometheus_client.registry import Collector

from kubeherd.metrics.scrape import Scraper

logger = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets); ValueError with the reason otherwise."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 (all interfaces, as asked)


class MetricsServer:
    def __init__(self, registry: Collector, address: str) -> None:
        self.host, self.port = parse_address(address)
        self._scraper = Scraper(registry)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)

    async def _metrics(self, request: web.Request) -> web.Response:
        accept = ",".join(request.headers.getall(hdrs.ACCEPT, []))
        compress = gzip_accepted(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
        page = await self._scraper.page(accept, compress)
        headers = {hdrs.CONTENT_TYPE: page.content_type}
        if page.gzipped:
            headers[hdrs.CONTENT_ENCODING] = "gzip"
        return web.Response(body=page.body, headers=headers)

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
        self._scraper.close()
