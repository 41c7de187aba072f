"""kubeherd's login: kubeconfigs read as kubectl reads them, the pod's service account, and
credentials renewed as they change (a rotated token file, an expiring exec credential)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from kubeherd.kube import config
from kubeherd.kube.credentials import exec_credential, renewal_time
from kubeherd.kube.http import ApiSession
from kubeherd.kube.login import ConfigError, ExecPlugin, Login
from tests.unit.loopback import serving


def write_kubeconfig(path: Path, **content: Any) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


def kubeconfig(
    context: str, cluster: dict[str, Any], user: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    context_body = {"cluster": f"{context}-cluster", "user": f"{context}-user"}
    if namespace:
        context_body["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "clusters": [{"name": f"{context}-cluster", "cluster": cluster}],
        "users": [{"name": f"{context}-user", "user": user}],
        "contexts": [{"name": context, "context": context_body}],
    }


def test_the_current_context_gives_server_ca_token_and_namespace(tmp_path: Path) -> None:
    ca = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"
    file = write_kubeconfig(
        tmp_path / "config",
        **kubeconfig(
            "prod",
            {
                "server": "https://10.0.0.1:6443/",
                "certificate-authority-data": base64.b64encode(ca).decode(),
            },
            {"token": "s3cret"},
            namespace="agents",
        ),
    )

    login = config.from_kubeconfig(file)

    assert (login.server, login.ca_pem, login.token, login.namespace) == (
        "https://10.0.0.1:6443",
        ca,
        "s3cret",
        "agents",
    )


def test_files_named_in_a_kubeconfig_are_relative_to_it(tmp_path: Path) -> None:
    folder = tmp_path / "kube"
    folder.mkdir()
    (folder / "ca.crt").write_bytes(b"CA")
    (folder / "user.crt").write_bytes(b"CERT")
    (folder / "user.key").write_bytes(b"KEY")
    file = write_kubeconfig(
        folder / "config",
        **kubeconfig(
            "local",
            {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
            {"client-certificate": "user.crt", "client-key": "user.key", "tokenFile": "token"},
        ),
    )

    login = config.from_kubeconfig(file)

    assert (login.ca_pem, login.client_certificate_pem, login.client_key_pem) == (
        b"CA",
        b"CERT",
        b"KEY",
    )
    assert login.token_file == folder / "token"


def test_kubeconfig_files_merge_with_the_first_to_name_a_thing_winning(tmp_path: Path) -> None:
    first = write_kubeconfig(
        tmp_path / "first",
        **kubeconfig("dev", {"server": "https://dev:6443"}, {"token": "dev-token"}),
    )
    second_content = kubeconfig("prod", {"server": "https://prod:6443"}, {"token": "prod"})
    # The second file also defines "dev-cluster": the first file's stays.
    second_content["clusters"].append({"name": "dev-cluster", "cluster": {"server": "https://x"}})
    second = write_kubeconfig(tmp_path / "second", **second_content)
    environ = {"KUBECONFIG": os.pathsep.join([str(first), str(tmp_path / "absent"), str(second)])}

    assert config.from_kubeconfig(environ=environ).server == "https://dev:6443"
    assert config.from_kubeconfig(context="prod", environ=environ).token == "prod"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"current-context": ""}, "name no current-context"),
        ({"current-context": "gone"}, "context 'gone' is not in"),
        (
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "missing"}}],
            },
            "the context's cluster 'missing' is not defined",
        ),
    ],
)
def test_an_unusable_kubeconfig_says_why(
    tmp_path: Path, content: dict[str, Any], message: str
) -> None:
    file = write_kubeconfig(tmp_path / "config", **content)

    with pytest.raises(ConfigError, match=message):
        config.from_kubeconfig(file)


def cluster_login(tmp_path: Path, cluster: dict[str, Any]) -> Login:
    content = kubeconfig("c", {"server": "https://10.0.0.1:6443", **cluster}, {"token": "t"})
    return config.from_kubeconfig(write_kubeconfig(tmp_path / "config", **content))


@pytest.mark.parametrize(
    ("flag", "insecure"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("TRUE", True),
        ("false", False),
        ("False", False),
        (None, False),
    ],
)
def test_insecure_skip_tls_verify_is_a_boolean_or_the_word_true_or_false(
    tmp_path: Path, flag: Any, insecure: bool
) -> None:
    cluster = {} if flag is None else {"insecure-skip-tls-verify": flag}

    assert cluster_login(tmp_path, cluster).insecure is insecure


@pytest.mark.parametrize("flag", ["yes", "0", "", "off", 1, 0, ["true"]])
def test_insecure_skip_tls_verify_that_is_not_a_boolean_is_refused(
    tmp_path: Path, flag: Any
) -> None:
    with pytest.raises(ConfigError, match="insecure-skip-tls-verify must be true or false"):
        cluster_login(tmp_path, {"insecure-skip-tls-verify": flag})


@pytest.mark.parametrize(
    "authority",
    [
        {"certificate-authority": "ca.crt"},
        {"certificate-authority-data": base64.b64encode(b"CA").decode()},
    ],
)
def test_insecure_skip_tls_verify_with_a_root_certificate_is_refused(
    tmp_path: Path, authority: dict[str, str]
) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")

    with pytest.raises(ConfigError, match=r"root certificate .* with insecure-skip-tls-verify"):
        cluster_login(tmp_path, {"insecure-skip-tls-verify": True, **authority})


def test_a_root_certificate_without_the_insecure_flag_is_used(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")

    login = cluster_login(
        tmp_path, {"insecure-skip-tls-verify": "false", "certificate-authority": "ca.crt"}
    )

    assert (login.insecure, login.ca_pem) == (False, b"CA")


def test_a_missing_kubeconfig_names_where_it_looked(tmp_path: Path) -> None:
    environ = {"KUBECONFIG": str(tmp_path / "nothing")}
    with pytest.raises(ConfigError, match=r"no kubeconfig at .*nothing"):
        config.from_kubeconfig(environ=environ)


def test_in_a_pod_the_service_account_is_used(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_bytes(b"CLUSTER CA")
    (tmp_path / "namespace").write_text("kubeherd-system")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}

    login = config.in_cluster(tmp_path, environ)

    assert (login.server, login.ca_pem, login.token_file, login.namespace) == (
        "https://[fd00::1]:443",
        b"CLUSTER CA",
        tmp_path / "token",
        "kubeherd-system",
    )
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        config.in_cluster(tmp_path, {})


def exec_plugin(tmp_path: Path, tokens: list[str], expiry: str | None = None) -> ExecPlugin:
    """A plugin script that hands out `tokens` one per run, and records what kubectl would
    pass it."""
    state = tmp_path / "calls"
    state.write_text("0")
    script = tmp_path / "plugin.py"
    status: dict[str, Any] = {}
    if expiry:
        status["expirationTimestamp"] = expiry
    script.write_text(
        f"""import json, os, sys
