"""The proxy the environment names for a cluster, read as Go's ``http.ProxyFromEnvironment`` reads it (what client-go
and kubectl use): ``HTTPS_PROXY``/``HTTP_PROXY`` by the server's scheme, either case (upper case first), unless
``NO_PROXY`` exempts the host or it is the loopback; credentials only in the proxy's URL (no netrc)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from yarl import URL


def _variable(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name.upper()) or environ.get(name.lower()) or ""


def exempt(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``host`` goes without a proxy: ``localhost`` and loopback addresses always; then ``NO_PROXY``'s ``*``,
    an IP address or CIDR range holding it, a domain that is the host or a parent of it (``.example.com``: its
    subdomains only); an entry with a port only for that port."""
    host = host.lower().strip("[]")
    address = _address(host)
    if host == "localhost" or (address is not None and address.is_loopback):
        return True
    entries = (e.strip().lower() for e in no_proxy.split(","))
    return any(_covers(entry, host, address, port) for entry in entries if entry)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _covers(
    entry: str, host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, port: int | None
) -> bool:
    if entry == "*":
        return True
    if "/" in entry:  # a CIDR range
        try:
            return address is not None and address in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    name, wanted = entry, ""
    if entry.count(":") == 1 or (entry.startswith("[") and "]:" in entry):  # host:port ([v6]:port)
        name, _, wanted = entry.rpartition(":")
    if wanted and (not wanted.isdigit() or int(wanted) != port):
        return False
    name = name.strip("[]")
    if name.startswith("."):  # subdomains only
        return host.endswith(name)
    return host == name or host.endswith("." + name)


def environment_proxy(server: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL for ``server``, or ``None`` (none named, or exempted)."""
    environ = os.environ if environ is None else environ
    url = URL(server)
    proxy = _variable(environ, "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY")
    if not proxy or exempt(url.host or "", url.port, _variable(environ, "NO_PROXY")):
        return None
    return proxy
