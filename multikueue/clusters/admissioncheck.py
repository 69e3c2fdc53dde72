"""The ``Active`` condition on AdmissionChecks that name this controller (Kueue's ACReconciler, same messages)."""

from __future__ import annotations

from typing import Any

from multikueue.kube import conditions
from multikueue.kube.addresses import ADMISSION_CHECKS, KUEUE
from multikueue.kube.resources import Objects
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.watches import Watch

ACTIVE = "Active"
Object = dict[str, Any]


def multikueue_config_name(check: Object) -> str:
    """The MultiKueueConfig an AdmissionCheck points at; ``ValueError`` in Kueue's words when it cannot."""
    ref = (check.get("spec") or {}).get("parameters")
    if not ref:
        raise ValueError("missing parameters reference")
    if not ref.get("name"):
        raise ValueError("empty name: bad parameters reference")
    if ref.get("apiGroup") != KUEUE:
        raise ValueError(f'wrong group "{ref.get("apiGroup", "")}", expecting "{KUEUE}": bad parameters reference')
    if ref.get("kind") != "MultiKueueConfig":
        raise ValueError(f'wrong kind "{ref.get("kind", "")}", expecting "MultiKueueConfig": bad parameters reference')
    return str(ref["name"])


def active_condition(check: Object, configs: Informer, clusters: Informer) -> Object:
    condition: Object = {
        "type": ACTIVE,
        "status": "True",
        "reason": "Active",
        "message": "The admission check is active",
        "observedGeneration": check["metadata"].get("generation"),
    }
    try:
        name = multikueue_config_name(check)
        config = configs.get(ObjectKey("", name))
        if config is None:
            raise ValueError(f'multikueueconfigs.kueue.x-k8s.io "{name}" not found')
    except ValueError as e:
        return {**condition, "status": "False", "reason": "BadConfig",
                "message": f"Cannot load the AdmissionChecks parameters: {e}"}  # fmt: skip
    names = (config.get("spec") or {}).get("clusters") or []
    missing = [n for n in names if clusters.get(ObjectKey("", n)) is None]
    inactive = [
        n for n in names if n not in missing and not conditions.is_true(clusters.store[ObjectKey("", n)], ACTIVE)
    ]
    if missing or inactive:
        parts = [f"Missing clusters: [{' '.join(missing)}]"] if missing else []
        parts += [f"Inactive clusters: [{' '.join(inactive)}]"] if inactive else []
        unusable = len(missing) + len(inactive)
        condition.update(
            status="True" if unusable < len(names) else "False",
            reason="SomeActiveClusters" if unusable < len(names) else "NoUsableClusters",
            message=", ".join(parts),
        )
    return condition


class AdmissionCheckReconciler:
    def __init__(
        self, controller_name: str, manager: Objects, checks: Informer, configs: Informer, clusters: Informer
    ) -> None:
        assert manager.resource == ADMISSION_CHECKS
        self.controller_name = controller_name
        self.manager = manager
        self.checks = checks
        self.configs = configs
        self.clusters = clusters

    def watches(self) -> list[Watch[str]]:
        return [
            Watch("AdmissionChecks", self.checks, lambda c: [c.obj["metadata"]["name"]]),
            Watch("MultiKueueConfigs (any change): this controller's checks", self.configs, lambda _: self.ours()),
            Watch("MultiKueueClusters (any change): this controller's checks", self.clusters, lambda _: self.ours()),
        ]

    def ours(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.checks.items() if self._is_ours(c)]

    def _is_ours(self, check: Object) -> bool:
        return bool((check.get("spec") or {}).get("controllerName") == self.controller_name)

    async def reconcile(self, name: str) -> Result:
        check = self.checks.get(ObjectKey("", name))
        if check is None or not self._is_ours(check):
            return Result()
        new = active_condition(check, self.configs, self.clusters)
        current = (check.get("status") or {}).get("conditions") or []
        if conditions.same_state(conditions.find(current, ACTIVE), new):
            return Result()
        patch = {
            "metadata": {"resourceVersion": check["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions.set_condition(current, new)},
        }
        self.checks.remember(await self.manager.patch_status(name, patch))
        return Result()
