"""The cluster's credentials: one CA, the API server's serving certificate, an admin client
certificate in system:masters, and the service-account signing key.

Generated fresh for each cluster with `cryptography`, like envtest's tiny CA, so no openssl
invocation or cfssl is needed and nothing secret is ever committed.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "kubeherd-admin"
# The first address of the service range: the `kubernetes` Service's ClusterIP.
API_SERVICE_IP = "10.96.0.1"
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.folder / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.folder / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.folder / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.folder / "admin.key"

    @property
    def kubelet_client_cert(self) -> Path:
        return self.folder / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.folder / "apiserver-kubelet-client.key"

    @property
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.folder / "sa.pub"


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _write_secret(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _issue(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # Backdated a little so clocks that disagree by seconds still accept it.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def generate_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubeherd-local-ca")])
    ca_cert = _issue(
        ca_name,
        ca_key.public_key(),
        ca_name,
        ca_key,
        [
            (x509.BasicConstraints(ca=True, path_length=None), True),
            (
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
                True,
            ),
        ],
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_secret(pki.ca_key, _private_pem(ca_key))

    def leaf(
        common_name: str,
        organization: str | None,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName],
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        extensions: list[tuple[x509.ExtensionType, bool]] = [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([usage]), False),
        ]
        if names:
            extensions.append((x509.SubjectAlternativeName(names), False))
        cert = _issue(x509.Name(attributes), key.public_key(), ca_name, ca_key, extensions)
        return cert.public_bytes(serialization.Encoding.PEM), _private_pem(key)

    serving_names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    serving_names += [
        x509.IPAddress(ipaddress.ip_address(address)) for address in ("127.0.0.1", API_SERVICE_IP)
    ]
    cert, key = leaf("kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, serving_names)
    pki.serving_cert.write_bytes(cert)
    _write_secret(pki.serving_key, key)

    # system:masters is bound to cluster-admin by the API server's bootstrap RBAC policy.
    cert, key = leaf(ADMIN_USER, "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    pki.admin_cert.write_bytes(cert)
    _write_secret(pki.admin_key, key)

    # The API server's identity towards kubelets (logs, exec), as kubeadm issues it.
    cert, key = leaf(
        "kube-apiserver-kubelet-client", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, []
    )
    pki.kubelet_client_cert.write_bytes(cert)
    _write_secret(pki.kubelet_client_key, key)

    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_secret(pki.service_account_key, _private_pem(service_account_key))
    pki.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_client_certificate(
    pki: Pki, stem: Path, common_name: str, organization: str | None
) -> tuple[Path, Path]:
    """A client certificate from the cluster's CA (a node's, kube-proxy's or kube-scheduler's
    identity: user `common_name` in group `organization`), written to `stem`.crt and
    `stem`.key."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the cluster CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    cert = _issue(
        x509.Name(attributes),
        key.public_key(),
        ca_cert.subject,
        ca_key,
        [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_secret(key_path, _private_pem(key))
    return cert_path, key_path
