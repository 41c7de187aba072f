"""The one transport to the API server: kubeherd's requests and the sessions handed to Kopf
follow the same rules (User-Agent, field manager, impersonation, proxy), on the same
connections, against a loopback HTTP server that records what it was sent."""

from __future__ import annotations

import asyncio
import datetime
import json
import platform
import ssl
import sys
from asyncio import sslproto
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import kubeherd
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.kube.client import Kube
from kubeherd.kube.http import TLS_READ_BUFFER, ApiSession, limit_tls_read_buffers
from kubeherd.kube.kinds import Kind
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.login import ConfigError, ExecPlugin, Login
from kubeherd.kube.outcomes import KubeError
from tests.unit.loopback import serving

CONFIGMAPS = Kind("/api/v1", "configmaps", "ConfigMap")
TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass
class Seen:
    method: str
    # The request target as sent: the path, or a whole URL when sent to a proxy.
    target: str
    headers: dict[str, list[str]]
    query: dict[str, str]


@dataclass
class RecordingServer:
    """Answers every request with the next of `answers` (status, headers), then 200 {}."""

    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        # Which client connection it came on: its address and port.
        peer = request.transport.get_extra_info("peername") if request.transport else None
        headers["x-peer"] = [str(peer)]
        self.seen.append(Seen(request.method, request.raw_path, headers, dict(request.url.query)))
        status, extra = self.answers.pop(0) if self.answers else (200, {})
        return web.json_response({"metadata": {}, "items": []}, status=status, headers=extra)


def run(server: RecordingServer, login: Callable[[str], Login], exercise: Any) -> None:
    """`exercise(kube, kopf_session, url)` against the server, through one transport."""

    async def check(url: str) -> None:
        transport = ApiSession(login(url))
        kopf_session = transport.client_session()
        try:
            await exercise(Kube(transport, WriteLimits()), kopf_session, url)
        finally:
            await kopf_session.close()
            await transport.close()

    asyncio.run(serving(server.handle, check))


async def kopf_request(session: aiohttp.ClientSession, method: str, url: str) -> int:
    """A request as Kopf makes one: a whole URL, a JSON body for writes, no TLS arguments."""
    payload: dict[str, Any] | None = (
        {"metadata": {}} if method in ("POST", "PATCH", "PUT") else None
    )
    async with session.request(method, url, json=payload, timeout=TIMEOUT) as response:
        return response.status


def test_every_request_of_both_halves_names_kubeherd_as_its_user_agent() -> None:
    server = RecordingServer()

    async def exercise(kube: Kube, kopf_session: aiohttp.ClientSession, url: str) -> None:
        await kube.get_object(CONFIGMAPS, "default", "x")
        await kopf_request(kopf_session, "GET", f"{url}/api/v1/namespaces")

    run(server, lambda url: Login(server=url), exercise)

    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    expected = f"kubeherd/{kubeherd.__version__} (linux/{machine})"
    assert [seen.headers["user-agent"] for seen in server.seen] == [[expected], [expected]]


def test_every_write_names_kubeherd_as_its_field_manager_unless_it_names_one() -> None:
    server = RecordingServer()
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}

    async def exercise(kube: Kube, kopf_session: aiohttp.ClientSession, url: str) -> None:
        await kube.create_object(CONFIGMAPS, manifest)
        await kube.replace_object(CONFIGMAPS, manifest)
        await kube.patch_object(CONFIGMAPS, "default", "x", [{"op": "test", "path": "/a"}])
        await kube.patch_status("customdaemonsets", "default", "x", {"ready": 1})
        await kube.json_patch("customdaemonsets", "default", "x", [])
        await DaemonSetApi(kube).create_controller_revision("default", {"metadata": {"name": "r"}})
        await DaemonSetApi(kube).patch_controller_revision("default", "r", {"revision": 2})
        await DaemonSetApi(kube).create_pod("default", {"metadata": {"name": "p"}})
        await kube.apply(manifest)
        await DaemonSetApi(kube).delete_pod("default", "p", "uid")
        await kube.get_object(CONFIGMAPS, "default", "x")
        await kopf_request(kopf_session, "PATCH", f"{url}/api/v1/namespaces/default/pods/p")
        await kopf_request(kopf_session, "POST", f"{url}/api/v1/namespaces/default/events")

    run(server, lambda url: Login(server=url), exercise)

    assert [(seen.method, seen.query.get("fieldManager")) for seen in server.seen] == [
        ("POST", "kubeherd"),
        ("PUT", "kubeherd"),
        ("PATCH", "kubeherd"),
        ("PATCH", "kubeherd"),
        ("PATCH", "kubeherd"),
        ("POST", "kubeherd"),
        ("PATCH", "kubeherd"),
        ("POST", "kubeherd"),
        ("PATCH", "kubeherd"),  # server-side apply names it itself, once
        ("DELETE", None),
        ("GET", None),
        ("PATCH", "kubeherd"),
        ("POST", "kubeherd"),
    ]
    assert server.seen[8].target.count("fieldManager") == 1


