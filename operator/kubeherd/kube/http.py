"""HTTP to the API server with a Login: one connection pool, TLS, the proxy, the credentials and
their renewal, for kubeherd's requests and Kopf's alike.

The rules live in an aiohttp client middleware, and every session to the API server (kubeherd's
own, and each one handed to Kopf at login) is made on the same connector with that middleware.
So the two halves of the operator cannot log in differently: where one could reach the API
server and the other not, the operator looked healthy while its watches waited forever.

A bearer token read from a file is read again when the file changes (a pod's service account
token is rotated while it runs); an exec plugin's credential is asked for again when it expires
or when the API server answers 401, and a client certificate it returns is used for new
connections from then on.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import platform
import ssl
import sys
import tempfile
import time
import urllib.parse
from asyncio import sslproto
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
from yarl import URL

import kubeherd
from kubeherd.kube.credentials import Credential, CredentialError, exec_credential, renewal_time
from kubeherd.kube.login import ConfigError, Login
from kubeherd.kube.proxy import ProxyRules

# As kubectl sets it: a watch event may carry an object of up to 1.5 MiB.
READ_BUFFER = 2**21
# What one read from a TLS connection takes at most. asyncio gives every TLS connection a read
# buffer of this size for as long as it is open: 256 KiB by default, 14 MiB over the 50-odd
# connections of a rollout (writes in flight and watches), most of them idle most of the time.
# A TLS record holds at most 16 KiB, so smaller reads only mean a few more of them.
TLS_READ_BUFFER = 64 * 1024
# The manager of the fields kubeherd writes (managedFields, audit logs, SSA conflicts).
FIELD_MANAGER = "kubeherd"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Go's names for machines, which the User-Agents of Kubernetes clients use.
GO_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}
# Characters a header name may hold besides letters and digits; others in an impersonated
# extra's key are percent-encoded, as the API server decodes them.
HEADER_NAME_CHARACTERS = "!#$&'*+-.^_`|~"


def limit_tls_read_buffers() -> None:
    """Give every TLS connection made from now on, in this process, a read buffer of
    TLS_READ_BUFFER rather than asyncio's 256 KiB."""
    sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class ProxyRefused(aiohttp.ClientConnectionError):
    """The proxy answered CONNECT with an error: the API server could not be reached through
    it. A connection error, as a refused connection is, so that Kopf and kubeherd's watches
    back off and try again rather than stop (the proxy may come back)."""


# Told each request's method, URL and outcome: the response's status, or the error it failed with.
RequestObserver = Callable[[str, URL, "int | BaseException"], None]


