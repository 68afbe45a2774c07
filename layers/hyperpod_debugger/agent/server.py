"""``hyperpod-debugger mcp``: the read-only core served to agents over the Model Context Protocol.

Built on the official ``mcp`` SDK (``MCPServer``). Every tool is annotated read-only, non-destructive and
idempotent; the ones that call AWS are open-world. Results are structured (the triage report comes with its
JSON schema as the tool's output schema). Failures come back as tool errors whose text starts with the
CLI's error kind (``invalid_argument: …``, ``cluster_not_found: …``). No tool changes anything: suggested
commands are returned as text for the person behind the agent.

Text read from the cluster is data: the instructions and the descriptions of the tools that return it say
so, and every such result passes through :func:`~hyperpod_debugger.domain.untrusted.for_agent` (each string
visible and bounded, the whole bounded) before it is validated back into its model. Every result, those
tools' and the local ones', is refused past :data:`RESULT_LIMIT` characters of JSON.

Over streamable HTTP (:func:`http_app`, :func:`serve_http`) the server listens on loopback unless told
otherwise; every request, whatever the bind, must name an allowed Host (else 421) and, when it has an Origin,
an allowed origin (else 403); with a bearer token (mandatory beyond loopback) it must also carry
``Authorization: Bearer <token>`` (else 401). These checks run before the SDK's app sees the request, and
the SDK's own Host/Origin check is given the same lists as a second layer.
"""

from __future__ import annotations

import hmac
import inspect
import ipaddress
import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response

from hyperpod_debugger import __version__
from hyperpod_debugger.agent import tools
from hyperpod_debugger.domain.model import TriageReport, trim_evidence
from hyperpod_debugger.domain.untrusted import (
    AGENT_RESULT_LIMIT,
    AGENT_STRING_LIMIT,
    UNTRUSTED_NOTE,
    bounded,
    for_agent,
    visible,
)
from hyperpod_debugger.report.support_case import SupportCase, render_markdown

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

INSTRUCTIONS = (
    "Diagnose Amazon SageMaker HyperPod clusters and nodes, read-only. Start with triage_cluster (add node= "
    "to focus on one instance); each problem names its runbook section, which read_runbook_section explains. "
    "When someone's training job died or hung, start from its Slurm job id with diagnose_job. "
    "For a node's past, use list_findings and node_history (the monitor's findings table). To judge output "
    "someone pasted from a node, use analyze_probe_output. Nothing here changes the cluster: when a finding "
    "suggests a reboot, a replacement or a configuration change, show the command to the person and let them "
    "run it; follow investigate → reboot → replace, one rung at a time, and never suggest deleting training "
    "state. UNKNOWN means we could not look: it is neither healthy nor faulty. " + UNTRUSTED_NOTE
)

#: the most characters of JSON one tool result may carry (the structured result; its text copy is the same JSON)
RESULT_LIMIT = AGENT_RESULT_LIMIT

#: reads AWS: the world outside the server, so results can change between calls
_READS_AWS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
#: reads only what the server ships or what it is given
_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

_Fn = TypeVar("_Fn", bound=Callable[..., Any])
_Model = TypeVar("_Model", bound=BaseModel)


class SupportCaseDraft(BaseModel):
    case: SupportCase
    markdown: str = Field(description="The draft as a person reads and pastes it; it has not been submitted")


def _as_tool_error(failure: tools.ToolFailure) -> ToolError:
    # a failure's message can quote the cluster (an API error, a document's text): shown, never interpreted
    return ToolError(bounded(visible(str(failure)), AGENT_STRING_LIMIT))


def _document(text: str) -> str:
    """A rendered document (a support case's Markdown, the commands as text): every line made visible and
    bounded like any string of a result, the lines kept; the whole is bounded by :data:`RESULT_LIMIT`."""
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(bounded(visible(line), AGENT_STRING_LIMIT) for line in lines)


def for_agent_model(result: _Model, *, documents: tuple[str, ...] = ()) -> _Model:
    """``result`` as an agent gets it: dumped to JSON, every string made visible and bounded and the whole
    bounded (:func:`~hyperpod_debugger.domain.untrusted.for_agent`), then validated back into its own model so
    the tool's output schema still holds. The top-level fields named in ``documents`` are rendered documents,
    bounded line by line instead of as one string."""
    data = result.model_dump(mode="json")
    kept = {name: _document(data.pop(name)) for name in documents}
    cleaned = for_agent(data)
    cleaned.update(kept)
    return type(result).model_validate(cleaned)


