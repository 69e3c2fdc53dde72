"""How a failed write is read (``kube/errors.py``): refused for certain, or its outcome unknown (#27)."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.errors import describe, outcome_unknown, refused


@pytest.mark.parametrize(
    ("error", "unknown"),
    [
        (TimeoutError(), True),  # the request may have reached the server
        (aiohttp.ServerDisconnectedError(), True),  # the connection lost after the request went out
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
    key = aiohttp.client_reqrep.ConnectionKey("worker1-control-plane", 6443, True, True, None, None, None)
    dns = aiohttp.ClientConnectorDNSError(key, socket.gaierror(-2, "Name or service not known"))
    assert describe(dns) == "cannot connect to worker1-control-plane:6443: Name or service not known"
    refused_connection = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connect call failed ('x', 1)"))
    assert describe(refused_connection) == "cannot connect to worker1-control-plane:6443: Connection refused"
    assert describe(aiohttp.ServerDisconnectedError()) == "the server closed the connection before answering"
