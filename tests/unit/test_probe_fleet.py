"""Fleet fan-out: rate, concurrency, retries, outcomes, the breaker; and probe delivery."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess

import pytest

from hyperpod_debugger.aws.ssm_types import CommandResult, SessionError, TargetError, session_target
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe import delivery, fleet
from hyperpod_debugger.probe.fleet import TokenBucket, order_nodes, outcome_findings, probe_fleet
from tests import builders as b

DOC = json.dumps(
    {"schema_version": 1, "hostname": "h", "collected_at": "2026-11-30T12:00:00Z", "uptime_s": 1.0, "items": {}}
).encode()
ARN = f"arn:aws:sagemaker:us-west-2:123456789012:cluster/{b.CLUSTER_ID}"


def _nodes(n: int, **kw):
    return [(b.node(f"i-{i:017x}", **kw), f"sagemaker-cluster:{b.CLUSTER_ID}_workers-i-{i:017x}") for i in range(n)]


def test_target_uses_the_cluster_id_from_the_arn_never_the_name():
    assert session_target(ARN, "workers", "i-0123456789abcdef0") == (
        f"sagemaker-cluster:{b.CLUSTER_ID}_workers-i-0123456789abcdef0"
    )


@pytest.mark.parametrize(
    ("arn", "group", "iid"),
    [
        ("arn:aws:sagemaker:us-west-2:123456789012:cluster/my-cluster-name", "workers", "i-0123456789abcdef0"),
        (ARN, "g1;rm -rf /", "i-0123456789abcdef0"),
        (ARN, "$(id)", "i-0123456789abcdef0"),
        (ARN, "workers", "i-xyz"),
    ],
)
def test_bad_target_parts_are_refused(arn, group, iid):
    with pytest.raises(TargetError):
        session_target(arn, group, iid)


def test_token_bucket_holds_the_rate(monkeypatch):
    # a clock that moves only when the bucket waits: the waits themselves are what is measured
    now = [0.0]
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        await real_sleep(0)

    monkeypatch.setattr(fleet.asyncio, "sleep", sleep)

    async def main():
        bucket = TokenBucket(20.0, clock=lambda: now[0])
        for _ in range(11):
            await bucket.acquire()

    asyncio.run(main())
    assert now[0] == pytest.approx(0.5)  # 1 immediate + 10 at 20/s


def test_suspects_then_accelerators_then_the_rest():
    cpu = b.node("i-0000000000000000a", instance_type="ml.m5.2xlarge")
    gpu = b.node("i-0000000000000000b", instance_type="ml.p5.48xlarge")
    named = b.node("i-0000000000000000c", instance_type="ml.m5.2xlarge")
    failing = b.node("i-0000000000000000d", instance_type="ml.m5.2xlarge", status="Failure")
    ordered = order_nodes([cpu, gpu, named, failing], suspects=["i-0000000000000000c"])
    assert [n.instance_id[-1] for n in ordered] == ["c", "d", "b", "a"]


def test_throttling_is_retried_and_other_outcomes_are_typed():
    calls: dict[str, int] = {}

    async def run(target: str, command: str) -> CommandResult:
        calls[target] = calls.get(target, 0) + 1
        if target.endswith("i-" + "0" * 17) and calls[target] < 3:
            raise SessionError("THROTTLED", "Rate exceeded")
        if target.endswith("i-" + "0" * 16 + "1"):
            raise SessionError("UNREACHABLE", "TargetNotConnected")
        if target.endswith("i-" + "0" * 16 + "2"):
            return CommandResult(0, b"{not json", b"boom", separated=True)
        return CommandResult(0, DOC, b"")

    probes = asyncio.run(probe_fleet(_nodes(4), "cmd", run, rate=1000, seed=1))
    assert [p.outcome for p in probes] == ["OK", "UNREACHABLE", "ERROR", "OK"]
    assert probes[0].attempts == 3 and probes[0].doc is not None
    assert "stderr: boom" in probes[2].message


def test_a_hung_node_never_blocks_the_others():
    done: list[str] = []
    others_finished_first = []

    async def run(target: str, command: str) -> CommandResult:
        if target.endswith("i-" + "0" * 17):
            # hang until the 19 others are through (they must get past it), with a safety net
            for _ in range(500):
                if len(done) == 19:
                    break
                await asyncio.sleep(0.01)
            others_finished_first.append(len(done) == 19)
            raise SessionError("TIMEOUT", "no answer")
        done.append(target)
        return CommandResult(0, DOC, b"")

    probes = asyncio.run(probe_fleet(_nodes(20), "cmd", run, rate=1000, concurrency=4))
    assert others_finished_first == [True]
    assert sum(p.outcome == "OK" for p in probes) == 19


def test_unprobed_nodes_are_unknown_in_section_k_never_a_hardware_verdict():
    async def run(target: str, command: str) -> CommandResult:
        raise SessionError("DENIED", "AccessDeniedException")

    probes = asyncio.run(probe_fleet(_nodes(1), "cmd", run, rate=1000))
    [f] = outcome_findings(probes, cluster_arn=ARN, cluster_name="c", region="us-west-2")
    assert (f.tag, f.section, f.node_action) == (Tag.UNKNOWN, "K", "investigate")
    assert not any(c.mutates for c in f.suggested_commands)


def test_many_nodes_failing_the_same_way_are_one_cluster_level_finding():
    async def run(target: str, command: str) -> CommandResult:
        if target[-1] in "01234567":
            raise SessionError("UNREACHABLE", "TargetNotConnected")
        return CommandResult(0, DOC, b"")

    probes = asyncio.run(probe_fleet(_nodes(10), "cmd", run, rate=1000))
    findings = outcome_findings(probes, cluster_arn=ARN, cluster_name="c", region="us-west-2")
    assert len(findings) == 1 and findings[0].instance_id is None
    assert findings[0].message.startswith("8 of 10 probed nodes could not be probed (UNREACHABLE)")


def test_the_probe_command_is_one_line_within_budget_and_carries_the_script():
    command = delivery.probe_command()
    assert "\n" not in command and len(command) <= delivery.MAX_COMMAND_BYTES
    assert shlex.split(command)[:2] == ["bash", "-c"]
    script = delivery.decode_command(command)
    assert script == delivery.strip_comments(delivery.probe_script())
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    code_lines = [
        line for line in delivery.probe_script().splitlines()[1:] if line.strip() and not line.lstrip().startswith("#")
    ]
    assert script.splitlines()[1:] == code_lines


def test_the_nodes_a_window_named_are_probed_in_order_up_to_the_cap_and_the_rest_are_said():
    from dataclasses import replace

    from hyperpod_debugger.probe.runner import select_nodes

    nodes = [node for node, _ in _nodes(6)]
    down = replace(nodes[1], status="Failure")
    listed = [nodes[0], down, *nodes[2:]]
    named = [nodes[4].instance_id, down.instance_id, "i-0000000000000dead", nodes[2].instance_id, nodes[3].instance_id]
    chosen, note = select_nodes(listed, focus=named, suspects=[], max_nodes=2)
    # never a node the events did not name; in the order they named them; Running only
    assert [n.instance_id for n in chosen] == [nodes[4].instance_id, nodes[2].instance_id]
    assert note == (
        "2 of the 5 node(s) the events named: 1 not in the node list, 1 not Running, "
        "1 over the cap of 2, left to the sweep (suspects first)"
    )
    # one named node is probed whatever its status, as --node is
    assert select_nodes(listed, focus=[down.instance_id], suspects=[], max_nodes=0)[0] == [down]
