"""Which proxy, if any, a request to the API server goes through: decided as client-go decides,
but for loopback.

The kubeconfig's proxy-url is used for every request. Otherwise HTTPS_PROXY (for https URLs) and
HTTP_PROXY (for http URLs) are, except for hosts NO_PROXY names. NO_PROXY is read as Go reads it:
besides names and domain suffixes it takes CIDRs (10.96.0.0/12), which is how OpenShift's and
AKS's injected settings exempt the service network. Python's own reading ignores CIDRs, so the
API server's service IP went through the proxy. Go also never proxies localhost and loopback
addresses; here NO_PROXY decides for them too (127.0.0.0/8 or localhost in it goes direct).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from kubeherd.kube.config import check_proxy_url

DEFAULT_PORTS = {"http": 80, "https": 443}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class NoProxyEntry:
    """One NO_PROXY entry: a network, an address, or a domain (with its subdomains unless it
    starts with a dot), each optionally only on one port."""

    network: Network | None = None
    domain: str = ""
    # The domain itself matches, not only names under it (an entry written without a dot).
    domain_itself: bool = False
    port: int | None = None

    def matches(self, host: str, address: Address | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        return host.endswith(self.domain) or (self.domain_itself and host == self.domain[1:])


def parse_no_proxy(value: str) -> tuple[bool, tuple[NoProxyEntry, ...]]:
    """(everything bypasses the proxy, the entries), from a NO_PROXY value."""
    entries = []
    for raw in value.split(","):
        text = raw.strip().lower()
        if not text:
            continue
        if text == "*":
            return True, ()
        entry = _entry(text)
        if entry is not None:
            entries.append(entry)
    return False, tuple(entries)


def _entry(text: str) -> NoProxyEntry | None:
    try:
        return NoProxyEntry(network=ipaddress.ip_network(text, strict=False))
    except ValueError:
        pass
    host, port = _split_port(text)
    try:
        return NoProxyEntry(network=ipaddress.ip_network(host.strip("[]")), port=port)
    except ValueError:
        pass
    if not host:
        return None
    if host.startswith("*."):
        host = host[1:]
    if host.startswith("."):
        return NoProxyEntry(domain=host, port=port)
    return NoProxyEntry(domain="." + host, domain_itself=True, port=port)


def _split_port(text: str) -> tuple[str, int | None]:
    """host[:port], with an IPv6 address only in brackets when a port follows."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or (":" in host and not host.endswith("]")):
        return text, None
    return host, int(port)


@dataclass(frozen=True)
class ProxyRules:
    """The proxy decision for one process: read once, at start."""

    # The kubeconfig's proxy-url: for every request.
    forced: str | None = None
    https_proxy: str | None = None
    http_proxy: str | None = None
    bypass_all: bool = False
    no_proxy: tuple[NoProxyEntry, ...] = ()

    @classmethod
    def of(cls, proxy_url: str | None, environ: Mapping[str, str]) -> ProxyRules:
        """The rules for a login's proxy-url and the environment; a ConfigError for a proxy
        kubeherd cannot use (SOCKS), so that it is refused at start."""
        if proxy_url:
            check_proxy_url(proxy_url, "proxy-url")
            return cls(forced=proxy_url)
        https_proxy = _proxy_variable(environ, "HTTPS_PROXY")
        # Set by a CGI server from a request's Proxy header, so not the user's: Go ignores it.
        http_proxy = (
            None if environ.get("REQUEST_METHOD") else _proxy_variable(environ, "HTTP_PROXY")
        )
        bypass_all, entries = parse_no_proxy(_first(environ, "NO_PROXY") or "")
        return cls(None, https_proxy, http_proxy, bypass_all, entries)

    def proxy_for(self, scheme: str, host: str, port: int | None) -> str | None:
        """The proxy URL for a request to scheme://host:port, or None to go direct."""
        if self.forced:
            return self.forced
        proxy = self.https_proxy if scheme == "https" else self.http_proxy
        if proxy is None or self.bypass_all:
            return None
        host = host.lower().strip("[]").rstrip(".")
        try:
            address: Address | None = ipaddress.ip_address(host)
        except ValueError:
            address = None
        # Unlike Go, loopback is not exempt by itself: NO_PROXY decides, as Python's and
        # aiohttp's reading did before (a local API server behind a proxy on the same machine
        # is then reachable, and testable).
        effective_port = port if port is not None else DEFAULT_PORTS.get(scheme, 0)
        if any(entry.matches(host, address, effective_port) for entry in self.no_proxy):
            return None
        return proxy


def _first(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name) or environ.get(name.lower()) or None


def _proxy_variable(environ: Mapping[str, str], name: str) -> str | None:
    value = _first(environ, name)
    if value is None:
        return None
    # A bare host:port means an HTTP proxy, as Go reads it.
    url = value if "://" in value else f"http://{value}"
    check_proxy_url(url, name)
    return url
