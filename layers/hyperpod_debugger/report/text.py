"""Render a triage report as text (the seed's line contract) or JSON (the documented schema)."""

from __future__ import annotations

import json
from typing import Any

from hyperpod_debugger.domain.model import (
    CheckStatus,
    Finding,
    NodeProblem,
    NodeVerdict,
    Priority,
    SuggestedCommand,
    Tag,
    TriageReport,
)
from hyperpod_debugger.domain.untrusted import map_strings, visible
from hyperpod_debugger.remediation.rootcause import reference

_COLOURS = {
    Tag.PASS: "\033[32m",
    Tag.FAIL: "\033[31m",
    Tag.WARN: "\033[33m",
    Tag.INFO: "\033[36m",
    Tag.UNKNOWN: "\033[35m",
}
_RESET = "\033[0m"
_BOLD = "\033[1m"

_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Permissions", ("iam",)),
    ("Cluster", ("cluster",)),
    ("Nodes", ("nodes",)),
    ("Network (EFA, VPC, EKS)", ("network", "vpc", "eks")),
    ("Kubernetes (EKS nodes and system pods)", ("k8s",)),
    ("Slurm (controller, nodes, jobs)", ("slurm",)),
    ("Capacity and configuration", ("capacity", "config")),
    ("CloudWatch logs (lifecycle scripts, health agent)", ("logs",)),
    ("On the nodes (probe through Session Manager)", ("probe",)),
    ("Node actions in batches", ("ladder",)),
)
_PRIORITY_HEADINGS = {
    Priority.P0: "P0 — blocks operation, fix now",
    Priority.P1: "P1 — degraded, fix soon",
    Priority.P2: "P2 — informational",
}


def finding_line(f: Finding, colour: bool = False) -> str:
    """``[FAIL] P0 <message> → references/node-diagnostics-detail.md § A``"""
    tag = f"[{f.tag.value}]"
    if colour:
        tag = f"{_COLOURS[f.tag]}{tag}{_RESET}"
    parts = [tag]
    if f.priority is not None and f.tag is not Tag.PASS:
        parts.append(f.priority.value)
    parts.append(f.message)
    line = " ".join(parts)
    if f.section and f.tag is not Tag.PASS:
        line += f" → {f.pointer()}"
    return line


def _finding_block(f: Finding, colour: bool) -> list[str]:
    lines = [finding_line(f, colour)]
    if not f.is_problem and not f.suggested_commands:
        return lines
    for item in f.evidence:
        lines.extend(f"    | {part}" for part in item.splitlines() or [""])
    if f.root_cause:
        lines.append(f"    root cause: {f.root_cause}")
    if f.caused_by:
        lines.append(f"    explained by: {f.caused_by}")
    lines.extend(f"    explains: {effect}" for effect in f.explains)
    if f.runbook:
        lines.append(f"    runbook: {f.runbook}")
    if f.next_step:
        lines.append(f"    next step: {f.next_step}")
    lines.extend(f"    {line}" for line in command_lines(f.suggested_commands))
    return lines


def command_lines(commands: list[SuggestedCommand]) -> list[str]:
    """Suggested commands as a person reads them: the read-only ones as "Investigate", the others as
    "Suggested command (run this yourself)" with their blast radius, preconditions and IaC note (said
    once after them when every command shares them)."""
    lines: list[str] = []
    mutating = [c for c in commands if c.mutates]
    shared = len(mutating) > 1 and all(
        (c.preconditions, c.iac_warning) == (mutating[0].preconditions, mutating[0].iac_warning) for c in mutating
    )
    for cmd in commands:
        header = "Suggested command (run this yourself)" if cmd.mutates else "Investigate (read-only)"
        lines.append(f"{header}: {cmd.purpose}")
        lines.append(f"  $ {cmd.command}")
        if cmd.mutates:
            lines.append(f"  blast radius: {cmd.blast_radius}")
            if not shared:
                lines.extend(f"  precondition: {pre}" for pre in cmd.preconditions)
                lines.append(f"  IaC: {cmd.iac_warning}")
    if shared:
        lines.append(f"For each of the {len(mutating)} suggested commands above:")
        lines.extend(f"  precondition: {pre}" for pre in mutating[0].preconditions)
        lines.append(f"  IaC: {mutating[0].iac_warning}")
    return lines


