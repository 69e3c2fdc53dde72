"""Restricted identities on a test-bed cluster: a ServiceAccount and a kubeconfig that acts as it (RBAC tests), or
its bare token (a scraper of the dispatcher's /metrics)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.testbed import Cluster, kubeconfig_document


async def service_account_token(api: ApiClient, *, namespace: str, name: str, expiration_seconds: int = 3600) -> str:
    """A bound token (TokenRequest, as ``kubectl create token``) for the ServiceAccount, created if needed."""
    core = k8s_client.CoreV1Api(k8s(api))
    try:
        await core.create_namespaced_service_account(namespace, raw_body({"metadata": {"name": name}}))
    except ApiException as e:
        if e.status != 409:
            raise
    request = await core.create_namespaced_service_account_token(
        name, namespace, raw_body({"spec": {"expirationSeconds": expiration_seconds}})
    )
    return str(request.status.token)


async def bind_cluster_role(api: ApiClient, role: str, *, namespace: str, name: str) -> str:
    """A ClusterRoleBinding of ``role`` to the ServiceAccount; its name (delete it when done)."""
    binding = f"{role}-{namespace}-{name}"
    body = {"metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}  # fmt: skip
    rbac = k8s_client.RbacAuthorizationV1Api(k8s(api))
    try:
        await rbac.create_cluster_role_binding(raw_body(body))
    except ApiException as e:
        if e.status != 409:
            raise
    return binding


async def mint_service_account_kubeconfig(
    api: ApiClient,
    cluster: Cluster,
    *,
    namespace: str,
    name: str,
    expiration_seconds: int = 3600,
) -> dict[str, Any]:
    """Create the ServiceAccount if needed and return a kubeconfig with a bound token for it.

    The account has no permissions beyond what RBAC objects grant it, so a test can prove exactly which
    Roles a component needs. Tokens come from the TokenRequest API, as ``kubectl create token`` does.
    """
    token = await service_account_token(api, namespace=namespace, name=name, expiration_seconds=expiration_seconds)
    return kubeconfig_document(f"{cluster.name}-{namespace}-{name}", cluster.url, ca_pem=cluster.ca_pem,
                               user={"token": token})  # fmt: skip
