"""The interop profile (#9): real Kueue, built from its Go module, on each cluster of a test bed of its own.

Opt-in (``make interop``): the first run builds Kueue (~10 min on 2 cores), later runs reuse the cached binary.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.pki import CertificateAuthority
from multikueue.testing import crds
from multikueue.testing.interop import KueueProcess, kueue_binary
from multikueue.testing.testbed import TestBed


def _progress(message: str) -> None:
    sys.stderr.write(f"[interop] {message}\n")
    sys.stderr.flush()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def kueue_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestBed, dict[str, KueueProcess]]]:
    binary = kueue_binary(_progress)
    definitions = crds.all_kueue_crds() + crds.tekton_crds()
    with TestBed() as bed:
        crds.install_on_bed(bed, definitions)
        ca = CertificateAuthority("kueue-webhooks")
        root = tmp_path_factory.mktemp("kueue")
        kueues = {name: KueueProcess(bed.cluster(name), binary, root / name) for name in bed.clusters}

        async def install() -> None:
            for name, kueue in kueues.items():
                async with await api_client_from_kubeconfig(bed.cluster(name).kubeconfig, temp_dir=root) as api:
                    await kueue.install(api, ca, ["PipelineRun.v1.tekton.dev"])

        anyio.run(install)
        try:
            for kueue in kueues.values():
                kueue.wait_ready()
            _progress(f"Kueue {crds.KUEUE_VERSION} ready on {', '.join(kueues)}")
            yield bed, kueues
        finally:
            for kueue in kueues.values():
                kueue.stop()


@pytest.fixture
async def clients(
    kueue_bed: tuple[TestBed, dict[str, KueueProcess]], tmp_path: Path
) -> AsyncIterator[dict[str, ApiClient]]:
    bed, _ = kueue_bed
    opened = {name: await api_client_from_kubeconfig(bed.cluster(name).kubeconfig, temp_dir=tmp_path)
              for name in bed.clusters}  # fmt: skip
    try:
        yield opened
    finally:
        for api in opened.values():
            await api.close()
