"""What a transport failure (aiohttp, the socket, TLS, a timeout) means, as a ``kube.errors`` type: the client
translates every one at its boundary, so no ``aiohttp`` exception leaves ``kube/``.

Whether a request may have reached the server is decided here: only a failure to make a connection at all (refused,
name not found, TLS handshake failed, no connection within the connect timeout, proxy refused the tunnel) proves it
did not. Anything later (a timeout waiting for the answer, a connection lost after it was reused or opened) may
follow a request the server has already carried out.
"""

from __future__ import annotations

import os
import socket
import ssl

import aiohttp
from yarl import URL

from multikueue.kube.errors import StreamBroken, Unreachable

FD_IN_USE = "File descriptor "
"""How uvloop's ``RuntimeError`` for a connect on a descriptor still mapped to a transport begins (uvloop#653)."""

_NOT_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, aiohttp.ClientHttpProxyError)
"""Failures before any connection carried the request."""


def where(server: str) -> str:
    """``host:port`` of a server URL, as the user's kubeconfig names it."""
    url = URL(server)
    return f"{url.host}:{url.port}" if url.port is not None else str(url.host or server)


def is_transport_failure(error: BaseException) -> bool:
    """Whether ``error`` is how a request or a read fails for want of an answer (not a bug of this process)."""
    if isinstance(error, RuntimeError):  # uvloop's descriptor reuse: a connect that failed; any other is a bug
        return str(error).startswith(FD_IN_USE)
    return isinstance(error, aiohttp.ClientError | TimeoutError | OSError)


def unreachable(error: BaseException, server: str) -> Unreachable:
    """The request to ``server`` that failed with ``error`` (a transport failure) got no answer."""
    host = where(server)
    maybe_done = not isinstance(error, _NOT_CONNECTED)
    if isinstance(error, aiohttp.ClientProxyConnectionError):
        message = f"cannot connect to {host} through the proxy {error.host}:{error.port}: {_why(error.os_error)}"
    elif isinstance(error, aiohttp.ClientSSLError):
        tls = getattr(error, "certificate_error", error.os_error)
        message = f"cannot connect to {error.host}:{error.port}: TLS handshake failed: {_why(tls)}"
    elif isinstance(error, aiohttp.ClientConnectorError):
        message = f"cannot connect to {error.host}:{error.port}: {_why(error.os_error)}"
    elif isinstance(error, aiohttp.ConnectionTimeoutError):
        message = f"cannot connect to {host}: no connection within the connect timeout"
    elif isinstance(error, aiohttp.ClientHttpProxyError):
        message = f"cannot connect to {host}: the proxy answered {error.status} {error.message}"
    elif isinstance(error, RuntimeError):
        maybe_done = False
        message = f"cannot connect to {host}: the event loop's socket descriptor was still in use (uvloop#653)"
    elif isinstance(error, aiohttp.ServerDisconnectedError):
        message = f"{host} closed the connection before answering"
    elif isinstance(error, TimeoutError):  # the total timeout, or silence past the read timeout
        message = f"{host} did not answer in time"
    elif isinstance(error, OSError):
        message = f"the connection to {host} failed: {_why(error)}"
    else:
        message = f"the request to {host} failed: {_text(error)}"
    return Unreachable(message, maybe_done=maybe_done)


def broken(error: BaseException, server: str) -> StreamBroken:
    """The answer from ``server`` that ``error`` (a transport failure, or a ``ValueError`` decoding it) cut short."""
    host = where(server)
    if isinstance(error, TimeoutError):
        return StreamBroken(f"the answer from {host} went silent past its read timeout")
    if isinstance(error, ValueError) and not isinstance(error, aiohttp.ClientError):
        return StreamBroken(f"the answer from {host} is not JSON: {_text(error)}")
    if isinstance(error, OSError):
        return StreamBroken(f"the answer from {host} was cut short: {_why(error)}")
    return StreamBroken(f"the answer from {host} was cut short: {_text(error)}")


def _why(error: BaseException) -> str:
    """An OS or TLS error's reason alone ("Connection refused", "certificate verify failed: ...")."""
    if isinstance(error, ssl.SSLCertVerificationError) and getattr(error, "verify_message", None):
        return f"certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return str(getattr(error, "reason", None) or error.strerror or type(error).__name__)
    if isinstance(error, aiohttp.ClientError) or not isinstance(error, OSError):
        return _text(error)
    if isinstance(error, socket.gaierror) or not error.errno or error.errno < 0:
        return error.strerror or type(error).__name__
    return os.strerror(error.errno)


def _text(error: BaseException) -> str:
    """``Type: text``, or the type alone when the text is empty or a Python object's repr."""
    text = str(getattr(error, "message", "") or error)
    return f"{type(error).__name__}: {text}" if text and "<" not in text else type(error).__name__
