"""The modules import-linter lets import aiohttp outside kube/ (pyproject.toml) use its server only: a client error
raised there would escape kube/'s error types."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import multikueue

SERVERS = ("endpoints.py", "integration/webhook.py")


def aiohttp_imports(source: str) -> list[str]:
    """Every aiohttp module or name a module imports, as ``aiohttp.x``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "aiohttp"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiohttp":
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


@pytest.mark.parametrize("module", SERVERS)
def test_the_http_servers_import_only_aiohttps_server(module: str) -> None:
    imported = aiohttp_imports((Path(multikueue.__file__).parent / module).read_text())
    assert imported, f"{module} no longer uses aiohttp: drop it from the contract's ignore_imports"
    assert all(name == "aiohttp.web" or name.startswith("aiohttp.web.") for name in imported), imported


def test_a_client_import_is_seen() -> None:
    assert aiohttp_imports("import aiohttp\nfrom aiohttp import web, ClientError") == [
        "aiohttp", "aiohttp.web", "aiohttp.ClientError",
    ]  # fmt: skip
