"""The `/metrics` endpoint: plain HTTP, or (`--metrics-secure`) HTTPS where each request's
bearer token must be allowed to get `/metrics` (metrics.auth). The page is written a slice of
the event loop's time at a time (metrics.scrape), so the controllers go on meanwhile."""

from __future__ import annotations

import datetime
import logging
import ssl
import tempfile
from pathlib import Path

from aiohttp import hdrs, web
from prometheus_client.exposition import gzip_accepted

from kubeherd.admission.certificates import issue
from kubeherd.metrics.auth import TokenAuthorizer
from kubeherd.metrics.objects import OperatorRegistry
from kubeherd.metrics.scrape import Scraper

logger = logging.getLogger(__name__)

# The names controller-runtime and cert-manager's Secrets give a serving certificate and key.
CERTIFICATE_FILE, KEY_FILE = "tls.crt", "tls.key"


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets); ValueError with the reason otherwise."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 (all interfaces, as asked)


def tls_context(cert_dir: Path | None) -> ssl.SSLContext:
    """A server context with the certificate and key in `cert_dir` (tls.crt, tls.key), or else a
    certificate made now, which lives only in memory: scrapers then skip its verification, as
    the chart's ServiceMonitor does unless told otherwise. Making one waits for a child process
    (admission.certificates): from the event loop, call this in a thread."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / CERTIFICATE_FILE, cert_dir / KEY_FILE)
        return context
    made = issue(
        ["kubeherd-metrics", "localhost", "127.0.0.1"], datetime.datetime.now(datetime.UTC)
    )
    # ssl loads only from files: they exist for the time of the call, in a private folder.
    with tempfile.TemporaryDirectory(prefix="kubeherd-metrics-") as folder:
        certificate, key = Path(folder) / CERTIFICATE_FILE, Path(folder) / KEY_FILE
        certificate.write_bytes(made.certificate + made.ca)
        key.touch(mode=0o600)
        key.write_bytes(made.key)
        context.load_cert_chain(certificate, key)
    return context


class MetricsServer:
    def __init__(
        self,
        registry: OperatorRegistry,
        address: str,
        *,
        authorizer: TokenAuthorizer | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port = parse_address(address)
        self._scraper = Scraper(registry)
        self._authorizer = authorizer
        self._tls = tls
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._authorizer is not None:
            verdict = await self._authorizer.decide(request.headers.get(hdrs.AUTHORIZATION))
            if not verdict.allowed:
                headers = {"WWW-Authenticate": "Bearer"} if verdict.status == 401 else {}
                return web.Response(status=verdict.status, text=verdict.reason, headers=headers)
        accept = ",".join(request.headers.getall(hdrs.ACCEPT, []))
        compress = gzip_accepted(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
        page = await self._scraper.page(accept, compress)
        headers = {hdrs.CONTENT_TYPE: page.content_type}
        if page.gzipped:
            headers[hdrs.CONTENT_ENCODING] = "gzip"
        return web.Response(body=page.body, headers=headers)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._tls)
        await site.start()
        # With port 0 the system picks one: say which.
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        scheme = "https" if self._tls is not None else "http"
        checked = ", each request's token checked" if self._authorizer is not None else ""
        logger.info("Metrics at %s://%s:%d/metrics%s", scheme, self.host, self.port, checked)

    async def stop(self) -> None:
        await self._runner.cleanup()
        await self._scraper.close()
