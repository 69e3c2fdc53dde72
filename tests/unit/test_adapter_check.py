"""``multikueue adapter check``: the offline rendering of one object, good and bad inputs, and the report's wording."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from multikueue.cli import main
from multikueue.commands.adapter_check import check
from multikueue.config import parse_configuration
from multikueue_testbed.objects import pipelinerun

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "examples" / "tekton" / "adapter-config.yaml"
EXAMPLE = ROOT / "examples" / "tekton" / "pipelinerun.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["adapter", "check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, document: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_the_example_renders_a_copy_and_a_status_patch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    example["spec"]["status"] = "Cancelled"
    worker = {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": "hello", "namespace": "team-a"},
        "spec": {},
        "status": {"conditions": [{"type": "Succeeded", "status": "False", "reason": "Cancelled"}]},
    }
    code, out, _ = run(
        capsys, "--config", str(CONFIG), "--object", write(tmp_path, "o.yaml", example),
        "--worker", write(tmp_path, "w.yaml", worker),
    )  # fmt: skip
    assert code == 0, out
    sections = dict(s.split("\n", 1) for s in out.strip().split("\n\n## "))
    copy = yaml.safe_load(
        "\n".join(line[2:] for line in sections["worker copy (created on the admitting worker)"].splitlines())
    )
    assert "managedBy" not in copy["spec"]
    assert copy["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert "status: Cancelled" in sections["spec sync (merge patch to the worker, against the worker object given)"]
    assert "reason: Cancelled" in sections["status mapping (merge patch to the manager's /status)"]
    assert sections["failed (on the worker object)"].strip().startswith("holds")
    assert out.rstrip().endswith("## problems\n  none")


def test_an_object_not_managed_and_a_kind_not_configured_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    del example["spec"]["managedBy"]
    code, out, _ = run(capsys, "--config", str(CONFIG), "--object", write(tmp_path, "o.yaml", example))
    assert code == 1
    assert 'Expecting .spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""' in out
    assert "its Workload would be Rejected" in out

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"}, "spec": {}}
    code, out, _ = run(capsys, "--config", str(CONFIG), "--object", write(tmp_path, "j.yaml", job))
    assert code == 1
    assert "kind Job.v1.batch is not in multiKueue.externalFrameworks (PipelineRun.v1.tekton.dev)" in out


def test_a_bad_configuration_or_file_stops_with_the_field_or_path_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(
        tmp_path,
        "c.yaml",
        {"multiKueue": {"externalFrameworks": [{"name": "PipelineRun.v1.tekton.dev"}]},
         "dispatcher": {"adapters": [{"name": "PipelineRun.v1.tekton.dev", "suspended": {"path": ".spec.status"}}]}},
    )  # fmt: skip
    code, _, err = run(capsys, "--config", bad, "--object", str(EXAMPLE))
    assert code == 2
    assert "dispatcher.adapters[0].suspended.path: needs exactly one of equals, in, notIn, exists" in err

    missing = str(tmp_path / "absent.yaml")
    code, _, err = run(capsys, "--config", str(CONFIG), "--object", missing)
    assert code == 2
    assert f"cannot read the object {missing}" in err


def test_the_offline_check_names_the_right_spelling_and_the_modes_outcome() -> None:
    config = parse_configuration("""
multiKueue: {externalFrameworks: [{name: pipelinerun.v1.tekton.dev}]}
dispatcher: {adapters: [{name: pipelinerun.v1.tekton.dev, mode: Direct}]}
""")
    run = pipelinerun("hello", managedBy="kueue.x-k8s.io/multikueue")
    run["metadata"]["namespace"] = "ns"
    problems = check(config, run).problems
    assert len(problems) == 1
    assert 'configured as "pipelinerun.v1.tekton.dev": kinds are case-sensitive' in problems[0]
    assert "PipelineRun.v1.tekton.dev" in problems[0]


def test_the_offline_check_previews_a_direct_mode_copy_without_workload_notes() -> None:
    config = parse_configuration("""
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher: {adapters: [{name: PipelineRun.v1.tekton.dev, mode: Direct}]}
""")
    run = pipelinerun("hello", managedBy="kueue.x-k8s.io/multikueue")
    run["metadata"].update(namespace="ns", uid="u-1")
    report = check(config, run)
    copy = next(body for title, body in report.sections if title.startswith("worker copy"))
    assert "prebuilt-workload-name" not in copy
    assert "placed worker (Direct mode)" in next(t for t, _ in report.sections if t.startswith("worker copy"))
