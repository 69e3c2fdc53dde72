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
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if host == "localhost" or (address is not None and address.is_loopback):
        return True
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, _, wanted = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if wanted and (not wanted.isdigit() or int(wanted) != port):
            continue
        name = name.strip("[]")
        if name.startswith("."):  # subdomains only
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def environment_proxy(server: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL for ``server``, or ``None`` (none named, or exempted)."""
    environ = os.environ if environ is None else environ
    url = URL(server)
    proxy = _variable(environ, "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY")
    if not proxy or exempt(url.host or "", url.port, _variable(environ, "NO_PROXY")):
        return None
    return proxy
