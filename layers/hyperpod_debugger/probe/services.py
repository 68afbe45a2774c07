"""Node services (§ K, M, H): the SSM agent everywhere, the container runtime only on EKS, the Slurm
daemons only on Slurm nodes of the role that needs them.

A unit is judged only where the orchestrator and role need it: containerd is legitimately absent
on Slurm nodes, slurmctld on compute nodes. Where it is needed, ``inactive``, ``failed`` and
``unknown``/``not-found`` (not installed) all mean the node cannot do its job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.parse.sysparse import TRUNCATED_NOTE, UnitState, cached, parse_is_active, system_item

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

CHECK = "probe.services"
SSM_UNITS = ("amazon-ssm-agent", "snap.amazon-ssm-agent.amazon-ssm-agent")
ON_NODE = "on the node (SSM session, § K)"

Verdict = Literal["ok", "down", "missing", "transitional", "unreadable"]

_DOWN = frozenset({"inactive", "failed", "maintenance"})
_MISSING = frozenset({"unknown", "not-found"})
_TRANSITIONAL = frozenset({"activating", "deactivating", "reloading", "refreshing"})


@dataclass(frozen=True, slots=True)
class _Need:
    unit: str
    section: str
    why: str


def verdict(state: UnitState) -> Verdict:
    if state.state == "active":
        return "ok"
    if state.state in _MISSING:
        return "missing"
    if state.state in _DOWN:
        return "down"
    if state.state in _TRANSITIONAL:
        # `activating (auto-restart)` in a status block is a crash loop between restarts, not a start-up
        if state.sub and "auto-restart" in state.sub:
            return "down"
        return "transitional"
    return "unreadable"


def _needs(ctx: ProbeContext) -> list[_Need]:
    if ctx.orchestrator == "EKS":
        return [
            _Need("containerd", "M", "no container can start or keep running without the runtime"),
            _Need("kubelet", "M", "the node goes NotReady and its pods are evicted"),
        ]
    if ctx.orchestrator == "Slurm" and ctx.role == "controller":
        return [
            _Need("slurmctld", "H", "the cluster has no scheduler: no job starts and sinfo/squeue fail"),
            _Need("munge", "H", "Slurm daemons cannot authenticate to each other"),
        ]
    if ctx.orchestrator == "Slurm":
        return [
            _Need("slurmd", "H", "the controller marks the node DOWN and schedules nothing on it"),
            _Need("munge", "H", "slurmd cannot authenticate to the controller"),
        ]
    return []


def _commands(unit: str) -> list[SuggestedCommand]:
    return [
        read_only(["systemctl", "status", f"{unit}.service", "--no-pager"], f"See why {unit} is not running {ON_NODE}"),
        read_only(
            ["journalctl", "-u", f"{unit}.service", "-n", "50", "--no-pager"], f"Read {unit}'s last log {ON_NODE}"
        ),
    ]


@dataclass(slots=True)
class _Judged:
    """What the check saw across the units it judged; :func:`_verdict` turns it into the findings."""

    truncated: list[str]
    problems: list[Finding] = field(default_factory=list)
    #: the units found active, and their runbook sections
    ok_units: list[str] = field(default_factory=list)
    ok_sections: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_services(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    found = system_item(doc, "systemctl_is_active", what="service states (systemctl is-active)")
    units = cached(doc, found, "systemctl_is_active", parse_is_active)
    if not units:
        raise NotApplicable("the systemctl_is_active output has no readable '<unit> <state>' line")
    judged = _Judged(truncated=[f"systemctl_is_active: {TRUNCATED_NOTE}"] if found.truncated else [])
    _judge_ssm_agent(ctx, [units[u] for u in SSM_UNITS if u in units], judged)
    for need in _needs(ctx):
        state = units.get(need.unit)
        if state is None:
            judged.notes.append(f"{need.unit}: not in the output, not judged")
        else:
            _judge_need(ctx, need, state, judged)
    if ctx.orchestrator is None:
        judged.notes.append("orchestrator unknown: containerd, kubelet and the Slurm daemons are not judged")
    return _verdict(ctx, judged)


def _judge_ssm_agent(ctx: ProbeContext, ssm: list[UnitState], judged: _Judged) -> None:
    """Is the SSM agent active under one of its unit names? Missing only when both names say so."""
    ssm_verdicts = [verdict(s) for s in ssm]
    judged.seen.extend(line for s in ssm for line in s.lines)
    active = [s.unit for s in ssm if verdict(s) == "ok"][:1]
    if active:
        judged.ok_units.extend(active)
        judged.ok_sections.append("K")
    elif "transitional" in ssm_verdicts:
        judged.problems.append(
            _transitional(ctx, next(s for s in ssm if verdict(s) == "transitional"), "K", judged.truncated)
        )
    elif len(ssm) == len(SSM_UNITS) and all(v in ("down", "missing") for v in ssm_verdicts):
        judged.problems.append(_ssm_agent_down(ctx, ssm, judged.truncated))
    else:
        judged.notes.append("SSM agent: not judged (both unit names are needed to conclude it is missing)")


def _ssm_agent_down(ctx: ProbeContext, ssm: list[UnitState], truncated: list[str]) -> Finding:
    states = ", ".join(f"{s.unit} {s.state}" for s in ssm)
    return finding(
        ctx,
        CHECK,
        Tag.WARN,
        f"The SSM agent is not active under either unit name, as reported by systemctl ({states}); "
        "if this probe itself came through an SSM session the agent evidently works, so confirm first",
        priority=Priority.P1,
        section="K",
        evidence=[line for s in ssm for line in s.lines] + truncated,
        root_cause=(
            "Without a running amazon-ssm-agent the node cannot be reached through Session Manager: "
            "operator access and scheduled on-node probes fail."
        ),
        suggested_commands=[
            *_commands("amazon-ssm-agent"),
            read_only(["snap", "services", "amazon-ssm-agent"], f"Check the snap-packaged agent {ON_NODE}"),
        ],
    )


def _judge_need(ctx: ProbeContext, need: _Need, state: UnitState, judged: _Judged) -> None:
    """Is a unit this node's orchestrator and role need active?"""
    judged.seen.extend(state.lines)
    v = verdict(state)
    if v == "ok":
        judged.ok_units.append(need.unit)
        judged.ok_sections.append(need.section)
    elif v == "transitional":
        judged.problems.append(_transitional(ctx, state, need.section, judged.truncated))
    elif v == "unreadable":
        judged.notes.append(f"{need.unit}: state {state.state!r} not understood, not judged")
    else:
        judged.problems.append(_needed_unit_down(ctx, need, state, v, judged.truncated))


