"""`--metrics-secure`: HTTPS, and /metrics only for tokens the API server says may get it.
The API server is a fake here that answers reviews as a table says and counts them; the
integration tests (tests/integration/test_metrics_auth.py) ask a real one."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeherd.admission.certificates import issue
from kubeherd.kube.kinds import Kind
from kubeherd.kube.outcomes import KubeError, Outcome
from kubeherd.metrics.auth import ACCESS_REVIEWS, TOKEN_REVIEWS, TokenAuthorizer, Verdict
from kubeherd.metrics.objects import customdaemonsets, operator_registry
from kubeherd.metrics.server import MetricsServer, tls_context
from tests.helpers import ManualClock

# token -> the user it belongs to; users allowed to get /metrics.
USERS = {
    "reader-token": "system:serviceaccount:monitoring:prometheus",
    "other-token": "system:serviceaccount:default:default",
}
READERS = {"system:serviceaccount:monitoring:prometheus"}


class FakeApiServer:
    def __init__(self) -> None:
        self.reviews: list[tuple[str, Mapping[str, Any]]] = []
        self.down = False
        self.answer_after = 0.0

    async def create_review(self, kind: Kind, review: Mapping[str, Any]) -> Mapping[str, Any]:
        self.reviews.append((kind.resource, review))
        await asyncio.sleep(self.answer_after)
        if self.down:
            raise KubeError(Outcome(0, "request failed: connection refused"))
        spec = review["spec"]
        if kind == TOKEN_REVIEWS:
            user = USERS.get(spec["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": ["g"]}}}
        assert kind == ACCESS_REVIEWS
        return {"status": {"allowed": spec["user"] in READERS}}

    def count(self, resource: str) -> int:
        return sum(1 for kind, _ in self.reviews if kind == resource)


def decide(authorizer: TokenAuthorizer, *headers: str | None) -> list[Verdict]:
    async def all_of_them() -> list[Verdict]:
        return list(await asyncio.gather(*(authorizer.decide(h) for h in headers)))

    return asyncio.run(all_of_them())


def test_no_token_or_a_bad_one_is_401_a_user_without_the_role_403_a_reader_200() -> None:
    api = FakeApiServer()
    verdicts = decide(
        TokenAuthorizer(api),
        None,
        "Basic dXNlcjpwYXNz",
        "Bearer forged",
        "Bearer other-token",
        "Bearer reader-token",
    )

    assert [v.status for v in verdicts] == [401, 401, 401, 403, 200]
    # Asked about what the request wants: get on the non-resource URL /metrics, as the user
    # the token belongs to, with that user's groups.
    (access,) = (r for kind, r in api.reviews if kind == "subjectaccessreviews"
                 if r["spec"]["user"] == USERS["reader-token"])  # fmt: skip
    assert access["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert access["spec"]["groups"] == ["g"]
    # A forged token is never asked about access.
    assert api.count("tokenreviews") == 3
    assert api.count("subjectaccessreviews") == 2


def test_a_flood_with_one_token_costs_one_review_until_the_decision_expires() -> None:
    api, clock = FakeApiServer(), ManualClock(1000.0)
    api.answer_after = 0.05
    authorizer = TokenAuthorizer(api, decision_seconds=30, clock=clock)

    verdicts = decide(authorizer, *["Bearer reader-token"] * 50, *["Bearer forged"] * 50)
    assert {v.status for v in verdicts[:50]} == {200}
    assert {v.status for v in verdicts[50:]} == {401}
    assert (api.count("tokenreviews"), api.count("subjectaccessreviews")) == (2, 1)

    clock.now += 29
    decide(authorizer, "Bearer reader-token", "Bearer forged")
    assert api.count("tokenreviews") == 2

    clock.now += 2
    decide(authorizer, "Bearer reader-token", "Bearer forged")
    assert (api.count("tokenreviews"), api.count("subjectaccessreviews")) == (4, 2)


def test_the_remembered_decisions_are_bounded_the_least_recently_used_forgotten() -> None:
    api = FakeApiServer()
    authorizer = TokenAuthorizer(api, max_decisions=2)

    for token in ("reader-token", "other-token", "reader-token", "forged"):
        decide(authorizer, f"Bearer {token}")
    assert api.count("tokenreviews") == 3
    decide(authorizer, "Bearer reader-token")
    assert api.count("tokenreviews") == 3
    decide(authorizer, "Bearer other-token")
    assert api.count("tokenreviews") == 4


def test_an_api_server_that_cannot_answer_gives_503_and_is_asked_again() -> None:
    api = FakeApiServer()
    api.down = True
    authorizer = TokenAuthorizer(api)

    assert decide(authorizer, "Bearer reader-token")[0].status == 503
    api.down = False
    assert decide(authorizer, "Bearer reader-token")[0].status == 200


async def fetch(url: str, token: str | None, context: ssl.SSLContext | bool) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=context) as response,
    ):
        return response.status, await response.text()


def secure_server(context: ssl.SSLContext) -> MetricsServer:
    registry = operator_registry(customdaemonsets(lambda: [{"metadata": {"name": "agent"}}]))
    return MetricsServer(
        registry, "127.0.0.1:0", authorizer=TokenAuthorizer(FakeApiServer()), tls=context
    )


def test_the_secure_endpoint_serves_https_to_readers_only() -> None:
    async def scenario() -> list[tuple[int, str]]:
        server = secure_server(tls_context(None))
        await server.start()
        try:
            url = f"https://127.0.0.1:{server.port}/metrics"
            answers = [await fetch(url, token, False) for token in (None, "other-token")]
            answers.append(await fetch(url, "reader-token", False))
            with pytest.raises(aiohttp.ClientError):
                await fetch(url.replace("https:", "http:"), "reader-token", False)
            # Made at start, signed by nothing a client trusts: only read without verifying.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await fetch(url, "reader-token", ssl.create_default_context())
            return answers
        finally:
            await server.stop()

    (none, other, reader) = asyncio.run(scenario())
    assert none[0] == 401
    assert other[0] == 403
    assert reader[0] == 200
    assert 'customdaemonset="agent"' in reader[1]


def test_a_provided_certificate_is_served_and_verifies(tmp_path: Path) -> None:
    made = issue(["localhost"], datetime.datetime.now(datetime.UTC))
    (tmp_path / "tls.crt").write_bytes(made.certificate)
    (tmp_path / "tls.key").write_bytes(made.key)
    (tmp_path / "ca.crt").write_bytes(made.ca)
    trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    async def scenario() -> int:
        server = secure_server(tls_context(tmp_path))
        await server.start()
        try:
            status, _ = await fetch(
                f"https://localhost:{server.port}/metrics", "reader-token", trusting
            )
            return status
        finally:
            await server.stop()

    assert asyncio.run(scenario()) == 200
