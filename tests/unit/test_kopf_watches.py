"""Kopf's watches of kubeherd's kinds in the readiness, from what the shared transport sees of
Kopf's requests: listed once a listing answers, failing while its requests are refused or fail,
and not needed on a standby, where Kopf neither lists nor watches."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from yarl import URL

from kubeherd.kopf_watches import KopfWatches
from kubeherd.kube.http import ApiSession
from kubeherd.kube.login import Login
from kubeherd.metrics.objects import ReadinessCollector, operator_registry
from kubeherd.readiness import Readiness
from tests.unit.loopback import serving
from tests.unit.test_metrics import samples

API = "https://kube.test:6443/apis/kubeherd.io/v1alpha1"


def test_a_listing_that_answers_lists_the_kind_and_a_refusal_fails_it() -> None:
    readiness = Readiness()
    readiness.started = True
    watches = KopfWatches(readiness, ("ops",), needed=lambda: True)

    watches.observe("GET", URL(f"{API}/namespaces/ops/customdaemonsets?limit=50"), 200)
    watches.observe("GET", URL(f"{API}/namespaces/ops/schedulerprofiles?limit=50"), 403)
    # Not a collection of a watched kind, or not a read: nothing to do with the readiness.
    watches.observe("GET", URL(f"{API}/namespaces/ops/schedulerprofiles/one"), 500)
    watches.observe("PATCH", URL(f"{API}/namespaces/ops/schedulerprofiles"), 500)
    watches.observe("GET", URL(f"{API}/namespaces/other/schedulerprofiles"), 500)

    verdict = readiness.verdict()
    assert not verdict.ready
    assert verdict.lines[1:] == (
        "[+]watch customdaemonsets in ops ok",
        "[-]watch schedulerprofiles in ops: not listed yet; failing for 0s (1 failures), last: "
        "the API server answered 403 to GET /apis/kubeherd.io/v1alpha1/namespaces/ops/"
        "schedulerprofiles",
    )

    watches.observe("GET", URL(f"{API}/namespaces/ops/schedulerprofiles?limit=50"), 200)
    assert readiness.ready()


def test_a_failed_watch_counts_until_a_watch_starts_again() -> None:
    readiness = Readiness()
    readiness.started = True
    watches = KopfWatches(readiness, (), needed=lambda: True)
    for resource in ("customdaemonsets", "schedulerprofiles"):
        watches.observe("GET", URL(f"{API}/{resource}"), 200)
    sps = next(w for w in readiness.watches if w.resource == "schedulerprofiles")

    watches.observe("GET", URL(f"{API}/schedulerprofiles?watch=true"), aiohttp.ClientError("x"))
    assert sps.failing_since is not None
    watches.observe("GET", URL(f"{API}/schedulerprofiles?watch=true&resourceVersion=7"), 200)
    assert sps.failing_since is None
    assert sps.failures == 1


def test_a_standby_does_not_need_kopfs_watches_nor_shows_them() -> None:
    active = False
    readiness = Readiness()
    readiness.started = True
    nodes = readiness.watch("nodes")
    nodes.has_listed()
    KopfWatches(readiness, (), needed=lambda: active)

    assert readiness.verdict().lines == ("[+]started ok", "[+]watch nodes ok")
    registry = operator_registry(ReadinessCollector(readiness))
    listed = {
        dict(labels)["resource"]: value
        for (name, labels), value in samples(registry).items()
        if name == "kubeherd_watch_listed"
    }
    # Unlisted by design on a standby: not a series the alert would take for a failure.
    assert listed == {"nodes": 1.0}

    active = True
    assert not readiness.ready()


def test_the_transport_tells_the_observer_each_outcome_of_kopfs_requests() -> None:
    seen: list[tuple[str, str, int | str]] = []

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({}, status=403 if "forbidden" in request.path else 200)

    async def check(url: str) -> None:
        transport = ApiSession(Login(server=url))
        kopf_session = transport.client_session(
            observe=lambda method, target, outcome: seen.append(
                (method, target.path, outcome if isinstance(outcome, int) else "error")
            )
        )
        try:
            for path in ("/ok", "/forbidden"):
                async with kopf_session.get(url + path) as response:
                    await response.read()
            # Kubeherd's own session is not observed.
            await transport.request("GET", "/ok", timeout=aiohttp.ClientTimeout(total=5))
        finally:
            await kopf_session.close()
            await transport.close()

    asyncio.run(serving(answer, check))

    assert seen == [("GET", "/ok", 200), ("GET", "/forbidden", 403)]