def fit_report(report: TriageReport, limit: int | None = None) -> tuple[TriageReport, str | None]:
    """A triage report that fits in a tool result, and what was left out to make it fit (None: nothing).

    A large cluster's report does not fit whole. In order, until it fits: the PASS and INFO findings go (the
    summary still counts them), then the healthy nodes' verdicts (likewise), then each finding's evidence is
    cut to its first three lines. No problem finding and no problem node is ever left out."""
    limit = RESULT_LIMIT if limit is None else limit
    left_out: list[str] = []

    def size(r: TriageReport) -> int:
        return len(r.model_dump_json())

    if size(report) <= limit:
        return report, None
    quiet = [f for f in report.findings if not f.is_problem]
    if quiet:
        report = report.model_copy(update={"findings": [f for f in report.findings if f.is_problem]})
        left_out.append(f"{len(quiet)} PASS/INFO findings")
    if size(report) > limit:
        healthy = [v for v in report.node_verdicts if v.verdict == "healthy"]
        if healthy:
            report = report.model_copy(
                update={"node_verdicts": [v for v in report.node_verdicts if v.verdict != "healthy"]}
            )
            left_out.append(f"the verdicts of {len(healthy)} healthy nodes")
    if size(report) > limit:
        report = report.model_copy(
            update={
                "findings": [
                    f.model_copy(update={"evidence": trim_evidence(f.evidence, 3)}) if len(f.evidence) > 3 else f
                    for f in report.findings
                ]
            }
        )
        left_out.append("evidence beyond three lines per finding")
    note = (
        f"Shortened to fit a tool result: left out {', '.join(left_out)} (the summary still counts everything). "
        "Give node= for one node's whole report, or run the hyperpod-debugger CLI for the full report."
    )
    return report, note


def _too_large(size: int) -> ToolError:
    return ToolError(
        f"result_too_large: the result would be {size} characters of JSON, more than the {RESULT_LIMIT} a tool "
        "result may carry; narrow the request (one node with node=, a shorter window) or run the "
        "hyperpod-debugger CLI for the whole report"
    )