def _area(check: str) -> str:
    prefix = check.split(".", 1)[0]
    for title, prefixes in _AREAS:
        if prefix in prefixes:
            return title
    return "Other"


def render_text(report: TriageReport, colour: bool = False, verbose: bool = True) -> str:
    """The report for people. ``verbose``: every finding with its evidence and commands, area by area;
    otherwise the short form: node verdicts, then the cluster-level problems (one line and one command
    each), then coverage in one line."""
    report = readable(report)
    if not verbose and report.error is None:
        return _render_short(report, colour)
    return _render_full(report, colour)


def readable(report: TriageReport) -> TriageReport:
    """The report with every string a terminal could interpret (escape sequences, bidirectional and
    zero-width characters) shown as escapes: text from the cluster is printed, never acted on. Findings
    are already kept that way; this covers the rest (names, job names, error messages)."""
    data = report.model_dump(mode="json")
    safe = map_strings(data, lambda text: visible(text, newlines=True))
    return report if safe == data else TriageReport.model_validate(safe)


def _render_short(report: TriageReport, colour: bool) -> str:
    bold = (lambda s: f"{_BOLD}{s}{_RESET}") if colour else (lambda s: s)
    out = _title(report, bold)
    out.extend(_verdict_table(report, bold, details=False))
    cluster = [f for f in report.findings if f.is_problem and not f.instance_id]
    # a problem another cluster-level problem explains is printed under it, not on its own
    causes = {reference(f) for f in cluster}
    shown = [f for f in cluster if f.caused_by not in causes]
    out.append("")
    out.append(bold("== Cluster-level problems =="))
    if not shown:
        out.append("None in what could be read.")
    for f in sorted(shown, key=lambda f: (str(f.priority or "P9"), f.tag is not Tag.FAIL)):
        out.append(finding_line(f, colour))
        out.extend(f"    explains: {effect}" for effect in f.explains)
        command = next((c for c in f.suggested_commands if not c.mutates), None) or next(
            iter(f.suggested_commands), None
        )
        if command is not None:
            label = "change (its blast radius and IaC note: --verbose)" if command.mutates else "look"
            out.append(f"    {label}: $ {command.command}")
    checks = report.coverage.checks
    ran = sum(1 for x in checks if x.status is CheckStatus.RAN)
    skipped = sum(1 for x in checks if x.status is CheckStatus.SKIPPED)
    unknown = [x.check for x in checks if x.status is CheckStatus.UNKNOWN]
    # the counts are of what this report shows, so a P0 counted is a P0 on screen
    on_screen = shown_in_short(report)
    count = {p: sum(1 for f in on_screen if f.priority is p) for p in Priority}
    left_out = sum(1 for f in report.findings if f.is_problem) - len(on_screen)
    s = report.summary
    out.append("")
    out.append(bold("== Summary =="))
    out.append(
        f"P0 {count[Priority.P0]} · P1 {count[Priority.P1]} · P2 {count[Priority.P2]} · passed {s.passed}"
        + (f" · {left_out} more problem(s) with --verbose" if left_out > 0 else "")
        + f"; {ran} check(s) ran, {skipped} skipped"
        + (f", could not run: {', '.join(unknown)}" if unknown else "")
        + f"; {sum(report.coverage.api_calls.values())} AWS API call(s)"
    )
    out.append("Evidence, every command with its blast radius and IaC note, and what was skipped: --verbose")
    out.append(f"exit code {report.exit_code}")
    return "\n".join(out) + "\n"


