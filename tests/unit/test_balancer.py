"""The test bed's Service stand-in: TLS replicas behind one address, calls spread by readiness, none ever cut."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskStatus
from anyio.streams.tls import TLSAttribute, TLSListener, TLSStream

from multikueue.pki import CertificateAuthority
from multikueue_testbed.balancer import Balancer
from multikueue_testbed.waiting import wait_until

BOUND = 15.0  # every test's whole run


class _Replica:
    """A TLS server answering each line with its name (its certificate names it too), and a plain HTTP health
    server whose every answer is ``status``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.status = 200
        self.port = self.health_port = 0
        self._health = anyio.CancelScope()

    @property
    def readyz(self) -> str:
        return f"http://127.0.0.1:{self.health_port}/readyz"

    def stop_health(self) -> None:
        """The health server gone: its port refuses."""
        self._health.cancel()

    async def serve(self, ssl_context: ssl.SSLContext, *, task_status: TaskStatus[None]) -> None:
        serving = await anyio.create_tcp_listener(local_host="127.0.0.1")
        health = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = serving.extra(SocketAttribute.local_port)
        self.health_port = health.extra(SocketAttribute.local_port)
        async with serving, anyio.create_task_group() as group:
            group.start_soon(self._serve_health, health)
            task_status.started()
            await TLSListener(serving, ssl_context, standard_compatible=False).serve(self._answer)

    async def _serve_health(self, health: SocketListener) -> None:
        with self._health:
            async with health:
                await health.serve(self._readyz)

    async def _answer(self, stream: TLSStream) -> None:
        async with stream:
            buffered = b""
            with contextlib.suppress(anyio.BrokenResourceError):
                async for chunk in stream:
                    buffered += chunk
                    while b"\n" in buffered:
                        _, buffered = buffered.split(b"\n", 1)
                        await stream.send(self.name.encode() + b"\n")

    async def _readyz(self, stream: SocketStream) -> None:
        async with stream:
            request = b""
            with anyio.move_on_after(2):
                while b"\r\n\r\n" not in request:
                    request += await stream.receive()
            answer = f"HTTP/1.1 {self.status} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            await stream.send(answer.encode())


@pytest.fixture
def ca() -> CertificateAuthority:
    return CertificateAuthority("balancer-test-ca")


@contextlib.asynccontextmanager
async def _replicas(ca: CertificateAuthority, directory: Path, *names: str) -> AsyncIterator[list[_Replica]]:
    replicas = [_Replica(name) for name in names]
    async with anyio.create_task_group() as group:
        for replica in replicas:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            pair = ca.issue(replica.name, ip_addresses=("127.0.0.1",), server=True)
            context.load_cert_chain(*pair.write(directory, replica.name))
            await group.start(replica.serve, context)
        yield replicas
        group.cancel_scope.cancel()


async def _connect(balancer: Balancer, ca: CertificateAuthority) -> TLSStream:
    stream = await anyio.connect_tcp(
        "127.0.0.1",
        balancer.port,
        ssl_context=ssl.create_default_context(cadata=ca.cert_pem.decode()),
        tls_standard_compatible=False,
    )
    assert isinstance(stream, TLSStream)
    return stream


async def _who(stream: TLSStream) -> str:
    """Which replica answers on ``stream``; checked against the certificate it presented (TLS passed through)."""
    await stream.send(b"who\n")
    answer = b""
    while not answer.endswith(b"\n"):
        answer += await stream.receive()
    name = answer.decode().strip()
    certificate = stream.extra(TLSAttribute.peer_certificate)
    assert certificate is not None
    subject = certificate["subject"]
    assert (("commonName", name),) in subject, subject
    return name