def structured_result(result: BaseModel, note: str | None = None) -> CallToolResult:
    """The tool result: ``result`` as structured content, and the same compact JSON as its text (after
    ``note``, when the result was shortened); refused (``result_too_large``) past :data:`RESULT_LIMIT`
    characters."""
    data = result.model_dump(mode="json", by_alias=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if len(text) > RESULT_LIMIT:
        raise _too_large(len(text))
    content = [TextContent(type="text", text=note)] if note else []
    return CallToolResult(content=[*content, TextContent(type="text", text=text)], structured_content=data)


def report_result(report: TriageReport) -> CallToolResult:
    """A triage report as a tool result: cleaned for the agent, then shortened to fit when it must be."""
    fitted, note = fit_report(for_agent_model(report))
    return structured_result(fitted, note)


def _run(work: Callable[[], _Model]) -> _Model:
    """``work()``, a tool failure turned into the tool error the agent reads."""
    try:
        return work()
    except tools.ToolFailure as failure:
        raise _as_tool_error(failure) from failure


@dataclass(frozen=True)
class _Tools:
    """What the tools of one server share: the server they are registered on, the AWS clients (Region →
    AwsClients), the findings table used when a call names none, and the profile."""

    server: MCPServer
    clients_for: tools.ClientsFactory
    table: str | None
    profile: str | None

    def tool(
        self, title: str, annotations: ToolAnnotations, *, cluster_text: bool, structured_output: bool | None = None
    ) -> Callable[[_Fn], _Fn]:
        """Register a tool described by its docstring; one that returns cluster text says it is data."""

        def register(fn: _Fn) -> _Fn:
            description = inspect.cleandoc(fn.__doc__ or "")
            if cluster_text:
                description = f"{description}\n\n{UNTRUSTED_NOTE}"
            decorate = self.server.tool(
                title=title, description=description, annotations=annotations, structured_output=structured_output
            )
            return decorate(fn)

        return register


def build_server(
    *, profile: str | None = None, table: str | None = None, clients_for: tools.ClientsFactory | None = None
) -> MCPServer:
    """The server; ``clients_for`` (Region → AwsClients) defaults to the profile's credentials."""
    if clients_for is None:
        from hyperpod_debugger.aws.clients import AwsClients

        def clients_for(region: str) -> Any:
            return AwsClients.for_profile(region, profile)

    server: MCPServer = MCPServer(
        "hyperpod-debugger",
        title="HyperPod Node Debugger",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",  # the SDK's own INFO lines (every AWS client's endpoint) would drown the agent's log
    )
    shared = _Tools(server, clients_for, table, profile)
    _add_triage_tools(shared)
    _add_findings_tools(shared)
    _add_reference_tools(shared)
    _add_advice_tools(shared)
    return server


def _add_triage_tools(shared: _Tools) -> None:
    """triage_cluster (through AWS) and analyze_probe_output (offline): the two that judge and return a report."""
    factory, profile = shared.clients_for, shared.profile

    @shared.tool("Triage a HyperPod cluster or one node", _READS_AWS, cluster_text=True)
    def triage_cluster(
        cluster: str,
        region: str | None = None,
        node: str | None = None,
        probe: bool = False,
        max_probe_nodes: int = 5,
        since_hours: float = 24.0,
        log_days: float = 7.0,
    ) -> Annotated[CallToolResult, TriageReport]:
        """Run the read-only triage of a HyperPod cluster (name or ARN): its API state and events, network,
        orchestrator, HyperPod's health-agent logs, and with probe=true the on-node probe through Session
        Manager (read-only script; slower: minutes). Give node (an EC2 instance id) to focus on one node.
        Returns the triage report: findings (PASS/FAIL/WARN/INFO/UNKNOWN with priority, evidence, runbook
        section, suggested commands), one verdict per node, and what was covered. Use this first."""
        report = _run(
            lambda: tools.triage_cluster(
                factory, cluster, region, node, probe, max_probe_nodes, since_hours, log_days, profile
            )
        )
        return report_result(report)

    @shared.tool("Why did a training job die", _READS_AWS, cluster_text=True)
    def diagnose_job(
        cluster: str,
        job: str | None = None,
        pytorchjob: str | None = None,
        table: str | None = None,
        region: str | None = None,
        probe: bool = True,
    ) -> Annotated[CallToolResult, tools.JobDiagnosisView]:
        """Start from a Slurm job id (job=4123) or a PyTorchJob (pytorchjob=NAMESPACE/NAME, on EKS): read the job
        (its nodes, start, end, state, exit code; a PyTorchJob's pods and how each ended), then what happened to
        those nodes in the job's window (HyperPod's events, the health agent's detections, a scoped triage
        probing the nodes still running, and the findings table's history when one is set), and answer: the
        likely culprit node(s) with the evidence and the next command, a cause common to all the job's nodes,
        or that nothing read explains it (the job's own exit), with what was read. Read-only; slower with
        probe=true (minutes). Use it when someone says their job died or hung."""
        diagnosis = _run(
            lambda: tools.diagnose_job(
                factory, cluster, job, table or shared.table, region, probe, profile, pytorchjob=pytorchjob
            )
        )
        return structured_result(for_agent_model(diagnosis))

    @shared.tool("Judge output saved from a node", _LOCAL, cluster_text=True)
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
    ) -> Annotated[CallToolResult, TriageReport]:
        """Judge what a node printed, without AWS access: either document (the JSON object probe.sh prints) or
        outputs (raw text by probe item id, e.g. {"nvidia_smi_query_gpu": "...", "kernel_log": "..."}; the ids
        are listed at the top of get_probe_script). instance_type (e.g. ml.p5.48xlarge) sets what is expected.
        Use it when someone pastes nvidia-smi, dmesg/journalctl, df or systemctl output."""
        report = _run(
            lambda: tools.analyze_probe_output(
                instance_type, document, outputs, orchestrator, role, now, window_hours, instance_id, cluster, region
            )
        )
        return report_result(report)