def _title(report: TriageReport, bold: Any) -> list[str]:
    c = report.cluster
    title = f"HyperPod triage: {c.name}"
    if c.cluster_id:
        title += f" ({c.cluster_id})"
    meta = [c.region, c.orchestrator or "", c.status or ""]
    if c.node_count is not None:
        meta.append(f"{c.node_count} nodes")
    if report.scope_node:
        meta.append(f"focus {report.scope_node}")
    return [bold(title + " · " + " · ".join(m for m in meta if m)), f"generated {report.generated_at}"]


def _render_full(report: TriageReport, colour: bool = False) -> str:
    bold = (lambda s: f"{_BOLD}{s}{_RESET}") if colour else (lambda s: s)
    c = report.cluster
    out: list[str] = _title(report, bold)

    if report.error is not None:
        out.append("")
        out.append(f"ERROR ({report.error.kind}): {report.error.message}")
        if report.error.kind == "cluster_not_found":
            if report.error.clusters_in_region:
                out.append(f"Clusters in {c.region}:")
                out.extend(f"  - {name}" for name in report.error.clusters_in_region)
            else:
                out.append(f"No HyperPod clusters are visible in {c.region}.")
        out.append(f"exit code {report.exit_code}")
        return "\n".join(out) + "\n"

    out.extend(_verdict_table(report, bold))

    for title_, _ in (*_AREAS, ("Other", ())):
        block = [f for f in report.findings if _area(f.check) == title_]
        if not block:
            continue
        out.append("")
        out.append(bold(f"== {title_} =="))
        current: str | None = None
        for f in sorted(block, key=lambda f: f.instance_id or "") if title_.startswith("On the nodes") else block:
            if title_.startswith("On the nodes") and f.instance_id and f.instance_id != current:
                current = f.instance_id
                group_label = f" ({f.instance_group})" if f.instance_group else ""
                out.append(f"-- node {f.instance_id}{group_label}")
            out.extend(_finding_block(f, colour))

    out.append("")
    out.append(bold("== Summary =="))
    problems = [f for f in report.findings if f.is_problem]
    if not problems:
        out.append("No problems found in the signals that could be read.")
    else:
        out.append(f"Problems found ({len(problems)}):")
        for priority in Priority:
            group = [f for f in problems if f.priority is priority]
            if not group:
                continue
            out.append(f"  [{_PRIORITY_HEADINGS[priority]}]")
            for f in group:
                where = f" [{f.instance_id}]" if f.instance_id else ""
                out.append(f"    → [{f.tag.value}] {f.message}{where} (§ {f.section})")
    checks = report.coverage.checks
    ran = sum(1 for x in checks if x.status is CheckStatus.RAN)
    skipped = [x for x in checks if x.status is CheckStatus.SKIPPED]
    unknown = [x for x in checks if x.status is CheckStatus.UNKNOWN]
    out.append(
        f"Coverage: {ran} check(s) ran, {len(skipped)} skipped, {len(unknown)} could not run; "
        f"{sum(report.coverage.api_calls.values())} AWS API call(s)"
    )
    for x in skipped:
        out.append(f"  skipped {x.check}: {x.reason}")
    for x in unknown:
        out.append(f"  unknown {x.check}: {x.reason}")
    out.append(
        f"Cluster: {c.name} | Region: {c.region} | Orchestrator: {c.orchestrator} | exit code {report.exit_code}"
    )
    return "\n".join(out) + "\n"


_VERDICT_LABEL = {
    "replace": "REPLACE",
    "reboot": "REBOOT",
    "investigate": "INVESTIGATE",
    "unknown": "UNKNOWN",
    "hyperpod-acting": "HYPERPOD ACTING",
    "fix-workload": "FIX WORKLOAD",
    "watch": "WATCH",
    "healthy": "healthy",
}


