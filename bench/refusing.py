"""What refuses a benchmark's pods in one namespace: a ResourceQuota, a ValidatingAdmissionPolicy,
or a validating admission webhook this process serves itself. The manifests and the webhook's
answer are pure; `RefusingWebhook` is the HTTPS server the API server calls."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from kubeherd.admission.certificate_worker import issue

Json = dict[str, Any]

ADMISSION = "admissionregistration.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
REFUSAL_MESSAGE = "no pods here (bench-refusals)"
WEBHOOK_NAME = "refuse-pods.bench.kubeherd.io"
WEBHOOK_PATH = "/validate"
POD_CREATES = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE"],
    "resources": ["pods"],
}


def pod_quota(pods: int) -> Json:
    return {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": str(pods)}}}


def in_namespace(namespace: str) -> Json:
    return {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}


def refusing_policy(name: str) -> Json:
    """A ValidatingAdmissionPolicy that refuses every pod create it is bound to."""
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [POD_CREATES]},
            "validations": [
                {"expression": "false", "message": REFUSAL_MESSAGE, "reason": "Forbidden"}
            ],
        },
    }


def policy_binding(name: str, namespace: str) -> Json:
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": in_namespace(namespace)},
        },
    }


def webhook_configuration(name: str, namespace: str, url: str, ca_pem: bytes) -> Json:
    """A ValidatingWebhookConfiguration that sends every pod create in `namespace`, dry runs
    too (no side effects), to `url`, and refuses the pod when the webhook cannot answer."""
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [{**POD_CREATES, "scope": "Namespaced"}],
                "namespaceSelector": in_namespace(namespace),
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }


@dataclass(frozen=True)
class ReviewCounts:
    """AdmissionReviews received: those of dry runs and those of real creates."""

    dry_run: int = 0
    real: int = 0

    def counted(self, review: Json) -> ReviewCounts:
        if (review.get("request") or {}).get("dryRun"):
            return ReviewCounts(self.dry_run + 1, self.real)
        return ReviewCounts(self.dry_run, self.real + 1)

    def __sub__(self, earlier: ReviewCounts) -> ReviewCounts:
        return ReviewCounts(self.dry_run - earlier.dry_run, self.real - earlier.real)


def refusal(review: Json, message: str = REFUSAL_MESSAGE) -> Json:
    """The answer to an AdmissionReview: not allowed, 403 Forbidden with `message`. Without a
    code the API server would answer the create 400, which is not how a quota or a policy
    engine refuses; 403 is, and it is what the refused creates are counted by."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": (review.get("request") or {}).get("uid", ""),
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        },
    }


class RefusingWebhook:
    """An HTTPS admission webhook on 127.0.0.1 that refuses everything it is asked about and
    counts what it was asked, under a CA of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.counts = ReviewCounts()
        self.ca_pem = b""
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{WEBHOOK_PATH}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(WEBHOOK_PATH, self._review)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._tls())
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def _tls(self) -> ssl.SSLContext:
        now = datetime.datetime.now(datetime.UTC)
        self.ca_pem, certificate, key = issue(["127.0.0.1"], now)
        self.folder.mkdir(parents=True, exist_ok=True)
        certificate_path, key_path = self.folder / "tls.crt", self.folder / "tls.key"
        certificate_path.write_bytes(certificate)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificate_path, key_path)
        return context

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _review(self, request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        self.counts = self.counts.counted(review)
        return web.json_response(refusal(review))
