"""The agent interface on the simulated account: a node with a history, and ``make mcp-demo``.

:func:`seed_node_history` gives one EKS node of the demo what a support case is about: an Xid 79 that the
monitor found, lost after a reboot, found again after a second one (the findings table holds it OPEN with
its history) and HyperPod's two reboot events for the node. The events' wording follows the form of
HyperPod's lifecycle events ("… for EC2 Instance i-… has Succeeded."); no published example of a reboot
event's exact description was found, so the draft lists every event verbatim and only names as a reboot
what says "reboot".

``python -m hyperpod_sim.agent_demo`` runs an agent-style session against ``hyperpod-debugger mcp``'s
server, in-process through the SDK's own client: list the tools, triage a cluster, read the runbook section
of its worst finding, ask for the commands of a stored finding, and draft the support case.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    SuggestedCommand,
    Tag,
    TriageReport,
)
from hyperpod_debugger.lifecycle.findings import plan_sweep
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import scenarios, seed

TABLE = "hyperpod-debugger-findings"
XID_LINE = "NVRM: Xid (PCI:0000:b9:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@dataclass(frozen=True)
class NodeScene:
    cluster: seed.SeededCluster
    node: str
    table: str
    reboots: tuple[datetime, ...]


def _node_commands(cluster: seed.SeededCluster, node: str) -> list[SuggestedCommand]:
    """The drain and reboot the product's ladder suggests for this node (its own builders, not a copy)."""
    from hyperpod_debugger.remediation import ladder

    target = ladder.Target(
        arn=cluster.arn,
        name=cluster.name,
        region=cluster.region,
        orchestrator="EKS",
        eks_cluster_arn=None,
        continuous=False,
    )
    facts = ladder.NodeFacts(node=None, recovering=None, slurm_controller=False)
    drain = ladder._drain(target, facts, node, "Xid 79")
    return [*([drain] if drain else []), ladder._reboot(target, [node])]


def _xid_report(cluster: seed.SeededCluster, node: str, found: bool, when: datetime) -> TriageReport:
    findings = []
    if found:
        findings.append(
            Finding(
                tag=Tag.FAIL,
                priority=Priority.P0,
                check="probe.xid",
                section="G.1",
                cluster_arn=cluster.arn,
                cluster_name=cluster.name,
                instance_id=node,
                instance_group="gpu-workers",
                message="Xid 79 (GPU has fallen off the bus) on this boot: reboot the node; replace it if it returns",
                evidence=[f"{when:%Y-%m-%dT%H:%M:%S}+00:00 ip-10-1-0-12 kernel: {XID_LINE}"],
                node_action="reboot",
                suggested_commands=_node_commands(cluster, node),
            )
        )
    return TriageReport(
        tool_version="0",
        generated_at=when.isoformat(),
        cluster=ClusterRef(name=cluster.name, arn=cluster.arn, region=cluster.region),
        scope_node=node,
        findings=findings,
        coverage=Coverage(checks=[CheckCoverage(check="probe.xid", status=CheckStatus.RAN)], probed_nodes=[node]),
        exit_code=1 if found else 0,
    )


def seed_node_history(clients: AwsClients, demo: scenarios.Demo, now: datetime) -> NodeScene:
    """The EKS cluster's first GPU worker: Xid 79 found, rebooted, gone, back, rebooted again, back again."""
    cluster = demo.eks
    node = cluster.nodes["gpu-workers"][0]
    create_table(clients, TABLE)
    store = FindingStore(clients, TABLE)
    first, second = now - timedelta(days=3), now - timedelta(hours=20)
    # the monitor's view: found, cleared by the first reboot, found again (reopened), seen since
    timeline = [
        (first - timedelta(minutes=30), True),
        (first + timedelta(hours=1), False),
        (second - timedelta(minutes=30), True),
        (now - timedelta(hours=2), True),
    ]
    for when, found in timeline:
        known = store.open_findings(cluster.arn, include_resolved=True)
        store.apply(plan_sweep(known, _xid_report(cluster, node, found, when), when), when)
    for when in (first, second):
        seed.add_event(
            cluster,
            when=when,
            level="Info",
            group="gpu-workers",
            instance=node,
            description=f"Reboot of EC2 Instance {node} in Cluster {cluster.name} and InstanceGroup gpu-workers "
            "has Succeeded.",
        )
    return NodeScene(cluster=cluster, node=node, table=TABLE, reboots=(first, second))


