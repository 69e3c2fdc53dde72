"""ClusterProfiles on the test bed, and an exec access provider the tests write: workers reached as an inventory
(OCM, a cloud's fleet manager) publishes them."""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from multikueue.kube.addresses import CLUSTER_PROFILES
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import Conflict
from multikueue.kube.kubeconfig import EXEC_EXTENSION
from multikueue.kube.resources import Objects
from multikueue_testbed.testbed import Cluster

PLUGIN_API_VERSION = "client.authentication.k8s.io/v1"

# The plugin: logs what it was given (the ExecCredential request in KUBERNETES_EXEC_INFO), then answers with the
# credential in the file its cluster's exec extension names, or, without cluster info, the one $CREDENTIALS names.
_PLUGIN = """\
import json, os, sys
info = json.loads(os.environ.get("KUBERNETES_EXEC_INFO") or "{}")
try:  # who ran it (a test tells the controllers apart by their program)
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        info["runBy"] = os.path.basename(f.read().split(b"\\0")[0].decode())
except OSError:
    info["runBy"] = ""
with open(os.environ["PLUGIN_LOG"], "a") as log:
    log.write(json.dumps(info) + "\\n")
config = ((info.get("spec") or {}).get("cluster") or {}).get("config") or {}
path = config.get("credentials") or os.environ.get("CREDENTIALS")
if not path or not os.path.exists(path):
    sys.exit(f"no credentials for this cluster: {path!r}")
with open(path) as f:
    status = json.load(f)
print(json.dumps({"apiVersion": info.get("apiVersion", "API_VERSION"), "kind": "ExecCredential", "status": status}))
""".replace("API_VERSION", PLUGIN_API_VERSION)


def write_plugin(directory: Path) -> tuple[Path, Path]:
    """The plugin's executable and the log it appends each request to."""
    directory.mkdir(parents=True, exist_ok=True)
    plugin, log = directory / "access-plugin", directory / "access-plugin.log"
    plugin.write_text(f"#!{sys.executable}\n{_PLUGIN}")
    plugin.chmod(0o755)
    log.touch()
    return plugin, log


def write_credentials(path: Path, cluster: Cluster) -> Path:
    """The bed cluster's admin client certificate, as an ExecCredential's status."""
    user = cluster.kubeconfig["users"][0]["user"]
    fields = (("clientCertificateData", "client-certificate"), ("clientKeyData", "client-key"))
    status = {key: base64.b64decode(user[f"{field}-data"]).decode() for key, field in fields}
    path.write_text(json.dumps(status))
    return path


def requests_logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def profile_status(provider: str, cluster: Cluster, *, extension: dict[str, Any] | None = None,
                   server: str | None = None, deprecated: bool = False) -> dict[str, Any]:  # fmt: skip
    entry: dict[str, Any] = {
        "server": server or cluster.url,
        "certificate-authority-data": base64.b64encode(cluster.ca_pem).decode(),
    }
    if extension is not None:
        entry["extensions"] = [{"name": EXEC_EXTENSION, "extension": extension}]
    return {
        "credentialProviders" if deprecated else "accessProviders": [{"name": provider, "cluster": entry}],
        "conditions": [],
        "version": {},
    }


async def put_cluster_profile(api: ApiClient, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Create the ClusterProfile (or keep it) and write its status, as an inventory's controller does."""
    profiles = Objects(api, CLUSTER_PROFILES)
    body = {
        "apiVersion": CLUSTER_PROFILES.api_version,
        "kind": "ClusterProfile",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"x-k8s.io/cluster-manager": "multikueue-tests"}},
        "spec": {"displayName": name, "clusterManager": {"name": "multikueue-tests"}},
    }  # fmt: skip
    with contextlib.suppress(Conflict):  # it exists: only its status changes
        await profiles.create(body, namespace)
    result: dict[str, Any] = await profiles.patch_status(name, {"status": status}, namespace)
    return result
