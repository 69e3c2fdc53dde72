"""End-to-end suite: the dispatcher as a separate process (or container, or Deployment), driven only through the
Kubernetes API. The provider comes from ``$MULTIKUEUE_E2E_PROVIDER`` (``local``, ``testcontainers``, ``kind``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from e2e.providers import CLUSTERS, Environment, ProviderUnavailable, environment
from e2e.wiring import wire
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig

# The kind scenarios need what only kind has (kubelets that run the step pods, node containers to pause) and
# leave nothing to play: there, test_dispatch.py's scenarios (written for providers where the suite plays Kueue
# and Tekton) give way to them.
if os.environ.get("MULTIKUEUE_E2E_PROVIDER", "local") == "kind":
    collect_ignore = ["test_dispatch.py", "interop"]
else:
    collect_ignore_glob = ["kind/test_*.py"]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def env() -> Iterator[Environment]:
    provider = environment()
    try:
        provider.start()
    except ProviderUnavailable as e:
        provider.stop()
        pytest.exit(f"e2e provider {provider.name} unavailable: {e}", returncode=3)
    except BaseException:
        provider.stop()
        raise
    try:
        wire(provider)
        yield provider
    finally:
        provider.stop()


@pytest.fixture
async def api(env: Environment) -> AsyncIterator[dict[str, ApiClient]]:
    """An admin client per cluster for one test, keyed by cluster name."""
    clients = {name: await api_client_from_kubeconfig(env.kubeconfig(name)) for name in CLUSTERS}
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.close()