def observing(observe: RequestObserver) -> aiohttp.ClientMiddlewareType:
    """A middleware that tells `observe` how each request ended (after the transport's rules,
    so a refused proxy or a failed credential is seen as the error it is)."""

    async def middleware(
        request: aiohttp.ClientRequest, send: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        try:
            response = await send(request)
        except (aiohttp.ClientError, TimeoutError) as error:
            observe(request.method, request.url, error)
            raise
        observe(request.method, request.url, response.status)
        return response

    return middleware


def user_agent() -> str:
    """As Kubernetes clients name themselves: kubeherd/<version> (<os>/<arch>)."""
    machine = platform.machine().lower()
    return (
        f"kubeherd/{kubeherd.__version__} ({sys.platform}/{GO_ARCHITECTURES.get(machine, machine)})"
    )


def tls_context(
    ca_pem: bytes | None,
    certificate_pem: bytes | None,
    key_pem: bytes | None,
    insecure: bool = False,
) -> ssl.SSLContext:
    """The TLS of a connection to the API server. Insecure turns off the server's check only:
    the client certificate is still presented, as kubectl does."""
    context = ssl.create_default_context(cadata=ca_pem.decode() if ca_pem else None)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if certificate_pem and key_pem:
        # The ssl module loads a client certificate from files only: a private folder, gone
        # once loaded.
        with tempfile.TemporaryDirectory(prefix="kubeherd-tls-") as folder:
            certificate, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
            certificate.write_bytes(certificate_pem)
            key.write_bytes(key_pem)
            context.load_cert_chain(certificate, key)
    return context


class ApiSession:
    """The one transport to the API server: a connection pool, and the rules every request to
    the server follows (TLS and its server name, the proxy, the credential, impersonation, the
    User-Agent, the field manager of writes).

    kubeherd's requests go through `request`; Kopf gets its own sessions on the same pool and
    rules from `client_session` (it closes the one it has when it logs in again)."""

    def __init__(
        self, login: Login, pool_size: int = 20, environ: Mapping[str, str] = os.environ
    ) -> None:
        self.login = login
        self.server_url = login.server
        self._server = URL(login.server)
        self._proxies = ProxyRules.of(login.proxy_url, environ)
        self._tls = tls_context(
            login.ca_pem, login.client_certificate_pem, login.client_key_pem, login.insecure
        )
        self._impersonation = impersonation_headers(login)
        self._user_agent = user_agent()
        self._connector = aiohttp.TCPConnector(limit=pool_size)
        self._credential: Credential | None = None
        self._credential_tls = self._tls
        self._token_file_stamp: tuple[int, int] | None = None
        self._renewing = asyncio.Lock()
        self._session = self.client_session()

    def client_session(self, observe: RequestObserver | None = None) -> aiohttp.ClientSession:
        """A session on the shared pool, with the shared rules; closing it leaves the pool.
        `observe` is told the outcome of each of its requests: a status or an error."""
        middlewares: tuple[aiohttp.ClientMiddlewareType, ...] = (self._to_api_server,)
        if observe is not None:
            middlewares = (observing(observe), *middlewares)
        return aiohttp.ClientSession(
            connector=self._connector,
            connector_owner=False,
            middlewares=middlewares,
            headers={"User-Agent": self._user_agent},
            # The proxy is decided by the middleware, from the environment read at start:
            # aiohttp's own reading would ignore NO_PROXY's CIDRs, and read ~/.netrc.
            trust_env=False,
            read_bufsize=READ_BUFFER,
        )

    async def authenticate(self) -> None:
        """Get the credential now (run the exec plugin), so that a failure shows at login."""
        await self._current()

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
        """Send the request; the caller reads and releases the response."""
        return await self._session.request(
            method,
            self.server_url + path,
            params=query or None,
            headers=headers,
            data=data,
            timeout=timeout,
        )

    async def close(self) -> None:
        await self._session.close()
        await self._connector.close()

    async def _to_api_server(
        self, request: aiohttp.ClientRequest, send: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """The middleware: the rules, for requests to the API server. A response 401 to a
        credential that can be renewed has it renewed, and the request sent once more."""
        if request.url.origin() != self._server.origin():
            # Followed a redirect elsewhere: no credential goes with it.
            return await send(request)
        self._route(request)
        for attempt in (1, 2):
            credential, tls = await self._current()
            self._authorize(request, credential, tls)
            try:
                response = await send(request)
            except aiohttp.ClientHttpProxyError as refusal:
                raise ProxyRefused(
                    f"the proxy {request.proxy} refused to connect to {self._server.origin()}: "
                    f"{refusal.status} {refusal.message}"
                ) from None
            if response.status == 401 and attempt == 1 and self._renewable:
                response.release()
                self._forget(credential)
                continue
            return response
        raise AssertionError("unreachable")

    def _route(self, request: aiohttp.ClientRequest) -> None:
        url = request.url
        proxy = self._proxies.proxy_for(url.scheme, url.host or "", url.explicit_port)
        if proxy is not None:
            proxy_url = URL(proxy)
            auth = (
                aiohttp.BasicAuth(proxy_url.user, proxy_url.password or "")
                if proxy_url.user
                else None
            )
            request.update_proxy(proxy_url.with_user(None), auth, None)
        else:
            request.update_proxy(None, None, None)
        if self.login.tls_server_name:
            request.server_hostname = self.login.tls_server_name
        if request.method in WRITE_METHODS and "fieldManager" not in url.query:
            request.url = url.extend_query(fieldManager=FIELD_MANAGER)

    def _authorize(
        self, request: aiohttp.ClientRequest, credential: Credential, tls: ssl.SSLContext
    ) -> None:
        headers = request.headers
        if credential.authorization:
            headers["Authorization"] = credential.authorization
        for name, value in self._impersonation:
            if value not in headers.getall(name, ()):
                headers.add(name, value)
        if request.is_ssl():
            # Kopf's calls pass no TLS context, and the pool's own would not follow a renewed
            # client certificate: the request's is set here, which also keys the pooled
            # connections by it, so that a new certificate gets new connections.
            request._ssl = tls

    @property
    def _renewable(self) -> bool:
        return self.login.exec_plugin is not None or self.login.token_file is not None

    def _forget(self, credential: Credential) -> None:
        # Only the credential refused: a concurrent request may have renewed it already.
        if self._credential is credential:
            self._credential = None

    async def _current(self) -> tuple[Credential, ssl.SSLContext]:
        async with self._renewing:
            if self._credential is None or self._stale(self._credential):
                credential = await self._renew()
                self._credential_tls = self._tls
                if credential.certificate_pem:
                    self._credential_tls = await asyncio.to_thread(
                        tls_context,
                        self.login.ca_pem,
                        credential.certificate_pem,
                        credential.key_pem,
                        self.login.insecure,
                    )
                self._credential = credential
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
            return dataclasses.replace(credential, expires=renewal_time(credential.expires))
        if login.token_file is not None:
            try:
                stat = login.token_file.stat()
                token = login.token_file.read_text().strip()
            except OSError as error:
                raise CredentialError(
                    f"cannot read the token file {login.token_file}: {error.strerror}"
                ) from None
            self._token_file_stamp = (stat.st_mtime_ns, stat.st_ino)
            return Credential(f"Bearer {token}", None, None)
        if login.token:
            return Credential(f"Bearer {login.token}", None, None)
        if login.username is not None:
            pair = f"{login.username}:{login.password or ''}".encode()
            return Credential(f"Basic {base64.b64encode(pair).decode()}", None, None)
        return Credential(None, None, None)


def check_login(login: Login, environ: Mapping[str, str] = os.environ) -> None:
    """ConfigError for what ApiSession would refuse (a SOCKS proxy, impersonation without a
    user), without opening anything: for a CLI to say at start."""
    ProxyRules.of(login.proxy_url, environ)
    impersonation_headers(login)


def impersonation_headers(login: Login) -> tuple[tuple[str, str], ...]:
    """The Impersonate-* headers of the login's `as`, `as-uid`, `as-groups`, `as-user-extra`."""
    if login.impersonate_user is None:
        if login.impersonate_uid or login.impersonate_groups or login.impersonate_extra:
            # The API server refuses these without a user; say so at start instead.
            raise ConfigError(
                f"{login.source}: as-uid, as-groups and as-user-extra need `as` (a user name)"
            )
        return ()
    headers = [("Impersonate-User", login.impersonate_user)]
    if login.impersonate_uid:
        headers.append(("Impersonate-Uid", login.impersonate_uid))
    headers += [("Impersonate-Group", group) for group in login.impersonate_groups]
    for key, values in login.impersonate_extra:
        name = "Impersonate-Extra-" + urllib.parse.quote(key, safe=HEADER_NAME_CHARACTERS)
        headers += [(name, value) for value in values]
    return tuple(headers)
