"""How a failed request is read (``kube/errors.py``, ``kube/failures.py``): refused for certain, or its outcome
unknown (#27); a transport failure as the kube error it means, in one line."""

from __future__ import annotations

import socket
import ssl

import aiohttp
import pytest

from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.errors import StreamBroken, Unreachable, describe, outcome_unknown, refused
from multikueue.kube.failures import broken, unreachable

SERVER = "https://worker1-control-plane:6443"
KEY = aiohttp.client_reqrep.ConnectionKey("worker1-control-plane", 6443, True, True, None, None, None)


@pytest.mark.parametrize(
    ("error", "unknown"),
    [
        (unreachable(TimeoutError(), SERVER), True),  # the request may have reached the server
        (unreachable(aiohttp.ServerDisconnectedError(), SERVER), True),  # the connection lost after it went out
        (unreachable(aiohttp.ClientOSError(104, "Connection reset by peer"), SERVER), True),
        (unreachable(aiohttp.SocketTimeoutError("Timeout on reading data from socket"), SERVER), True),
        (unreachable(aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), SERVER), False),
        (unreachable(aiohttp.ConnectionTimeoutError("Connection timeout to host"), SERVER), False),
        (broken(aiohttp.ClientPayloadError("Response payload is not completed"), SERVER), True),  # answered
        (TimeoutError(), True),  # anything not translated is never taken as not done
        (ConnectionResetError(), True),
        (refused(500, "Internal Server Error"), True),  # the server failed midway
        (refused(504, "Gateway Timeout"), True),
        (refused(503, "Service Unavailable"), False),  # sent before any work: starting or shedding load
        (refused(429, "Too Many Requests"), False),
        (refused(422, "Unprocessable Entity"), False),
        (refused(404, "Not Found"), False),
        (refused(403, "Forbidden"), False),
        (refused(409, "Conflict"), False),
        (refused(401, "Unauthorized"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_a_write_without_an_answer_is_never_taken_as_not_done(error: BaseException, unknown: bool) -> None:
    assert outcome_unknown(error) is unknown


def test_the_users_line_says_when_a_write_may_have_been_done() -> None:
    lost = WorkerWriteFailed("worker1", "create", "PipelineRun", "ns", "run", TimeoutError())
    assert (
        str(lost)
        == 'worker "worker1": cannot create PipelineRun ns/run: TimeoutError (no answer: it may have been done)'
    )
    assert not lost.refused
    answered = WorkerWriteFailed("worker1", "create", "PipelineRun", "ns", "run", refused(403, "Forbidden"))
    assert str(answered) == 'worker "worker1": cannot create PipelineRun ns/run: HTTP 403 Forbidden'
    assert answered.refused


def test_a_failed_connection_is_said_as_where_and_why_with_no_python_object_in_it() -> None:
    dns = aiohttp.ClientConnectorDNSError(KEY, socket.gaierror(-2, "Name or service not known"))
    assert (
        describe(unreachable(dns, SERVER)) == "cannot connect to worker1-control-plane:6443: Name or service not known"
    )
    refused_connection = aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "Connect call failed ('x', 1)"))
    assert (
        describe(unreachable(refused_connection, SERVER))
        == "cannot connect to worker1-control-plane:6443: Connection refused"
    )
    assert (
        describe(unreachable(aiohttp.ServerDisconnectedError(), SERVER))
        == "worker1-control-plane:6443 closed the connection before answering"
    )
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "self-signed certificate in certificate chain"
    certificate = unreachable(aiohttp.ClientConnectorCertificateError(KEY, untrusted), SERVER)
    assert describe(certificate) == (
        "cannot connect to worker1-control-plane:6443: TLS handshake failed: "
        "certificate verify failed: self-signed certificate in certificate chain"
    )
    assert certificate.maybe_done is False
    cut = broken(aiohttp.ClientPayloadError("Response payload is not completed: <TransferEncodingError: 400>"), SERVER)
    assert isinstance(cut, StreamBroken)
    assert describe(cut) == "the answer from worker1-control-plane:6443 was cut short: ClientPayloadError"
    for error in (dns, refused_connection, aiohttp.ServerDisconnectedError()):
        line = describe(unreachable(error, SERVER))
        assert "<" not in line
        assert "\n" not in line


def test_an_unreachable_write_says_whether_it_may_have_been_done() -> None:
    never_sent = unreachable(aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), SERVER)
    assert isinstance(never_sent, Unreachable)
    failed = WorkerWriteFailed("worker1", "create", "PipelineRun", "ns", "run", never_sent)
    assert str(failed) == (
        'worker "worker1": cannot create PipelineRun ns/run: cannot connect to worker1-control-plane:6443: '
        "Connection refused"
    )
    lost = WorkerWriteFailed("worker1", "create", "PipelineRun", "ns", "run", unreachable(TimeoutError(), SERVER))
    assert str(lost) == (
        'worker "worker1": cannot create PipelineRun ns/run: worker1-control-plane:6443 did not answer in time '
        "(no answer: it may have been done)"
    )
