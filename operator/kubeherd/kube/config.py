"""Where the API server is and how to log in: the pod's service account, or a kubeconfig read
as kubectl reads it (KUBECONFIG's files merged, the current or a named context).

kubeherd has its own loader rather than a client library's: a generated client's modules
were most of kubeherd's start-up memory, for models it never used (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


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
    # Where it came from, for messages.
    source: str = ""


def load() -> Login:
    """The operator's login: the pod's service account when in a pod, else the kubeconfig."""
    try:
        return in_cluster()
    except ConfigError as not_in_pod:
        try:
            return from_kubeconfig()
        except ConfigError as no_kubeconfig:
            raise ConfigError(f"{no_kubeconfig}; and not in a pod: {not_in_pod}") from None


def in_cluster(account: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] = os.environ) -> Login:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    token_file = account / "token"
    if not token_file.is_file():
        raise ConfigError(f"{token_file} does not exist")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    ca_file = account / "ca.crt"
    namespace_file = account / "namespace"
    return Login(
        server=f"https://{host}:{port}",
        ca_pem=ca_file.read_bytes() if ca_file.is_file() else None,
        token_file=token_file,
        namespace=namespace_file.read_text().strip() if namespace_file.is_file() else None,
        source="the pod's service account",
    )


def kubeconfig_paths(environ: Mapping[str, str] = os.environ) -> list[Path]:
    listed = [part for part in environ.get("KUBECONFIG", "").split(os.pathsep) if part]
    return [Path(part) for part in listed] if listed else [Path.home() / ".kube" / "config"]


def from_kubeconfig(
    path: str | Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Login:
    """The login of `context` (else the current one) in `path` (else KUBECONFIG's files,
    merged as kubectl merges them: the first file to name a thing wins)."""
    paths = [Path(path)] if path is not None else kubeconfig_paths(environ)
    merged = _merge([_read(file) for file in paths if path is not None or file.is_file()])
    if not merged["files"]:
        raise ConfigError(f"no kubeconfig at {os.pathsep.join(map(str, paths))}")
    name = context or merged["current-context"]
    if not name:
        raise ConfigError(f"{merged['files']} name no current-context")
    found = merged["contexts"].get(name)
    if found is None:
        raise ConfigError(f"context {name!r} is not in {merged['files']}")
    context_body, _ = found
    cluster, cluster_dir = _named(merged["clusters"], context_body.get("cluster"), "cluster")
    user, user_dir = (
        _named(merged["users"], context_body.get("user"), "user")
        if context_body.get("user")
        else ({}, Path())
    )
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"cluster {context_body.get('cluster')!r} has no server")
    token_file = user.get("tokenFile")
    insecure = _insecure_skip_tls_verify(cluster, context_body.get("cluster"))
    return Login(
        server=server,
        ca_pem=_data_or_file(cluster, "certificate-authority", cluster_dir),
        insecure=insecure,
        tls_server_name=cluster.get("tls-server-name") or None,
        client_certificate_pem=_data_or_file(user, "client-certificate", user_dir),
        client_key_pem=_data_or_file(user, "client-key", user_dir),
        token=user.get("token") or _auth_provider_token(user) or None,
        token_file=user_dir / token_file if token_file else None,
        username=user.get("username") or None,
        password=user.get("password") or None,
        exec_plugin=_exec_plugin(user.get("exec"), user_dir),
        proxy_url=cluster.get("proxy-url") or None,
        namespace=context_body.get("namespace") or None,
        source=f"context {name!r} of {merged['files']}",
    )


def _read(file: Path) -> tuple[Path, Mapping[str, Any]]:
    try:
        loaded = yaml.safe_load(file.read_text()) or {}
    except OSError as error:
        raise ConfigError(f"cannot read kubeconfig {file}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"kubeconfig {file} is not YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"kubeconfig {file} is not a mapping")
    return file, loaded


def _merge(files: list[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """Each named cluster, user and context with the folder of the file that defined it
    (relative paths in it are relative to that file)."""
    merged: dict[str, Any] = {
        "files": ", ".join(str(file) for file, _ in files),
        "current-context": "",
        "clusters": {},
        "users": {},
        "contexts": {},
    }
    for file, config in files:
        merged["current-context"] = merged["current-context"] or config.get("current-context")
        for section, field in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in config.get(section) or ():
                if isinstance(entry, dict) and entry.get("name") not in merged[section]:
                    merged[section][entry.get("name")] = (entry.get(field) or {}, file.parent)
    return merged


def _named(
    entries: Mapping[str, tuple[Mapping[str, Any], Path]], name: Any, what: str
) -> tuple[Mapping[str, Any], Path]:
    if name not in entries:
        raise ConfigError(f"the context's {what} {name!r} is not defined")
    return entries[name]


def _insecure_skip_tls_verify(cluster: Mapping[str, Any], cluster_name: Any) -> bool:
    """The flag read as kubectl reads it: a boolean, or the words true and false. Anything
    looser would let a typo, or a quoted "false", turn certificate checks off."""
    flag = cluster.get("insecure-skip-tls-verify")
    if flag is None or isinstance(flag, bool):
        insecure = bool(flag)
    elif isinstance(flag, str) and flag.lower() in ("true", "false"):
        insecure = flag.lower() == "true"
    else:
        raise ConfigError(
            f"cluster {cluster_name!r}: insecure-skip-tls-verify must be true or false, "
            f"not {flag!r}"
        )
    if insecure and (
        cluster.get("certificate-authority") or cluster.get("certificate-authority-data")
    ):
        # kubectl refuses this too: the user meant one of the two, and guessing which could
        # quietly drop the check they wanted.
        raise ConfigError(
            f"cluster {cluster_name!r}: specifying a root certificate (certificate-authority or "
            "certificate-authority-data) with insecure-skip-tls-verify is not allowed"
        )
    return insecure


def _data_or_file(section: Mapping[str, Any], key: str, folder: Path) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        if not isinstance(data, str):
            raise ConfigError(f"{key}-data is not a string")
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            raise ConfigError(f"{key}-data is not base64") from None
    if not section.get(key):
        return None
    file = folder / str(section[key])
    try:
        return file.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {key} {file}: {error.strerror}") from None


def _auth_provider_token(user: Mapping[str, Any]) -> str:
    """The token an auth-provider (oidc) stored; it is used as it is, never refreshed."""
    config = (user.get("auth-provider") or {}).get("config") or {}
    return str(config.get("id-token") or config.get("access-token") or "")


def _exec_plugin(section: Any, folder: Path) -> ExecPlugin | None:
    if not section:
        return None
    command = str(section.get("command") or "")
    if not command:
        raise ConfigError("the user's exec plugin names no command")
    # A relative command with a slash is relative to the kubeconfig, as kubectl has it.
    if os.sep in command and not Path(command).is_absolute():
        command = str(folder / command)
    return ExecPlugin(
        command=command,
        args=tuple(str(arg) for arg in section.get("args") or ()),
        env=tuple(
            (str(pair.get("name")), str(pair.get("value", ""))) for pair in section.get("env") or ()
        ),
        api_version=str(section.get("apiVersion") or ExecPlugin.api_version),
    )