def _add_findings_tools(shared: _Tools) -> None:
    """list_findings, findings_stats and node_history: what the monitor's findings table holds."""
    factory, server_table, profile = shared.clients_for, shared.table, shared.profile

    @shared.tool("Open findings of a cluster", _READS_AWS, cluster_text=True)
    def list_findings(
        cluster: str, table: str | None = None, region: str | None = None, include_resolved: bool = False
    ) -> Annotated[CallToolResult, tools.FindingsList]:
        """The monitor's open findings of a cluster from its findings table (the stack's FindingsTableName),
        most urgent first, each with first/last seen, count, evidence and fingerprint. Use it to see what the
        deployed monitor already knows before triaging again."""
        found = _run(
            lambda: tools.list_findings(factory, cluster, table or server_table, region, include_resolved, profile)
        )
        return structured_result(for_agent_model(found))

    @shared.tool("Findings history reviewed over a period", _READS_AWS, cluster_text=True)
    def findings_stats(
        cluster: str, table: str | None = None, region: str | None = None, days: int = 30, until: str | None = None
    ) -> Annotated[CallToolResult, tools.FindingsStats]:
        """A cluster's findings history over the last `days` (1-90, ending `until`, ISO 8601, default now):
        repeat offenders (nodes with two or more incidents), incidents and node-hours unhealthy per instance
        group and type, what fails most by check and by runbook section, time to resolve (p50/p90), and what is
        still open. Use it for "which nodes keep failing" or a monthly reliability review."""
        stats = _run(
            lambda: tools.findings_stats(factory, cluster, table or server_table, region, days, until, profile)
        )
        return structured_result(for_agent_model(stats))

    @shared.tool("History of a node's findings", _READS_AWS, cluster_text=True)
    def node_history(
        node: str | None = None,
        cluster: str | None = None,
        table: str | None = None,
        region: str | None = None,
        limit: int = 50,
    ) -> Annotated[CallToolResult, tools.NodeHistory]:
        """Every transition (NEW, ESCALATED, RESOLVED, REOPENED …) of one node's findings, newest first, from
        the findings table; or give cluster for its cluster-wide findings. Use it to see whether a fault
        recurs across reboots or replacements."""
        history = _run(
            lambda: tools.node_history(factory, node, cluster, table or server_table, region, limit, profile)
        )
        return structured_result(for_agent_model(history))


def _add_reference_tools(shared: _Tools) -> None:
    """read_runbook_section and get_probe_script: the package's own text, no AWS and no cluster text."""

    @shared.tool("Read a runbook section", _LOCAL, cluster_text=False)
    def read_runbook_section(section: str) -> Annotated[CallToolResult, tools.RunbookSection]:
        """The runbook section a finding points at (its section id, e.g. "G.1.a" or "B.2"): what the
        problem is, how to confirm it read-only, and what to do, in order."""
        # the package's own text: not cluster text, and not cut at a string's limit (a section is bounded)
        return structured_result(_run(lambda: tools.read_runbook_section(section)))

    @shared.tool("The read-only on-node probe script", _LOCAL, cluster_text=False, structured_output=False)
    def get_probe_script() -> str:
        """probe.sh, the read-only script the triage runs on a node: show it to a person who wants to run it
        by hand, or to see which outputs (item ids) analyze_probe_output reads."""
        script = tools.probe_script()
        if len(script) > RESULT_LIMIT:
            raise _too_large(len(script))
        return script


def _add_advice_tools(shared: _Tools) -> None:
    """suggested_commands and draft_support_case: text for the person behind the agent to read, run or send."""
    factory, server_table, profile = shared.clients_for, shared.table, shared.profile

    @shared.tool("Suggested commands for a stored finding", _READS_AWS, cluster_text=True)
    def suggested_commands(
        cluster: str, fingerprint: str, table: str | None = None, region: str | None = None
    ) -> Annotated[CallToolResult, tools.CommandsForFinding]:
        """The commands suggested for one stored finding (its fingerprint from list_findings), with ids filled
        in, blast radius, preconditions and the infrastructure-as-code note. They are text for a person to
        read and run; this server never runs them."""
        commands = _run(
            lambda: tools.commands_for_finding(factory, cluster, fingerprint, table or server_table, region, profile)
        )
        return structured_result(for_agent_model(commands, documents=("text",)))

    @shared.tool("Draft an AWS Support case for a node", _READS_AWS, cluster_text=True)
    def draft_support_case(
        cluster: str, node: str, table: str | None = None, region: str | None = None, days: int = 14
    ) -> Annotated[CallToolResult, SupportCaseDraft]:
        """A draft AWS Support case for one node: ids, instance type, findings with evidence and times, the
        reboots and replacements HyperPod's events show, and the checklist of what Support asks for. It is a
        draft to show the person; nothing is submitted."""
        case = for_agent_model(
            _run(lambda: tools.draft_support_case(factory, cluster, node, table or server_table, region, days, profile))
        )
        # the Markdown is rendered from the case as the agent gets it, so it quotes the same bounded text
        return structured_result(SupportCaseDraft(case=case, markdown=_document(render_markdown(case))))


# --------------------------------------------------------------------------- streamable HTTP

