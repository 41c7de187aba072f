"""HTTP to the API server with a Login: TLS, the credentials and their renewal.

A bearer token read from a file is read again when the file changes (a pod's service account
token is rotated while it runs); an exec plugin's credential is asked for again when it expires
or when the API server answers 401.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json
import logging
import os
import ssl
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kubeherd.kube.config import ConfigError, ExecPlugin, Login

logger = logging.getLogger(__name__)

# A credential is renewed this long before it expires.
RENEW_BEFORE_EXPIRY = 60.0
EXEC_TIMEOUT = 60.0
# As kubectl sets it: a watch event may carry an object of up to 1.5 MiB.
READ_BUFFER = 2**21


@dataclass(frozen=True)
class Credential:
    """What goes with each request: the Authorization header and the client certificate."""

    authorization: str | None
    certificate_pem: bytes | None
    key_pem: bytes | None
    # time.time() after which to renew; None: never.
    expires: float | None = None


def tls_context(
    ca_pem: bytes | None, certificate_pem: bytes | None, key_pem: bytes | None
) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca_pem.decode() if ca_pem else None)
    if certificate_pem and key_pem:
        # The ssl module loads a client certificate from files only: a private folder, gone
        # once loaded.
        with tempfile.TemporaryDirectory(prefix="kubeherd-tls-") as folder:
            certificate, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
            certificate.write_bytes(certificate_pem)
            key.write_bytes(key_pem)
            context.load_cert_chain(certificate, key)
    return context


async def exec_credential(plugin: ExecPlugin) -> Credential:
    """Run the plugin as kubectl does and read its ExecCredential.

    A ConfigError's text can end up in Events and status conditions in tenant namespaces, so it
    names only the command's file name; what the plugin wrote to stderr (account ids, role
    names, paths) goes to the operator's log alone."""
    name = Path(plugin.command).name
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential"}
    info["spec"] = {"interactive": False}  # type: ignore[assignment]
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
        raise ConfigError(f"exec plugin {name} could not be started: {error.strerror}") from None
    try:
        output, errors = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ConfigError(f"exec plugin {name} gave no answer in {EXEC_TIMEOUT:.0f} s") from None
    if process.returncode != 0:
        logger.warning(
            "exec plugin %s exited %d; it wrote: %s",
            plugin.command,
            process.returncode,
            errors.decode(errors="replace").strip(),
        )
        raise ConfigError(f"exec plugin {name} failed with exit code {process.returncode}")
    try:
        status = json.loads(output)["status"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"exec plugin {name} wrote no ExecCredential") from None
    token = status.get("token")
    certificate = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    if not token and not (certificate and key):
        raise ConfigError(f"exec plugin {name} gave neither a token nor a certificate")
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


class ApiSession:
    """One aiohttp session to the API server, with the login's credentials on every request."""

    def __init__(self, login: Login, pool_size: int = 20) -> None:
        self.login = login
        self.server_url = login.server
        # Proxies only when the user sets them (or the kubeconfig's proxy-url): otherwise aiohttp
        # would look for proxy variables and ~/.netrc on every request, for nothing.
        trust_env = bool(urllib.request.getproxies_environment())
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool_size),
            trust_env=trust_env,
            read_bufsize=READ_BUFFER,
        )
        self._tls = (
            False
            if login.insecure
            else tls_context(login.ca_pem, login.client_certificate_pem, login.client_key_pem)
        )
        self._credential: Credential | None = None
        self._credential_tls: ssl.SSLContext | bool = self._tls
        self._token_file_stamp: tuple[int, int] | None = None
        self._renewing = asyncio.Lock()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send the request; the caller reads and releases the response. A 401 with a
        credential that can be renewed is renewed and sent once more."""
        for attempt in (1, 2):
            credential, tls = await self._current()
            request_headers = dict(headers or {})
            if credential.authorization:
                request_headers["Authorization"] = credential.authorization
            response = await self._session.request(
                method,
                self.server_url + path,
                params=query or None,
                headers=request_headers,
                data=data,
                ssl=tls,
                server_hostname=self.login.tls_server_name,
                proxy=self.login.proxy_url,
                timeout=timeout,
            )
            if response.status == 401 and attempt == 1 and self._renewable:
                response.release()
                self._credential = None
                continue
            return response
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._session.close()

    @property
    def _renewable(self) -> bool:
        return self.login.exec_plugin is not None or self.login.token_file is not None

    async def _current(self) -> tuple[Credential, ssl.SSLContext | bool]:
        async with self._renewing:
            if self._credential is None or self._stale(self._credential):
                self._credential = await self._renew()
                self._credential_tls = self._tls
                if self._credential.certificate_pem and self._tls is not False:
                    self._credential_tls = await asyncio.to_thread(
                        tls_context,
                        self.login.ca_pem,
                        self._credential.certificate_pem,
                        self._credential.key_pem,
                    )
            return self._credential, self._credential_tls

    def _stale(self, credential: Credential) -> bool:
        if credential.expires is not None and time.time() > credential.expires:
            return True
        return self.login.token_file is not None and self._token_file_changed()

    def _token_file_changed(self) -> bool:
        assert self.login.token_file is not None
        try:
            stat = self.login.token_file.stat()
        except OSError:
            return False  # keep the token we have until a new one shows up
        return (stat.st_mtime_ns, stat.st_ino) != self._token_file_stamp

    async def _renew(self) -> Credential:
        login = self.login
        if login.exec_plugin is not None:
            credential = await exec_credential(login.exec_plugin)
            if credential.expires is None:
                return credential
            return dataclasses.replace(credential, expires=credential.expires - RENEW_BEFORE_EXPIRY)
        if login.token_file is not None:
            stat = login.token_file.stat()
            self._token_file_stamp = (stat.st_mtime_ns, stat.st_ino)
            token = login.token_file.read_text().strip()
            return Credential(f"Bearer {token}", None, None)
        if login.token:
            return Credential(f"Bearer {login.token}", None, None)
        if login.username is not None:
            pair = f"{login.username}:{login.password or ''}".encode()
            return Credential(f"Basic {base64.b64encode(pair).decode()}", None, None)
        return Credential(None, None, None)
