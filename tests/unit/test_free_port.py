"""The test bed's ports: never one the kernel may give a client's outgoing connection meanwhile."""

from __future__ import annotations

import random
import socket

import pytest

from multikueue_testbed import testbed


def test_ports_are_below_the_ephemeral_range_bindable_and_never_handed_out_twice() -> None:
    low, _ = testbed._ephemeral_range()
    ports = [testbed.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= p < low for p in ports), ports
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_taken_meanwhile_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "shuffle", lambda ports: None)  # candidates tried in order
    low, _ = testbed._ephemeral_range()
    holders = []
    for port in range(low - 12000, low - 11990):  # the first ten candidates, taken by someone else
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        holders.append(s)
    taken = {s.getsockname()[1] for s in holders}
    try:
        assert taken, "the first candidates could not be taken for the test"
        assert not taken & {testbed.free_port() for _ in range(20)}
    finally:
        for s in holders:
            s.close()
