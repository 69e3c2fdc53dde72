"""Kubernetes Events (core/v1) on the objects this controller acts on."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import structlog

from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError, describe

log = structlog.get_logger(__name__)


async def record(api: ApiClient, obj: dict[str, Any], *, type_: str, reason: str, message: str, component: str) -> None:
    """Best effort: an Event that cannot be written is logged, never fatal to a reconcile."""
    meta = obj["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    namespace = meta.get("namespace", "default")
    body: dict[str, Any] = {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta["name"],
            "namespace": meta.get("namespace"), "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_, "reason": reason, "message": message[:1024],
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }  # fmt: skip
    try:
        # The answer is not decoded: nothing reads it, and Events are the most frequent write of a burst.
        await api.send("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
    except KubeError as e:
        log.warning("event not recorded", reason=reason, error=describe(e))