def test_an_impersonating_login_sends_who_it_acts_as_from_both_halves() -> None:
    server = RecordingServer()

    def login(url: str) -> Login:
        return Login(
            server=url,
            token="admin",
            impersonate_user="jane",
            impersonate_uid="42",
            impersonate_groups=("devs", "oncall"),
            impersonate_extra=(("reason/why", ("rollback",)),),
        )

    async def exercise(kube: Kube, kopf_session: aiohttp.ClientSession, url: str) -> None:
        await kube.get_object(CONFIGMAPS, "default", "x")
        await kopf_request(kopf_session, "GET", f"{url}/api/v1/namespaces")

    run(server, login, exercise)

    for seen in server.seen:
        assert (
            seen.headers["authorization"],
            seen.headers["impersonate-user"],
            seen.headers["impersonate-uid"],
            seen.headers["impersonate-group"],
            seen.headers["impersonate-extra-reason%2fwhy"],
        ) == (["Bearer admin"], ["jane"], ["42"], ["devs", "oncall"], ["rollback"])
    assert len(server.seen) == 2


def test_impersonation_fields_without_a_user_are_refused() -> None:
    with pytest.raises(ConfigError, match="need `as`"):
        ApiSession(Login(server="https://kube.test", impersonate_groups=("devs",)))


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        # aiohttp's own zero-second yields are not waits.
        if seconds:
            delays.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return delays


def test_reads_wait_as_a_throttling_server_asks_then_succeed(slept: list[float]) -> None:
    server = RecordingServer(
        answers=[
            (429, {"Retry-After": "3"}),  # a GET
            (503, {"Retry-After": "2"}),  # a LIST page
            (429, {"Retry-After": "1"}),  # a watch
        ]
    )
    found: list[Any] = []

    async def exercise(kube: Kube, kopf_session: aiohttp.ClientSession, url: str) -> None:
        found.append(await kube.get_object(CONFIGMAPS, "default", "x"))
        found.append(await kube.list_objects(CONFIGMAPS, "app=x"))
        found.append([line async for line in kube.stream_lines("/api/v1/pods", [])])

    run(server, lambda url: Login(server=url), exercise)

    assert slept == [3.0, 2.0, 1.0]
    assert len(server.seen) == 6
    assert found[0] == {"metadata": {}, "items": []}
    assert found[1] == []


def test_a_server_error_without_retry_after_is_not_waited_for(slept: list[float]) -> None:
    server = RecordingServer(answers=[(500, {})])

    async def exercise(kube: Kube, kopf_session: aiohttp.ClientSession, url: str) -> None:
        with pytest.raises(KubeError):
            await kube.get_object(CONFIGMAPS, "default", "x")

    run(server, lambda url: Login(server=url), exercise)

    assert (slept, len(server.seen)) == ([], 1)


def test_kopfs_sessions_share_kubeherds_connections_and_outlive_nothing() -> None:
    server = RecordingServer()
    statuses: list[int] = []

    async def check(url: str) -> None:
        transport = ApiSession(Login(server=url))
        kube = Kube(transport, WriteLimits())
        first = transport.client_session()
        statuses.append(await kopf_request(first, "GET", f"{url}/api"))
        assert first.connector is transport._connector
        # Kopf logs in again: it closes the session it had and is given a new one.
        await first.close()
        second = transport.client_session()
        statuses.append(await kopf_request(second, "GET", f"{url}/api"))
        await kube.get_object(CONFIGMAPS, "default", "x")
        assert second.connector is transport._connector
        await second.close()
        await transport.close()

    asyncio.run(serving(server.handle, check))

    assert statuses == [200, 200]
    # One keep-alive connection carried all three requests, Kopf's and kubeherd's.
    assert len({seen.headers["x-peer"][0] for seen in server.seen}) == 1