from pathlib import Path
calls = int(Path({str(state)!r}).read_text())
Path({str(state)!r}).write_text(str(calls + 1))
Path({str(tmp_path / "info")!r}).write_text(os.environ["KUBERNETES_EXEC_INFO"])
tokens = {tokens!r}
status = dict({status!r}, token=tokens[min(calls, len(tokens) - 1)] + os.environ["SUFFIX"])
print(json.dumps({{"kind": "ExecCredential", "status": status}}))
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return ExecPlugin(command=sys.executable, args=(str(script),), env=(("SUFFIX", "!"),))


def test_an_exec_plugin_is_run_as_kubectl_runs_it(tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, ["first"], expiry="2030-01-01T00:00:00Z")

    credential = asyncio.run(exec_credential(plugin))

    assert credential.authorization == "Bearer first!"
    assert credential.expires == 1893456000.0
    info = json.loads((tmp_path / "info").read_text())
    assert (info["kind"], info["spec"]) == ("ExecCredential", {"interactive": False})


FAILING_PLUGIN = ExecPlugin(
    sys.executable, ("-c", "import sys; sys.exit('no access for arn:aws:iam::123456789012:role/x')")
)


def test_a_failing_exec_plugins_error_names_only_the_command_and_exit_code() -> None:
    with pytest.raises(ConfigError) as raised:
        asyncio.run(exec_credential(FAILING_PLUGIN))

    # The text can become an Event in a tenant's namespace: nothing the plugin wrote is in it.
    assert str(raised.value) == (f"exec plugin {Path(sys.executable).name} failed with exit code 1")


def test_a_failing_exec_plugins_stderr_is_logged_once_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="kubeherd.kube.credentials"),
        pytest.raises(ConfigError),
    ):
        asyncio.run(exec_credential(FAILING_PLUGIN))

    logged = [record for record in caplog.records if "arn:aws:iam" in record.getMessage()]
    assert [record.levelno for record in logged] == [logging.WARNING]
    assert "no access for arn:aws:iam::123456789012:role/x" in logged[0].getMessage()


class FakeApiServer:
    """A loopback HTTP server that accepts only the token it currently expects."""

    def __init__(self) -> None:
        self.valid_token = ""
        self.seen: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        self.seen.append(header)
        if header != f"Bearer {self.valid_token}":
            return web.json_response({"message": "Unauthorized"}, status=401)
        return web.json_response({"gitVersion": "v1.37.2"})

    async def run(self, check: Any) -> None:
        await serving(self.handle, check)


async def version_status(session: ApiSession) -> int:
    response = await session.request("GET", "/version", timeout=aiohttp.ClientTimeout(total=10))
    response.release()
    return response.status


