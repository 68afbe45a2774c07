"""``hyperpod-debugger support-case`` on the simulated account: a node with two reboots and a recurring Xid."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.cli.main import main
from hyperpod_sim import agent_demo, scenarios


@pytest.fixture
def scene(clients, demo, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    monkeypatch.delenv("HYPERPOD_DEBUGGER_TABLE", raising=False)
    return agent_demo.seed_node_history(clients, demo, datetime.now(UTC))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_draft_names_the_node_its_fault_and_the_two_reboots(scene, capsys):
    code, out, err = run(
        capsys, "support-case", "--cluster", scene.cluster.name, "--node", scene.node, "--table", scene.table
    )
    assert code == 0, err
    assert out.startswith(f"# Draft AWS Support case: {scene.node} in {scene.cluster.name}")
    assert "It opens nothing" in out
    assert "| Instance type | ml.p5.48xlarge |" in out and "| Instance group | gpu-workers |" in out
    assert "### P0 FAIL: Xid 79" in out and agent_demo.XID_LINE in out  # the evidence, verbatim
    tried = out.split("## What was already tried", 1)[1].split("##", 1)[0]
    assert tried.count("**reboot**") == 2 and "2 reboot(s) and 0 replacement(s)" in tried
    history = out.split("## Finding history (newest first)", 1)[1].split("##", 1)[0]
    assert [line.split(": ", 1)[1].split()[0] for line in history.strip().splitlines()] == [
        "REOPENED",
        "RESOLVED",
        "NEW",
    ]
    checklist = out.split("## What Support asks for", 1)[1]
    assert "- [x] Cluster name, cluster ARN and Region." in checklist
    assert "- [ ] The triage report, scoped to the node" in checklist  # the person attaches it
    assert f"--node {scene.node} --json > triage.json" in checklist


def test_json_and_what_it_could_not_read(scene, capsys):
    code, out, err = run(capsys, "support-case", "--cluster", scene.cluster.arn, "--node", scene.node, "--json")
    assert code == 0, err
    case = json.loads(out)
    assert case["instance_id"] == scene.node and case["cluster_arn"] == scene.cluster.arn
    assert [a["kind"] for a in case["attempts"]] == ["reboot", "reboot"]
    assert case["findings"] == []  # no table given: no findings, and the draft says why
    assert any("no findings table" in gap for gap in case["gaps"])


def test_a_node_with_no_history_still_gets_a_draft_that_says_so(clients, demo, capsys, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    node = demo.eks.nodes["gpu-workers"][2]
    code, out, err = run(capsys, "support-case", "--cluster", demo.eks.name, "--node", node)
    assert code == 0, err
    assert "No open finding for this node" in out
    assert "No reboot or replacement among HyperPod's events" in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--cluster", "no-such-cluster", "--node", "i-0123456789abcdef0"], 1, "no HyperPod cluster"),
        (["--cluster", "ml-eks-prod", "--node", "node-7"], 2, "instance id"),
        (["--cluster", "ml-eks-prod", "--node", "i-0123456789abcdef0", "--days", "0"], 2, "--days"),
        (["--cluster", "ml-eks-prod", "--node", "i-0123456789abcdef0", "--table", "bad name!"], 2, "table"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(demo, capsys, monkeypatch, argv, code, message):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    got, _, err = run(capsys, "support-case", *argv)
    assert got == code
    assert message in err
