"""The certificate work that needs cryptography, done in a short-lived child process
(`python -m kubeherd.admission.certificate_worker`) so that the operator, which runs for months,
never holds the library in its memory. admission/certificates.py starts it and speaks to it.

One request on stdin, one answer on stdout, both JSON:
- {"action": "issue", "hostnames": [...], "now": ISO time} -> {"ca", "certificate", "key"}: PEM
- {"action": "serves", "certificate": PEM, "hostnames": [...], "now": ISO time} -> {"serves"}
A request the worker cannot honour (a certificate that does not parse) is answered
{"invalid": why}; anything else that goes wrong ends it with a traceback on stderr.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import sys
from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long-lived: nothing renews the certificate while the operator runs, and the CA only signs
# this one certificate, whose key never leaves the operator's Secret (or memory).
VALIDITY = datetime.timedelta(days=3650)
# A certificate closer than this to its end is replaced when the operator starts.
RENEW_BEFORE = datetime.timedelta(days=30)


def serves(certificate_pem: bytes, hostnames: list[str], now: datetime.datetime) -> bool:
    """Whether it is valid for all the names (DNS names or IP addresses) for a while yet."""
    certificate = x509.load_pem_x509_certificate(certificate_pem)
    if certificate.not_valid_after_utc - RENEW_BEFORE < now:
        return False
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return set(hostnames) <= covered


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(hostname: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(hostname))
    except ValueError:
        return x509.DNSName(hostname)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def issue(hostnames: list[str], now: datetime.datetime) -> tuple[bytes, bytes, bytes]:
    """A new CA and a certificate it signs for the names (the first one is the common name):
    the CA's certificate, the serving certificate and its key, in PEM.

    A CA of its own rather than one self-signed certificate: Go's TLS client (the API server's)
    refuses a self-signed leaf that is also a CA in some versions, never a proper chain."""
    if not hostnames:
        raise ValueError("a serving certificate needs at least one hostname")
    start, end = now - datetime.timedelta(minutes=5), now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"kubeherd-webhook-ca@{int(now.timestamp())}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(hostnames[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hostnames]), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        ca.public_bytes(serialization.Encoding.PEM),
        certificate.public_bytes(serialization.Encoding.PEM),
        _pem_key(key),
    )


def _answer_issue(request: dict[str, Any]) -> dict[str, Any]:
    ca, certificate, key = issue(
        list(request["hostnames"]), datetime.datetime.fromisoformat(request["now"])
    )
    return {"ca": ca.decode(), "certificate": certificate.decode(), "key": key.decode()}


def _answer_serves(request: dict[str, Any]) -> dict[str, Any]:
    found = serves(
        request["certificate"].encode(),
        list(request["hostnames"]),
        datetime.datetime.fromisoformat(request["now"]),
    )
    return {"serves": found}


ACTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "issue": _answer_issue,
    "serves": _answer_serves,
}


def main() -> None:
    request = json.load(sys.stdin)
    try:
        answer = ACTIONS[request["action"]](request)
    except ValueError as error:
        answer = {"invalid": str(error)}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
