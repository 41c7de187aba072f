"""Who may read `/metrics` (`--metrics-secure`): the API server decides, as for kubebuilder's
projects and kube-rbac-proxy. A request's bearer token is checked with a TokenReview; the user it
names must then be allowed `get` on the non-resource URL `/metrics` (a SubjectAccessReview), as
the chart's `<release>-metrics-reader` ClusterRole grants.

Decisions are remembered for a short while, by a hash of the token, so that Prometheus scraping
every few seconds, or a flood of requests with one token, costs a pair of reviews per token and
period rather than per request. At most a few reviews are in flight at once: a flood of distinct
tokens queues here instead of in the API server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubeherd.kube.kinds import Kind
from kubeherd.kube.outcomes import KubeError

logger = logging.getLogger(__name__)

TOKEN_REVIEWS = Kind(
    "/apis/authentication.k8s.io/v1", "tokenreviews", "TokenReview", namespaced=False
)
ACCESS_REVIEWS = Kind(
    "/apis/authorization.k8s.io/v1", "subjectaccessreviews", "SubjectAccessReview",
    namespaced=False,
)  # fmt: skip
# Long enough that a scraper every 10-30 s is reviewed about once per period, short enough
# that a revoked token or binding stops working soon (kube-rbac-proxy keeps denials 30 s too).
DECISION_SECONDS = 30.0
# Tokens remembered; the one unused longest goes first. Enough for every scraper of a cluster.
MAX_DECISIONS = 1024
REVIEWS_IN_FLIGHT = 4


class ReviewClient(Protocol):
    """What the API server is asked (kubeherd.kube.client.Kube)."""

    async def create_review(self, kind: Kind, review: Mapping[str, Any]) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    """The HTTP status to answer (200: serve the metrics) and why."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


NO_TOKEN = Verdict(401, "Unauthorized: a bearer token is required")


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class TokenAuthorizer:
    def __init__(
        self,
        client: ReviewClient,
        *,
        path: str = "/metrics",
        decision_seconds: float = DECISION_SECONDS,
        max_decisions: int = MAX_DECISIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._path = path
        self._decision_seconds = decision_seconds
        self._max_decisions = max_decisions
        self._clock = clock
        self._decisions: OrderedDict[bytes, tuple[float, Verdict]] = OrderedDict()
        self._reviewing: dict[bytes, asyncio.Future[Verdict]] = {}
        self._slots = asyncio.Semaphore(REVIEWS_IN_FLIGHT)

    async def decide(self, authorization: str | None) -> Verdict:
        """The verdict on a request with this Authorization header."""
        token = bearer_token(authorization)
        if not token:
            return NO_TOKEN
        # The token itself is never kept: a dump of the process shows hashes only.
        key = hashlib.sha256(token.encode()).digest()
        remembered = self._decisions.get(key)
        if remembered is not None:
            expires, verdict = remembered
            if self._clock() < expires:
                self._decisions.move_to_end(key)
                return verdict
            del self._decisions[key]
        reviewing = self._reviewing.get(key)
        if reviewing is None:
            # Requests with the same token share one review.
            reviewing = asyncio.ensure_future(self._review(key, token))
            self._reviewing[key] = reviewing
            reviewing.add_done_callback(lambda _: self._reviewing.pop(key, None))
        return await asyncio.shield(reviewing)

    async def _review(self, key: bytes, token: str) -> Verdict:
        async with self._slots:
            try:
                verdict = await self._ask(token)
            except KubeError as error:
                # Not the requester's fault, and not remembered: the next request asks again.
                logger.warning("Cannot check a /metrics token: %s", error)
                return Verdict(503, "the API server could not check the token")
        self._decisions[key] = (self._clock() + self._decision_seconds, verdict)
        while len(self._decisions) > self._max_decisions:
            self._decisions.popitem(last=False)
        return verdict

    async def _ask(self, token: str) -> Verdict:
        review = await self._client.create_review(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        identity = review.get("status") or {}
        if not identity.get("authenticated"):
            return Verdict(401, "Unauthorized: the token is not valid")
        user = identity.get("user") or {}
        username = str(user.get("username") or "")
        access = await self._client.create_review(
            ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": username,
                    "uid": user.get("uid") or "",
                    "groups": user.get("groups") or [],
                    "extra": user.get("extra") or {},
                    "nonResourceAttributes": {"path": self._path, "verb": "get"},
                },
            },
        )
        if (access.get("status") or {}).get("allowed"):
            return Verdict(200, f"{username} may get {self._path}")
        return Verdict(403, f"Forbidden: {username} may not get {self._path}")