def _needed_unit_down(ctx: ProbeContext, need: _Need, state: UnitState, v: Verdict, truncated: list[str]) -> Finding:
    role = "EKS" if ctx.orchestrator == "EKS" else f"Slurm {ctx.role}"
    what = "is not installed" if v == "missing" else "is not running"
    detail = f" ({state.state}{f' ({state.sub})' if state.sub else ''})"
    return finding(
        ctx,
        CHECK,
        Tag.FAIL,
        f"{need.unit} {what}{detail} on this {role} node: {need.why}",
        priority=Priority.P0,
        section=need.section,
        evidence=list(state.lines) + truncated,
        root_cause=(
            f"{need.unit} is required on a {role} node and systemd reports it {state.state}: it crashed, "
            "was stopped, failed to start (missing configuration, mount or credential) or was never installed."
        ),
        suggested_commands=_commands(need.unit),
        node_action="investigate",
    )


def _verdict(ctx: ProbeContext, judged: _Judged) -> list[Finding]:
    """The check's one verdict: the problems found, else a PASS naming the active units."""
    if judged.problems:
        return judged.problems
    if not judged.ok_units:
        raise NotApplicable("no service this node needs could be judged: " + "; ".join(judged.notes))
    sections = judged.ok_sections
    return [
        finding(
            ctx,
            CHECK,
            Tag.PASS,
            f"Services judged on this node are active: {', '.join(judged.ok_units)}",
            # the runbook section of what was judged (§ M containerd/kubelet, § H Slurm, § K the SSM agent)
            section=sections[0] if len(set(sections)) == 1 else "K",
            evidence=judged.seen + judged.notes + judged.truncated,
        )
    ]


def _transitional(ctx: ProbeContext, state: UnitState, section: str, truncated: list[str]) -> Finding:
    return finding(
        ctx,
        CHECK,
        Tag.WARN,
        f"{state.unit} is {state.state}, not yet active: look again in a minute",
        priority=Priority.P2,
        section=section,
        evidence=list(state.lines) + truncated,
        root_cause=(
            f"{state.unit} was starting, stopping or reloading when the probe ran; if it stays that way it is "
            "stuck or restarting repeatedly."
        ),
        suggested_commands=_commands(state.unit),
    )


CHECKS: tuple[Check, ...] = (Check(CHECK, "K", "Node services (SSM agent, container runtime, Slurm)", check_services),)
