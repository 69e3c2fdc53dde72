"""One informer per resource of a cluster, shared by every controller of the process that reads it.

As client-go's SharedInformerFactory: the dispatcher and the integration both read the manager's Workloads and
PipelineRuns; each adds its handlers (and the indexes it needs) to the one informer, so the process holds one
cache and one watch per resource, not one per reader.
"""

from __future__ import annotations

import anyio.abc

from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import Informer


class SharedInformers:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._informers: dict[tuple[str, str, str], Informer] = {}
        self._started: set[tuple[str, str, str]] = set()

    def of(self, resource: Resource, *, label_selector: str = "") -> Informer:
        """The informer over the objects of ``resource`` in all namespaces (those ``label_selector`` selects), made
        on first use."""
        key = (resource.group, resource.plural, label_selector)
        if (informer := self._informers.get(key)) is None:
            source = Objects(self.api, resource).source(label_selector=label_selector or None)
            informer = self._informers[key] = Informer(source)
        return informer

    def start(self, task_group: anyio.abc.TaskGroup) -> list[Informer]:
        """Run, in ``task_group``, every informer made so far that no one has started; returns them all."""
        for key, informer in self._informers.items():
            if key not in self._started:
                self._started.add(key)
                task_group.start_soon(informer.run)
        return list(self._informers.values())

    async def synced(self) -> None:
        """Until every informer made so far has listed once."""
        for informer in list(self._informers.values()):
            await informer.synced.wait()

    def __len__(self) -> int:
        return len(self._informers)


__all__ = ["SharedInformers"]
