"""Where the API server is and how to log in: the pod's service account, or a kubeconfig read
as kubectl reads it (KUBECONFIG's files merged, the current or a named context).

What kubectl honours in a kubeconfig is either honoured here or refused with a ConfigError that
says so: never silently dropped, since a dropped field (an impersonation, a client certificate)
changes who the requests run as.

kubeherd has its own loader rather than a client library's: a generated client's modules
were most of kubeherd's start-up memory, for models it never used (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kubeherd.kube.login import ConfigError, ExecPlugin, Login

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def load(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
    account: Path | None = None,
) -> Login:
    """The operator's login, looked for as controller-runtime looks: the kubeconfig named
    (`--kubeconfig`), else KUBECONFIG's files, else the pod's service account, else
    ~/.kube/config. A named context is a kubeconfig's, so it skips the service account."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context, environ)
    if environ.get("KUBECONFIG"):
        return from_kubeconfig(None, context, environ)
    not_in_pod = ""
    if context is None:
        try:
            return in_cluster(account or SERVICE_ACCOUNT, environ)
        except ConfigError as error:
            not_in_pod = f"; and not in a pod: {error}"
    try:
        return from_kubeconfig(None, context, environ)
    except ConfigError as no_kubeconfig:
        if context is not None:
            raise ConfigError(
                f"context {context!r} needs a kubeconfig (--kubeconfig or KUBECONFIG): "
                f"{no_kubeconfig}"
            ) from None
        raise ConfigError(f"{no_kubeconfig}{not_in_pod}") from None


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
    if listed:
        return [Path(part) for part in listed]
    home = environ.get("HOME")
    return [(Path(home) if home else Path.home()) / ".kube" / "config"]


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
    cluster_name, user_name = context_body.get("cluster"), context_body.get("user")
    insecure = _insecure_skip_tls_verify(cluster, cluster_name)
    ca_pem = _data_or_file(cluster, "certificate-authority", cluster_dir)
    certificate = _data_or_file(user, "client-certificate", user_dir)
    key = _data_or_file(user, "client-key", user_dir)
    if bool(certificate) != bool(key):
        raise ConfigError(
            f"user {user_name!r}: a client certificate needs both client-certificate and client-key"
        )
    proxy_url = str(cluster.get("proxy-url") or "") or None
    if proxy_url is not None:
        check_proxy_url(proxy_url, f"cluster {cluster_name!r}: proxy-url")
    cluster_info = {
        "server": server,
        "tls-server-name": cluster.get("tls-server-name") or "",
        "insecure-skip-tls-verify": insecure,
        "certificate-authority-data": base64.b64encode(ca_pem).decode() if ca_pem else "",
        "proxy-url": proxy_url or "",
        "disable-compression": bool(cluster.get("disable-compression")),
    }
    extension = _exec_extension(cluster.get("extensions"))
    if extension is not None:
        cluster_info["config"] = extension
    return Login(
        server=server,
        ca_pem=ca_pem,
        insecure=insecure,
        tls_server_name=cluster.get("tls-server-name") or None,
        client_certificate_pem=certificate,
        client_key_pem=key,
        token=user.get("token") or _auth_provider_token(user, user_name, time.time()) or None,
        token_file=user_dir / token_file if token_file else None,
        username=user.get("username") or None,
        password=user.get("password") or None,
        exec_plugin=_exec_plugin(user.get("exec"), user_dir, cluster_info),
        proxy_url=proxy_url,
        namespace=context_body.get("namespace") or None,
        impersonate_user=_text(user.get("as")),
        impersonate_uid=_text(user.get("as-uid")),
        impersonate_groups=tuple(str(group) for group in user.get("as-groups") or ()),
        impersonate_extra=_impersonate_extra(user.get("as-user-extra"), user_name),
        source=f"context {name!r} of {merged['files']}",
    )


