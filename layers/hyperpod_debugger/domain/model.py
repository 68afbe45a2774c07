"""The finding model and the triage report: the contract every face of the product renders.

A :class:`Finding` is one observation about one cluster (and, where it applies, one node),
carrying the evidence it rests on and the commands an operator may run. The JSON form of a
:class:`TriageReport` is a documented, versioned schema (``references/triage-report.schema.json``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hyperpod_debugger.domain import untrusted
from hyperpod_debugger.domain.sections import is_section, link, pointer

# Every model below builds its schema on first use (``defer_build``), not at import: a function that imports
# this module pays only for what it validates (the notifier and the alert groups never build a report).

SCHEMA_VERSION: Literal[1] = 1
#: exit codes of the triage and the CLI (README.md § CLI): 0 healthy, 1 problems found, 2 invalid arguments,
#: 3 could not look (the AWS CLI too keeps "could not run" apart from its own error codes)
EXIT_HEALTHY: Literal[0] = 0
EXIT_PROBLEMS: Literal[1] = 1
EXIT_INVALID: Literal[2] = 2
EXIT_COULD_NOT_LOOK: Literal[3] = 3


class Tag(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    INFO = "INFO"
    #: We could not look (access denied, timeout, unreachable, malformed answer). Never a verdict.
    UNKNOWN = "UNKNOWN"


class Priority(StrEnum):
    P0 = "P0"  # blocks operation
    P1 = "P1"  # degraded
    P2 = "P2"  # informational


PROBLEM_TAGS = frozenset({Tag.FAIL, Tag.WARN, Tag.UNKNOWN})

#: The rung a suggested command stands on; commands are always listed in this order.
Step = Literal["investigate", "change", "drain", "reboot", "replace"]
STEP_ORDER: dict[str, int] = {"investigate": 0, "change": 1, "drain": 2, "reboot": 3, "replace": 4}

#: What the evidence says should happen to the node a finding is about.
NodeAction = Literal["investigate", "reboot", "replace", "fix-workload"]


class SuggestedCommand(BaseModel):
    """A command we never run ourselves; the operator may, after reading the conditions."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    command: str = Field(description="Shell command with real ids filled in, every value shell-quoted.")
    purpose: str = Field(description="What running it achieves, one line.")
    mutates: bool = Field(description="True when the command changes cluster, node, network or workload state.")
    blast_radius: str | None = Field(
        default=None, description="What else the command affects; required when it mutates."
    )
    iac_warning: str | None = Field(
        default=None,
        description="Drift warning, present when the command changes cluster/VPC/SG/EKS configuration.",
    )
    preconditions: list[str] = Field(default_factory=list)
    step: Step = Field(
        default="investigate",
        description="Rung of the ladder: investigate (read-only), change (configuration), drain, reboot, replace.",
    )
    resource: str | None = Field(default=None, description="Id or ARN of the resource the command changes.")

    @model_validator(mode="after")
    def _mutating_commands_state_their_reach(self) -> SuggestedCommand:
        if self.mutates:
            if not self.blast_radius:
                raise ValueError("a mutating suggested command must state its blast radius")
            if not self.iac_warning:
                raise ValueError("a mutating suggested command must carry the IaC note")
            if not self.preconditions:
                raise ValueError("a mutating suggested command must state its preconditions")
            if self.step == "investigate":
                raise ValueError("a mutating command cannot be an investigate step")
        elif self.step != "investigate":
            raise ValueError("a read-only command is an investigate step")
        if self.step == "replace" and "root and secondary volumes" not in (self.blast_radius or ""):
            raise ValueError("a replace command must say it destroys the root and secondary volumes")
        return self


