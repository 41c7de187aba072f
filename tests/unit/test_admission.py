"""The webhook's pure parts: which requests are checked, the pod asked about, the API server's
answer as the reviewer's verdict, the configuration and the certificate."""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from kubeherd.admission import certificates
from kubeherd.admission.certificates import CertificateWorkerError, ServingCertificate, issue
from kubeherd.admission.configuration import (
    CHECKS,
    TIMEOUT_SECONDS,
    ServiceEndpoint,
    WebhookOptions,
    already_applied,
    reachable_host,
    webhook_configuration,
)
from kubeherd.admission.review import profile_review, spec_changed
from kubeherd.daemonset.core.template import (
    checked_pod,
    no_verdict,
    pod_template_review,
    template_field,
)
from kubeherd.scheduler.core.problems import Verdict
from kubeherd.scheduler.core.validation import Problem

NOW = datetime.datetime(2026, 11, 23, tzinfo=datetime.UTC)


def cds(**template_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": "agent", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "a", "image": "busybox"}], **template_spec},
            },
        },
    }


def invalid(*causes: tuple[str, str]) -> dict[str, Any]:
    return {
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": "Pod is invalid",
        "details": {"causes": [{"field": f, "message": m} for f, m in causes]},
    }


def test_a_create_is_checked() -> None:
    assert spec_changed("CREATE", None, cds())


def test_an_update_of_the_spec_is_checked() -> None:
    changed = cds(hostNetwork=True)
    assert spec_changed("UPDATE", cds(), changed)


def test_an_update_that_leaves_the_spec_alone_is_not_checked() -> None:
    """The controller's finalizer patches must pass even on an object that is already bad."""
    with_finalizer = cds()
    with_finalizer["metadata"]["finalizers"] = ["kubeherd.io/scheduler-cleanup"]
    assert not spec_changed("UPDATE", cds(), with_finalizer)


def test_an_object_being_deleted_is_not_checked() -> None:
    deleting = cds(hostNetwork=True)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    assert not spec_changed("UPDATE", cds(), deleting)


def test_the_checked_pod_is_the_daemon_pod_with_the_templates_own_affinity() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "Foo", "values": ["v"]}]}
                ]
            }
        }
    }
    pod = checked_pod(cds(affinity=affinity))
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pod["spec"]["affinity"] == affinity
    # The controller's additions are there: its label and the daemon tolerations.
    assert pod["metadata"]["labels"]["kubeherd.io/customdaemonset"] == "agent"
    assert pod["spec"]["tolerations"]


def test_a_template_without_affinity_gives_a_pod_without_one() -> None:
    assert "affinity" not in checked_pod(cds())["spec"]


def test_the_checked_pod_leaves_the_customdaemonset_alone() -> None:
    body = cds()
    checked_pod(body)
    assert body == cds()


@pytest.mark.parametrize(
    ("pod_field", "template_field_name"),
    [
        ("spec.containers[1].name", "spec.template.spec.containers[1].name"),
        ("spec", "spec.template.spec"),
        ("metadata.labels", "spec.template.metadata.labels"),
        ("metadata.annotations[a/b]", "spec.template.metadata.annotations[a/b]"),
        ("metadata.name", "metadata.name (of the daemon pods)"),
        ("spectacle", "spectacle (of the daemon pods)"),
    ],
)
def test_pod_fields_are_named_as_the_templates(pod_field: str, template_field_name: str) -> None:
    assert template_field(pod_field) == template_field_name


def test_an_invalid_pod_refuses_with_the_api_servers_message_per_field() -> None:
    review = pod_template_review(422, invalid(("spec.containers[1].name", 'Duplicate value: "a"')))
    assert review.refusal == 'spec.template.spec.containers[1].name: Duplicate value: "a"'


def test_several_refusals_are_listed_as_kubectl_lists_the_api_servers() -> None:
    review = pod_template_review(
        422,
        invalid(
            ("spec.containers[0].ports[0].containerPort", "Required value"),
            ("spec.volumes[0].name", "Required value"),
        ),
    )
    assert review.refusal == (
        "\n* spec.template.spec.containers[0].ports[0].containerPort: Required value"
        "\n* spec.template.spec.volumes[0].name: Required value"
    )


