"""The informer's decisions, with a scripted source; tests/integration proves it against real apiservers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from multikueue.kube.errors import CredentialsUnavailable, Forbidden, Gone, StreamBroken, Unreachable
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.workqueue import Backoff


def obj(name: str, rv: int, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}}


class ScriptedSource:
    """Answers lists and watches from scripts; each watch script item is an event dict or an exception."""

    description = "scripted"

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls: list[str | None] = []
        self.watch_calls: list[str] = []
        self.done = anyio.Event()

    async def list(self, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        self.list_calls.append(continue_token)
        page = self.lists.pop(0)
        return page  # type: ignore[return-value]

    async def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[dict[str, Any]]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.done.set()
            await anyio.sleep_forever()
        for item in self.watches.pop(0):
            if isinstance(item, BaseException):
                raise item
            yield item


def page(items: list[dict[str, Any]], rv: int, cont: str | None = None) -> Any:
    return {"items": items, "metadata": {"resourceVersion": str(rv), **({"continue": cont} if cont else {})}}


async def run_until_idle(informer: Informer, source: ScriptedSource) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, o: seen.append((kind, o["metadata"]["name"])))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            await source.done.wait()
            tg.cancel_scope.cancel()
    return seen


FAST = Backoff(base=0.001, cap=0.001)


async def test_lists_all_pages_then_watches_from_the_lists_version() -> None:
    source = ScriptedSource(
        lists=[page([obj("a", 5)], 10, cont="next"), page([obj("b", 6)], 10)],
        watches=[[{"type": "ADDED", "object": obj("c", 11)}]],
    )
    informer = Informer(source)
    seen = await run_until_idle(informer, source)
    assert source.list_calls == [None, "next"]
    assert source.watch_calls[0] == "10"
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert informer.synced.is_set()
    assert sorted(k.name for k in informer.store) == ["a", "b", "c"]


async def test_a_normal_end_resumes_from_the_last_event_or_bookmark_without_relisting() -> None:
    source = ScriptedSource(
        lists=[page([], 10)],
        watches=[
            [
                {"type": "ADDED", "object": obj("a", 11)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ],
            [{"type": "MODIFIED", "object": obj("a", 16)}],
        ],
    )
    informer = Informer(source)
    seen = await run_until_idle(informer, source)
    assert source.watch_calls == ["10", "15", "16"]
    assert len(source.list_calls) == 1
    assert seen == [("ADDED", "a"), ("MODIFIED", "a")]


async def test_gone_relists_and_reports_what_was_missed() -> None:
    source = ScriptedSource(
        lists=[
            page([obj("keep", 1), obj("drop", 2), obj("edit", 3)], 10),
            page([obj("keep", 1), obj("edit", 20), obj("new", 21)], 22),
        ],
        watches=[[Gone(status=410, reason="Expired: too old resource version")]],
    )
    informer = Informer(source)
    seen = await run_until_idle(informer, source)
    assert informer.relists == 2
    assert source.watch_calls == ["10", "22"]
    assert seen[3:] == [("DELETED", "drop"), ("MODIFIED", "edit"), ("ADDED", "new")]
    assert sorted(k.name for k in informer.store) == ["edit", "keep", "new"]


async def test_connection_errors_back_off_keep_the_version_and_record_the_first_drop() -> None:
    source = ScriptedSource(
        lists=[page([], 10)],
        watches=[
            [Unreachable("cannot connect to w:6443: Connection refused", maybe_done=False)],
            [Unreachable("w:6443 did not answer in time", maybe_done=True)],
            [StreamBroken("the answer from w:6443 was cut short")],
            [CredentialsUnavailable("exec plugin 'x' failed")],
            [{"type": "ADDED", "object": obj("a", 11)}],
        ],
    )
    informer = Informer(source, backoff=FAST)
    drops: list[float | None] = []
    original = informer._failed

    def spy(error: BaseException) -> None:
        original(error)
        drops.append(informer.disconnected_since)

    informer._failed = spy  # type: ignore[method-assign]
    await run_until_idle(informer, source)
    assert source.watch_calls == ["10", "10", "10", "10", "10", "11"]
    assert len(source.list_calls) == 1
    assert drops[0] is not None
    assert drops[0] == drops[1], "the first drop time is kept across failed retries"
    assert informer.connected
    assert informer.disconnected_since is None


async def test_a_forbidden_watch_relists_after_backoff() -> None:
    source = ScriptedSource(lists=[page([], 10), page([], 12)], watches=[[Forbidden(status=403, reason="Forbidden")]])
    informer = Informer(source, backoff=FAST)
    await run_until_idle(informer, source)
    assert informer.relists == 2
    assert source.watch_calls == ["10", "12"]


async def test_deleted_events_remove_from_the_store() -> None:
    source = ScriptedSource(lists=[page([obj("a", 1)], 10)], watches=[[{"type": "DELETED", "object": obj("a", 11)}]])
    informer = Informer(source)
    seen = await run_until_idle(informer, source)
    assert informer.get(ObjectKey("ns", "a")) is None
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


async def test_cached_objects_share_their_strings_and_keep_their_content() -> None:
    import json

    from multikueue.runtime.informer import SHARED_STRING_MAX

    def decoded(name: str) -> dict[str, Any]:  # as a watch delivers it: every string new
        body = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "2", "managedFields": [{"a": 1}]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}], "note": "x" * 100}}  # fmt: skip
        copy: dict[str, Any] = json.loads(json.dumps(body))
        return copy

    first, second = decoded("a"), decoded("b")
    source = ScriptedSource([page([], 1)], [[{"type": "ADDED", "object": first}, {"type": "ADDED", "object": second}]])
    informer = Informer(source)
    await run_until_idle(informer, source)
    a, b = informer.get(ObjectKey("ns", "a")), informer.get(ObjectKey("ns", "b"))
    assert a is not None
    assert b is not None
    assert a == {**decoded("a"), "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "2"}}
    condition_a, condition_b = a["status"]["conditions"][0], b["status"]["conditions"][0]
    assert condition_a["type"] is condition_b["type"]
    assert next(iter(condition_a)) is next(iter(condition_b))  # keys too
    assert len(a["status"]["note"]) > SHARED_STRING_MAX
    assert a["status"]["note"] is not b["status"]["note"]  # long strings are left as they are


async def test_a_remembered_write_never_regresses_the_cache_nor_brings_back_the_deleted() -> None:
    source = ScriptedSource(
        [page([obj("a", 1), obj("b", 1)], 1)],
        [[{"type": "MODIFIED", "object": obj("a", 5)}, {"type": "DELETED", "object": obj("b", 6)}]],
    )
    informer = Informer(source)
    await run_until_idle(informer, source)
    informer.remember(obj("a", 4))  # our write's response, overtaken by the watch's newer event
    informer.remember(obj("b", 3))  # our write, deleted meanwhile
    current = informer.get(ObjectKey("ns", "a"))
    assert current is not None
    assert current["metadata"]["resourceVersion"] == "5"
    assert informer.get(ObjectKey("ns", "b")) is None
    informer.remember(obj("a", 7))  # newer than the cache: kept
    current = informer.get(ObjectKey("ns", "a"))
    assert current is not None
    assert current["metadata"]["resourceVersion"] == "7"


async def test_a_remembered_write_is_never_undone_by_older_events_or_a_list_begun_before_it() -> None:
    """The soak's find: a run finished (phase written, then its copy deleted) read as running again for a moment
    when the watch, lagging, delivered the status write before the phase; the pass in that moment made the copy
    anew. Every read between a write of ours and its own event must see at least that write."""
    source = ScriptedSource(
        [page([obj("a", 1)], 1), page([obj("a", 5), obj("b", 1)], 6)],
        [
            [{"type": "MODIFIED", "object": obj("a", 5)}, {"type": "MODIFIED", "object": obj("a", 7)}],
            [Gone(status=410, reason="Expired")],
            [{"type": "MODIFIED", "object": obj("a", 9)}],
        ],
    )
    informer = Informer(source, backoff=FAST)
    cached: list[tuple[str, str, str]] = []

    def handler(kind: str, o: dict[str, Any]) -> None:
        if (kind, o["metadata"]["resourceVersion"]) == ("ADDED", "1") and o["metadata"]["name"] == "a":
            informer.remember(obj("a", 7))  # our write: its answer came before the watch's older event
        now = informer.get(ObjectKey("ns", "a"))
        assert now is not None
        cached.append((kind, o["metadata"]["resourceVersion"], now["metadata"]["resourceVersion"]))

    informer.add_handler(handler)
    await run_until_idle(informer, source)
    # RV 5 (older than the remembered 7) neither replaced the cache nor was told; nor did the relist's copy of it.
    assert cached == [("ADDED", "1", "7"), ("MODIFIED", "7", "7"), ("ADDED", "1", "7"), ("MODIFIED", "9", "9")]
    assert informer.relists == 2
    assert source.watch_calls == ["1", "7", "6", "9"]


async def test_a_created_object_reads_as_cached_until_its_watch_event_or_a_relist_or_its_time_is_up() -> None:
    source = ScriptedSource(
        [page([], 1), page([obj("a", 3)], 9)],
        [[{"type": "ADDED", "object": obj("a", 3)}, {"type": "DELETED", "object": obj("b", 4)}], [Gone(status=410)]],
    )
    informer = Informer(source, backoff=Backoff(base=0.001, cap=0.001))
    informer.remember_created(obj("a", 2))  # our create's answer; the watch's event follows
    informer.remember_created(obj("b", 2))
    informer.remember_created(obj("c", 2))
    informer.remember_created(obj("d", 2), seconds=0)  # its time is up at once
    assert [informer.get(ObjectKey("ns", n)) is not None for n in "abcd"] == [True, True, True, False]
    assert informer.items() == []  # a listing shows only what the server said
    await run_until_idle(informer, source)
    current = informer.get(ObjectKey("ns", "a"))
    assert current is not None
    assert current["metadata"]["resourceVersion"] == "3"  # the event's, not ours
    assert informer.get(ObjectKey("ns", "b")) is None  # its deletion ends the assumption
    assert informer.get(ObjectKey("ns", "c")) is None  # the relist (after 410) is the truth
    informer.remember_created(obj("e", 12))
    informer.remember_created(obj("e", 13), seconds=0)  # a later answer for the same name replaces the first
    assert informer.get(ObjectKey("ns", "e")) is None


async def test_the_cache_keeps_what_the_transform_makes_of_listed_watched_and_remembered_objects() -> None:
    def with_spec(name: str, rv: int) -> dict[str, Any]:
        return {**obj(name, rv), "spec": {"big": name * 100}}

    source = ScriptedSource([page([with_spec("a", 1)], 1)], [[{"type": "ADDED", "object": with_spec("b", 2)}]])
    handed: list[dict[str, Any]] = []
    informer = Informer(
        source, on_event=lambda _, o: handed.append(o), transform=lambda o: {**o, "spec": len(o["spec"]["big"])}
    )
    await run_until_idle(informer, source)
    informer.remember({**with_spec("a", 3), "spec": {"big": "a"}})  # our write's newer response
    assert {k.name: o["spec"] for k, o in informer.store.items()} == {"a": 1, "b": 100}
    assert [o["spec"] for o in handed] == [100, 100], "handlers see what the cache keeps"


def owned(name: str, rv: int, owner: str) -> dict[str, Any]:
    o = obj(name, rv)
    o["metadata"]["ownerReferences"] = [{"uid": owner, "controller": True}]
    return o


def owner_uids(o: dict[str, Any]) -> list[str]:
    return [r["uid"] for r in o["metadata"].get("ownerReferences") or [] if r.get("controller")]


async def test_an_index_follows_adds_changes_deletes_and_relists() -> None:
    source = ScriptedSource(
        lists=[
            page([owned("a", 1, "u1"), owned("b", 2, "u1")], 10),
            page([owned("b", 2, "u1"), owned("c", 30, "u2")], 31),
        ],
        watches=[
            [
                {"type": "MODIFIED", "object": owned("a", 11, "u2")},  # a changes owner
                {"type": "DELETED", "object": owned("b", 12, "u1")},
                Gone(status=410, reason="Expired"),  # relist: b back, a gone, c new
            ]
        ],
    )
    informer = Informer(source)
    informer.add_index("owner", owner_uids)
    snapshots: list[tuple[list[str], list[str]]] = []

    def snapshot(kind: str, o: dict[str, Any]) -> None:  # the index is current when handlers run
        snapshots.append(
            ([k.name for k in informer.by_index("owner", "u1")], [k.name for k in informer.by_index("owner", "u2")])
        )

    informer.add_handler(snapshot)
    await run_until_idle(informer, source)
    assert snapshots[2:4] == [(["b"], ["a"]), ([], ["a"])]
    assert (informer.by_index("owner", "u1"), informer.by_index("owner", "u2")) == (
        [ObjectKey("ns", "b")],
        [ObjectKey("ns", "c")],
    )
    assert informer._indexes["owner"].keys() == {"u1", "u2"}, "an emptied value leaves the index"


async def test_a_handler_added_to_a_running_informer_first_gets_what_is_cached() -> None:
    source = ScriptedSource(
        lists=[page([obj("a", 1), obj("b", 2)], 10)], watches=[[{"type": "ADDED", "object": obj("c", 11)}]]
    )
    informer = Informer(source)
    early: list[tuple[str, str]] = []
    late: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, o: early.append((kind, o["metadata"]["name"])))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            await informer.synced.wait()
            informer.add_handler(lambda kind, o: late.append((kind, o["metadata"]["name"])))
            await source.done.wait()
            tg.cancel_scope.cancel()
    assert early == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert late == early, "the late handler saw the cached objects, then the rest"


def test_a_watch_error_event_is_raised_as_the_api_error_it_carries() -> None:
    from multikueue.kube.listwatch import event_of

    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 5 (9)"}
    with pytest.raises(Gone, match="too old resource version") as raised:
        event_of({"type": "ERROR", "object": expired})
    assert raised.value.status == 410
    added = {"type": "ADDED", "object": obj("a", 1)}
    assert event_of(added) == added
    assert event_of({"type": "BOOKMARK", "object": obj("", 7)})["type"] == "BOOKMARK"


async def test_the_first_lists_objects_and_a_late_handlers_replay_are_told_in_bulk_and_changes_are_not() -> None:
    """What a controller queues at low priority: every object of the first list and of a late handler's replay; a
    watch event, and what a relist after a gap finds changed, are changes someone made."""
    source = ScriptedSource(
        lists=[page([obj("a", 1), obj("b", 2)], 10), page([obj("b", 3), obj("c", 4)], 20)],
        watches=[[{"type": "ADDED", "object": obj("d", 11)}, Gone(status=410, reason="Expired")]],
    )
    informer = Informer(source, backoff=FAST)
    told: list[tuple[str, str, bool]] = []
    informer.add_handler(lambda kind, o: told.append((kind, o["metadata"]["name"], informer.initial)))
    await run_until_idle(informer, source)
    assert told[:3] == [("ADDED", "a", True), ("ADDED", "b", True), ("ADDED", "d", False)]
    assert sorted(told[3:]) == [("ADDED", "c", False), ("DELETED", "a", False), ("DELETED", "d", False),
                                ("MODIFIED", "b", False)]  # fmt: skip
    late: list[tuple[str, bool]] = []
    informer.add_handler(lambda kind, o: late.append((o["metadata"]["name"], informer.initial)))
    assert sorted(late) == [("b", True), ("c", True)]
    assert informer.initial is False