#: the --host values served without --allow-remote: the three names of this machine's loopback interface that
#: the SDK and every client treat as local. Any other address, 127.0.0.2 and the rest of 127.0.0.0/8 included,
#: is a deliberate choice and needs the opt-in (and so a token), like 0.0.0.0 or a LAN address.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: the names a local client may use for a loopback bind (in a Host header, an IPv6 address is bracketed)
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: an operator's token: at least this many visible ASCII characters (a header value, no space)
TOKEN_MIN_CHARS = 32
_TOKEN = re.compile(rf"[\x21-\x7e]{{{TOKEN_MIN_CHARS},}}")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class AccessError(ValueError):
    """A --host, --allowed-host, --allowed-origin or token the HTTP server cannot use (said without the token)."""


def bind_address(host: str) -> str:
    """``host`` as it is bound and compared: an IP address in its compressed form without brackets, a name in
    lower case."""
    value = host.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    try:
        return ipaddress.ip_address(value).compressed
    except ValueError:
        pass
    name = value.lower()
    if not _HOSTNAME.fullmatch(name):
        raise AccessError(f"--host {host!r} is neither an IP address nor a host name")
    return name


def is_loopback(host: str) -> bool:
    """Whether ``host`` is one of :data:`LOOPBACK_HOSTS` (any spelling of the same address)."""
    try:
        return bind_address(host) in LOOPBACK_HOSTS
    except AccessError:
        return False


