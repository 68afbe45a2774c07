"""A draft AWS Support case for one node, from what the monitor and HyperPod already know.

Pure: the facts come in (:class:`CaseFacts`, gathered by ``support_case.gather``), Markdown or JSON go out.
Nothing here opens a case; the draft says so, and says what it could not read instead of leaving it out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from hyperpod_debugger.domain.sections import pointer
from hyperpod_debugger.domain.untrusted import markdown_code, markdown_text
from hyperpod_debugger.lifecycle.findings import State, StoredFinding
from hyperpod_debugger.report.runbook import support_checklist

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import Cluster, ClusterEvent, NodeDetail
    from hyperpod_debugger.store.findings import HistoryRecord

#: evidence lines of each open finding the draft quotes (the case links the rest)
EVIDENCE_LINES = 12
_REBOOT = re.compile(r"\breboot", re.IGNORECASE)
_REPLACE = re.compile(r"\breplac", re.IGNORECASE)
_PRIORITY = {"P0": 0, "P1": 1, "P2": 2}


@dataclass(frozen=True)
class CaseFacts:
    cluster: Cluster
    node_id: str
    generated_at: datetime
    window_days: int
    node: NodeDetail | None = None
    findings: tuple[StoredFinding, ...] = ()
    history: tuple[HistoryRecord, ...] = ()
    events: tuple[ClusterEvent, ...] = ()
    #: what could not be read, each said in the draft (no table given, a call denied, …)
    gaps: tuple[str, ...] = field(default=())


class Attempt(BaseModel):
    at: str
    kind: str = Field(description="reboot or replacement, as HyperPod's event describes it")
    event_id: str
    description: str


class CaseEvent(BaseModel):
    at: str
    level: str | None
    event_id: str
    description: str
    failure_messages: list[str] = Field(default_factory=list)


class CaseFinding(BaseModel):
    fingerprint: str
    state: str
    priority: str | None
    tag: str
    check: str
    section: str | None
    first_seen: str
    last_seen: str
    count: int
    message: str
    evidence: list[str]


class CaseJob(BaseModel):
    """The job a case drafted with ``--job`` is about, and what the job diagnosis concluded."""

    job_id: str
    name: str
    owner: str | None
    state: str
    exit_code: str | None
    start: str | None
    end: str | None
    nodes: list[str]
    conclusion: str
    evidence: list[str] = Field(description="The culprit node's evidence, each with where it falls in the job")


class SupportCase(BaseModel):
    """The draft as data (``--json``); :func:`render_markdown` prints the same for a person."""

    subject: str
    cluster_name: str
    cluster_arn: str
    region: str
    orchestrator: str
    eks_cluster_arn: str | None
    instance_id: str
    instance_group: str | None
    instance_type: str | None
    node_status: str | None
    generated_at: str
    window_days: int
    findings: list[CaseFinding]
    history: list[dict[str, str | None]]
    events: list[CaseEvent]
    attempts: list[Attempt] = Field(description="Reboots and replacements HyperPod's events show, oldest first")
    checklist: list[dict[str, str | bool]] = Field(description="What Support asks for, and whether the draft has it")
    gaps: list[str]
    job: CaseJob | None = Field(default=None, description="The training job the case is about (support-case --job)")


def _when(moment: datetime | str | None) -> str:
    if moment is None:
        return "time unknown"
    if isinstance(moment, str):
        return moment
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def attempts(events: tuple[ClusterEvent, ...]) -> list[Attempt]:
    """The reboots and replacements among the node's events (read from their descriptions), oldest first."""
    found = []
    for event in sorted(events, key=lambda e: e.time):
        kind = (
            "replacement"
            if _REPLACE.search(event.description)
            else "reboot"
            if _REBOOT.search(event.description)
            else None
        )
        if kind:
            found.append(
                Attempt(at=_when(event.time), kind=kind, event_id=event.event_id, description=event.description)
            )
    return found


#: words of each checklist item of the catalog → what the draft holds for it
_CHECKLIST_KEYS = (
    ("cluster arn", "identity"),
    ("orchestrator", "orchestrator"),
    ("instance ids", "node"),
    ("time window", "window"),
    ("error strings", "errors"),
    ("gpu problems", "gpu"),
    ("already tried", "tried"),
    ("event ids", "events"),
    ("triage report", "report"),
    ("s3 location", "bundles"),
)


def _in_draft(item: str, have: dict[str, bool]) -> bool:
    lowered = item.lower()
    return next((have[key] for words, key in _CHECKLIST_KEYS if words in lowered), False)