def test_a_rotated_token_file_is_read_again(tmp_path: Path) -> None:
    server = FakeApiServer()
    token_file = tmp_path / "token"

    async def check(url: str) -> None:
        session = ApiSession(Login(server=url, token_file=token_file))
        try:
            server.valid_token = "one"
            token_file.write_text("one\n")
            assert await version_status(session) == 200
            # The kubelet swaps the projected token for a new one.
            server.valid_token = "two"
            replacement = tmp_path / "token.new"
            replacement.write_text("two\n")
            replacement.replace(token_file)
            assert await version_status(session) == 200
        finally:
            await session.close()

    asyncio.run(server.run(check))
    assert server.seen == ["Bearer one", "Bearer two"]


def test_an_exec_credential_refused_with_401_is_asked_for_again(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.valid_token = "fresh!"
    plugin = exec_plugin(tmp_path, ["stale", "fresh"])

    async def check(url: str) -> None:
        session = ApiSession(Login(server=url, exec_plugin=plugin))
        try:
            assert await version_status(session) == 200
            assert await version_status(session) == 200
        finally:
            await session.close()

    asyncio.run(server.run(check))
    # Refused once, then the plugin ran again; the fresh token is kept for the next request.
    assert server.seen == ["Bearer stale!", "Bearer fresh!", "Bearer fresh!"]
    assert (tmp_path / "calls").read_text() == "2"


def test_a_static_token_refused_is_not_retried(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.valid_token = "right"

    async def check(url: str) -> None:
        session = ApiSession(Login(server=url, token="wrong"))
        try:
            assert await version_status(session) == 401
        finally:
            await session.close()

    asyncio.run(server.run(check))
    assert server.seen == ["Bearer wrong"]


# Where the login comes from, as controller-runtime looks ------------------------------------


def two_contexts(path: Path, server: str) -> Path:
    content = kubeconfig("first", {"server": server}, {"token": "t"})
    content["contexts"].append({"name": "second", "context": {"cluster": "first-cluster"}})
    return write_kubeconfig(path, **content)


@pytest.fixture
def pod(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A service account folder and the pod's environment, with a HOME of its own."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    home = tmp_path / "home"
    home.mkdir()
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "HOME": str(home),
    }
    return account, environ


def test_the_kubeconfig_flag_wins_over_kubeconfig_and_the_pod(
    tmp_path: Path, pod: tuple[Path, dict[str, str]]
) -> None:
    account, environ = pod
    flag = two_contexts(tmp_path / "flag", "https://flag:6443")
    environ["KUBECONFIG"] = str(two_contexts(tmp_path / "env", "https://env:6443"))

    login = config.load(flag, None, environ, account)

    assert login.server == "https://flag:6443"


def test_kubeconfig_wins_over_the_pods_service_account(
    tmp_path: Path, pod: tuple[Path, dict[str, str]]
) -> None:
    account, environ = pod
    environ["KUBECONFIG"] = str(two_contexts(tmp_path / "env", "https://env:6443"))

    assert config.load(None, None, environ, account).server == "https://env:6443"


def test_the_pods_service_account_wins_over_the_home_kubeconfig(
    pod: tuple[Path, dict[str, str]],
) -> None:
    account, environ = pod
    (Path(environ["HOME"]) / ".kube").mkdir()
    two_contexts(Path(environ["HOME"]) / ".kube" / "config", "https://home:6443")

    assert config.load(None, None, environ, account).server == "https://10.96.0.1:443"


def test_outside_a_pod_the_home_kubeconfig_is_used(pod: tuple[Path, dict[str, str]]) -> None:
    account, environ = pod
    (Path(environ["HOME"]) / ".kube").mkdir()
    two_contexts(Path(environ["HOME"]) / ".kube" / "config", "https://home:6443")
    del environ["KUBERNETES_SERVICE_HOST"]

    assert config.load(None, None, environ, account).server == "https://home:6443"


def test_a_context_is_picked_by_name(tmp_path: Path, pod: tuple[Path, dict[str, str]]) -> None:
    account, environ = pod
    flag = two_contexts(tmp_path / "flag", "https://flag:6443")

    assert config.load(flag, "second", environ, account).source.startswith("context 'second'")
    with pytest.raises(ConfigError, match="context 'third' is not in"):
        config.load(flag, "third", environ, account)


def test_a_context_in_a_pod_without_a_kubeconfig_is_refused(
    pod: tuple[Path, dict[str, str]],
) -> None:
    account, environ = pod

    with pytest.raises(ConfigError, match="context 'second' needs a kubeconfig"):
        config.load(None, "second", environ, account)


# What kubectl honours is honoured, or refused at start ---------------------------------------


def user_login(tmp_path: Path, user: dict[str, Any], **cluster: Any) -> Login:
    content = kubeconfig("c", {"server": "https://10.0.0.1:6443", **cluster}, user)
    return config.from_kubeconfig(write_kubeconfig(tmp_path / "config", **content))


def test_impersonation_is_read_from_the_user(tmp_path: Path) -> None:
    login = user_login(
        tmp_path,
        {
            "token": "t",
            "as": "jane",
            "as-uid": "42",
            "as-groups": ["devs", "oncall"],
            "as-user-extra": {"reason": ["rollback"], "scopes": ["a", "b"]},
        },
    )

    assert (
        login.impersonate_user,
        login.impersonate_uid,
        login.impersonate_groups,
        login.impersonate_extra,
    ) == ("jane", "42", ("devs", "oncall"), (("reason", ("rollback",)), ("scopes", ("a", "b"))))


def test_a_socks_proxy_url_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"proxy-url 'socks5://bastion:1080'.* not SOCKS"):
        user_login(tmp_path, {"token": "t"}, **{"proxy-url": "socks5://bastion:1080"})


def test_a_client_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    data = base64.b64encode(b"CERT").decode()
    with pytest.raises(ConfigError, match="needs both client-certificate and client-key"):
        user_login(tmp_path, {"client-certificate-data": data})


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "v1alpha1' is not supported"),
        ({"interactiveMode": "Always"}, "needs an interactive terminal"),
    ],
)
def test_an_exec_plugin_kubeherd_cannot_run_is_refused_at_start(
    tmp_path: Path, plugin: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        user_login(tmp_path, {"exec": {"command": "aws", **plugin}})


def test_an_exec_plugin_asking_for_cluster_info_gets_the_cluster(tmp_path: Path) -> None:
    script = tmp_path / "plugin.py"
    script.write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'info')!r}).write_text(os.environ['KUBERNETES_EXEC_INFO'])\n"
        'print(\'{"kind": "ExecCredential", "status": {"token": "t"}}\')\n'
    )
    login = user_login(
        tmp_path,
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": sys.executable,
                "args": [str(script)],
                "provideClusterInfo": True,
            }
        },
        **{
            "tls-server-name": "kube.test",
            "extensions": [
                {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "x"}}
            ],
        },
    )
    assert login.exec_plugin is not None

    asyncio.run(exec_credential(login.exec_plugin))

    spec = json.loads((tmp_path / "info").read_text())["spec"]
    assert spec["cluster"] == {
        "server": "https://10.0.0.1:6443",
        "tls-server-name": "kube.test",
        "insecure-skip-tls-verify": False,
        "certificate-authority-data": "",
        "proxy-url": "",
        "disable-compression": False,
        "config": {"audience": "x"},
    }


