"""A login's credential from an exec plugin (client.authentication.k8s.io), run as kubectl runs
it, and when to ask for it again: EKS, GKE, AKS and OIDC logins.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kubeherd.kube.login import ConfigError, ExecPlugin

logger = logging.getLogger(__name__)

# A credential is renewed this long before it expires, or half way through its life if that
# is shorter (else a short-lived one would be asked for again on every request).
RENEW_BEFORE_EXPIRY = 60.0
EXEC_TIMEOUT = 60.0


class CredentialError(ConfigError, aiohttp.ClientConnectionError):
    """No credential could be had (an exec plugin failed). A ConfigError for kubeherd and its
    CLI; a connection error for Kopf, which then backs off and tries again."""


@dataclass(frozen=True)
class Credential:
    """What goes with each request: the Authorization header and the client certificate."""

    authorization: str | None
    certificate_pem: bytes | None
    key_pem: bytes | None
    # time.time() after which to renew; None: never.
    expires: float | None = None


async def exec_credential(plugin: ExecPlugin) -> Credential:
    """Run the plugin as kubectl does and read its ExecCredential.

    A ConfigError's text can end up in Events and status conditions in tenant namespaces, so it
    names only the command's file name; what the plugin wrote to stderr (account ids, role
    names, paths) goes to the operator's log alone."""
    name = Path(plugin.command).name
    spec: dict[str, Any] = {"interactive": False}
    if plugin.cluster_info is not None:
        spec["cluster"] = dict(plugin.cluster_info)
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        process = await asyncio.create_subprocess_exec(
            plugin.command,
            *plugin.args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        logger.warning("exec plugin %s could not be started: %s", plugin.command, error)
        hint = f"; {plugin.install_hint.strip()}" if plugin.install_hint.strip() else ""
        raise CredentialError(
            f"exec plugin {name} could not be started: {error.strerror}{hint}"
        ) from None
    try:
        output, errors = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise CredentialError(
            f"exec plugin {name} gave no answer in {EXEC_TIMEOUT:.0f} s"
        ) from None
    if process.returncode != 0:
        logger.warning(
            "exec plugin %s exited %d; it wrote: %s",
            plugin.command,
            process.returncode,
            errors.decode(errors="replace").strip(),
        )
        raise CredentialError(f"exec plugin {name} failed with exit code {process.returncode}")
    try:
        status = json.loads(output)["status"]
    except (ValueError, KeyError, TypeError):
        raise CredentialError(f"exec plugin {name} wrote no ExecCredential") from None
    token = status.get("token")
    certificate = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    if not token and not (certificate and key):
        raise CredentialError(f"exec plugin {name} gave neither a token nor a certificate")
    return Credential(
        authorization=f"Bearer {token}" if token else None,
        certificate_pem=certificate.encode() if certificate else None,
        key_pem=key.encode() if key else None,
        expires=_timestamp(status.get("expirationTimestamp")),
    )


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def renewal_time(expires: float, now: float | None = None) -> float:
    """When to renew a credential that expires at `expires`."""
    now = time.time() if now is None else now
    return expires - min(RENEW_BEFORE_EXPIRY, max(expires - now, 0.0) / 2)