def draft(facts: CaseFacts) -> SupportCase:
    node_findings = sorted(
        (f for f in facts.findings if f.instance_id == facts.node_id),
        key=lambda f: (f.state is State.RESOLVED, _PRIORITY.get(f.priority.value if f.priority else "", 9), f.check),
    )
    open_ones = [f for f in node_findings if f.state is not State.RESOLVED]
    tried = attempts(facts.events)
    worst = open_ones[0] if open_ones else None
    what = worst.message if worst else "node health problem"
    group = facts.node.group if facts.node and facts.node.group else None
    itype = facts.node.instance_type if facts.node and facts.node.instance_type else None
    subject = f"HyperPod {facts.cluster.name}: {facts.node_id}{f' ({itype})' if itype else ''} — {what}"
    have = {
        "identity": True,
        "orchestrator": True,
        "node": True,
        "window": bool(node_findings or facts.events),
        "errors": bool(open_ones or facts.events),
        # GPU evidence: the probe's GPU checks (nvidia-smi, DCGM, Xid) or the health agent's Xid records
        "gpu": any(f.check.startswith(("probe.gpu", "probe.xid", "probe.dcgm", "logs.hma")) for f in open_ones),
        "tried": bool(facts.events),
        "events": bool(facts.events),
        "report": False,
        "bundles": False,
    }
    checklist = [{"item": item, "in_draft": _in_draft(item, have)} for item in support_checklist()]
    return SupportCase(
        subject=subject[:250],
        cluster_name=facts.cluster.name,
        cluster_arn=facts.cluster.arn,
        region=facts.cluster.region,
        orchestrator=facts.cluster.orchestrator,
        eks_cluster_arn=facts.cluster.eks_cluster_arn,
        instance_id=facts.node_id,
        instance_group=group,
        instance_type=itype,
        node_status=facts.node.status if facts.node else None,
        generated_at=_when(facts.generated_at),
        window_days=facts.window_days,
        findings=[
            CaseFinding(
                fingerprint=f.fingerprint,
                state=f.state.value,
                priority=f.priority.value if f.priority else None,
                tag=f.tag.value,
                check=f.check,
                section=f.section,
                first_seen=f.first_seen,
                last_seen=f.last_seen,
                count=f.count,
                message=f.message,
                evidence=list(f.evidence[:EVIDENCE_LINES]),
            )
            for f in node_findings
        ],
        history=[
            {
                "at": r.at,
                "transition": r.transition.value,
                "priority": r.priority.value if r.priority else None,
                "check": r.check,
                "message": r.message,
            }
            for r in facts.history
        ],
        events=[
            CaseEvent(
                at=_when(e.time),
                level=e.level,
                event_id=e.event_id,
                description=e.description,
                failure_messages=list(e.failure_messages),
            )
            for e in sorted(facts.events, key=lambda e: e.time, reverse=True)
        ],
        attempts=tried,
        checklist=checklist,
        gaps=list(facts.gaps),
    )


def _fence(lines: list[str]) -> list[str]:
    """Outside lines as a code block no fence inside them can close."""
    return markdown_code(lines).split("\n")


def _cell(text: str | None) -> str:
    """Outside text on one line of Markdown (a heading, a bullet, a table cell): nothing in it can become an
    image, a link, HTML, emphasis or a table column."""
    return markdown_text(" ".join((text or "").split()))


def render_markdown(case: SupportCase) -> str:
    """The draft as a person reads and pastes it: the environment, what is wrong, what was tried, HyperPod's
    events, the finding history, Support's checklist and what the draft could not read."""
    sections = (
        _environment,
        _the_job,
        _what_is_wrong,
        _what_was_tried,
        _hyperpod_events,
        _finding_history,
        _what_support_asks,
        _not_in_draft,
    )
    return "\n".join(line for section in sections for line in section(case))


def _environment(case: SupportCase) -> list[str]:
    eks = f" (EKS cluster `{case.eks_cluster_arn}`)" if case.eks_cluster_arn else ""
    return [
        f"# Draft AWS Support case: {_cell(case.instance_id)} in {_cell(case.cluster_name)}",
        "",
        "> Drafted by `hyperpod-debugger support-case` from the findings table and HyperPod's own events. "
        "It opens nothing: review it, add what the checklist marks missing, and submit it yourself in the "
        "AWS Support Center.",
        "",
        f"**Subject:** {_cell(case.subject)}",
        "",
        "## Environment",
        "",
        "| | |",
        "|---|---|",
        f"| Cluster | {_cell(case.cluster_name)} (`{case.cluster_arn}`) |",
        f"| Region | {case.region} |",
        f"| Orchestrator | {case.orchestrator}{eks} |",
        f"| Instance | `{case.instance_id}` |",
        f"| Instance group | {_cell(case.instance_group) or 'not read'} |",
        f"| Instance type | {case.instance_type or 'not read'} |",
        f"| Node status now | {_cell(case.node_status) or 'not read'} |",
        f"| Drafted | {case.generated_at} (looking back {case.window_days} days) |",
        "",
    ]


