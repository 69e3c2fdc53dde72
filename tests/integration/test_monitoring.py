"""The monitoring that ships (config/monitoring): the alerts checked and unit-tested by promtool, and a real
Prometheus (both built from its Go module) scraping a running dispatcher on the bed, where every alert and every
dashboard expression evaluates and returns data."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml

from multikueue.config import Webhook
from multikueue_testbed import kueue, scrape
from multikueue_testbed.interop import prometheus_binary
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario
from tests.integration.webhooks import configuration, serving_replica, webhook_configuration

ROOT = Path(__file__).parents[2]
MONITORING = ROOT / "config" / "monitoring"
COMPARISON = re.compile(r"\s(>|<|==|!=|>=|<=)\s[0-9.]+$")


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def _write_rules(directory: Path) -> Path:
    """The PrometheusRule's groups as a plain rules file (what the Prometheus Operator hands Prometheus)."""
    document = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": document["spec"]["groups"]}))
    return path


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


async def test_promtool_checks_the_rules_and_their_unit_tests_pass(tmp_path: Path) -> None:
    promtool = str(prometheus_binary("promtool"))
    _write_rules(tmp_path)
    shutil.copy(ROOT / "tests" / "monitoring" / "rules_test.yaml", tmp_path / "rules_test.yaml")
    for args in (("check", "rules", "rules.yaml"), ("test", "rules", "rules_test.yaml")):
        done = await anyio.run_process([promtool, *args], cwd=tmp_path, check=False)
        output = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{output}"
        assert "SUCCESS" in output, output


@pytest.fixture
async def token(scenario: Scenario) -> str:
    """A ServiceAccount token multikueue-metrics-reader allows (what Prometheus's own is, bound as shipped)."""
    return await scrape.metrics_reader_token(scenario.api["manager"], namespace=scenario.namespace)


@pytest.fixture
def prometheus(scenario: Scenario, token: str, tmp_path: Path) -> Iterator[str]:
    """A real Prometheus scraping the scenario's dispatcher every second, evaluating the shipped rules; its URL.

    As the shipped ServiceMonitor has it: HTTPS, with a ServiceAccount token that multikueue-metrics-reader allows
    (the dispatcher's generated CA trusted here, where the ServiceMonitor skips verification)."""
    assert scenario.manager is not None
    assert scenario.manager.endpoints is not None
    served = scenario.manager.endpoints
    assert served.ca_pem is not None
    _write_rules(tmp_path)
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(served.ca_pem)
    job = {
        "job_name": "multikueue",
        "scheme": "https",
        "authorization": {"credentials_file": "token"},
        "tls_config": {"ca_file": "ca.crt"},
        "static_configs": [{"targets": [f"127.0.0.1:{served.metrics_port}"]}],
    }
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": ["rules.yaml"],
              "scrape_configs": [job]}  # fmt: skip
    (tmp_path / "prometheus.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [str(prometheus_binary("prometheus")), f"--config.file={tmp_path / 'prometheus.yaml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    with (tmp_path / "prometheus.log").open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


async def _query(url: str, expression: str) -> list[Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(f"{url}/api/v1/query", params={"query": expression}) as response,
    ):
        body = await response.json()
    assert body["status"] == "success", (expression, body)
    return list(body["data"]["result"])


async def _answers(url: str, expression: str) -> list[Any]:
    try:
        return await _query(url, expression)
    except aiohttp.ClientError:
        return []  # not serving yet


async def test_a_real_prometheus_finds_data_for_every_alert_and_dashboard_expression(
    scenario: Scenario, prometheus: str
) -> None:
    s = scenario
    # A ClusterQueue on worker2, for the fleet panel (listed every 30 s; the scrape waits below cover it).
    fleet = f"{s.namespace}-fleet"
    await kueue.queues(s.api["worker2"], s.namespace, local_queue="fleet", cluster_queue=fleet, flavor=fleet,
                       check=None, quota={"cpu": "8"}, namespace_selector={})  # fmt: skip
    # Something to measure: a run dispatched, admitted, its status mirrored, finished; then a worker's API server
    # gone for a moment (failed requests to it).
    wl_name = await s.run_to_the_end("watched", "worker2")
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "finished and cleaned")
    await eventually(lambda: _answers(prometheus, 'up{job="multikueue"} == 1'), timeout=60, what="scraped")
    # A run no worker's Kueue can fit: counted as waiting for a worker.
    _, stuck = await s.submit("stuck")
    await s.copied(stuck["metadata"]["name"])
    for worker in ("worker1", "worker2"):
        await kueue.pending(s.api[worker], stuck["metadata"]["name"], s.namespace, "insufficient quota for cpu")
    await eventually(lambda: _answers(prometheus, 'multikueue_runs_waiting_for_a_worker{mode="Kueue"} == 1'),
                     timeout=60, what="the stuck run counted")  # fmt: skip
    s.bed.stop_apiserver("worker1", kill=True)
    try:
        await eventually(lambda: _answers(prometheus, "multikueue_api_errors_total"), timeout=90,
                         what="failed requests to the stopped worker, scraped")  # fmt: skip
    finally:
        s.bed.start_apiserver("worker1")

    # The admission webhook, as config/integration serves it, counted in the dispatcher's metrics.
    assert s.manager is not None
    name = f"multikueue-{s.namespace}"
    options = Webhook(host="127.0.0.1", port=0, hosts=("127.0.0.1",), configuration_name=name)
    async with (
        serving_replica(s.api["manager"], s.namespace, options, s.manager.metrics) as webhook,
        webhook_configuration(s.api["manager"], configuration(name, s.namespace, f"https://127.0.0.1:{webhook.port}",
                                                               None)),
    ):  # fmt: skip
        expressions = [COMPARISON.sub("", rule["expr"]) for rule in _rules()] + _dashboard_expressions()
        for expression in expressions:  # the alerts' expressions less their thresholds: the measured values
            await eventually(lambda e=expression: _answers(prometheus, e), timeout=60, what=f"data for {expression}")  # type: ignore[misc]

    async def rules() -> list[Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{prometheus}/api/v1/rules") as response:
            body = await response.json()
        return [r for group in body["data"]["groups"] for r in group["rules"]]

    evaluated = await eventually(rules, until=lambda found: len(found) == len(_rules())
                                 and all(r.get("lastEvaluation", "").startswith("2") for r in found),
                                 timeout=60, what="every rule evaluated")  # fmt: skip
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in evaluated] == [
        (rule["alert"], "ok", "") for rule in _rules()
    ]
