"""Requests counted by the kube-apiservers themselves: one audit event per request made by the identities measured.

Kueue's manager does not expose client-go's request counter (another package registers client-go's metrics
first, so controller-runtime's ``rest_client_requests_total`` stays empty), and a process's own counter is its own
word. The apiservers' audit log is neutral and the same for every controller: each measured controller talks to
every cluster as a ServiceAccount of its own (bound to cluster-admin), the audit policy records only those users,
at Metadata level, once per request (stage ResponseComplete), and the bench counts the events per cluster and verb.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.testbed import Cluster

LOG = "audit.log"


def apiserver_args(directory: Path, users: list[str]) -> list[str]:
    """kube-apiserver flags: the policy (written into ``directory``) and a log in each cluster's own directory."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata", "users": users}, {"level": "None"}],
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "audit-policy.json"
    path.write_text(json.dumps(policy))
    return [f"--audit-policy-file={path}", f"--audit-log-path={{directory}}/{LOG}", "--audit-log-maxsize=0"]


def user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


async def identity(api: ApiClient, cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """A kubeconfig for ServiceAccount ``namespace/name`` on ``cluster``, bound to cluster-admin."""
    binding = {
        "metadata": {"name": f"{namespace}-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    try:
        await k8s_client.RbacAuthorizationV1Api(k8s(api)).create_cluster_role_binding(raw_body(binding))
    except ApiException as e:
        if e.status != 409:
            raise
    return await mint_service_account_kubeconfig(api, cluster, namespace=namespace, name=name, expiration_seconds=86400)


class Counter:
    """Audit events per cluster, user and verb since ``mark()``."""

    def __init__(self, clusters: dict[str, Cluster]) -> None:
        self.clusters = clusters  # report name -> the bed's cluster
        self.offsets: dict[str, int] = {}

    def _path(self, name: str) -> Path:
        return self.clusters[name].directory / LOG

    def mark(self) -> None:
        self.offsets = {n: (p.stat().st_size if (p := self._path(n)).exists() else 0) for n in self.clusters}

    def count(self, *, by_resource: bool = False) -> dict[str, dict[str, dict[str, int]]]:
        """{user: {cluster: {verb: requests}}} since the mark; a request that failed is counted once more under
        "<verb> <code>" (e.g. "patch 409": conflicts). ``by_resource``: "<verb> <resource>[/<subresource>]"
        instead of the verb (the mix bench/ceiling.py replays). A partly written last line is left for later."""
        counts: dict[str, dict[str, dict[str, int]]] = {}
        for name in self.clusters:
            path = self._path(name)
            if not path.exists():
                continue
            with path.open("rb") as log:
                log.seek(self.offsets.get(name, 0))
                for line in log.read().splitlines():
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    verbs = counts.setdefault(event["user"]["username"], {}).setdefault(name, {})
                    verb = f"{event['verb']} {_resource(event)}" if by_resource else event["verb"]
                    verbs[verb] = verbs.get(verb, 0) + 1
                    code = (event.get("responseStatus") or {}).get("code", 0)
                    if code >= 400:
                        failed = f"{verb} {code}"
                        verbs[failed] = verbs.get(failed, 0) + 1
        return counts


def _resource(event: dict[str, Any]) -> str:
    """The resource an audit event is about: ``workloads``, ``workloads/status``, or the path of a non-resource
    request (``/version``)."""
    ref = event.get("objectRef") or {}
    if not ref.get("resource"):
        return str(event.get("requestURI", "")).split("?", 1)[0]
    return str(ref["resource"]) + (f"/{ref['subresource']}" if ref.get("subresource") else "")


def creates_by_name(cluster: Cluster, user: str, resource: str) -> dict[str, tuple[int, int]]:
    """Creates of ``resource`` by ``user`` on ``cluster``, by object name, over the whole audit log: (answered 2xx,
    outcome unknown). A create answered 5xx or not at all (its client gave up, e.g. while etcd was paused) may still
    have been carried out: it is counted apart, never as "not created"."""
    path = cluster.directory / LOG
    created: dict[str, tuple[int, int]] = {}
    if not path.exists():
        return created
    with path.open("rb") as log:
        for line in log:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            ref = event.get("objectRef") or {}
            if (event.get("verb") != "create" or ref.get("resource") != resource or ref.get("subresource")
                    or event["user"]["username"] != user):  # fmt: skip
                continue
            code = (event.get("responseStatus") or {}).get("code", 0)
            done, unknown = created.get(ref.get("name") or "?", (0, 0))
            if 200 <= code < 300:
                done += 1
            elif code >= 500 or code == 0:
                unknown += 1
            created[ref.get("name") or "?"] = (done, unknown)
    return created