def test_an_exec_plugin_not_installed_says_how_to_install_it(tmp_path: Path) -> None:
    plugin = ExecPlugin(
        command=str(tmp_path / "gke-gcloud-auth-plugin"),
        install_hint="Install gke-gcloud-auth-plugin with gcloud components install",
    )

    with pytest.raises(ConfigError, match=r"could not be started: .*gcloud components install"):
        asyncio.run(exec_credential(plugin))


@pytest.mark.parametrize(
    ("lifetime", "renewed_after"),
    [(3600.0, 3540.0), (120.0, 60.0), (10.0, 5.0), (0.0, 0.0)],
)
def test_a_credential_is_renewed_a_minute_early_or_half_way_if_shorter(
    lifetime: float, renewed_after: float
) -> None:
    assert renewal_time(1000.0 + lifetime, now=1000.0) == 1000.0 + renewed_after


def jwt(**claims: Any) -> str:
    """An unsigned JWT with these claims (kubeherd reads `exp` only; the API server checks)."""

    def part(content: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(content).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.signature"


def test_an_oidc_auth_providers_id_token_is_used_while_it_is_valid(tmp_path: Path) -> None:
    token = jwt(exp=time.time() + 3600)
    oidc = {"name": "oidc", "config": {"id-token": token, "refresh-token": "r"}}

    assert user_login(tmp_path, {"auth-provider": oidc}).token == token


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (
            {"name": "oidc", "config": {"id-token": jwt(exp=time.time() - 60)}},
            "id-token has expired, and kubeherd does not refresh it",
        ),
        ({"name": "oidc", "config": {"refresh-token": "r"}}, "id-token is missing"),
        ({"name": "gcp", "config": {"access-token": "a"}}, "use the exec plugin gke-gcloud"),
        ({"name": "azure", "config": {}}, "removed from kubectl in 1.26; use the exec plugin kube"),
        ({"name": "keystone"}, "no auth-provider named 'keystone'"),
    ],
)
def test_an_auth_provider_kubeherd_cannot_use_is_refused_at_start(
    tmp_path: Path, provider: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        user_login(tmp_path, {"auth-provider": provider})
