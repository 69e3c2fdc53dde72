"""What a worker's cache holds per Workload copy, with the spec kept whole or as a digest (``specdigest``).

    python -m bench.cachesize [--copies 1000]

Builds ``--copies`` Workload copies as a worker's API server returns them (status: admitted, conditions), for two
shapes of spec: the benchmark's (one pod set, one container) and a training job's (three pod sets whose templates
carry commands, environment, volumes and tolerations, as a JobSet's or RayJob's do). Each passes through the
informer's trimming (``compact``: keys and short strings shared) with and without the ``transform`` the worker
connections use, and the memory the cache keeps is traced (``tracemalloc``). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from typing import Any

from multikueue import specdigest
from multikueue.runtime.informer import compact
from multikueue_testbed.kueue import workload_for

Object = dict[str, Any]


def _container(name: str, index: int) -> Object:
    return {
        "name": name,
        "image": f"registry.example.com/team/{name}:v1.{index}",
        "command": ["python", "-m", "trainer", "--epochs", "10", "--checkpoint-dir", "/ckpt"],
        "env": [{"name": f"VAR_{k}", "value": f"value-{k}-of-{name}"} for k in range(6)],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "ckpt", "mountPath": "/ckpt"}],
    }


def training_spec(index: int) -> Object:
    """Three pod sets (driver, workers, evaluator) with templates as a training job's are."""
    pod_sets = []
    for name, count in (("driver", 1), ("workers", 8), ("evaluator", 2)):
        template = {
            "metadata": {"labels": {"app": "trainer", "role": name}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [_container(name, index)],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}},
                    {"name": "ckpt", "emptyDir": {}},
                ],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodeSelector": {"pool": "training"},
            },
        }
        pod_sets.append({"name": name, "count": count, "template": template})
    return {"queueName": "training", "priority": 100, "active": True, "podSets": pod_sets}


def copy_of(index: int, shape: str) -> Object:
    uid = f"{index:08d}-0000-4000-8000-000000000000"
    meta = {"name": f"run-{index:05d}", "namespace": "bench", "uid": uid}
    owner = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": meta}
    workload = workload_for(owner)
    if shape == "training":
        workload["spec"] = training_spec(index)
    workload["metadata"].update(resourceVersion=str(1000 + index), uid=f"{index:08d}-1111-4000-8000-000000000000",
                                creationTimestamp="2026-11-25T10:00:00Z")  # fmt: skip
    workload["status"] = {
        "conditions": [{"type": t, "status": "True", "reason": t, "message": f"{t} on the worker",
                        "lastTransitionTime": "2026-11-25T10:00:01Z", "observedGeneration": 1}
                       for t in ("QuotaReserved", "Admitted")],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1,
                      "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}]},
    }  # fmt: skip
    decoded: Object = json.loads(json.dumps(workload))  # as read from the wire: no strings shared yet
    return decoded


def held(shape: str, copies: int, *, digest: bool) -> int:
    """Bytes the cache keeps for ``copies`` copies of ``shape``."""
    decoded = [copy_of(i, shape) for i in range(copies)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = [compact(specdigest.summarized(w) if digest else w) for w in decoded]
    del decoded
    size: int = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del cache
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cachesize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=1000)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"copies": args.copies}
    for shape in ("bench", "training"):
        spec_bytes = len(json.dumps(copy_of(0, shape)["spec"], separators=(",", ":")))
        whole, digest = held(shape, args.copies, digest=False), held(shape, args.copies, digest=True)
        result[shape] = {"spec_json_bytes": spec_bytes, "whole_kib_per_copy": round(whole / args.copies / 1024, 2),
                         "digest_kib_per_copy": round(digest / args.copies / 1024, 2),
                         "saved_mib_per_1000": round((whole - digest) / args.copies * 1000 / 2**20, 2)}  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
