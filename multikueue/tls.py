"""A TLS server's certificate that can change while it serves: ``/metrics`` and the admission webhook.

Python's ``ssl`` loads a certificate only from files, into a context fixed once a listener has it. The context given
to the listener therefore switches each new handshake (its SNI callback runs on every one) to the context made from
the certificate as it is now; connections already open keep theirs, as a TLS connection always does.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)
CHECK_INTERVAL = 10.0  # seconds between looks at watched files for a rotated certificate


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class ServingCertificate:
    """The context to serve with (``listener``) and the certificate behind it now.

    ``watch=True``: the files are looked at again (at most every ``CHECK_INTERVAL`` seconds, on a handshake) and
    loaded when their stamp changes, as controller-runtime's certwatcher does for cert-manager's renewals; files that
    do not load (half-written during a rotation) leave the last good certificate in use. ``use`` puts another pair in
    place at once (a certificate generated here)."""

    def __init__(self, cert: Path, key: Path, *, watch: bool, what: str) -> None:
        self.cert, self.key, self.watch, self.what = cert, key, watch, what
        self._stamp = self._files_stamp()
        self.current = server_context(cert, key)
        self.listener = self.current
        self.listener.sni_callback = self._switch
        self._next_look = time.monotonic() + CHECK_INTERVAL
        self.loads = 1  # certificates put in place, the first included

    def use(self, cert: Path, key: Path) -> None:
        """Serve this pair from the next handshake on; ``ssl.SSLError``/``OSError`` if it does not load."""
        self.current = server_context(cert, key)
        self.cert, self.key, self._stamp = cert, key, self._files_stamp()
        self.loads += 1

    def _files_stamp(self) -> tuple[float, float, int, int]:
        cert, key = self.cert.stat(), self.key.stat()
        return cert.st_mtime, key.st_mtime, cert.st_ino, key.st_ino

    def _switch(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
        if self.watch and time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + CHECK_INTERVAL
            self.look()
        if self.current is not self.listener:
            connection.context = self.current

    def look(self) -> bool:
        """Load the watched files if they changed since last loaded; whether a new certificate is now in use."""
        try:
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return False
            self.current = server_context(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            log.warning("the rotated certificate does not load; the last good one stays in use", serving=self.what,
                        cert=str(self.cert), error=str(e))  # fmt: skip
            return False
        self._stamp = stamp
        self.loads += 1
        log.info("serving certificate reloaded", serving=self.what, cert=str(self.cert))
        return True
