"""Which requests go through a proxy: NO_PROXY read as Go reads it, CIDRs included, and the
kubeconfig's proxy-url over the environment, as kubectl has it."""

from __future__ import annotations

import pytest

from kubeherd.kube.login import ConfigError
from kubeherd.kube.proxy import ProxyRules

PROXY = "http://proxy.corp:3128"


def rules(no_proxy: str, **environ: str) -> ProxyRules:
    return ProxyRules.of(None, {"HTTPS_PROXY": PROXY, "NO_PROXY": no_proxy, **environ})


@pytest.mark.parametrize(
    ("no_proxy", "host"),
    [
        ("10.96.0.0/12", "10.96.0.1"),
        (".svc,10.96.0.0/12", "10.111.255.254"),
        ("fd00::/108", "[fd00::1]"),
        ("192.168.1.7", "192.168.1.7"),
        ("example.com", "example.com"),
        ("example.com", "api.example.com"),
        (".example.com", "api.example.com"),
        ("*.example.com", "api.example.com"),
        ("EXAMPLE.com", "Api.Example.COM"),
        ("kube.test:443", "kube.test"),
        ("*", "anything.at.all"),
    ],
)
def test_no_proxy_sends_these_hosts_direct(no_proxy: str, host: str) -> None:
    assert rules(no_proxy).proxy_for("https", host, None) is None


@pytest.mark.parametrize(
    ("no_proxy", "host"),
    [
        ("10.96.0.0/12", "10.112.0.1"),
        ("10.96.0.0/12", "kubernetes.default.svc"),
        ("192.168.1.7", "192.168.1.8"),
        ("example.com", "notexample.com"),
        (".example.com", "example.com"),
        ("kube.test:6443", "kube.test"),
        ("", "10.96.0.1"),
    ],
)
def test_other_hosts_go_through_the_proxy(no_proxy: str, host: str) -> None:
    assert rules(no_proxy).proxy_for("https", host, None) == PROXY


def test_a_port_in_no_proxy_matches_only_that_port() -> None:
    found = rules("kube.test:6443")
    assert (
        found.proxy_for("https", "kube.test", 6443),
        found.proxy_for("https", "kube.test", 443),
    ) == (
        None,
        PROXY,
    )


def test_this_machine_goes_through_the_proxy_unless_no_proxy_names_it() -> None:
    hosts = ("localhost", "127.0.0.1", "[::1]")
    assert [rules("").proxy_for("https", host, 6443) for host in hosts] == [PROXY] * 3
    local = rules("localhost,127.0.0.0/8,::1")
    assert [local.proxy_for("https", host, 6443) for host in hosts] == [None] * 3


def test_https_takes_https_proxy_and_http_takes_http_proxy() -> None:
    found = ProxyRules.of(None, {"https_proxy": "https-proxy:1", "http_proxy": "http://plain:2"})
    assert (
        found.proxy_for("https", "kube.test", None),
        found.proxy_for("http", "kube.test", None),
    ) == (
        "http://https-proxy:1",
        "http://plain:2",
    )


def test_the_upper_case_variables_win_over_the_lower_case_ones() -> None:
    found = ProxyRules.of(
        None, {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "no_proxy": "*"}
    )
    # NO_PROXY is unset, so no_proxy counts.
    assert found.proxy_for("https", "kube.test", None) is None
    assert (
        ProxyRules.of(
            None, {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}
        ).proxy_for("https", "kube.test", None)
        == "http://upper:1"
    )


def test_the_kubeconfigs_proxy_url_wins_over_the_environment_and_no_proxy() -> None:
    found = ProxyRules.of("http://from-kubeconfig:8080", {"HTTPS_PROXY": PROXY, "NO_PROXY": "*"})
    assert found.proxy_for("https", "10.96.0.1", 443) == "http://from-kubeconfig:8080"


@pytest.mark.parametrize(
    ("proxy_url", "environ"),
    [
        ("socks5://bastion:1080", {}),
        (None, {"HTTPS_PROXY": "socks5h://bastion:1080"}),
    ],
)
def test_a_socks_proxy_is_refused_plainly(proxy_url: str | None, environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="only http:// and https:// proxies"):
        ProxyRules.of(proxy_url, environ)
