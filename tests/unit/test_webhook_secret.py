"""Where the webhook's certificate comes from when it starts: an in-memory API server stands in
for the real one at the Kube boundary (tests/integration/test_admission.py restarts a real
operator), and the certificates are real ones, made by the certificate worker."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
from typing import Any, cast

import pytest

from kubeherd.admission.certificates import ServingCertificate, issue
from kubeherd.admission.configuration import SecretName, ServiceEndpoint, WebhookOptions
from kubeherd.admission.webhook import SECRET as SECRET_KIND
from kubeherd.admission.webhook import ConfiguringServer, start_webhook
from kubeherd.cli import build_parser, main
from kubeherd.cli_run import webhook_options
from kubeherd.daemonset.core.template import OperatorIdentity
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import Kind
from kubeherd.kube.outcomes import Outcome
from kubeherd.main import operator_identity

SECRET = SecretName("kubeherd-system", "kubeherd-webhook-tls")
URL = "https://127.0.0.1:9443/path"


class FakeKube:
    """Objects by (kind, namespace, name), each with a resourceVersion bumped at every write;
    creates of an existing name and replaces of a stale version are refused with 409, as the
    API server refuses them. Every write is recorded."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.versions = 0

    def _store(self, kind: str, manifest: dict[str, Any]) -> None:
        self.versions += 1
        body = copy.deepcopy(manifest)
        body["metadata"]["resourceVersion"] = str(self.versions)
        metadata = body["metadata"]
        self.objects[(kind, metadata.get("namespace"), metadata["name"])] = body

    async def get_object(self, kind: Kind, namespace: str | None, name: str) -> Any:
        return copy.deepcopy(self.objects.get((kind.kind, namespace, name)))

    async def create_object(self, kind: Kind, manifest: dict[str, Any]) -> Outcome:
        metadata = manifest["metadata"]
        self.writes.append(("create", kind.kind, metadata["name"]))
        if (kind.kind, metadata.get("namespace"), metadata["name"]) in self.objects:
            return Outcome(409, "already exists")
        self._store(kind.kind, manifest)
        return Outcome(201)

    async def replace_object(self, kind: Kind, manifest: dict[str, Any]) -> Outcome:
        metadata = manifest["metadata"]
        self.writes.append(("replace", kind.kind, metadata["name"]))
        current = self.objects.get((kind.kind, metadata.get("namespace"), metadata["name"]))
        if current is None or current["metadata"]["resourceVersion"] != metadata.get(
            "resourceVersion"
        ):
            return Outcome(409, "the object has been modified")
        self._store(kind.kind, manifest)
        return Outcome(200)

    async def apply(self, manifest: dict[str, Any]) -> Outcome:
        self.writes.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        self._store(manifest["kind"], manifest)
        return Outcome(200)

    def secret(self) -> dict[str, Any] | None:
        return self.objects.get(("Secret", SECRET.namespace, SECRET.name))


def stored_pems(secret: dict[str, Any]) -> ServingCertificate:
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    return ServingCertificate(data["ca.crt"], data["tls.crt"], data["tls.key"])


def secret_manifest(certificate: ServingCertificate) -> dict[str, Any]:
    pems = {
        "ca.crt": certificate.ca,
        "tls.crt": certificate.certificate,
        "tls.key": certificate.key,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET.name, "namespace": SECRET.namespace},
        "data": {key: base64.b64encode(value).decode() for key, value in pems.items()},
    }


def url_options(secret: SecretName | None = SECRET) -> WebhookOptions:
    return WebhookOptions(listen="127.0.0.1:9443", secret=secret)


async def start_serving(kube: FakeKube, options: WebhookOptions) -> ConfiguringServer:
    """Start the webhook as `kubeherd run` does, and let its configuration be applied for the
    address it serves at."""
    server = await start_webhook(cast(Kube, kube), options)
    server.keeper.serving(URL)
    assert server.keeper.task is not None
    await server.keeper.task
    return server


def test_by_url_with_a_secret_the_certificate_is_stored_in_it() -> None:
    kube = FakeKube()

    server = asyncio.run(start_serving(kube, url_options()))

    stored = kube.secret()
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubeherd"}
    assert stored_pems(stored) == server.certificate
    assert kube.writes == [
        ("create", "Secret", SECRET.name),
        ("apply", "ValidatingWebhookConfiguration", "kubeherd"),
    ]


def test_by_url_with_a_secret_a_restart_serves_the_same_certificate_and_writes_nothing() -> None:
    kube = FakeKube()
    first = asyncio.run(start_serving(kube, url_options()))
    kube.writes.clear()

    restarted = asyncio.run(start_serving(kube, url_options()))

    assert restarted.certificate == first.certificate
    assert kube.writes == []