class Finding(BaseModel):
    """One result of one check."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tag: Tag
    priority: Priority | None = None
    check: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$", description="Stable check id.")
    section: str | None = Field(default=None, description="Runbook section id such as 'B.2' (no '§').")
    message: str
    cluster_arn: str | None = None
    cluster_name: str | None = None
    instance_id: str | None = None
    instance_group: str | None = None
    instance_type: str | None = Field(default=None, description="The node's instance type, where the node is known.")
    node_logical_id: str | None = Field(
        default=None,
        description="HyperPod's NodeLogicalId of the node (clusters in continuous provisioning mode): the identity "
        "a replacement keeps, so a node's history follows it across replacements.",
    )
    evidence: list[str] = Field(default_factory=list, description="Verbatim lines the finding rests on.")
    root_cause: str | None = None
    suggested_commands: list[SuggestedCommand] = Field(default_factory=list)
    node_action: NodeAction | None = Field(
        default=None,
        description="What the evidence says to do with the node: the rung of investigate → reboot → replace.",
    )
    next_step: str | None = Field(default=None, description="One line: what the operator should do next.")
    runbook: str | None = Field(default=None, description="Link to the runbook section (anchor), from the section.")
    caused_by: str | None = Field(
        default=None,
        description="The finding of this report that explains this one (one root cause across checks): its "
        "message and section. The report prints this finding under it.",
    )
    explains: list[str] = Field(
        default_factory=list, description="Findings of this report that this one explains (message and section)."
    )

    @model_validator(mode="before")
    @classmethod
    def _link_the_runbook(cls, data: object) -> object:
        if (
            isinstance(data, dict)
            and data.get("section")
            and not data.get("runbook")
            and is_section(str(data["section"]))
        ):
            return {**data, "runbook": link(str(data["section"]))}
        return data

    @field_validator("message")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("message must not be empty")
        return untrusted.clean(value)

    @field_validator("root_cause", "next_step", "caused_by")
    @classmethod
    def _outside_text(cls, value: str | None) -> str | None:
        return untrusted.clean(value) if value else value

    @field_validator("explains")
    @classmethod
    def _outside_texts(cls, value: list[str]) -> list[str]:
        return [untrusted.clean(v) for v in value]

    @field_validator("evidence")
    @classmethod
    def _verbatim_but_safe(cls, value: list[str]) -> list[str]:
        """Evidence is kept verbatim except for what must never be kept or shown: credentials (redacted, with
        their kind), invisible and control characters (shown as escapes) and lines beyond
        :data:`~hyperpod_debugger.domain.untrusted.LINE_LIMIT` characters (cut, saying how much)."""
        return untrusted.clean_lines(value)

    @field_validator("section")
    @classmethod
    def _known_section(cls, value: str | None) -> str | None:
        if value is not None and not is_section(value):
            raise ValueError(f"unknown runbook section {value!r}")
        return value

    @model_validator(mode="after")
    def _problems_are_prioritised_and_routed(self) -> Finding:
        if self.tag in PROBLEM_TAGS:
            if self.priority is None:
                raise ValueError(f"a {self.tag} finding needs a priority")
            if self.section is None:
                raise ValueError(f"a {self.tag} finding needs a runbook section")
        if self.tag is Tag.PASS and self.priority is not None:
            raise ValueError("a PASS finding carries no priority")
        if self.tag is Tag.UNKNOWN and any(c.mutates for c in self.suggested_commands):
            raise ValueError("an UNKNOWN finding may only suggest read-only commands")
        steps = [STEP_ORDER[c.step] for c in self.suggested_commands]
        if steps != sorted(steps):
            raise ValueError("suggested commands must run in the order investigate → change → reboot → replace")
        return self

    @property
    def is_problem(self) -> bool:
        return self.tag in PROBLEM_TAGS

    @property
    def blocks_or_degrades(self) -> bool:
        return self.is_problem and self.priority in (Priority.P0, Priority.P1)

    def pointer(self) -> str | None:
        return pointer(self.section) if self.section else None


class CheckStatus(StrEnum):
    RAN = "ran"
    SKIPPED = "skipped"
    UNKNOWN = "unknown"


class CheckCoverage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    check: str
    status: CheckStatus
    reason: str | None = None
    nodes: list[str] | None = Field(
        default=None,
        description="The only nodes this check looked at (HyperPod's verdicts on the nodes its events named); "
        "null: every node the run saw.",
    )


class Coverage(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    checks: list[CheckCoverage] = Field(default_factory=list)
    api_calls: dict[str, int] = Field(
        default_factory=dict, description="Logical AWS API calls made, keyed by IAM action name."
    )
    probed_nodes: list[str] | None = Field(
        default=None,
        description="Instance ids whose on-node probe document was evaluated (null: no probing was attempted).",
    )
    software: dict[str, dict[str, str]] | None = Field(
        default=None,
        description="What each probed node runs (§ E), by instance id: component (nvidia_driver, cuda_driver, "
        "kernel, efa_installer, libfabric, aws_ofi_nccl, nccl, neuron_driver, …) → version, or 'none found' where "
        "the node has none; components that could not be read are left out (null: no versions were read).",
    )


class ClusterRef(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    arn: str | None = None
    cluster_id: str | None = None
    region: str
    account_id: str | None = None
    status: str | None = None
    orchestrator: Literal["EKS", "Slurm", "Unknown"] | None = None
    eks_cluster_arn: str | None = None
    node_count: int | None = None


class RunError(BaseModel):
    """A fatal condition that stopped the triage before any check could run."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["credentials", "cluster_not_found", "endpoint", "invalid_argument", "internal"]
    message: str
    clusters_in_region: list[str] = Field(default_factory=list)