async def _refused(port: int) -> None:
    """A plain connection to ``port`` is accepted and closed at once, nothing sent (not forwarded anywhere: a
    TLS replica would wait for the handshake, and the test's bound would fail it)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()


async def test_connections_go_round_robin_and_each_sees_its_replica_s_own_certificate(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    with anyio.fail_after(BOUND):
        async with _replicas(ca, tmp_path, "a", "b") as (a, b), Balancer() as balancer:
            balancer.add("a", a.port)
            balancer.add("b", b.port)
            async with contextlib.AsyncExitStack() as open_streams:
                streams = [await open_streams.enter_async_context(await _connect(balancer, ca)) for _ in range(4)]
                assert [await _who(s) for s in streams] == ["a", "b", "a", "b"]
                assert [await _who(s) for s in streams] == ["a", "b", "a", "b"]  # each stays with its replica
            assert balancer.connections == {"a": 2, "b": 2}


async def test_an_unready_replica_gets_no_new_connection_and_keeps_those_it_has(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    with anyio.fail_after(BOUND):
        async with _replicas(ca, tmp_path, "a", "b") as (a, b), Balancer() as balancer:
            balancer.add("a", a.port, a.readyz)
            balancer.add("b", b.port, b.readyz)
            await wait_until(lambda: balancer.ready() == ["a", "b"], timeout=BOUND, what="both ready")
            async with await _connect(balancer, ca) as kept:
                assert await _who(kept) == "a"
                a.status = 503
                await wait_until(lambda: balancer.ready() == ["b"], timeout=BOUND, what="a unready")
                for _ in range(3):
                    async with await _connect(balancer, ca) as stream:
                        assert await _who(stream) == "b"
                assert await _who(kept) == "a"  # never cut
                assert balancer.connections == {"a": 1, "b": 3}
                a.status = 200
                await wait_until(lambda: balancer.ready() == ["a", "b"], timeout=BOUND, what="a ready again")
                answered = set()
                for _ in range(2):
                    async with await _connect(balancer, ca) as stream:
                        answered.add(await _who(stream))
                assert answered == {"a", "b"}


async def test_a_replica_whose_health_server_refuses_is_unready_and_none_ready_closes_the_call(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    with anyio.fail_after(BOUND):
        async with _replicas(ca, tmp_path, "a") as (a,):
            balancer = Balancer()
            balancer.add("a", a.port, a.readyz)  # before the start: polled from it
            async with balancer:
                await wait_until(lambda: balancer.ready() == ["a"], timeout=BOUND, what="a ready")
                async with await _connect(balancer, ca) as kept:
                    assert await _who(kept) == "a"
                    a.stop_health()  # its status still 200: only the refusal can make it unready
                    await wait_until(lambda: balancer.ready() == [], timeout=BOUND, what="a unready")
                    await _refused(balancer.port)
                    assert await _who(kept) == "a"
                assert balancer.connections == {"a": 1}


async def test_without_any_backend_a_call_is_closed_at_once() -> None:
    with anyio.fail_after(BOUND):
        async with Balancer() as balancer:
            await _refused(balancer.port)
            assert balancer.connections == {}


async def test_a_removed_replica_gets_no_new_connection(ca: CertificateAuthority, tmp_path: Path) -> None:
    with anyio.fail_after(BOUND):
        async with _replicas(ca, tmp_path, "a", "b") as (a, b), Balancer() as balancer:
            balancer.add("a", a.port)
            balancer.add("b", b.port)
            async with await _connect(balancer, ca) as kept:
                assert await _who(kept) == "a"
                balancer.remove("a")
                for _ in range(3):
                    async with await _connect(balancer, ca) as stream:
                        assert await _who(stream) == "b"
                assert await _who(kept) == "a"
            assert balancer.connections == {"a": 1, "b": 3}
            assert balancer.ready() == ["b"]


async def test_leaving_closes_the_listener_and_every_connection(ca: CertificateAuthority, tmp_path: Path) -> None:
    with anyio.fail_after(BOUND):
        async with _replicas(ca, tmp_path, "a") as (a,):
            async with Balancer() as balancer:
                balancer.add("a", a.port, a.readyz)
                await wait_until(lambda: balancer.ready() == ["a"], timeout=BOUND, what="a ready")
                stream = await _connect(balancer, ca)
                assert await _who(stream) == "a"
            async with stream:
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await _who(stream)
            with pytest.raises(OSError, match="connection attempts failed") as failed:
                await anyio.connect_tcp("127.0.0.1", balancer.port)
            assert isinstance(failed.value.__cause__, ConnectionRefusedError)  # nothing listens there any more