def test_an_undecodable_template_is_refused_with_its_fields_renamed() -> None:
    message = (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagePullPolcy"'
    )
    review = pod_template_review(400, {"message": message, "code": 400})
    assert review.refusal == (
        "pod template: strict decoding error: unknown field "
        '"spec.template.spec.containers[0].imagePullPolcy"'
    )


@pytest.mark.parametrize(
    "message",
    [
        'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: 1',
        'pods "x" is forbidden: maximum cpu usage per Container is 1, but limit is 2',
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged',
        'pods "x" is forbidden: error looking up service account ns/sa: not found',
    ],
)
def test_a_refusal_by_the_namespaces_present_state_only_warns(message: str) -> None:
    review = pod_template_review(403, {"message": message, "code": 403})
    assert not review.refusal
    assert message in review.warnings[0]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, 'admission webhook "policy.example.com" does not support dry run'),
        (400, 'admission webhook "policy.example.com" denied the request: no latest tags'),
        (422, 'admission webhook "policy.example.com" denied the request: no hostPath'),
    ],
)
def test_another_webhooks_refusal_of_the_pod_only_warns(status: int, message: str) -> None:
    review = pod_template_review(status, {"message": message, "code": status})
    assert not review.refusal
    assert message in review.warnings[0]


@pytest.mark.parametrize("status", [0, 500, 503, 504])
def test_a_failed_check_allows_with_a_warning(status: int) -> None:
    review = pod_template_review(status, {"message": "request failed"})
    assert not review.refusal
    assert "could not check" in review.warnings[0]


@pytest.mark.parametrize(
    ("status", "says_nothing"),
    [
        (0, True),
        (429, True),
        (500, True),
        (504, True),
        (201, False),
        (400, False),
        (403, False),
        (409, False),
        (422, False),
    ],
)
def test_only_a_failed_or_overloaded_dry_run_says_nothing_of_the_pod(
    status: int, says_nothing: bool
) -> None:
    assert no_verdict(status) is says_nothing


def test_a_pod_the_api_server_would_create_is_allowed() -> None:
    assert pod_template_review(201, {"kind": "Pod"}) == pod_template_review(409, {})
    assert not pod_template_review(201, {"kind": "Pod"}).refusal


def test_a_schedulerprofile_is_refused_with_each_problems_field() -> None:
    verdict = Verdict(
        errors=[Problem("spec.profiles[0].plugins.queueSort", "needs exactly one")],
        warnings=[Problem("spec.profiles[0].plugins.filter", "out-of-tree")],
    )
    review = profile_review(verdict)
    assert review.refusal == "spec.profiles[0].plugins.queueSort: needs exactly one"
    assert review.warnings == ("spec.profiles[0].plugins.filter: out-of-tree",)


def test_a_valid_schedulerprofile_is_allowed() -> None:
    assert not profile_review(Verdict()).refusal


def test_service_endpoints_parse() -> None:
    assert ServiceEndpoint.parse("ns/svc") == ServiceEndpoint("ns", "svc", 443)
    assert ServiceEndpoint.parse("ns/svc:8443") == ServiceEndpoint("ns", "svc", 8443)
    for bad in ("svc", "ns/", "/svc", "ns/svc:https"):
        with pytest.raises(ValueError, match=r"NAMESPACE/NAME|port"):
            ServiceEndpoint.parse(bad)


def test_listen_addresses() -> None:
    every_interface = "0.0.0.0"  # noqa: S104  (what a listen address may name)
    assert WebhookOptions(listen=":9443").address == ("", 9443)
    assert WebhookOptions(listen="127.0.0.1:0").address == ("127.0.0.1", 0)
    assert WebhookOptions(listen="[::1]:9443").address == ("::1", 9443)
    assert reachable_host(every_interface) == "127.0.0.1"
    assert reachable_host("") == "127.0.0.1"
    assert reachable_host("127.0.0.2") == "127.0.0.2"


