"""The manager cluster's published schemas of the configured kinds, watched for as long as a generation runs.

At start, what they make impossible (a ``managedByPath`` a kind's schema drops: no object of it is ever dispatched)
is said in the log and where the configuration is (``manager_schemas.managed_by_problems``). When a kind's schema
changes (its CRD upgraded on the manager), the status fields the dispatch modes stopped mirroring because that
schema dropped them (``dispatch/mirror.py``) are tried again, for every object of the kind: no restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio
import structlog

from multikueue.config import Configuration
from multikueue.kube import openapi
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.manager_schemas import managed_by_problems, published_kinds
from multikueue.runtime.informer import Informer
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Change, KindChange

log = structlog.get_logger(__name__)
Warn = Callable[[str, str], Awaitable[None]]  # (reason, message): an Event where the configuration is


class Forgets(Protocol):
    """A dispatch mode's status mirror: the status fields a kind's schema dropped, remembered per kind."""

    def forget_kind(self, gvk: GroupVersionKind) -> bool: ...


class SchemaHeal:
    def __init__(
        self,
        api: ApiClient,
        config: Configuration,
        *,
        kinds: Mapping[GroupVersionKind, tuple[Informer, Any]],
        changes: Signal[KindChange],
        mirrors: Sequence[Forgets],
        warn: Warn,
    ) -> None:
        self.api, self.config, self.warn = api, config, warn
        self.kinds = kinds  # the configured kinds the manager serves, kept up to date as kinds are served late
        self.changes = changes  # where an object looked at again is told (the configured kinds' events)
        self.mirrors = mirrors
        self.digests: dict[GroupVersionKind, str] = {}  # each kind's published schema, as last seen

    async def run(self) -> None:
        """Say the problems once, and look for changed schemas every ``openapi.RECHECK_SECONDS`` until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(openapi.watch_changes, self.api, self.changed)
            tg.start_soon(self.say_problems)

    async def say_problems(self) -> None:
        """What the manager's schemas make impossible (a managedByPath they drop), where the configuration is."""
        schemas = await published_kinds(self.api, self.config.multi_kueue.gvks)
        self.digests = {gvk: schema.digest for gvk, schema in schemas.items()}
        for problem in managed_by_problems(self.config, schemas):
            log.warning("configuration cannot work with the manager's schema", problem=problem)
            await self.warn("ManagedByPathPruned", problem)

    async def changed(self, group_versions: set[str]) -> None:
        """A configured kind's published schema changed on the manager (its CRD upgraded): status fields it once
        dropped are mirrored again, for every object of the kind. Another kind's change in the same group version
        changes nothing."""
        kinds = [g for g in self.kinds if openapi.group_version_path(g.group, g.version) in group_versions]
        for gvk, schema in (await published_kinds(self.api, kinds)).items():
            if self.digests.get(gvk) == schema.digest:
                continue
            self.digests[gvk] = schema.digest
            forgot = [mirror.forget_kind(gvk) for mirror in self.mirrors]  # every mirror forgets, not only the first
            if any(forgot):
                log.info("the kind's schema changed on the manager: dropped status fields tried again", kind=str(gvk))
                for obj in self.kinds[gvk][0].items():  # every object of the kind looked at again
                    self.changes.emit(KindChange(gvk, Change("", obj, bulk=True)))