# --------------------------------------------------------------------------- make mcp-demo


def _show(title: str, body: str) -> None:
    print(f"\n── {title} " + "─" * max(0, 70 - len(title)))
    print(body.rstrip())


async def agent_session(server: Any, scene: NodeScene, out: Any = None) -> dict[str, Any]:
    """What an agent would do, step by step, through the SDK's client; returns the results it read."""
    from mcp import Client
    from mcp.types import TextContent

    seen: dict[str, Any] = {}
    async with Client(server) as client:
        listed = await client.list_tools()
        rows = []
        for tool in listed.tools:
            hints = tool.annotations
            flags = "read-only" if hints and hints.read_only_hint else "WRITES"
            rows.append(f"{tool.name:24s} {flags:9s} {tool.title or ''}")
        _show("the agent lists the tools", "\n".join(rows))
        seen["tools"] = [t.name for t in listed.tools]

        result = await client.call_tool("triage_cluster", {"cluster": scene.cluster.name, "node": scene.node})
        report = result.structured_content or {}
        problems = [f for f in report.get("findings", []) if f["tag"] in ("FAIL", "WARN", "UNKNOWN")]
        lines = [f"{len(report.get('findings', []))} findings, {len(problems)} problems; node verdicts:"]
        lines += [f"  {v['instance_id']}: {v['verdict']} ({v['why']})" for v in report.get("node_verdicts", [])]
        lines += [f"  [{f['tag']}] {f.get('priority') or ''} {f['message']} → § {f['section']}" for f in problems[:6]]
        _show(f"triage_cluster(cluster={scene.cluster.name!r}, node={scene.node!r})", "\n".join(lines))
        seen["triage"] = report

        listed_findings = await client.call_tool("list_findings", {"cluster": scene.cluster.name})
        stored = (listed_findings.structured_content or {}).get("findings", [])
        _show(
            "list_findings: what the deployed monitor already holds",
            "\n".join(
                f"  {f['state']} {f['priority']} {f['instance_id']} {f['message']} (seen {f['count']}×)" for f in stored
            ),
        )
        seen["findings"] = stored

        if stored:
            section = stored[0]["section"]
            page = await client.call_tool("read_runbook_section", {"section": section})
            text = (page.structured_content or {}).get("text", "")
            _show(f"read_runbook_section({section!r}) (first lines)", "\n".join(text.splitlines()[:8]))
            commands = await client.call_tool(
                "suggested_commands", {"cluster": scene.cluster.name, "fingerprint": stored[0]["fingerprint"]}
            )
            _show(
                "suggested_commands: shown to the person, never run",
                (commands.structured_content or {}).get("text", ""),
            )
            seen["commands"] = commands.structured_content

        draft = await client.call_tool("draft_support_case", {"cluster": scene.cluster.name, "node": scene.node})
        markdown = (draft.structured_content or {}).get("markdown", "")
        _show("draft_support_case (the draft; nothing submitted)", markdown)
        seen["case"] = draft.structured_content

        refused = await client.call_tool("triage_cluster", {"cluster": "no-such-cluster"})
        first = refused.content[0] if refused.content else None
        _show("a mistake comes back as a tool error", first.text if isinstance(first, TextContent) else "")
        seen["error"] = refused.is_error
    return seen


def main(argv: list[str] | None = None) -> int:
    import anyio

    from hyperpod_debugger.agent.server import build_server
    from hyperpod_sim.server import simulated_aws

    as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    now = datetime.now(UTC)
    with simulated_aws():
        clients = AwsClients(scenarios.REGION, max_attempts=2)
        demo = scenarios.seed_demo(clients, now)
        scene = seed_node_history(clients, demo, now)
        server = build_server(table=TABLE, clients_for=lambda region: AwsClients(region, max_attempts=2))
        print("hyperpod-debugger mcp, in-process, on the simulated account (no AWS account, no network)")
        seen = anyio.run(agent_session, server, scene)
    if as_json:
        print(json.dumps({k: v for k, v in seen.items() if k != "triage"}, indent=2, default=str))
    return 0 if seen.get("error") and seen.get("case") else 1


if __name__ == "__main__":
    raise SystemExit(main())