def test_the_kubeconfigs_proxy_url_carries_both_halves_requests() -> None:
    # The proxy is the recording server: an HTTP proxy is sent the whole URL as the target.
    proxy = RecordingServer()

    async def check(proxy_url: str) -> None:
        transport = ApiSession(Login(server="http://kube.test:8080", proxy_url=proxy_url))
        kopf_session = transport.client_session()
        try:
            await Kube(transport, WriteLimits()).get_object(CONFIGMAPS, "default", "x")
            await kopf_request(kopf_session, "GET", "http://kube.test:8080/api")
        finally:
            await kopf_session.close()
            await transport.close()

    asyncio.run(serving(proxy.handle, check))

    assert [seen.target for seen in proxy.seen] == [
        "http://kube.test:8080/api/v1/namespaces/default/configmaps/x",
        "http://kube.test:8080/api",
    ]


def test_environment_proxies_apply_to_both_halves_except_for_no_proxy_cidrs() -> None:
    proxy = RecordingServer()
    failures: list[type[BaseException]] = []

    async def check(proxy_url: str) -> None:
        environ = {"HTTP_PROXY": proxy_url, "NO_PROXY": "192.0.2.0/24"}
        proxied = ApiSession(Login(server="http://kube.test:8080"), environ=environ)
        direct = ApiSession(Login(server="http://192.0.2.1:8080"), environ=environ)
        kopf_session = proxied.client_session()
        try:
            await kopf_request(kopf_session, "GET", "http://kube.test:8080/api")
            try:
                # Not through the proxy: straight to an address nothing answers on.
                await direct.request(
                    "GET", "/api", timeout=aiohttp.ClientTimeout(total=10, sock_connect=0.5)
                )
            except (aiohttp.ClientError, TimeoutError) as error:
                failures.append(type(error))
        finally:
            await kopf_session.close()
            await proxied.close()
            await direct.close()

    asyncio.run(serving(proxy.handle, check))

    assert [seen.target for seen in proxy.seen] == ["http://kube.test:8080/api"]
    assert len(failures) == 1


# TLS: a loopback HTTPS server that asks for client certificates ------------------------------


def issue(
    subject: str, issuer: tuple[Any, Any] | None = None, hostnames: tuple[str, ...] = ()
) -> tuple[bytes, bytes, Any]:
    """(certificate PEM, key PEM, (certificate, key)) signed by `issuer`, else self-signed CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if hostnames:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(host) for host in hostnames]), critical=False
        )
    certificate = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem, (certificate, key)


@dataclass
class TlsServer:
    """Serves https on loopback as `hostname` only; answers with the client certificate's CN."""

    hostname: str
    folder: Path
    client_names: list[str] = field(default_factory=list)
    # Client certificates answered 401 (expired, say).
    refused: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.ca_pem, _, self.ca = issue("test-ca")
        certificate, key, _ = issue(self.hostname, self.ca, (self.hostname,))
        (self.folder / "server.crt").write_bytes(certificate)
        (self.folder / "server.key").write_bytes(key)

    def client(self, name: str) -> tuple[bytes, bytes]:
        certificate, key, _ = issue(name, self.ca)
        return certificate, key

    async def handle(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        names = [
            value for ((key, value),) in (peer or {}).get("subject", ()) if key == "commonName"
        ]
        name = names[0] if names else "anonymous"
        self.client_names.append(name)
        return web.json_response({}, status=401 if name in self.refused else 200)

    async def serve(self, check: Callable[[str], Awaitable[None]]) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=self.ca_pem.decode())
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_cert_chain(self.folder / "server.crt", self.folder / "server.key")
        await serving(self.handle, check, tls=context)


def both_halves(server: TlsServer, login: Callable[[str], Login]) -> None:
    async def check(url: str) -> None:
        transport = ApiSession(login(url))
        kopf_session = transport.client_session()
        try:
            await Kube(transport, WriteLimits()).get_object(CONFIGMAPS, "default", "x")
            assert await kopf_request(kopf_session, "GET", f"{url}/api") == 200
        finally:
            await kopf_session.close()
            await transport.close()

    asyncio.run(server.serve(check))


def test_insecure_skip_tls_verify_still_presents_the_client_certificate(tmp_path: Path) -> None:
    server = TlsServer("kube.test", tmp_path)
    certificate, key = server.client("operator")

    both_halves(
        server,
        lambda url: Login(
            server=url, insecure=True, client_certificate_pem=certificate, client_key_pem=key
        ),
    )

    assert server.client_names == ["operator", "operator"]


