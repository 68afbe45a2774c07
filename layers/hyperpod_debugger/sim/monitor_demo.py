"""The monitor's path in the demo: a HyperPod node-health event → a triage scoped to its node → the
findings store (DynamoDB on moto) → the Slack and email messages the notifier sends; then the operator
fixes one problem and the next scheduled sweep resolves it.

It drives the same core the Lambda functions call (``run_triage``, ``plan_sweep``, ``FindingStore``,
``notify``); the Lambda wiring itself (Powertools, the stream, Secrets Manager, SNS) is exercised by
``tests/integration/test_functions.py``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.store import FindingStore, create_table
from hyperpod_debugger.model import Tag
from hyperpod_debugger.notify import Notice, email_text, slack_message
from hyperpod_debugger.notify.stored import notice_of
from hyperpod_debugger.probe.runner import ProbeOptions
from hyperpod_debugger.sim.scenarios import REGION, Demo
from hyperpod_debugger.store_logic import Transition, plan_sweep
from hyperpod_debugger.triage import TriageRequest, run_triage

TABLE = "hyperpod-debugger-findings"
#: The demo probes at the fake service's pace, not at the 3/s a real account allows.
DEMO_PROBE = ProbeOptions(rate=20.0, timeout=30.0)
#: The check the operator fixes between the event and the sweep (enableDnsHostnames, § B.2).
FIXED_CHECK = "vpc.dns"


def node_health_event(demo: Demo, instance_id: str, now: datetime) -> dict[str, Any]:
    """An EventBridge event as HyperPod's health agent emits it for an unhealthy node."""
    cluster = demo.eks
    return {
        "version": "0",
        "id": "5d1c9e0a-3b7f-4c62-8e15-a9d04f7b2c38",
        "detail-type": "SageMaker HyperPod Cluster Node Health Event",
        "source": "aws.sagemaker",
        "account": cluster.arn.split(":")[4],
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [cluster.arn],
        "detail": {
            "ClusterName": cluster.name,
            "ClusterArn": cluster.arn,
            "InstanceId": instance_id,
            "HealthSummary": {
                "HealthStatus": "Unhealthy",
                "HealthStatusReason": "HMA detected fault type NvidiaErrorTerminate on the node",
                "RepairAction": "None",
            },
        },
    }


def slack_preview(message: dict[str, Any]) -> list[str]:
    """What Slack shows for a Block Kit message, as indented text."""
    lines: list[str] = []
    for block in message.get("blocks", []):
        kind = block.get("type")
        if kind == "header":
            lines.append(block["text"]["text"])
        elif kind == "section":
            texts = [block["text"]["text"]] if "text" in block else [f["text"] for f in block.get("fields", [])]
            for text in texts:
                lines.extend(text.splitlines())
        elif kind == "context":
            lines.append("  ".join(e.get("text", "") for e in block.get("elements", [])))
        elif kind == "divider":
            lines.append("─" * 40)
    return [f"  │ {line}" for line in lines]


def _counts(transitions: Iterable[Transition]) -> str:
    counted = Counter(t.kind.value for t in transitions)
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counted.items())) or "no change"


def _notices(transitions: Sequence[Transition]) -> list[Notice]:
    return [notice_of(t.kind, t.at, t.finding, REGION) for t in transitions if t.notify]


def _show(out: list[str], notice: Notice) -> None:
    out.append("Slack (Block Kit, as displayed):")
    out.extend(slack_preview(slack_message(notice, runbook_base_url=None)))
    subject, body = email_text(notice, runbook_base_url=None)
    out.append("")
    out.append(f"Email (SNS) — Subject: {subject}")
    out.extend(f"  │ {line}" for line in body.splitlines())
    out.append("")


def _urgency(notice: Notice) -> tuple[str, bool, str]:
    f = notice.finding
    return (f.priority.value if f.priority else "P9", f.tag is not Tag.FAIL, f.check)


def _vpc_of(message: str) -> str | None:
    found = re.search(r"\bvpc-[0-9a-f]+\b", message)
    return found.group(0) if found else None


def monitor_walkthrough(clients: AwsClients, demo: Demo, now: datetime) -> str:
    out: list[str] = ["MONITOR: event → triage → findings store → Slack and email → resolution", ""]
    create_table(clients, TABLE)
    store = FindingStore(clients, TABLE)
    cluster = demo.eks
    instance_id = cluster.nodes["gpu-workers"][0]

    # 1. the event
    event = node_health_event(demo, instance_id, now)
    out.append("1. EventBridge delivers a HyperPod node-health event to the event handler:")
    out.extend(f"  │ {line}" for line in json.dumps(event, indent=2).splitlines())
    out.append("")

    # 2. scoped triage → store
    scoped = TriageRequest(
        cluster=cluster.arn, region=REGION, node=instance_id, now=now, probe=True, probe_options=DEMO_PROBE
    )
    report = run_triage(scoped)
    first = store.apply(plan_sweep(store.open_findings(cluster.arn), report, now), now)
    out.append(
        f"2. Triage scoped to {instance_id} (cluster checks + its on-node probe) wrote to the findings table "
        f"{TABLE!r}: {_counts(first)}."
    )
    notices = sorted(_notices(first), key=_urgency)
    out.append(f"   The stream notifier sends one message per transition ({len(notices)}); the most urgent:")
    out.append("")
    if notices:
        _show(out, notices[0])

    # 3. the operator fixes one problem; the next sweep resolves it
    dns = next((t for t in first if t.finding.check == FIXED_CHECK), None)
    vpc_id = _vpc_of(dns.finding.message) if dns else None
    if vpc_id is None:
        out.append("3. (no DNS finding to fix in this run; resolution step skipped)")
        return "\n".join(out) + "\n"
    suggested = [c["command"] for c in dns.finding.suggested_commands if c.get("mutates")]
    command = suggested[0] if suggested else f"aws ec2 modify-vpc-attribute --vpc-id {vpc_id} --enable-dns-hostnames"
    out.append(f"3. The operator runs the suggested command themselves (this tool never does): {command}")
    clients.client("ec2").modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    later = now + timedelta(minutes=15)
    sweep = run_triage(
        TriageRequest(cluster=cluster.arn, region=REGION, now=later, probe=True, probe_options=DEMO_PROBE)
    )
    second = store.apply(plan_sweep(store.open_findings(cluster.arn), sweep, later), later)
    out.append(f"   The scheduled sweep 15 minutes later (whole cluster): {_counts(second)}.")
    resolved = [n for n in _notices(second) if n.transition == "RESOLVED"]
    out.append("")
    for notice in resolved:
        _show(out, notice)
    history = store.open_findings(cluster.arn, include_resolved=True)
    states = Counter(f.state.value for f in history.values())
    out.append(
        "4. Findings history for the cluster (DynamoDB): "
        + ", ".join(f"{state} ×{n}" for state, n in sorted(states.items()))
    )
    return "\n".join(out) + "\n"
