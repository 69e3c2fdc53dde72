"""The Lease election's decisions (client-go's): what a candidate writes, and when a holder's Lease has expired."""

from __future__ import annotations

import time
from typing import Any

from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.kube.leader import Election, next_spec, released_spec


def test_a_new_holder_counts_a_transition_and_a_renewal_keeps_the_acquire_time() -> None:
    first = next_spec(None, "a", 15, "t0")
    assert first == {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "t0", "renewTime": "t0",
                     "leaseTransitions": 0}  # fmt: skip
    renewed = next_spec(first, "a", 15, "t1")
    assert (renewed["acquireTime"], renewed["renewTime"], renewed["leaseTransitions"]) == ("t0", "t1", 0)
    taken = next_spec(renewed, "b", 15, "t2")
    assert (taken["holderIdentity"], taken["acquireTime"], taken["leaseTransitions"]) == ("b", "t2", 1)
    released = next_spec({"holderIdentity": "", "leaseTransitions": 3}, "c", 15, "t3")
    assert released["leaseTransitions"] == 3, "taking a Lease nobody holds is no transition"


def test_another_holder_counts_as_expired_only_after_its_lease_duration_by_our_own_clock(monkeypatch: Any) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    election = Election(ApiClient(ClusterAccess(server="http://127.0.0.1:1")), "ns", "lease", "me", 15)
    held = {"holderIdentity": "other", "leaseDurationSeconds": 10, "renewTime": "2000-01-01T00:00:00.000000Z"}
    assert election.held_by_another(held), "an old renewTime means nothing: clocks of two machines differ"
    now[0] += 9.9
    assert election.held_by_another(held)
    now[0] += 0.2
    assert not election.held_by_another(held), "unchanged for its leaseDurationSeconds: expired"
    renewed = {**held, "renewTime": "2000-01-01T00:00:11.000000Z"}
    assert election.held_by_another(renewed), "a renewal seen restarts the count"
    assert not election.held_by_another({**held, "holderIdentity": "me"})
    assert not election.held_by_another({"holderIdentity": ""})


def test_a_released_lease_has_no_holder_and_is_free_to_the_next_candidate_at_once() -> None:
    held = next_spec({"holderIdentity": "a", "leaseTransitions": 2}, "b", 15, "t0")
    released = released_spec(held, "t1")
    assert released == {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": "t1", "renewTime": "t1",
                        "leaseTransitions": 3}  # fmt: skip
    election = Election(ApiClient(ClusterAccess(server="http://127.0.0.1:1")), "ns", "lease", "c", 15)
    assert not election.held_by_another(released), "a standby need not wait out the old leader's duration"
    assert next_spec(released, "c", 15, "t2")["holderIdentity"] == "c"