def test_tls_connections_read_into_small_buffers_and_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)
    buffers: list[int] = []
    made = sslproto.SSLProtocol.__init__

    def noting_the_buffer(protocol: sslproto.SSLProtocol, *args: Any, **kwargs: Any) -> None:
        made(protocol, *args, **kwargs)
        buffers.append(len(protocol._ssl_buffer))  # type: ignore[attr-defined]

    monkeypatch.setattr(sslproto.SSLProtocol, "__init__", noting_the_buffer)
    limit_tls_read_buffers()
    server = TlsServer("kube.test", tmp_path)

    both_halves(server, named_server_login(server))

    assert server.client_names == ["operator", "operator"]
    # Each TLS connection made, the server's and the client's.
    assert buffers
    assert set(buffers) == {TLS_READ_BUFFER}


def named_server_login(server: TlsServer) -> Callable[[str], Login]:
    """The operator's login to the server at a URL of its address, naming the server."""
    certificate, key = server.client("operator")
    return lambda url: Login(
        server=url,
        ca_pem=server.ca_pem,
        tls_server_name=server.hostname,
        client_certificate_pem=certificate,
        client_key_pem=key,
    )


def test_tls_server_name_is_checked_by_both_halves(tmp_path: Path) -> None:
    server = TlsServer("kube.test", tmp_path)

    both_halves(server, named_server_login(server))

    assert server.client_names == ["operator", "operator"]
    # The same server without the name: its certificate is not for 127.0.0.1.
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        both_halves(server, lambda url: Login(server=url, ca_pem=server.ca_pem))


def test_a_renewed_exec_client_certificate_is_used_by_kopfs_requests_too(tmp_path: Path) -> None:
    server = TlsServer("kube.test", tmp_path, refused=frozenset({"expired"}))
    for name in ("expired", "renewed"):
        certificate, key = server.client(name)
        (tmp_path / f"{name}.json").write_text(
            json.dumps(
                {
                    "kind": "ExecCredential",
                    "status": {
                        "clientCertificateData": certificate.decode(),
                        "clientKeyData": key.decode(),
                    },
                }
            )
        )
    script = tmp_path / "plugin.py"
    script.write_text(
        "import pathlib\n"
        f"calls = pathlib.Path({str(tmp_path / 'calls')!r})\n"
        "count = int(calls.read_text()) if calls.exists() else 0\n"
        "calls.write_text(str(count + 1))\n"
        f"folder = pathlib.Path({str(tmp_path)!r})\n"
        "print((folder / ('expired.json' if count == 0 else 'renewed.json')).read_text())\n"
    )
    plugin = ExecPlugin(command=sys.executable, args=(str(script),))
    statuses: list[int] = []

    async def check(url: str) -> None:
        transport = ApiSession(
            Login(server=url, ca_pem=server.ca_pem, tls_server_name="kube.test", exec_plugin=plugin)
        )
        kopf_session = transport.client_session()
        try:
            statuses.append(await kopf_request(kopf_session, "GET", f"{url}/api"))
            statuses.append(await kopf_request(kopf_session, "GET", f"{url}/api"))
        finally:
            await kopf_session.close()
            await transport.close()

    asyncio.run(server.serve(check))

    # Refused once with the first certificate; the plugin ran again, and its new certificate
    # went on a new connection, and stayed.
    assert (statuses, server.client_names) == ([200, 200], ["expired", "renewed", "renewed"])
    assert (tmp_path / "calls").read_text() == "2"


def test_a_proxy_refusing_connect_is_a_connection_error_that_names_it() -> None:
    # Kopf backs off on connection errors and gives up on any other response error: a proxy
    # that refuses must read as the former, or the operator stops instead of waiting.
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def check() -> BaseException | None:
        proxy = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        transport = ApiSession(
            Login(server="https://kube.test:6443"),
            environ={"HTTPS_PROXY": f"http://127.0.0.1:{port}"},
        )
        kopf_session = transport.client_session()
        try:
            await kopf_request(kopf_session, "GET", "https://kube.test:6443/api")
        except aiohttp.ClientConnectionError as error:
            return error
        finally:
            await kopf_session.close()
            await transport.close()
            proxy.close()
        return None

    error = asyncio.run(check())

    assert error is not None
    assert "refused to connect to https://kube.test:6443: 403" in str(error)