class Summary(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    P0: int = 0
    P1: int = 0
    P2: int = 0
    unknown: int = 0
    passed: int = 0


VerdictState = Literal[
    "healthy", "watch", "investigate", "reboot", "replace", "hyperpod-acting", "fix-workload", "unknown"
]


class NodeProblem(BaseModel):
    """One problem finding of a node, as its verdict names it (the finding itself is in ``findings``)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    check: str
    tag: Tag
    priority: Priority | None = None
    message: str
    section: str | None = None
    fixed_by_rung: bool = Field(
        default=False,
        description="Whether the verdict's rung clears it too (a reboot clears a transient accelerator fault, "
        "never a full disk or a service's configuration); false: it needs its own step.",
    )


class NodeVerdict(BaseModel):
    """One node's state, from all its findings: the single rung of the ladder it is on, and why."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    instance_id: str
    instance_group: str | None = None
    instance_type: str | None = None
    verdict: VerdictState
    why: str = Field(description="The deciding finding's message.")
    section: str | None = None
    checks: list[str] = Field(default_factory=list, description="Checks with a problem on this node, weightiest first.")
    next_step: str | None = None
    next_command: str | None = Field(
        default=None,
        description="The next command for this rung, ids filled in (the drain, before a reboot or replace).",
    )
    then_command: str | None = Field(default=None, description="The rung's own command, after the drain.")
    hyperpod: str | None = Field(default=None, description="What HyperPod itself is doing or recommends.")
    occupancy: str | None = Field(
        default=None,
        description="On the reboot or replace rung: what runs on the node (Slurm jobs, pods outside DaemonSets) "
        "as read before the suggestion, or why it could not be read.",
    )
    likely_cause: str | None = Field(
        default=None, description="The root cause of the deciding finding, when another finding explains it."
    )
    priority: Priority | None = Field(default=None, description="The deciding finding's priority.")
    worst: NodeProblem | None = Field(
        default=None,
        description="The node's most urgent problem (priority first, then FAIL before WARN) when it is not the "
        "deciding finding: the rung is chosen by what fixes the node, so the worst problem may be another.",
    )
    other_problems: list[NodeProblem] = Field(
        default_factory=list,
        description="Every other problem finding on this node, most urgent first, with whether the rung clears "
        "it: the verdict hides none of them.",
    )


class TriageReport(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    tool_version: str
    generated_at: str = Field(description="UTC ISO-8601 time the triage ran.")
    cluster: ClusterRef
    scope_node: str | None = Field(default=None, description="Instance id given with --node.")
    findings: list[Finding] = Field(default_factory=list)
    coverage: Coverage = Field(default_factory=Coverage)
    summary: Summary = Field(default_factory=Summary)
    node_verdicts: list[NodeVerdict] = Field(
        default_factory=list, description="One verdict per node with findings, most urgent first."
    )
    error: RunError | None = None
    exit_code: Literal[0, 1, 2, 3] = Field(
        description="0 no problem at P1 or above; 1 a P0/P1 problem; 2 invalid arguments; 3 could not look "
        "(no usable credentials, no such cluster, access denied to the first calls, endpoint unreachable)."
    )

    @staticmethod
    def summarise(findings: list[Finding]) -> Summary:
        summary = Summary()
        for finding in findings:
            if finding.tag is Tag.PASS:
                summary.passed += 1
            if finding.tag is Tag.UNKNOWN:
                summary.unknown += 1
            if finding.is_problem and finding.priority is not None:
                setattr(summary, finding.priority.value, getattr(summary, finding.priority.value) + 1)
        return summary

    @staticmethod
    def exit_code_for(findings: list[Finding], error: RunError | None = None) -> int:
        if error is not None:
            return EXIT_INVALID if error.kind == "invalid_argument" else EXIT_COULD_NOT_LOOK
        return EXIT_PROBLEMS if any(f.blocks_or_degrades for f in findings) else EXIT_HEALTHY


def trim_evidence(
    lines: list[str] | tuple[str, ...], max_lines: int = 20, *, max_bytes: int | None = None, say_more: bool = True
) -> list[str]:
    """Evidence kept readable and bounded, in order: at most ``max_lines`` lines and, with ``max_bytes``,
    that many UTF-8 bytes (the last line cut at a character). With ``say_more`` a last line says how many
    lines were left out, so a reader knows more exists (checks say it; the store's bound is silent)."""
    if max_bytes is None and len(lines) <= max_lines:
        return list(lines)  # the usual case: nothing to cut
    kept = list(lines)[:max_lines]
    out: list[str] = []
    budget = max_bytes
    for line in kept:
        if budget is not None:
            encoded = line.encode()
            if len(encoded) > budget:
                if budget > 0:
                    out.append(encoded[:budget].decode(errors="ignore"))
                break
            budget -= len(encoded)
        out.append(line)
    left = len(lines) - len(out)
    if say_more and left > 0 and len(lines) > max_lines:
        out.append(f"… and {len(lines) - max_lines} more")
    return out
