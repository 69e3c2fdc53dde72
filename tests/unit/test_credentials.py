"""kube/credentials.py without a cluster: credentials that rotate (a token file read again after a 401, an exec
plugin run again once its credential expires), and a plugin that fails as one retryable line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from multikueue.kube.credentials import Credentials
from multikueue.kube.errors import CredentialsUnavailable
from multikueue.kube.kubeconfig import ClusterAccess, ExecPlugin


async def test_a_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    credentials = Credentials(ClusterAccess(server="http://k:80", token_file=str(token)))
    assert await credentials.authorization() == "Bearer first"
    token.write_text("second")
    assert await credentials.authorization() == "Bearer first", "kept for a minute, not read per request"
    credentials.expire()
    assert await credentials.authorization() == "Bearer second"


def plugin_printing(tmp_path: Path, status: dict[str, Any]) -> ExecPlugin:
    """An exec plugin (a Python one-liner) that counts its runs in a file and prints an ExecCredential."""
    runs = tmp_path / "runs"
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                             "status": status})  # fmt: skip
    script = (
        "import os,pathlib,sys; p=pathlib.Path(sys.argv[1]); p.write_text(p.read_text()+'x' if p.exists() else 'x');"
        "assert '\"interactive\": false' in os.environ['KUBERNETES_EXEC_INFO'];"
        f"print(os.environ['PREFIX'] + {credential!r})"
    )
    return ExecPlugin(sys.executable, ("-c", script, str(runs)), (("PREFIX", ""),))


async def test_an_exec_plugin_runs_once_until_its_credential_expires_or_the_server_refuses_it(tmp_path: Path) -> None:
    plugin = plugin_printing(tmp_path, {"token": "t1", "expirationTimestamp": "2999-01-01T00:00:00Z"})
    credentials = Credentials(ClusterAccess(server="http://k:80", exec=plugin))
    assert [await credentials.authorization() for _ in range(3)] == ["Bearer t1"] * 3
    assert (tmp_path / "runs").read_text() == "x"
    credentials.expire()
    assert await credentials.authorization() == "Bearer t1"
    assert (tmp_path / "runs").read_text() == "xx"
    expired = plugin_printing(tmp_path, {"token": "t2", "expirationTimestamp": "2000-01-01T00:00:00Z"})
    credentials = Credentials(ClusterAccess(server="http://k:80", exec=expired))
    await credentials.authorization()
    await credentials.authorization()
    assert (tmp_path / "runs").read_text() == "xxxx", "an expired credential is asked for again"


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (ExecPlugin("/no/such/plugin", install_hint="install it"), "exec plugin '/no/such/plugin' cannot run"),
        (ExecPlugin(sys.executable, ("-c", "import sys; sys.exit('token expired, log in again')")),
         "failed: token expired, log in again"),
        (ExecPlugin(sys.executable, ("-c", "print('{}')")), "did not print an ExecCredential with a status"),
        (ExecPlugin(sys.executable, ("-c", "print('{\"status\": {}}')")), "returned neither a token nor"),
    ],
)  # fmt: skip
async def test_an_exec_plugin_that_fails_is_one_line(plugin: ExecPlugin, message: str) -> None:
    """A retryable error of its own (no credential just now), never a configuration error that ends a process."""
    with pytest.raises(CredentialsUnavailable) as raised:
        await Credentials(ClusterAccess(server="http://k:80", exec=plugin)).authorization()
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
