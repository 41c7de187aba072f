"""The webhook at run time: its certificate, Kopf's server, the configuration kept pointing at
it, and the two checks (thin: the answers are worked out in `review`).

Every replica serves, standbys included (Kopf's peering pauses the watches, not the admission
server), so the replicas share one certificate: the first makes it and stores it in a Secret,
the others read it, and the configuration's caBundle is the same whichever replica wrote it.
A process reached by URL keeps its certificate in a Secret the same way when told one
(`--webhook-secret`): restarted on the same address, it leaves the configuration as it was.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import kopf

from kubeherd.admission.certificates import ServingCertificate, issue
from kubeherd.admission.configuration import (
    CHECKS,
    MANAGED_BY,
    SecretName,
    WebhookOptions,
    already_applied,
    reachable_host,
    webhook_configuration,
)
from kubeherd.admission.review import profile_review, spec_changed
from kubeherd.daemonset.core.template import ALLOWED, Review, checked_pod, pod_template_review
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import KINDS
from kubeherd.kube.outcomes import KubeError, Outcome
from kubeherd.kube.ratelimit import Backoff
from kubeherd.names import (
    API_VERSION,
    CUSTOMDAEMONSET,
    CUSTOMDAEMONSETS,
    GROUP,
    SCHEDULERPROFILE,
    SCHEDULERPROFILES,
    VERSION,
)
from kubeherd.scheduler.core.catalog import CatalogChoice, image_catalog
from kubeherd.scheduler.core.claims import claims_of
from kubeherd.scheduler.core.verdict import profile_verdict
from kubeherd.scheduler.shell.gather import profile_image

logger = logging.getLogger(__name__)

SECRET = KINDS[("v1", "Secret")]
CLUSTER_ROLE = KINDS[("rbac.authorization.k8s.io/v1", "ClusterRole")]
CONFIGURATION = KINDS[("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")]
SCHEDULER_PROFILE = KINDS[(API_VERSION, SCHEDULERPROFILE)]
# `--webhook-listen=auto`: on when the API server can reach this process on loopback.
AUTO = "auto"


def is_loopback_url(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class IdleServer:
    """Kopf's admission server when the webhook is off: Kopf refuses to start with validation
    handlers and no server, and this one serves nothing."""

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        await asyncio.Event().wait()
        yield kopf.WebhookClientConfig()  # never reached: makes this an async generator


class ConfiguringServer(kopf.WebhookServer):
    """Kopf's HTTPS server, which also keeps the configuration pointing at where it serves
    (Kopf's own management of the configuration cannot set a timeout nor share a CA).

    Kopf loads the serving certificate and key from files: they are written to a folder of
    their own only when the server starts, and removed when it stops, so that no private key
    outlives the server (an operator stopped before it served leaves none either)."""

    def __init__(
        self, keeper: ConfigurationKeeper, certificate: ServingCertificate, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.keeper = keeper
        self.certificate = certificate

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        folder = Path(tempfile.mkdtemp(prefix="kubeherd-webhook-"))
        try:
            self.certfile, self.pkeyfile = folder / "tls.crt", folder / "tls.key"
            for path, content in (
                (self.certfile, self.certificate.certificate),
                (self.pkeyfile, self.certificate.key),
            ):
                path.touch(mode=0o600)
                path.write_bytes(content)
            async for client_config in super().__call__(fn):
                self.keeper.serving(str(client_config.get("url") or ""))
                yield client_config
        finally:
            shutil.rmtree(folder, ignore_errors=True)


class ConfigurationKeeper:
    """Applies the configuration once the server listens, retrying until it is written."""

    def __init__(self, kube: Kube, options: WebhookOptions, certificate: ServingCertificate):
        self.kube = kube
        self.options = options
        self.certificate = certificate
        self.task: asyncio.Task[None] | None = None

    def serving(self, url: str) -> None:
        if self.task is not None:
            self.task.cancel()
        self.task = asyncio.get_running_loop().create_task(self._apply(url))

    def client_configs(self, url: str) -> dict[str, dict[str, Any]]:
        service = self.options.service
        return {
            plural: service.client_config(f"/{self.certificate.path_secret}/{check}")
            if service is not None
            else {"url": f"{url.rstrip('/')}/{check}"}
            for plural, check in CHECKS.items()
        }

    async def _apply(self, url: str) -> None:
        backoff = Backoff(limit=60.0)
        while True:
            outcome = await self._apply_once(url)
            if outcome.ok:
                logger.info(
                    "ValidatingWebhookConfiguration %s points at %s",
                    self.options.configuration,
                    self.options.service or url,
                )
                return
            logger.error(
                "ValidatingWebhookConfiguration %s not written (%s): applies go unchecked by "
                "the webhook until it is; retrying",
                self.options.configuration,
                outcome.message,
            )
            await asyncio.sleep(backoff.next_delay())

    async def _apply_once(self, url: str) -> Outcome:
        owner = None
        if self.options.owner:
            try:
                owner = await self.kube.get_object(CLUSTER_ROLE, None, self.options.owner)
            except KubeError as error:
                return error.outcome
            if owner is None:
                return Outcome(404, f"ClusterRole {self.options.owner} (its owner) not found")
            owner = {**owner, "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
        manifest = webhook_configuration(
            self.options.configuration,
            self.client_configs(url),
            self.certificate.ca,
            owner,
        )
        try:
            current = await self.kube.get_object(CONFIGURATION, None, self.options.configuration)
        except KubeError as error:
            return error.outcome
        if current is not None and already_applied(current, manifest):
            return Outcome(200)
        return await self.kube.apply(manifest)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def start_webhook(kube: Kube, options: WebhookOptions) -> ConfiguringServer:
    """The server Kopf runs (in `settings.admission.server`), with its certificate."""
    host, port = options.address
    secret = options.certificate_secret
    if secret is not None:
        certificate = await shared_certificate(kube, secret, options.hostnames)
    else:
        certificate = await asyncio.to_thread(issue, options.hostnames, now())
    keeper = ConfigurationKeeper(kube, options, certificate)
    return ConfiguringServer(
        keeper,
        certificate,
        addr=host or None,  # None: every interface
        port=port or None,
        # Kopf serves POSTs under this path only (the URL it reports includes it).
        path=f"/{certificate.path_secret}",
        host=reachable_host(host),
        cadata=certificate.ca,
    )


async def remove_configuration(kube: Kube, name: str) -> None:
    """Delete the configuration, if kubeherd made it: with the webhook turned off, the API
    server would otherwise keep calling a webhook nobody serves (failing open, but slowly when
    the address does not answer)."""
    try:
        existing = await kube.get_object(CONFIGURATION, None, name)
    except KubeError as error:
        logger.error("ValidatingWebhookConfiguration %s not read: %s", name, error)
        return
    labels = (existing or {}).get("metadata", {}).get("labels") or {}
    if existing is None or labels.get(MANAGED_BY) != "kubeherd":
        return
    outcome = await kube.delete_object(CONFIGURATION, None, name, existing["metadata"]["uid"])
    if outcome.ok or outcome.not_found:
        logger.info("The webhook is off: deleted ValidatingWebhookConfiguration %s", name)
    else:
        logger.error("ValidatingWebhookConfiguration %s not deleted: %s", name, outcome.message)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def shared_certificate(
    kube: Kube, where: SecretName, hostnames: list[str]
) -> ServingCertificate:
    """The certificate kept in the Secret, common to the replicas and to their restarts; made
    (or renewed) by the first replica that finds none usable for `hostnames`. Creates and
    replacements are conditional, so two replicas starting at once end up with the one that
    won."""
    namespace, name = where.namespace, where.name
    for _ in range(5):
        secret = await kube.get_object(SECRET, namespace, name)
        stored = _stored_certificate(secret)
        if stored is not None and await asyncio.to_thread(stored.serves, hostnames, now()):
            return stored
        fresh = await asyncio.to_thread(issue, hostnames, now())
        manifest = _secret(namespace, name, fresh, secret)
        if secret is None:
            outcome = await kube.create_object(SECRET, manifest)
        else:
            outcome = await kube.replace_object(SECRET, manifest)
        if outcome.ok:
            logger.info("stored a new webhook certificate in Secret %s/%s", namespace, name)
            return fresh
        if not outcome.already_exists:
            raise KubeError(outcome)
        # Another replica wrote one meanwhile: read it.
    raise RuntimeError(f"Secret {namespace}/{name} keeps changing: no certificate to serve")


def _stored_certificate(secret: Mapping[str, Any] | None) -> ServingCertificate | None:
    import base64

    data = (secret or {}).get("data") or {}
    try:
        return ServingCertificate(
            ca=base64.b64decode(data["ca.crt"]),
            certificate=base64.b64decode(data["tls.crt"]),
            key=base64.b64decode(data["tls.key"]),
        )
    except (KeyError, ValueError):
        return None


def _secret(
    namespace: str,
    name: str,
    certificate: ServingCertificate,
    existing: Mapping[str, Any] | None,
) -> dict[str, Any]:
    import base64

    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "kubeherd"},
    }
    if existing is not None:
        metadata["resourceVersion"] = existing["metadata"]["resourceVersion"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "kubernetes.io/tls",
        "data": {
            key: base64.b64encode(value).decode()
            for key, value in (
                ("ca.crt", certificate.ca),
                ("tls.crt", certificate.certificate),
                ("tls.key", certificate.key),
            )
        },
    }


# The checks ----------------------------------------------------------------------------------


async def review_customdaemonset(
    kube: Kube, operation: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> Review:
    if not spec_changed(operation, old, new):
        return ALLOWED
    pod = checked_pod(new)
    answer = await kube.dry_run_create(KINDS[("v1", "Pod")], pod["metadata"]["namespace"], pod)
    return pod_template_review(answer.status, answer.body)


async def review_schedulerprofile(
    kube: Kube, operation: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> Review:
    if not spec_changed(operation, old, new):
        return ALLOWED
    # Listed at each review, not read from the controller's index: a standby replica's index
    # is paused, and one stale name would let a conflict through.
    others = await kube.list_objects(SCHEDULER_PROFILE, "")
    claims = [claim for body in others for claim in claims_of(body)]
    # Judged for the minor its image runs; with the cluster's release unknown, only what needs
    # no catalog (the controller judges the rest once it can read the release).
    image, _ = await profile_image(kube, new.get("spec") or {})
    choice = image_catalog(image) if image is not None else CatalogChoice(None)
    return profile_review(profile_verdict(new, claims, choice))


class Memo(Protocol):
    """What the webhook reads of Kopf's memo (kubeherd.main.Runtime)."""

    @property
    def kube(self) -> Kube: ...


async def answer(
    review: Any,
    kind: str,
    cause: Mapping[str, Any],
    body: kopf.Body,
    warnings: list[str],
    memo: Memo,
) -> None:
    """Run a check; refuse with its message, else allow. A check that fails allows: the
    webhook is there to refuse what is certainly bad, never to block on its own trouble."""
    try:
        old = cause.get("old")
        result: Review = await review(
            memo.kube, str(cause["operation"]), dict(old) if old else None, dict(body)
        )
    except Exception as error:
        logger.exception("%s admission check failed; allowing", kind)
        warnings.append(f"kubeherd could not check this {kind} ({error}); its status will tell")
        return
    warnings.extend(result.warnings)
    if result.refusal:
        raise kopf.AdmissionError(result.refusal, code=422)


@kopf.on.validate(
    GROUP,
    VERSION,
    CUSTOMDAEMONSETS,
    id=CHECKS[CUSTOMDAEMONSETS],
    operations=["CREATE", "UPDATE"],
)
async def check_customdaemonset(
    body: kopf.Body, warnings: list[str], memo: Memo, **kwargs: Any
) -> None:
    await answer(review_customdaemonset, CUSTOMDAEMONSET, kwargs, body, warnings, memo)


@kopf.on.validate(
    GROUP,
    VERSION,
    SCHEDULERPROFILES,
    id=CHECKS[SCHEDULERPROFILES],
    operations=["CREATE", "UPDATE"],
)
async def check_schedulerprofile(
    body: kopf.Body, warnings: list[str], memo: Memo, **kwargs: Any
) -> None:
    await answer(review_schedulerprofile, SCHEDULERPROFILE, kwargs, body, warnings, memo)


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