def test_by_url_a_stored_certificate_for_another_address_is_replaced() -> None:
    kube = FakeKube()
    asyncio.run(start_serving(kube, WebhookOptions(listen="127.0.0.2:9443", secret=SECRET)))
    kube.writes.clear()

    moved = asyncio.run(start_serving(kube, url_options()))

    assert asyncio.run(asyncio.to_thread(moved.certificate.serves, ["127.0.0.1"], now()))
    stored = kube.secret()
    assert stored is not None
    assert stored_pems(stored) == moved.certificate
    assert kube.writes == [
        ("replace", "Secret", SECRET.name),
        ("apply", "ValidatingWebhookConfiguration", "kubeherd"),
    ]


def test_by_url_a_stored_certificate_near_its_end_is_replaced() -> None:
    kube = FakeKube()
    # Made so long ago that it ends in ten days.
    old = issue(["127.0.0.1"], now() - datetime.timedelta(days=3650 - 10))
    asyncio.run(kube.create_object(SECRET_KIND, secret_manifest(old)))

    server = asyncio.run(start_serving(kube, url_options()))

    assert server.certificate.ca != old.ca
    assert ("replace", "Secret", SECRET.name) in kube.writes


def test_by_url_without_a_secret_each_start_makes_a_new_certificate_and_reads_no_secret() -> None:
    kube = FakeKube()
    first = asyncio.run(start_serving(kube, url_options(secret=None)))

    restarted = asyncio.run(start_serving(kube, url_options(secret=None)))

    assert restarted.certificate.ca != first.certificate.ca
    assert kube.secret() is None
    assert kube.writes == [("apply", "ValidatingWebhookConfiguration", "kubeherd")] * 2


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


# The options ----------------------------------------------------------------------------------


def test_webhook_secret_names_the_secret_of_a_webhook_reached_by_url() -> None:
    options = build_parser().parse_args(
        [
            "run",
            "--webhook-listen=127.0.0.1:9443",
            "--webhook-secret=kubeherd-system/kubeherd-webhook-tls",
        ]
    )

    chosen = webhook_options(options)

    assert chosen is not None
    assert chosen.certificate_secret == SECRET
    assert chosen.hostnames == ["127.0.0.1"]


def test_without_webhook_secret_a_webhook_reached_by_url_keeps_no_certificate() -> None:
    options = build_parser().parse_args(["run", "--webhook-listen=127.0.0.1:9443"])

    chosen = webhook_options(options)

    assert chosen is not None
    assert chosen.certificate_secret is None


def test_a_webhook_behind_a_service_keeps_its_certificate_in_the_services_secret() -> None:
    options = WebhookOptions(listen=":9443", service=ServiceEndpoint("ops", "kubeherd-webhook"))

    assert options.certificate_secret == SecretName("ops", "kubeherd-webhook-tls")


def test_webhook_secret_with_webhook_service_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "run",
                "--webhook-listen=:9443",
                "--webhook-service=ops/kubeherd-webhook",
                "--webhook-secret=ops/mine",
            ]
        )

    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kubeherd: error: --webhook-secret is for a webhook reached by URL: with "
        "--webhook-service, the certificate is kept in the Secret ops/kubeherd-webhook-tls"
    )


@pytest.mark.parametrize("text", ["mine", "/mine", "ops/", "ops/a/b"])
def test_webhook_secret_must_be_namespace_slash_name(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", f"--webhook-secret={text}"])

    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"kubeherd run: error: argument --webhook-secret: {text!r}: expected NAMESPACE/NAME"
    )


# What daemon pods may not borrow -------------------------------------------------------------


class ServiceAccountKube:
    """Answers the SelfSubjectReview as the API server does for the chart's ServiceAccount."""

    async def create_review(self, kind: Kind, review: dict[str, Any]) -> dict[str, Any]:
        username = f"system:serviceaccount:{SECRET.namespace}:kubeherd"
        return {**review, "status": {"userInfo": {"username": username}}}


@pytest.mark.parametrize(
    ("secret", "kept_from_pods"),
    [(SECRET, {SECRET.name}), (SecretName("elsewhere", SECRET.name), set())],
)
def test_the_url_webhooks_secret_in_the_operators_namespace_is_kept_from_daemon_pods(
    secret: SecretName, kept_from_pods: set[str]
) -> None:
    lookup = operator_identity(cast(Kube, ServiceAccountKube()), url_options(secret))

    async def ask() -> OperatorIdentity | None:
        return await lookup()

    identity = asyncio.run(ask())

    assert identity is not None
    assert identity.secrets == kept_from_pods
