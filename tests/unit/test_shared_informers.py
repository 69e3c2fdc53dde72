"""One informer per resource: readers of the same resource get the same informer, and it is started once."""

from __future__ import annotations

import anyio

from multikueue.kube.addresses import WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.runtime.shared import SharedInformers


async def test_readers_of_one_resource_share_one_informer_started_once() -> None:
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    try:
        informers = SharedInformers(api)
        first = informers.of(WORKLOADS)
        discovered = Resource(WORKLOADS.group, WORKLOADS.version, WORKLOADS.plural, WORKLOADS.kind)
        assert informers.of(discovered) is first, "the same resource, found again by discovery"
        other = informers.of(Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun"))
        assert other is not first
        assert len(informers) == 2
        selected = informers.of(WORKLOADS, label_selector="team=a")
        assert selected is not first, "a shard's selection is an informer of its own"
        assert informers.of(WORKLOADS, label_selector="team=a") is selected
        assert len(informers) == 3
        async with anyio.create_task_group() as tg:
            assert informers.start(tg) == [first, other, selected]
            informers.start(tg)  # a second reader starting them again starts nothing twice
            await anyio.wait_all_tasks_blocked()  # both runs began (a second run of one informer would raise)
            assert first.running
            assert other.running
            assert selected.running
            tg.cancel_scope.cancel()
    finally:
        await api.close()
