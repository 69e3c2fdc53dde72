"""The admission webhook's answer (integration/webhook.py): a JSON patch that holds a created object, nothing for
the rest."""

from __future__ import annotations

import base64
import json
from typing import Any

from multikueue.config import parse_configuration
from multikueue.integration.webhook import review
from tests.unit.test_lifecycle import TEKTON, _run


def test_the_webhook_answers_create_with_a_json_patch_and_lets_the_rest_through() -> None:
    integrations = parse_configuration(TEKTON).integrations
    request: dict[str, Any] = {"request": {"uid": "r1", "operation": "CREATE", "object": _run(),
                           "kind": {"group": "tekton.dev", "version": "v1", "kind": "PipelineRun"}}}  # fmt: skip
    response = review(request, integrations)["response"]
    assert response["uid"] == "r1"
    assert response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"]))
    assert ops[0] == {"op": "add", "path": "/spec/status", "value": "PipelineRunPending"}
    request["request"]["operation"] = "UPDATE"
    assert "patch" not in review(request, integrations)["response"]
    request["request"]["operation"] = "CREATE"
    request["request"]["kind"]["kind"] = "TaskRun"
    assert "patch" not in review(request, integrations)["response"]
