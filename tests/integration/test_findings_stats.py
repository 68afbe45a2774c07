"""``hyperpod-debugger findings stats`` over a simulated month written through the real store on moto: every
transition comes from ``plan_sweep`` and ``FindingStore.apply``, as the monitor writes them, and is read back
with one Query on the ``by_cluster`` index. The expected figures were worked out by hand from the month below
(the same month as ``tests/unit/test_fleet_stats.py``), not by the code under test."""

from __future__ import annotations

import json
import pathlib
import shlex
from dataclasses import replace
from datetime import UTC, datetime

import pytest

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
from hyperpod_debugger.store.findings import FindingStore, create_table, to_item, typed
from hyperpod_sim import scenarios

TABLE = "hyperpod-debugger-stats"
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/stats0month1"
CHECKS = ("probe.xid", "probe.gpu_count", "probe.root_volume", "probe.services", "network.efa_sg")
NODES = (
    "i-0000000000000000a",
    "i-0000000000000000b",
    "i-00000000000000c01",
    "i-00000000000000c02",
    "i-0000000000000000d",
)
A, B, C1, C2, D = NODES
P5, M5 = "ml.p5.48xlarge", "ml.m5.xlarge"


def at(day: int, hour: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


def problem(check: str, node: str | None, *, priority=Priority.P1, group="gpu-workers", itype=P5, logical=None):
    words = {
        "probe.xid": "Xid 79 (GPU has fallen off the bus) on GPU 3",
        "probe.gpu_count": "7 of 8 GPUs visible",
        "probe.root_volume": "Root volume / is 97% full",
        "probe.services": "slurmd is not running",
        "network.efa_sg": "Security group sg-0abc lacks its self-referencing rule",
    }
    return Finding(
        tag=Tag.FAIL,
        priority=priority,
        check=check,
        section={"probe.root_volume": "I.2", "probe.services": "H", "network.efa_sg": "A"}.get(check, "G.1"),
        message=words[check],
        cluster_arn=ARN,
        cluster_name="ml-train",
        instance_id=node,
        instance_group=group if node else None,
        instance_type=itype if node else None,
        node_logical_id=logical,
    )


XID_A, COUNT_A = problem("probe.xid", A), problem("probe.gpu_count", A)
DISK_B = problem("probe.root_volume", B, priority=Priority.P0)
XID_C1 = problem("probe.xid", C1, logical="lg-7")
XID_C2 = problem("probe.xid", C2, logical="lg-7")
SLURMD_D_P2 = problem("probe.services", D, priority=Priority.P2, group="cpu", itype=M5)
SLURMD_D_P1 = problem("probe.services", D, priority=Priority.P1, group="cpu", itype=M5)
EFA_SG = problem("network.efa_sg", None)

#: (time, every problem open after it): a sweep at each time sees exactly these
MONTH = [
    (at(30, 0, month=10), [SLURMD_D_P2]),  # before the month: D's slurmd is down (P2)
    (at(5, 10), [SLURMD_D_P2, XID_A]),
    (at(5, 11), [SLURMD_D_P2, XID_A, COUNT_A]),
    (at(5, 12), [SLURMD_D_P2, COUNT_A]),
    (at(5, 13), [SLURMD_D_P2]),
    (at(6, 0), [SLURMD_D_P1]),  # escalated
    (at(7, 0), []),
    (at(10, 0), [XID_C1]),
    (at(10, 6), []),
    (at(12, 8), [XID_A]),
    (at(12, 9), []),
    (at(15, 0), [EFA_SG]),
    (at(15, 5), []),
    (at(20, 0), [XID_A]),
    (at(20, 3), []),
    (at(25, 0), [XID_C2]),
    (at(25, 2), []),
    (at(30, 0), [DISK_B]),
    (at(3, 12, month=12), [DISK_B]),  # still open
]


@pytest.fixture
def month(clients, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    create_table(clients, TABLE)
    store = FindingStore(clients, TABLE)
    for when, found in MONTH:
        report = TriageReport(
            tool_version="0",
            generated_at=when.isoformat(),
            cluster=ClusterRef(name="ml-train", arn=ARN, region=scenarios.REGION),
            findings=found,
            coverage=Coverage(
                checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in CHECKS], probed_nodes=list(NODES)
            ),
            exit_code=TriageReport.exit_code_for(found),
        )
        store.apply(plan_sweep(store.open_findings(ARN), report, when), when)
    return store


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


STATS = ("findings", "stats", "--table", TABLE, "--cluster", ARN, "--until", "2026-12-04T00:00:00Z")


def test_a_month_of_history_gives_the_figures_worked_out_by_hand(month, capsys):
    code, out, err = run(capsys, *STATS, "--json")
    assert code == 0, err
    stats = json.loads(out)
    assert stats["since"] == "2026-11-04T00:00:00Z" and stats["until"] == "2026-12-04T00:00:00Z"
    # A: Xid 79 three times (10-12, 08-09, 00-03) and the GPU count 11-13 during the first: 3 incidents,
    # 3 + 1 + 3 = 7 h. lg-7: i-c1 6 h, then its replacement i-c2 2 h. B: open from Nov 30 to Dec 4, 96 h.
    # D: open since before the month, resolved Nov 7 00:00: 72 h in the month, no incident opened in it.
    assert [(n["node"], n["incidents"], n["hours_unhealthy"]) for n in stats["nodes"]] == [
        (A, 3, 7.0),
        ("lg-7", 2, 8.0),
        (B, 1, 96.0),
        (D, 0, 72.0),
    ]
    assert stats["repeat_offenders"] == [A, "lg-7"]
    assert [n["instance_ids"] for n in stats["nodes"] if n["node"] == "lg-7"] == [[C1, C2]]
    assert [(g["name"], g["incidents"], g["nodes_affected"], g["hours_unhealthy"]) for g in stats["groups"]] == [
        ("gpu-workers", 6, 3, 111.0),
        ("cpu", 0, 1, 72.0),
    ]
    assert [(g["name"], g["hours_unhealthy"]) for g in stats["types"]] == [(P5, 111.0), (M5, 72.0)]
    assert [(c["check"], c["opened"]) for c in stats["checks"]] == [
        ("probe.xid", 5),
        ("network.efa_sg", 1),
        ("probe.gpu_count", 1),
        ("probe.root_volume", 1),
    ]
    assert [(c["section"], c["opened"]) for c in stats["causes"]] == [("G.1", 6), ("A", 1), ("I.2", 1)]
    # opened and resolved in the month: 2 1 3 (A's Xid), 2 (count), 6 (i-c1), 2 (i-c2), 5 (SG): p50 2, p90 6
    assert stats["time_to_resolve_hours"] == {"p50": 2.0, "p90": 6.0, "resolved": 7}
    assert [(p["instance_id"], p["check"], p["hours_open"]) for p in stats["open_now"]] == [
        (B, "probe.root_volume", 96.0)
    ]


def test_the_text_review_names_repeat_offenders_and_one_table_by_choice(month, capsys):
    code, out, err = run(capsys, *STATS)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Findings history of " + ARN + ", 2026-11-04 00:00 UTC to 2026-12-04 00:00 UTC")
    assert "6 node incident(s) on 4 node(s)" in lines[1] and "2 repeat offender(s)" in lines[1]
    assert "Time to resolve: p50 2.0 h, p90 6.0 h (7 problem(s) opened and resolved in the period)" in out
    assert "Repeat offenders (2 or more incidents): 2" in out
    assert f"instances: {C1}, {C2}" in out
    assert "open 4.0 d" in out and "Still open: 1" in out
    code, out, _ = run(capsys, *STATS, "--by", "cause")
    assert code == 0 and "What fails most, by cause (runbook section): 3" in out and "Repeat offenders" not in out
    assert "§ G.1" in out


def test_a_shorter_period_counts_only_what_it_holds(month, capsys):
    # Nov 19 00:00 to Dec 4 00:00: A's third Xid (3 h), i-c2 (2 h), B (96 h); A has one incident in it
    code, out, _ = run(capsys, *STATS, "--days", "15", "--json")
    stats = json.loads(out)
    assert [(n["node"], n["incidents"], n["hours_unhealthy"]) for n in stats["nodes"]] == [
        (B, 1, 96.0),
        (A, 1, 3.0),
        ("lg-7", 1, 2.0),
    ]
    assert stats["repeat_offenders"] == []


def test_ack_takes_a_unique_prefix_and_refuses_an_ambiguous_or_unknown_one(month, clients, capsys):
    [fp] = [fp for fp, f in month.open_findings(ARN).items() if f.instance_id == B]
    code, out, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", ARN, "--fingerprint", fp[:6], "--by", "alice"
    )
    assert code == 0, err
    assert out.startswith(f"Acknowledged {fp} ")
    # two findings whose fingerprints share a prefix: the prefix is refused, naming both
    twin = month.get(ARN, fp)
    for tail in ("1" * 26, "2" * 26):
        item = to_item(replace(twin, fingerprint="abcdef" + tail, state=State.OPEN, acknowledged_by=None))
        clients.client("dynamodb").put_item(TableName=TABLE, Item=typed(item))
    code, _, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", ARN, "--fingerprint", "abcdef", "--by", "bob"
    )
    assert code == 1 and "2 findings" in err and "abcdef" + "1" * 26 in err and "give more of the fingerprint" in err
    code, _, err = run(
        capsys, "findings", "ack", "--table", TABLE, "--cluster", ARN, "--fingerprint", "ffff", "--by", "bob"
    )
    assert code == 1 and ("no finding of" in err or "findings of" in err)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--days", "0"], "--days must be between 1 and 90"), (["--until", "yesterday"], "not an ISO 8601")],
)
def test_a_period_it_cannot_read_exits_2(extra, message, capsys, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    code, _, err = run(capsys, *STATS, *extra)
    assert code == 2 and message in err


# --------------------------------------------------------------------------- the README's own query

README = pathlib.Path(__file__).parents[2] / "README.md"
#: the AWS CLI's flags of `aws dynamodb query`, as the API names them (JSON ones decoded as the CLI does)
_FLAGS = {
    "--table-name": ("TableName", False),
    "--key-condition-expression": ("KeyConditionExpression", False),
    "--filter-expression": ("FilterExpression", False),
    "--expression-attribute-names": ("ExpressionAttributeNames", True),
    "--expression-attribute-values": ("ExpressionAttributeValues", True),
    "--projection-expression": ("ProjectionExpression", False),
}


def readme_query() -> list[str]:
    """The `aws dynamodb query` command of the README's history section, as a shell would split it."""
    text = README.read_text()
    section = text[text.index("## Query the findings history") :]
    start = section.index("aws dynamodb query")
    command = section[start : section.index("```", start)]
    return shlex.split(command.replace("\\\n", " "))


def test_the_readmes_query_runs_against_the_simulated_table_and_lists_the_open_findings(month, clients):
    argv = readme_query()
    assert argv[:3] == ["aws", "dynamodb", "query"]
    params: dict = {}
    for flag, value in zip(argv[3::2], argv[4::2], strict=True):
        name, is_json = _FLAGS[flag]
        params[name] = json.loads(value) if is_json else value
    assert params["TableName"] == "<FindingsTableName>"
    params["TableName"] = TABLE
    example = params["ExpressionAttributeValues"][":pk"]["S"]
    assert example.startswith("CLUSTER#arn:aws:sagemaker:")
    params["ExpressionAttributeValues"][":pk"]["S"] = f"CLUSTER#{ARN}"
    items = clients.client("dynamodb").query(**params)["Items"]
    # the month ends with one problem open: B's full root volume
    assert [(i["instance_id"]["S"], i["state"]["S"], i["check"]["S"]) for i in items] == [
        (B, "OPEN", "probe.root_volume")
    ]
    assert set(items[0]) == {"instance_id", "state", "priority", "check", "message", "last_seen"}
