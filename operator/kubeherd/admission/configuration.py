"""The ValidatingWebhookConfiguration kubeherd keeps for itself, and where the API server
reaches the webhook: a Service in front of the operator's pods, or a URL (an operator run as a
local process, next to an API server on the same machine).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.names import CUSTOMDAEMONSETS, GROUP, SCHEDULERPROFILES, VERSION

# The Kopf handler ids of the two checks; each webhook calls its own path, so that one request
# runs one handler.
CHECKS = {
    CUSTOMDAEMONSETS: f"{CUSTOMDAEMONSETS}.{GROUP}",
    SCHEDULERPROFILES: f"{SCHEDULERPROFILES}.{GROUP}",
}
# Well below the API server's 10 s default: a slow operator delays an apply by this at most,
# and then (failurePolicy Ignore) the apply goes through unchecked.
TIMEOUT_SECONDS = 5
# Marks the configuration as kubeherd's: the only one it ever deletes.
MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass(frozen=True)
class ServiceEndpoint:
    """The Service the API server calls the webhook through (port: the Service's)."""

    namespace: str
    name: str
    port: int = 443

    @property
    def hostnames(self) -> list[str]:
        """The names the API server checks the certificate for (it dials <name>.<ns>.svc)."""
        return [
            f"{self.name}.{self.namespace}.svc",
            f"{self.name}.{self.namespace}.svc.cluster.local",
        ]

    def client_config(self, path: str) -> dict[str, Any]:
        service = {"namespace": self.namespace, "name": self.name, "port": self.port, "path": path}
        return {"service": service}

    @classmethod
    def parse(cls, text: str) -> ServiceEndpoint:
        """NAMESPACE/NAME or NAMESPACE/NAME:PORT."""
        namespace, slash, rest = text.partition("/")
        name, colon, port = rest.partition(":")
        if not slash or not namespace or not name:
            raise ValueError(f"{text!r}: expected NAMESPACE/NAME[:PORT]")
        try:
            return cls(namespace, name, int(port) if colon else 443)
        except ValueError:
            raise ValueError(f"{text!r}: the port must be a number") from None


@dataclass(frozen=True)
class SecretName:
    """A Secret, by namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> SecretName:
        """NAMESPACE/NAME."""
        namespace, slash, name = text.partition("/")
        if not slash or not namespace or not name or "/" in name:
            raise ValueError(f"{text!r}: expected NAMESPACE/NAME")
        return cls(namespace, name)


@dataclass(frozen=True)
class WebhookOptions:
    """What `kubeherd run --webhook-*` chose."""

    # HOST:PORT to listen on; port 0: any free one (the configuration names the one taken).
    listen: str = "127.0.0.1:0"
    # Reached through this Service (the chart's); None: by URL, at the listen address.
    service: ServiceEndpoint | None = None
    # The ValidatingWebhookConfiguration kubeherd keeps.
    configuration: str = "kubeherd"
    # A ClusterRole whose deletion deletes the configuration (the chart's); empty: none.
    owner: str = ""
    # By URL: the Secret that keeps the certificate across restarts; None: a new one at each
    # start. (Through a Service, the Service names the Secret: see `certificate_secret`.)
    secret: SecretName | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        # No host (":9443"): "", every interface (IPv4 and IPv6), as in a pod behind a Service.
        return host.strip("[]"), int(port or 0)

    @property
    def hostnames(self) -> list[str]:
        """The names the API server checks the serving certificate for."""
        if self.service is not None:
            return self.service.hostnames
        return [reachable_host(self.address[0])]

    @property
    def certificate_secret(self) -> SecretName | None:
        """Where the certificate is kept, so that replicas and restarts serve the same one:
        the Secret NAME-tls beside the Service, else the one named by URL; None: nowhere."""
        if self.service is not None:
            return SecretName(self.service.namespace, f"{self.service.name}-tls")
        return self.secret


def reachable_host(listen_host: str) -> str:
    """The address the API server dials for a URL webhook listening on `listen_host`."""
    if not listen_host:
        return "127.0.0.1"
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(listen_host).is_unspecified:
            return "127.0.0.1"
    return listen_host


def already_applied(current: Any, desired: Any) -> bool:
    """Whether an object already holds every field of `desired` with its value (lists item by
    item, of the same length): applying it again would change nothing. A restart then sends no
    write."""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(
            key in current and already_applied(current[key], value)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(already_applied(c, d) for c, d in zip(current, desired, strict=True))
        )
    return bool(current == desired)


def webhook_configuration(
    name: str,
    client_configs: Mapping[str, Mapping[str, Any]],
    ca_bundle: bytes,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The configuration: one webhook per kind, each with its `clientConfig` (keyed by plural).

    `owner`: a cluster-scoped object (the chart's ClusterRole) whose deletion, at
    `helm uninstall`, takes the configuration with it."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {MANAGED_BY: "kubeherd"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    bundle = base64.b64encode(ca_bundle).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            {
                "name": CHECKS[plural],
                "clientConfig": {**client_configs[plural], "caBundle": bundle},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "resources": [plural],
                        "operations": ["CREATE", "UPDATE"],
                        "scope": "Namespaced",
                    }
                ],
                # An operator that is down, slow or unreachable never blocks anyone: the
                # controllers' conditions report what the webhook could not refuse.
                "failurePolicy": "Ignore",
                "timeoutSeconds": TIMEOUT_SECONDS,
                # It only reads (dry-run pod creates change nothing).
                "sideEffects": "None",
                "matchPolicy": "Equivalent",
                "admissionReviewVersions": ["v1"],
            }
            for plural in sorted(client_configs)
        ],
    }
