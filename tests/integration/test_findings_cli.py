"""``hyperpod-debugger findings``: list, history, sweeps and ack against the findings table on moto."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.cli.main import main
from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.lifecycle.findings import State, plan_sweep
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import scenarios

TABLE = "hyperpod-debugger-findings"
NODE = "i-0123456789abcdef0"


@pytest.fixture
def seeded(clients, demo, monkeypatch):
    """The demo clusters on moto and, for the EKS one, a P0 node finding and a P1 cluster-wide one."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    create_table(clients, TABLE)
    cluster = demo.eks
    findings = [
        Finding(
            tag=Tag.FAIL,
            priority=Priority.P0,
            check="probe.xid",
            section="F",
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
            instance_id=NODE,
            message="Xid 79 (GPU has fallen off the bus)",
            evidence=["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."],
        ),
        Finding(
            tag=Tag.FAIL,
            priority=Priority.P1,
            check="vpc.dns",
            section="B.2",
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
            message="enableDnsHostnames is disabled on vpc-0abc",
        ),
    ]
    report = TriageReport(
        tool_version="0",
        generated_at=datetime.now(UTC).isoformat(),
        cluster=ClusterRef(name=cluster.name, arn=cluster.arn, region=scenarios.REGION),
        findings=findings,
        coverage=Coverage(checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in ("probe.xid", "vpc.dns")]),
        exit_code=1,
    )
    store = FindingStore(clients, TABLE)
    now = datetime.now(UTC) - timedelta(minutes=5)
    store.apply(plan_sweep({}, report, now), now)
    return cluster, store


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_by_name_shows_the_most_urgent_first_with_its_fingerprint(seeded, capsys):
    cluster, store = seeded
    code, out, err = run(capsys, "findings", "list", "--table", TABLE, "--cluster", cluster.name)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Findings of {cluster.name} in {TABLE}: 2 OPEN"
    assert lines[1].startswith("OPEN") and " P0 " in lines[1] and NODE in lines[1] and "§ F" in lines[1]
    assert "vpc.dns" in lines[3] and "cluster-wide" in lines[3]
    fingerprints = set(store.open_findings(cluster.arn))
    assert {line.rsplit("fingerprint ", 1)[1] for line in lines if "fingerprint" in line} == fingerprints


def test_list_json_and_by_arn(seeded, capsys):
    cluster, _ = seeded
    code, out, _ = run(capsys, "findings", "list", "--table", TABLE, "--cluster", cluster.arn, "--json")
    assert code == 0
    data = json.loads(out)
    assert [d["priority"] for d in data] == ["P0", "P1"]
    assert data[0]["instance_id"] == NODE and data[0]["cluster_name"] == cluster.name
    assert data[0]["evidence"] == ["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."]


def test_ack_moves_open_to_acknowledged_once(seeded, capsys):
    cluster, store = seeded
    [fp] = [fp for fp, f in store.open_findings(cluster.arn).items() if f.instance_id == NODE]

    code, out, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", cluster.name, "--fingerprint", fp, "--by", "alice"
    )
    assert code == 0, err
    assert f"Acknowledged {fp}" in out
    item = store.get(cluster.arn, fp)
    assert item.state is State.ACKNOWLEDGED and item.acknowledged_by == "alice"

    # a second acknowledgement changes nothing and says why
    code, _, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", cluster.name, "--fingerprint", fp, "--by", "bob"
    )
    assert code == 1 and "ACKNOWLEDGED, not OPEN" in err
    assert store.get(cluster.arn, fp).acknowledged_by == "alice"


def test_history_of_a_node_lists_its_transitions(seeded, capsys):
    cluster, store = seeded
    [fp] = [fp for fp, f in store.open_findings(cluster.arn).items() if f.instance_id == NODE]
    run(capsys, "findings", "ack", "--table", TABLE, "--cluster", cluster.arn, "--fingerprint", fp, "--by", "alice")

    code, out, _ = run(capsys, "findings", "history", "--table", TABLE, "--node", NODE, "--json")

    assert code == 0
    transitions = [r["transition"] for r in json.loads(out)]
    assert transitions == ["ACKNOWLEDGED", "NEW"]  # newest first


def test_sweeps_show_what_each_sweep_could_check(seeded, capsys):
    cluster, _ = seeded
    code, out, _ = run(capsys, "findings", "sweeps", "--table", TABLE, "--cluster", cluster.arn)
    assert code == 0
    assert out.splitlines()[0] == f"Latest sweeps of {cluster.arn}: 1"
    assert "checks ran 2" in out and "transitions NEW 2" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["findings", "list", "--cluster", "c"], "no findings table"),
        (["findings", "list", "--table", "x y", "--cluster", "c"], "not a DynamoDB table name"),
        (["findings", "list", "--table", TABLE, "--cluster", "bad name"], "neither a HyperPod cluster name"),
        (["findings", "history", "--table", TABLE, "--node", "i-nothex"], "not an EC2 instance id"),
        (["findings", "ack", "--table", TABLE, "--cluster", "c", "--fingerprint", "zz", "--by", "a"], "hex digits"),
        (["findings", "ack", "--table", TABLE, "--cluster", "c", "--fingerprint", "0" * 32, "--by", " "], "--by"),
        (["findings", "history", "--table", TABLE, "--node", NODE, "--limit", "0"], "--limit"),
        # the same Region rule as triage: an ARN in one Region and --region another is refused
        (
            [
                "findings",
                "list",
                "--table",
                TABLE,
                "--region",
                "us-east-1",
                "--cluster",
                "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456",
            ],
            "the cluster ARN is in us-west-2",
        ),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("HYPERPOD_DEBUGGER_TABLE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_unknown_cluster_missing_table_and_unknown_fingerprint_are_clear_errors(seeded, capsys):
    cluster, _ = seeded
    code, _, err = run(capsys, "findings", "list", "--table", TABLE, "--cluster", "no-such-cluster")
    assert code == 1 and "no HyperPod cluster 'no-such-cluster'" in err
    code, _, err = run(capsys, "findings", "list", "--table", "missing-table", "--cluster", cluster.arn)
    assert code == 1 and "missing-table" in err and "Traceback" not in err
    code, _, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", cluster.arn, "--fingerprint", "f" * 32, "--by", "a"
    )
    assert code == 1 and "no finding" in err


def test_table_comes_from_the_environment(seeded, capsys, monkeypatch):
    cluster, _ = seeded
    monkeypatch.setenv("HYPERPOD_DEBUGGER_TABLE", TABLE)
    code, out, _ = run(capsys, "findings", "list", "--cluster", cluster.arn)
    assert code == 0 and "2 OPEN" in out


def test_an_empty_table_says_none(clients, demo, capsys, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    create_table(AwsClients(scenarios.REGION, max_attempts=1), TABLE)
    code, out, _ = run(capsys, "findings", "list", "--table", TABLE, "--cluster", demo.eks.arn)
    assert code == 0 and out.startswith(f"Findings of {demo.eks.arn} in {TABLE}: none")