def check_proxy_url(url: str, where: str) -> None:
    """An HTTP CONNECT proxy is what kubeherd can use; kubectl also takes SOCKS5, which must be
    refused plainly rather than dialled as if it were HTTP."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        raise ConfigError(
            f"{where} {url!r}: kubeherd supports only http:// and https:// proxies "
            "(HTTP CONNECT), not SOCKS"
            if scheme.startswith("socks")
            else f"{where} {url!r} must start with http:// or https://"
        )


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _impersonate_extra(section: Any, user_name: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not section:
        return ()
    if not isinstance(section, dict):
        raise ConfigError(f"user {user_name!r}: as-user-extra must map keys to lists of values")
    extra = []
    for key, values in section.items():
        listed = values if isinstance(values, list) else [values]
        extra.append((str(key), tuple(str(value) for value in listed)))
    return tuple(extra)


def _exec_extension(extensions: Any) -> Any:
    """The cluster's extension for exec plugins, handed to them as spec.cluster.config."""
    for entry in extensions or ():
        if isinstance(entry, dict) and entry.get("name") == "client.authentication.k8s.io/exec":
            return entry.get("extension")
    return None


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
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in config.get(section) or ():
                if isinstance(entry, dict) and entry.get("name") not in merged[section]:
                    merged[section][entry.get("name")] = (entry.get(key) or {}, file.parent)
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


# The auth-providers kubectl dropped in 1.26, and the exec plugin each one's users moved to.
REMOVED_AUTH_PROVIDERS = {"gcp": "gke-gcloud-auth-plugin", "azure": "kubelogin"}


def _auth_provider_token(user: Mapping[str, Any], user_name: Any, now: float) -> str:
    """The id-token an oidc auth-provider stored, used as it is: kubeherd does not refresh it,
    so one that has expired is refused at start rather than failing every request. The
    providers kubectl no longer has are refused as kubectl refuses them."""
    provider = user.get("auth-provider")
    if not provider:
        return ""
    name = str(provider.get("name") or "")
    if name in REMOVED_AUTH_PROVIDERS:
        raise ConfigError(
            f"user {user_name!r}: the {name} auth-provider was removed from kubectl in 1.26; "
            f"use the exec plugin {REMOVED_AUTH_PROVIDERS[name]} instead"
        )
    if name != "oidc":
        raise ConfigError(f"user {user_name!r}: no auth-provider named {name!r} (only oidc)")
    token = str((provider.get("config") or {}).get("id-token") or "")
    expires = _jwt_expiry(token)
    if not token or (expires is not None and expires <= now):
        state = "has expired" if token else "is missing"
        raise ConfigError(
            f"user {user_name!r}: the oidc auth-provider's id-token {state}, and kubeherd does "
            "not refresh it: run a kubectl command to refresh it, or log in with an exec "
            "plugin such as kubelogin"
        )
    return token


def _jwt_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT, unverified (the API server checks the token); None if the
    token is not a JWT or has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        return float(claims["exp"])
    except (ValueError, KeyError, TypeError):
        return None


EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


def _exec_plugin(section: Any, folder: Path, cluster_info: Mapping[str, Any]) -> ExecPlugin | None:
    if not section:
        return None
    command = str(section.get("command") or "")
    if not command:
        raise ConfigError("the user's exec plugin names no command")
    api_version = str(section.get("apiVersion") or ExecPlugin.api_version)
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"exec plugin {Path(command).name}: apiVersion {api_version!r} is not supported "
            f"(use one of {', '.join(EXEC_API_VERSIONS)})"
        )
    # kubeherd runs plugins with no terminal, as a pod would: one that must ask the user
    # cannot log in, so it is refused at start rather than at its first prompt.
    if section.get("interactiveMode") == "Always":
        raise ConfigError(
            f"exec plugin {Path(command).name} needs an interactive terminal "
            "(interactiveMode: Always), which kubeherd never has"
        )
    # A relative command with a slash is relative to the kubeconfig, as kubectl has it.
    if os.sep in command and not Path(command).is_absolute():
        command = str(folder / command)
    return ExecPlugin(
        command=command,
        args=tuple(str(arg) for arg in section.get("args") or ()),
        env=tuple(
            (str(pair.get("name")), str(pair.get("value", ""))) for pair in section.get("env") or ()
        ),
        api_version=api_version,
        install_hint=str(section.get("installHint") or ""),
        cluster_info=dict(cluster_info) if section.get("provideClusterInfo") else None,
    )
