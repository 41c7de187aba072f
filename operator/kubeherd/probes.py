"""kubeherd's own `/healthz` and `/readyz`, for the kubelet's probes (plain HTTP, no token: the
kubelet sends none, and they tell only whether the operator lives and can work).

`/healthz` answers while the event loop does. `/readyz` answers 200 only while the readiness
(kubeherd.readiness) holds, and otherwise 503 with the check that fails and why, so that a
replica whose watches cannot list never turns Ready."""

from __future__ import annotations

import logging

from aiohttp import web

from kubeherd.metrics.server import parse_address
from kubeherd.readiness import Readiness

logger = logging.getLogger(__name__)

TEXT = "text/plain"


class HealthServer:
    def __init__(self, readiness: Readiness, address: str) -> None:
        self.readiness = readiness
        self.host, self.port = parse_address(address)
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        # What /readyz said last: its changes are logged, each once.
        self._said = ""

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n", content_type=TEXT)

    async def _readyz(self, _: web.Request) -> web.Response:
        verdict = self.readiness.verdict()
        failed = [line[3:] for line in verdict.lines if line.startswith("[-]")]
        # Logged when the failing checks change, not at each probe: their text says for how
        # long, which changes every time.
        which = ", ".join(line.partition(":")[0] for line in failed)
        if which != self._said:
            if failed:
                logger.warning("Not ready: %s", "; ".join(failed))
            else:
                logger.info("Ready: started, and every watch has listed and works")
            self._said = which
        return web.Response(
            status=200 if verdict.ready else 503, text=verdict.text(), content_type=TEXT
        )

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        logger.info("Health at http://%s:%d/healthz and /readyz", self.host, self.port)

    async def stop(self) -> None:
        await self._runner.cleanup()
