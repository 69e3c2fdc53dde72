"""A worker kubeconfig that is not YAML is said in one line (the MultiKueueCluster's Active condition, a worker's
line in ``workers`` and ``status``): the parser's position and problem, not the snippet and caret PyYAML prints."""

from __future__ import annotations

import pytest

from multikueue.clusters.worker_kubeconfig import BAD_KUBECONFIG, KubeconfigNotYaml, validate_kubeconfig

BROKEN = """apiVersion: v1
clusters:
- name: w1
  cluster: server: https://127.0.0.1:6443
"""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (BROKEN, "line 4, column 18: mapping values are not allowed here"),
        ("clusters: [", "line 1, column 12: expected the node content, but found '<stream end>'"),
        ("users: [{name: a}\ncontexts: []", "line 2, column 1: expected ',' or ']', but got '<scalar>'"),
        (b"current-context: \x07", "position 17: unacceptable character #x0007: special characters are not allowed"),
    ],
)
def test_a_kubeconfig_that_is_not_yaml_is_one_line_with_the_parsers_position(text: str | bytes, problem: str) -> None:
    with pytest.raises(KubeconfigNotYaml) as caught:
        validate_kubeconfig(text)
    assert caught.value.reason == BAD_KUBECONFIG
    assert caught.value.problem == problem
    assert str(caught.value) == f"failed to parse kubeconfig(apiconfig): {problem}"
    # What the cluster reconciler writes on the MultiKueueCluster's Active condition.
    assert "\n" not in f"load client config failed: {caught.value}"
