"""What a login to the API server is: where the server is and one way to prove who we are.
Read from a kubeconfig or the pod's service account by kube/config.py; used by the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """No usable login: the message says what is missing or wrong."""


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig's `exec` credential plugin (client.authentication.k8s.io), as kubectl runs
    it for EKS, GKE, AKS and OIDC logins."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    # Shown when the command cannot be run: how to install it (gcloud, aws, kubelogin).
    install_hint: str = ""
    # provideClusterInfo: the cluster, as KUBERNETES_EXEC_INFO's spec.cluster, which plugins
    # such as GKE's read to know which cluster they log in to. None: not asked for.
    cluster_info: Mapping[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Login:
    """The API server's URL and one way to prove who we are."""

    server: str
    # PEM; None trusts the system's certificate authorities.
    ca_pem: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_certificate_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    # Read again as it changes: a service account's token is rotated while the pod runs.
    token_file: Path | None = None
    username: str | None = None
    password: str | None = None
    exec_plugin: ExecPlugin | None = None
    proxy_url: str | None = None
    # The context's namespace (kubectl's default for commands without -n).
    namespace: str | None = None
    # Impersonation (the user's `as`, `as-uid`, `as-groups`, `as-user-extra`): the API server
    # acts as this identity, if the logged-in one may impersonate it.
    impersonate_user: str | None = None
    impersonate_uid: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    impersonate_extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Where it came from, for messages.
    source: str = ""
