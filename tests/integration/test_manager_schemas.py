"""The manager's published schema against the configuration: a kind whose schema has no field at managedByPath
(PyTorchJob v1.8.1, LeaderWorkerSet) is said at start and on reload, and the annotation recipe dispatches it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.kube import openapi
from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.labels import PLACEMENT_WORKER
from multikueue.process import Process
from multikueue.reload import ConfigSource, load_configuration
from multikueue_testbed import TestBed, crds
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import widget_crd
from multikueue_testbed.waiting import eventually
from tests.integration.clusters import Harness

GROUP = "gizmo.multikueue.x-k8s.io"
KIND = f"Gizmo.v1.{GROUP}"
GIZMOS = Resource(GROUP, "v1", "gizmos", "Gizmo")
ANNOTATION = "multikueue.x-k8s.io/managed-by"


def gizmo_crd() -> dict[str, Any]:
    """A kind whose spec is a closed schema without managedBy (what PyTorchJob v1.8.1 is for runPolicy)."""
    crd = widget_crd(strict_status=False, group=GROUP, kind="Gizmo")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    schema["spec"] = {"type": "object", "properties": {"size": {"type": "integer"}}}
    return crd


def document(namespace: str, managed_by_path: str) -> dict[str, Any]:
    text = yaml.safe_dump({
        "multiKueue": {"externalFrameworks": [{"name": KIND}]},
        "dispatcher": {"namespace": namespace, "workerClient": {"timeout": "3s"},
                       "adapters": [{"name": KIND, "mode": "Direct", "managedByPath": managed_by_path}]},
    })  # fmt: skip
    return {"data": {"config.yaml": text}}


async def test_a_managed_by_path_the_manager_schema_drops_is_said_and_the_annotation_recipe_dispatches(
    testbed: TestBed, manager_api: ApiClient, worker1_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    await crds.install_crds(manager_api, [gizmo_crd()])
    await crds.install_crds(worker1_api, [gizmo_crd()])
    await eventually(lambda: openapi.kind_schema(manager_api, GROUP, "v1", "Gizmo"), until=lambda s: s is not None,
                     what="the Gizmo schema published")  # fmt: skip
    core = k8s_client.CoreV1Api(k8s(manager_api))
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "mk"},
                                                        **document(namespace, ".spec.managedBy")})  # fmt: skip
    source = ConfigSource(namespace, "mk", "config.yaml")
    config = await load_configuration(manager_api, source.namespace, source.name, source.key)
    h = Harness(testbed, manager_api, namespace)
    manager = Process(manager_api, config, temp_dir=tmp_path / "certs", config_source=source)

    async def told() -> list[Any]:
        events = await core.list_namespaced_event(namespace, field_selector="involvedObject.name=mk")
        return [e for e in events.items if e.reason == "ManagedByPathPruned"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(30):
            await manager.started.wait()
        said = await eventually(told, until=bool, what="ManagedByPathPruned on the ConfigMap")
        assert said[0].type == "Warning"
        assert said[0].message.startswith(
            "Gizmo: the manager's Gizmo schema has no field at managedByPath .spec.managedBy: the API server drops it"
        ), said[0].message
        assert '.metadata.annotations["multikueue.x-k8s.io/managed-by"]' in said[0].message

        # The recipe the message gives: the annotation carries managedBy, and the object is placed on a worker.
        path = f'.metadata.annotations["{ANNOTATION}"]'
        await core.patch_namespaced_config_map("mk", namespace, document(namespace, path))
        await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
        await h.add_cluster("worker1", "w1")
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Gizmo",
                "metadata": {"name": "g", "annotations": {ANNOTATION: "kueue.x-k8s.io/multikueue"}},
                "spec": {"size": 1}}  # fmt: skip
        await Objects(manager_api, GIZMOS).create(body, namespace)

        def placed_on(o: Any) -> bool:
            return PLACEMENT_WORKER in (((o or {}).get("metadata") or {}).get("annotations") or {})

        placed = await eventually(lambda: Objects(manager_api, GIZMOS).get("g", namespace), until=placed_on,
                                  timeout=60, what="the Gizmo placed")  # fmt: skip
        assert placed is not None
        assert placed["metadata"]["annotations"][PLACEMENT_WORKER] == h.name("worker1")
        copy = await eventually(lambda: Objects(worker1_api, GIZMOS).get("g", namespace), until=lambda o: o is not None,
                                timeout=60, what="the copy on worker1")  # fmt: skip
        assert copy is not None
        assert ANNOTATION not in (copy["metadata"].get("annotations") or {})  # so the worker's controller runs it
        assert len(await told()) == 1  # the reload's own check found nothing to say
        tg.cancel_scope.cancel()
    await h.clusters.delete(h.name("worker1"))  # cluster-scoped: it would outlive the test