def _verdict_table(report: TriageReport, bold: Any, details: bool = True) -> list[str]:
    """One line per node that needs something (its single rung and why), the one command under it, and the
    healthy nodes counted. The details follow, area by area."""
    verdicts = report.node_verdicts
    acting = [v for v in verdicts if v.verdict != "healthy"]
    if not verdicts:
        return []
    heading = "one rung per node; details below" if details else "one rung per node"
    out = ["", bold(f"== Node verdicts ({heading}) ==")]
    if acting:
        width = max(len(v.instance_id) for v in acting)
        for v in acting:
            where = " ".join(x for x in (v.instance_group, v.instance_type) if x)
            why = v.why if len(v.why) <= 110 else v.why[:107] + "..."
            section = f" (§ {v.section})" if v.section else ""
            out.append(f"{_VERDICT_LABEL[v.verdict]:<15} {v.instance_id:<{width}}  {where}")
            priority = f"{v.priority} " if v.priority else ""
            out.append(f"    why: {priority}{why}{section}")
            out.extend(_hidden_nothing(v))
            if v.hyperpod and v.verdict != "hyperpod-acting":
                out.append(f"    HyperPod: {v.hyperpod}")
            if v.likely_cause:
                out.append(f"    likely cause: {v.likely_cause}")
            if v.occupancy:
                out.append(f"    runs there: {v.occupancy}")
            if v.next_command:
                out.append(f"    next: $ {v.next_command}")
            if v.then_command:
                out.append(f"    then: $ {v.then_command}")
    healthy = len(verdicts) - len(acting)
    if healthy:
        out.append(f"healthy: {healthy} node(s) with no problem in what was read")
    return out


#: how the table names what a rung does not clear
_RUNG_NAME = {"reboot": "a reboot", "replace": "a replacement"}
_CLEARS_TOO = {
    "reboot": "a reboot clears too",
    "replace": "a replacement clears too",
    "fix-workload": "fixing the workload clears too",
}


def _problem_line(p: NodeProblem) -> str:
    text = f"[{p.tag.value}] {p.priority.value + ' ' if p.priority else ''}{p.message}"
    text = text if len(text) <= 120 else text[:117] + "..."
    return text + (f" (§ {p.section})" if p.section else "")


def _hidden_nothing(v: NodeVerdict) -> list[str]:
    """Under a verdict: the node's worst problem when the deciding finding is not it, every problem the rung
    does not clear (each needs its own step), then those it clears too. No problem of the node is left out."""
    out: list[str] = []
    rung = _RUNG_NAME.get(v.verdict)
    worst = v.worst
    if worst is not None:
        tail = "" if worst.fixed_by_rung or rung is None else f"; {rung} does not fix it"
        out.append(f"    worst: {_problem_line(worst)}{tail}")
    listed = [p for p in v.other_problems if worst is None or p != worst]
    open_ = [p for p in listed if not p.fixed_by_rung]
    cleared = [p for p in listed if p.fixed_by_rung]
    if open_:
        if rung is None:
            heading = "also on this node:"
        else:
            heading = f"{rung} does not fix{' these either' if worst is not None and not worst.fixed_by_rung else ''}:"
        out.append(f"    {heading}")
        out.extend(f"      {_problem_line(p)}" for p in open_)
    if cleared:
        out.append(f"    {_CLEARS_TOO.get(v.verdict, 'cleared with it')}:")
        out.extend(f"      {_problem_line(p)}" for p in cleared)
    return out


def shown_in_short(report: TriageReport) -> list[Finding]:
    """The problem findings the short report puts on screen: every node's (under its verdict), the cluster-level
    ones, and those a shown cluster-level problem explains (its "explains:" lines)."""
    on_nodes = {v.instance_id for v in report.node_verdicts if v.verdict != "healthy"}
    cluster = [f for f in report.findings if f.is_problem and not f.instance_id]
    causes = {reference(f) for f in cluster}
    shown_causes = {reference(f) for f in cluster if f.caused_by not in causes}
    out: list[Finding] = []
    for f in report.findings:
        if not f.is_problem:
            continue
        if f.instance_id and f.check != "ladder.batch":
            if f.instance_id in on_nodes:
                out.append(f)
        elif not f.instance_id and (f.caused_by not in causes or f.caused_by in shown_causes):
            out.append(f)
    return out


def render_json(report: TriageReport) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2) + "\n"
