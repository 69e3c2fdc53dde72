"""The import contracts (pyproject.toml) stay as strict as they are: each forbidden contract counts indirect imports,
and the lists meant to name every application module do. The modules import-linter lets import aiohttp outside
kube/ use its server only: a client error raised there would escape kube/'s error types."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

import pytest

import multikueue

SERVERS = ("endpoints.py", "integration/webhook.py")
PACKAGE = Path(multikueue.__file__).parent


def contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def contract(name_starts: str) -> dict[str, Any]:
    [found] = [c for c in contracts() if c["name"].startswith(name_starts)]
    return found


def application_modules() -> set[str]:
    """Every top-level module and package of multikueue/, the test bed included."""
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    return {f"multikueue.{name}" for name in names}


def test_every_forbidden_contract_counts_indirect_imports() -> None:
    forbidden = [c for c in contracts() if c["type"] == "forbidden"]
    assert len(forbidden) >= 5
    assert [c["name"] for c in forbidden if c.get("allow_indirect_imports") is not False] == []


def test_the_contracts_meant_to_name_every_module_do() -> None:
    """A module added later is covered without anyone remembering to list it."""
    product = application_modules()  # the test bed is a distribution of its own (testbed/)
    assert set(contract("The product imports no test bed")["source_modules"]) == product
    assert set(contract("aiohttp is reached only")["source_modules"]) == product - {"multikueue.kube"}
    assert set(contract("kube/ imports no application module")["forbidden_modules"]) == application_modules() - {
        "multikueue.kube"
    }
    assert set(contract("runtime/ knows nothing")["forbidden_modules"]) == application_modules() - {
        "multikueue.kube",
        "multikueue.runtime",
    }


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