def _the_job(case: SupportCase) -> list[str]:
    """The training job the case is about, when drafted from one: what ran, how it ended, why we think so."""
    job = case.job
    if job is None:
        return []
    out = [
        "## The training job",
        "",
        f"Job {_cell(job.job_id)} ({_cell(job.name) or 'no name'}, {_cell(job.owner) or 'unknown owner'}) ran on "
        f"{len(job.nodes)} node(s) from {job.start or 'an unknown start'} to {job.end or 'now'} and ended "
        f"{_cell(job.state)} (exit code {_cell(job.exit_code) or 'unknown'}).",
        "",
        f"{_cell(job.conclusion)}",
        "",
    ]
    out += [f"- {_cell(line)}" for line in job.evidence]
    return [*out, ""] if job.evidence else out


def _what_is_wrong(case: SupportCase) -> list[str]:
    """Each open finding with its evidence verbatim, then the resolved ones in one line each."""
    open_ones = [f for f in case.findings if f.state != "RESOLVED"]
    out = ["## What is wrong", ""]
    if not open_ones:
        out += ["No open finding for this node in the findings table.", ""]
    for f in open_ones:
        section = f" → {pointer(f.section)}" if f.section else ""
        out += [
            f"### {f.priority or '--'} {f.tag}: {_cell(f.message)}",
            "",
            f"Check `{f.check}`{section}. First seen {f.first_seen}, last seen {f.last_seen}, seen {f.count}×; "
            f"state {f.state} (fingerprint `{f.fingerprint}`).",
            "",
        ]
        if f.evidence:
            out += ["Evidence, verbatim:", "", *_fence(f.evidence), ""]
    resolved = [f for f in case.findings if f.state == "RESOLVED"]
    if resolved:
        out += ["Resolved earlier (kept for the case's timeline):", ""]
        out += [
            f"- {f.first_seen} … {f.last_seen}: {f.priority or '--'} {_cell(f.message)} (`{f.check}`)" for f in resolved
        ]
        out += [""]
    return out


def _what_was_tried(case: SupportCase) -> list[str]:
    out = ["## What was already tried", ""]
    if case.attempts:
        for a in case.attempts:
            out.append(f"- {a.at}: **{a.kind}** — {_cell(a.description)} (event `{a.event_id}`)")
        reboots = sum(1 for a in case.attempts if a.kind == "reboot")
        replacements = len(case.attempts) - reboots
        out += ["", f"{reboots} reboot(s) and {replacements} replacement(s) in the last {case.window_days} days."]
    else:
        out.append("No reboot or replacement among HyperPod's events for this node in the window.")
    return [*out, ""]


def _hyperpod_events(case: SupportCase) -> list[str]:
    out = ["## HyperPod's events for this node (newest first)", ""]
    if case.events:
        out += ["| Time (UTC) | Level | Description | Event id |", "|---|---|---|---|"]
        for e in case.events:
            detail = "; ".join(e.failure_messages)
            text = _cell(e.description) + (f" — {_cell(detail)}" if detail else "")
            out.append(f"| {e.at} | {e.level or ''} | {text} | `{e.event_id}` |")
    else:
        out.append("None read (see below if they could not be).")
    return [*out, ""]


def _finding_history(case: SupportCase) -> list[str]:
    if not case.history:
        return []
    return [
        "## Finding history (newest first)",
        "",
        *(
            f"- {h['at']}: {h['transition']} {h['priority'] or '--'} {_cell(h['message'])} (`{h['check']}`)"
            for h in case.history
        ),
        "",
    ]


def _what_support_asks(case: SupportCase) -> list[str]:
    """Support's checklist, each item marked when the draft holds it, and the command for the report to attach."""
    out = ["## What Support asks for", ""]
    for entry in case.checklist:
        mark = "x" if entry["in_draft"] else " "
        out.append(f"- [{mark}] {entry['item']}")
    return [
        *out,
        "",
        "Attach the node-scoped report (read-only; it changes nothing):",
        "",
        "```",
        f"hyperpod-debugger triage --cluster {shlex.quote(case.cluster_arn)} --node {shlex.quote(case.instance_id)} "
        "--json > triage.json",
        "```",
        "",
    ]


def _not_in_draft(case: SupportCase) -> list[str]:
    if not case.gaps:
        return []
    return ["## Not in this draft", "", *(f"- {_cell(gap)}" for gap in case.gaps), ""]