def test_the_configuration_never_blocks_and_calls_one_path_per_kind() -> None:
    service = ServiceEndpoint("kubeherd-system", "kubeherd-webhook")
    owner = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "kubeherd", "uid": "u-2"},
    }
    configuration = webhook_configuration(
        "kubeherd",
        {plural: service.client_config(f"/{check}") for plural, check in CHECKS.items()},
        b"CA",
        owner,
    )
    assert configuration["metadata"]["ownerReferences"][0]["uid"] == "u-2"
    webhooks = {w["name"]: w for w in configuration["webhooks"]}
    assert set(webhooks) == set(CHECKS.values())
    for plural, check in CHECKS.items():
        webhook = webhooks[check]
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["timeoutSeconds"] == TIMEOUT_SECONDS <= 5
        assert webhook["rules"][0]["resources"] == [plural]
        assert webhook["clientConfig"]["service"]["path"] == f"/{check}"
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == b"CA"


def test_a_configuration_as_stored_counts_as_applied_until_a_field_of_ours_differs() -> None:
    service = ServiceEndpoint("kubeherd-system", "kubeherd-webhook")
    ours = webhook_configuration(
        "kubeherd",
        {plural: service.client_config(f"/{check}") for plural, check in CHECKS.items()},
        b"CA",
    )
    # As the API server keeps it: with its defaults and metadata added.
    stored = copy.deepcopy(ours)
    stored["metadata"].update(uid="u-9", resourceVersion="12", generation=1)
    for webhook in stored["webhooks"]:
        webhook.update(matchPolicy="Equivalent", namespaceSelector={}, objectSelector={})
    assert already_applied(stored, ours)

    new_ca = webhook_configuration(
        "kubeherd",
        {plural: service.client_config(f"/{check}") for plural, check in CHECKS.items()},
        b"NEW CA",
    )
    assert not already_applied(stored, new_ca)
    one_webhook_less = copy.deepcopy(stored)
    one_webhook_less["webhooks"].pop()
    assert not already_applied(one_webhook_less, ours)


def test_the_certificate_is_signed_by_its_ca_for_the_names() -> None:
    hostnames = ["kubeherd-webhook.kubeherd-system.svc", "127.0.0.1"]
    certificate = issue(hostnames, NOW)
    leaf = x509.load_pem_x509_certificate(certificate.certificate)
    ca = x509.load_pem_x509_certificate(certificate.ca)
    leaf.verify_directly_issued_by(ca)
    assert certificate.serves(hostnames, NOW)
    assert not certificate.serves(["other.svc"], NOW)
    assert not certificate.serves(hostnames, NOW + datetime.timedelta(days=3640))


def test_a_tls_server_with_the_certificate_is_trusted_by_a_client_of_the_ca() -> None:
    """What the API server does: trust the caBundle, dial the name, check the chain."""
    certificate = issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    with tempfile.TemporaryDirectory() as folder:
        certfile, keyfile = Path(folder, "tls.crt"), Path(folder, "tls.key")
        certfile.write_bytes(certificate.certificate)
        keyfile.write_bytes(certificate.key)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(certfile, keyfile)
    client = ssl.create_default_context(cadata=certificate.ca.decode())
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):
        for side in (client_side, server_side):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    client_side.do_handshake()  # raises SSLCertVerificationError if the chain did not hold
    peer = client_side.getpeercert()
    assert peer is not None
    assert peer["subjectAltName"] == (("IP Address", "127.0.0.1"),)


def test_no_certificate_without_a_name() -> None:
    with pytest.raises(ValueError, match="hostname"):
        issue([], NOW)


def test_a_stored_certificate_that_does_not_parse_is_refused_as_invalid() -> None:
    stored = ServingCertificate(ca=b"", certificate=b"not a certificate", key=b"")
    with pytest.raises(ValueError, match="PEM"):
        stored.serves(["kubeherd-webhook.kubeherd-system.svc"], NOW)


def test_a_certificate_worker_that_fails_is_an_error_quoting_its_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(certificates, "WORKER", "kubeherd.admission.no_such_worker")
    missing = r"failed \(exit status 1\): .*No module named kubeherd\.admission\.no_such_worker"
    with pytest.raises(CertificateWorkerError, match=missing):
        issue(["127.0.0.1"], NOW)