def _every_interface(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _port(text: str, what: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AccessError(f"{what}: {text!r} is not a port (1-65535)")
    return int(text)


def _authority(text: str, what: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address → (name as a Host header writes
    it, port or None)."""
    value = text.strip().lower()
    if value.startswith("["):
        m = re.fullmatch(r"\[([^\]]+)\](?::(.*))?", value)
        if m is None:
            raise AccessError(f"{what}: {text!r} is not [IPv6 address] or [IPv6 address]:port")
        try:
            name = f"[{ipaddress.IPv6Address(m.group(1)).compressed}]"
        except ValueError as exc:
            raise AccessError(f"{what}: {m.group(1)!r} is not an IPv6 address") from exc
        return name, (_port(m.group(2), what) if m.group(2) is not None else None)
    if value.count(":") > 1:  # a bare IPv6 address (it cannot carry a port without brackets)
        try:
            return f"[{ipaddress.IPv6Address(value).compressed}]", None
        except ValueError as exc:
            raise AccessError(f"{what}: {text!r} is not an IPv6 address; write [address]:port") from exc
    name, colon, port = value.partition(":")
    try:
        name = ipaddress.IPv4Address(name).compressed
    except ValueError:
        if not _HOSTNAME.fullmatch(name):
            raise AccessError(
                f"{what}: {text!r} is not a host name or address with an optional :port (no scheme, path or wildcard)"
            ) from None
    return name, (_port(port, what) if colon else None)


def _host_values(name: str, port: int) -> list[str]:
    # a client leaves out the port when it is HTTP's default
    return [f"{name}:{port}", name] if port == _DEFAULT_PORTS["http"] else [f"{name}:{port}"]


def _origin(scheme: str, name: str, port: int | None) -> str:
    # a browser leaves out the port when it is the scheme's default
    return f"{scheme}://{name}" if port in (None, _DEFAULT_PORTS[scheme]) else f"{scheme}://{name}:{port}"


def allowed_origin(value: str) -> str:
    """An operator's ``--allowed-origin`` (``http(s)://host[:port]``) as a browser writes it in ``Origin``."""
    m = re.fullmatch(r"(https?)://([^/?#@*\\\s]+)/?", value.strip().lower())
    if m is None:
        raise AccessError(f"--allowed-origin {value!r} is not http(s)://host[:port] (no path or wildcard)")
    name, port = _authority(m.group(2), "--allowed-origin")
    return _origin(m.group(1), name, port)


def check_token(token: str) -> str:
    """``token`` if it is fit to be a bearer token; the error never quotes it."""
    if not _TOKEN.fullmatch(token):
        raise AccessError(
            f"the bearer token must be at least {TOKEN_MIN_CHARS} visible ASCII characters without spaces "
            "(for example the output of `openssl rand -hex 32`)"
        )
    return token


def new_token() -> str:
    """A bearer token for one run of the server (256 random bits)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class HttpAccess:
    """Who may talk to the HTTP server: the bind, the Host and Origin values accepted, the bearer token."""

    host: str
    port: int
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    token: str | None = field(default=None, repr=False)

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def url(self) -> str:
        return f"http://{_bracketed(self.host)}:{self.port}/mcp"

    def transport_security(self) -> TransportSecuritySettings:
        """The same lists for the SDK's own check (exact matches: no ``:*`` wildcard is ever given)."""
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(self.allowed_hosts),
            allowed_origins=list(self.allowed_origins),
        )

    def refusal(self, headers: Headers) -> Response | None:
        """Why a request is refused (421 Host, 403 Origin, 401 token, in that order), or None."""
        hosts = headers.getlist("host")
        if len(hosts) != 1 or hosts[0] not in self.allowed_hosts:
            return PlainTextResponse("Invalid Host header", status_code=421)
        origins = headers.getlist("origin")
        if len(origins) > 1 or (origins and origins[0] not in self.allowed_origins):
            return PlainTextResponse("Invalid Origin header", status_code=403)
        if self.token is not None:
            given = headers.getlist("authorization")
            scheme, _, credential = (given[0] if len(given) == 1 else "").partition(" ")
            matches = hmac.compare_digest(credential.strip().encode(), self.token.encode())
            if scheme.lower() != "bearer" or not matches:
                return PlainTextResponse(
                    "Missing or wrong bearer token", status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
        return None


def http_access(
    host: str,
    port: int,
    *,
    extra_hosts: Iterable[str] = (),
    extra_origins: Iterable[str] = (),
    token: str | None = None,
) -> HttpAccess:
    """The access rules of a bind: Host may be the bind address with the port (for a loopback bind, any of
    ``localhost``, ``127.0.0.1`` and ``[::1]`` with the port) or an ``extra_hosts`` value (``host`` alone
    takes the server's port); Origin, when sent, ``http://`` or ``https://`` one of those, or an
    ``extra_origins`` value. Every match is exact."""
    bind = bind_address(host)
    if not 1 <= port <= 65535:
        raise AccessError(f"--port {port} is not a port (1-65535)")
    names = _LOOPBACK_NAMES if bind in LOOPBACK_HOSTS else (_bracketed(bind),)
    authorities: list[tuple[str, int]] = [(name, port) for name in names]
    for value in extra_hosts:
        name, given = _authority(value, "--allowed-host")
        authorities.append((name, given or port))
    hosts = [value for name, p in authorities for value in _host_values(name, p)]
    origins = [_origin(scheme, name, p) for name, p in authorities for scheme in ("http", "https")]
    origins += [allowed_origin(value) for value in extra_origins]
    return HttpAccess(
        host=bind,
        port=port,
        allowed_hosts=tuple(dict.fromkeys(hosts)),
        allowed_origins=tuple(dict.fromkeys(origins)),
        token=check_token(token) if token is not None else None,
    )


class _Gate:
    """The checks of :meth:`HttpAccess.refusal` on every HTTP request, whatever its path, before the app."""

    def __init__(self, app: ASGIApp, access: HttpAccess) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no WebSocket is served: closed before it is accepted (403)
            await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self.access.refusal(Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, access: HttpAccess) -> ASGIApp:
    """The SDK's streamable HTTP app (``/mcp``) for ``access``, behind the Host, Origin and token checks."""
    app = server.streamable_http_app(transport_security=access.transport_security(), host=access.host)
    return _Gate(app, access)


def exposure_warning(access: HttpAccess, profile: str | None = None) -> str:
    """What a bind beyond loopback risks, for stderr."""
    credentials = f"the AWS credentials of profile {profile}" if profile else "this process's AWS credentials"
    lines = [
        f"warning: serving {access.url}, beyond this machine's loopback interface. Anyone who can reach this "
        f"port and holds the bearer token can run the read-only triage with {credentials}, including on-node "
        "probes through Session Manager (triage_cluster with probe=true), and read the findings table.",
        "warning: this is plain HTTP: the token and the results cross the network unencrypted; prefer a "
        "loopback bind reached through an SSH tunnel, or put TLS in front of it.",
        f"accepted Host values: {', '.join(access.allowed_hosts)}",
    ]
    own = _bracketed(access.host)
    if _every_interface(access.host) and all(value.startswith(own) for value in access.allowed_hosts):
        lines.append(
            "note: no --allowed-host was given, so only a client on this machine that addresses the server as "
            f"{access.allowed_hosts[0]} is accepted; add the name or address clients use with --allowed-host."
        )
    return "\n".join(lines)


def serve_http(server: MCPServer, access: HttpAccess) -> None:
    """Serve ``server`` over streamable HTTP until interrupted."""
    import uvicorn

    uvicorn.run(
        http_app(server, access),
        host=access.host,
        port=access.port,
        log_level="warning",
        proxy_headers=False,  # nothing is taken from X-Forwarded-* headers
        server_header=False,
    )
