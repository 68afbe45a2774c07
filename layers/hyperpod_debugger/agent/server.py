"""``hyperpod-debugger mcp``: the read-only core served to agents over the Model Context Protocol.

Built on the official ``mcp`` SDK (``MCPServer``). Every tool is annotated read-only, non-destructive and
idempotent; the ones that call AWS are open-world. Results are structured (the triage report comes with its
JSON schema as the tool's output schema). Failures come back as tool errors whose text starts with the
CLI's error kind (``invalid_argument: …``, ``cluster_not_found: …``). No tool changes anything: suggested
commands are returned as text for the person behind the agent.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from hyperpod_debugger import __version__
from hyperpod_debugger.agent import tools
from hyperpod_debugger.domain.model import TriageReport
from hyperpod_debugger.report.support_case import SupportCase

INSTRUCTIONS = (
    "Diagnose Amazon SageMaker HyperPod clusters and nodes, read-only. Start with triage_cluster (add node= "
    "to focus on one instance); each problem names its runbook section, which read_runbook_section explains. "
    "For a node's past, use list_findings and node_history (the monitor's findings table). To judge output "
    "someone pasted from a node, use analyze_probe_output. Nothing here changes the cluster: when a finding "
    "suggests a reboot, a replacement or a configuration change, show the command to the person and let them "
    "run it; follow investigate → reboot → replace, one rung at a time, and never suggest deleting training "
    "state. UNKNOWN means we could not look: it is neither healthy nor faulty."
)

#: reads AWS: the world outside the server, so results can change between calls
_READS_AWS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
#: reads only what the server ships or what it is given
_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class SupportCaseDraft(BaseModel):
    case: SupportCase
    markdown: str = Field(description="The draft as a person reads and pastes it; it has not been submitted")


def _as_tool_error(failure: tools.ToolFailure) -> ToolError:
    return ToolError(str(failure))


def build_server(
    *, profile: str | None = None, table: str | None = None, clients_for: tools.ClientsFactory | None = None
) -> MCPServer:
    """The server; ``clients_for`` (Region → AwsClients) defaults to the profile's credentials."""
    if clients_for is None:
        from hyperpod_debugger.aws.clients import AwsClients

        def clients_for(region: str) -> Any:
            return AwsClients.for_profile(region, profile)

    factory = clients_for
    server_table = table
    server: MCPServer = MCPServer(
        "hyperpod-debugger",
        title="HyperPod Node Debugger",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",  # the SDK's own INFO lines (every AWS client's endpoint) would drown the agent's log
    )

    def run(work: Any) -> Any:
        try:
            return work()
        except tools.ToolFailure as failure:
            raise _as_tool_error(failure) from failure

    @server.tool(title="Triage a HyperPod cluster or one node", annotations=_READS_AWS)
    def triage_cluster(
        cluster: str,
        region: str | None = None,
        node: str | None = None,
        probe: bool = False,
        max_probe_nodes: int = 5,
        since_hours: float = 24.0,
        log_days: float = 7.0,
    ) -> TriageReport:
        """Run the read-only triage of a HyperPod cluster (name or ARN): its API state and events, network,
        orchestrator, HyperPod's health-agent logs, and with probe=true the on-node probe through Session
        Manager (read-only script; slower: minutes). Give node (an EC2 instance id) to focus on one node.
        Returns the triage report: findings (PASS/FAIL/WARN/INFO/UNKNOWN with priority, evidence, runbook
        section, suggested commands), one verdict per node, and what was covered. Use this first."""
        return run(
            lambda: tools.triage_cluster(
                factory, cluster, region, node, probe, max_probe_nodes, since_hours, log_days, profile
            )
        )

    @server.tool(title="Judge output saved from a node", annotations=_LOCAL)
    def analyze_probe_output(
        instance_type: str,
        document: dict[str, Any] | str | None = None,
        outputs: dict[str, str] | None = None,
        orchestrator: Literal["EKS", "Slurm"] | None = None,
        role: Literal["compute", "controller"] = "compute",
        now: str | None = None,
        window_hours: float = 24.0,
        instance_id: str | None = None,
        cluster: str | None = None,
        region: str | None = None,
    ) -> TriageReport:
        """Judge what a node printed, without AWS access: either document (the JSON object probe.sh prints) or
        outputs (raw text by probe item id, e.g. {"nvidia_smi_query_gpu": "...", "kernel_log": "..."}; the ids
        are listed at the top of get_probe_script). instance_type (e.g. ml.p5.48xlarge) sets what is expected.
        Use it when someone pastes nvidia-smi, dmesg/journalctl, df or systemctl output."""
        return run(
            lambda: tools.analyze_probe_output(
                instance_type, document, outputs, orchestrator, role, now, window_hours, instance_id, cluster, region
            )
        )

    @server.tool(title="Open findings of a cluster", annotations=_READS_AWS)
    def list_findings(
        cluster: str, table: str | None = None, region: str | None = None, include_resolved: bool = False
    ) -> tools.FindingsList:
        """The monitor's open findings of a cluster from its findings table (the stack's FindingsTableName),
        most urgent first, each with first/last seen, count, evidence and fingerprint. Use it to see what the
        deployed monitor already knows before triaging again."""
        return run(
            lambda: tools.list_findings(factory, cluster, table or server_table, region, include_resolved, profile)
        )

    @server.tool(title="History of a node's findings", annotations=_READS_AWS)
    def node_history(
        node: str | None = None,
        cluster: str | None = None,
        table: str | None = None,
        region: str | None = None,
        limit: int = 50,
    ) -> tools.NodeHistory:
        """Every transition (NEW, ESCALATED, RESOLVED, REOPENED …) of one node's findings, newest first, from
        the findings table; or give cluster for its cluster-wide findings. Use it to see whether a fault
        recurs across reboots or replacements."""
        return run(lambda: tools.node_history(factory, node, cluster, table or server_table, region, limit, profile))

    @server.tool(title="Read a runbook section", annotations=_LOCAL)
    def read_runbook_section(section: str) -> tools.RunbookSection:
        """The runbook section a finding points at (its section id, e.g. "G.1.a" or "B.2"): what the
        problem is, how to confirm it read-only, and what to do, in order."""
        return run(lambda: tools.read_runbook_section(section))

    @server.tool(title="The read-only on-node probe script", annotations=_LOCAL, structured_output=False)
    def get_probe_script() -> str:
        """probe.sh, the read-only script the triage runs on a node: show it to a person who wants to run it
        by hand, or to see which outputs (item ids) analyze_probe_output reads."""
        return tools.probe_script()

    @server.tool(title="Suggested commands for a stored finding", annotations=_READS_AWS)
    def suggested_commands(
        cluster: str, fingerprint: str, table: str | None = None, region: str | None = None
    ) -> tools.CommandsForFinding:
        """The commands suggested for one stored finding (its fingerprint from list_findings), with ids filled
        in, blast radius, preconditions and the infrastructure-as-code note. They are text for a person to
        read and run; this server never runs them."""
        return run(
            lambda: tools.commands_for_finding(factory, cluster, fingerprint, table or server_table, region, profile)
        )

    @server.tool(title="Draft an AWS Support case for a node", annotations=_READS_AWS)
    def draft_support_case(
        cluster: str, node: str, table: str | None = None, region: str | None = None, days: int = 14
    ) -> SupportCaseDraft:
        """A draft AWS Support case for one node: ids, instance type, findings with evidence and times, the
        reboots and replacements HyperPod's events show, and the checklist of what Support asks for. It is a
        draft to show the person; nothing is submitted."""

        def work() -> SupportCaseDraft:
            case, markdown = tools.draft_support_case(
                factory, cluster, node, table or server_table, region, days, profile
            )
            return SupportCaseDraft(case=case, markdown=markdown)

        return run(work)

    return server
