"""One verdict per node: the single rung of investigate → reboot → replace it is on, from all its findings.

Pure. The states, weightiest first: ``hyperpod-acting`` (HyperPod is rebooting or replacing it already: no
second action), ``replace``, ``reboot``, ``investigate``, ``unknown`` (something could not be read; it
never hides a FAIL, whose state outranks it), ``fix-workload``, ``watch`` (a warning with no node action),
``healthy``. A replace supersedes a reboot; a node never gets two rungs.

A verdict hides no problem: beside its deciding finding it names the node's worst one (when another) and every
other problem, each marked with whether the rung clears it (:func:`fixed_by`). The rung is chosen by what
fixes the node; a P0 the rung does not fix (a full disk, a stopped service) is listed, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.model import Finding, NodeProblem, NodeVerdict, Priority, Tag, VerdictState
from hyperpod_debugger.remediation.rootcause import reference

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterNode

#: weight of each state: the node takes the weightiest of its findings'
RANK: dict[str, int] = {
    "healthy": 0,
    "watch": 1,
    "fix-workload": 2,
    "unknown": 3,
    "investigate": 4,
    "reboot": 5,
    "replace": 6,
    "hyperpod-acting": 7,
}
#: the rungs that change the node
RUNGS = ("reboot", "replace")
#: what a reboot clears besides a finding that asks for one (runbook § F, "Step 2: reboot": transient faults, a
#: hung driver, a pending row remap, a device count that dropped once): the accelerator sections. A reboot keeps
#: the instance and its volumes (a full disk stays full) and the configuration (a service that failed to start
#: fails again); a workload's fault comes back with the workload.
REBOOT_CLEARS = frozenset({"G", "G.1", "G.1.a", "G.2"})


def state_of(finding: Finding) -> VerdictState:
    """What one finding alone says about its node."""
    if not finding.is_problem:
        return "healthy"
    if finding.tag is Tag.UNKNOWN:
        return "unknown"
    if finding.node_action in RUNGS:
        return "replace" if finding.node_action == "replace" else "reboot"
    if finding.node_action == "fix-workload":
        return "fix-workload"
    if finding.tag is Tag.FAIL or finding.priority in (Priority.P0, Priority.P1):
        return "investigate"
    return "watch"


def fixed_by(state: str, finding: Finding) -> bool:
    """Whether the rung ``state`` clears this problem of its node by itself.

    A replacement is a new instance with new volumes: it clears every fault of the node but the workload's. A
    reboot clears what asks for a reboot and the transient accelerator faults (:data:`REBOOT_CLEARS`). The other
    states change nothing on the node; fixing the workload clears the workload's findings."""
    own = state_of(finding)
    if own in ("unknown", "healthy"):
        return False  # could not look, or no problem: nothing to clear
    if state == "replace":
        return own != "fix-workload"
    if state == "reboot":
        return own == "reboot" or (finding.section in REBOOT_CLEARS and own != "fix-workload")
    if state == "fix-workload":
        return own == "fix-workload"
    return False


def urgency(finding: Finding) -> tuple[int, int, int]:
    """How urgent a problem is, most urgent first when sorted: its priority, then FAIL before WARN."""
    priority = {"P0": 0, "P1": 1, "P2": 2}.get(str(finding.priority), 3)
    return (priority, finding.tag is not Tag.FAIL, finding.tag is Tag.UNKNOWN)


def _problem(finding: Finding, cleared: set[str]) -> NodeProblem:
    return NodeProblem(
        check=finding.check,
        tag=finding.tag,
        priority=finding.priority,
        message=finding.message,
        section=finding.section,
        fixed_by_rung=reference(finding) in cleared,
    )


def _cleared(state: str, deciding: Finding | None, problems: list[Finding]) -> set[str]:
    """References of the problems the rung clears, with those they explain (the effect goes with its cause)."""
    cleared = {reference(f) for f in problems if fixed_by(state, f)}
    if state in RUNGS and deciding is not None:
        cleared.add(reference(deciding))
    changed = True
    while changed:
        changed = False
        for f in problems:
            if f.caused_by in cleared and reference(f) not in cleared:
                cleared.add(reference(f))
                changed = True
    return cleared


def weight(finding: Finding) -> tuple[int, int, int]:
    """How much one finding weighs in its node's verdict (the heaviest decides)."""
    priority = {"P0": 0, "P1": 1, "P2": 2}.get(str(finding.priority), 3)
    return (RANK[state_of(finding)], finding.tag is Tag.FAIL, -priority)


def node_verdicts(
    findings: Iterable[Finding],
    *,
    nodes: Mapping[str, ClusterNode] | None = None,
    recovering: Mapping[str, str] | None = None,
    occupancy: Mapping[str, str] | None = None,
) -> list[NodeVerdict]:
    """One verdict per node that has a finding (a PASS alone makes it ``healthy``), weightiest first.

    ``occupancy``: instance id -> what runs there in one line; shown for the nodes on the reboot or
    replace rung (what the drain waits for and the action stops)."""
    nodes = nodes or {}
    recovering = recovering or {}
    occupancy = occupancy or {}
    by_node: dict[str, list[Finding]] = {}
    for f in findings:
        if f.instance_id and f.check != "ladder.batch":
            by_node.setdefault(f.instance_id, []).append(f)
    out: list[NodeVerdict] = []
    for iid, mine in by_node.items():
        ranked = sorted(mine, key=weight, reverse=True)
        top = ranked[0]
        state: VerdictState = state_of(top)
        hyperpod = recovering.get(iid)
        if hyperpod:
            state = "hyperpod-acting"
        node = nodes.get(iid)
        problems = [f for f in ranked if f.is_problem]
        # the finding the "why" line shows (HyperPod's own action shows none of the node's findings)
        deciding = top if problems and state != "hyperpod-acting" else None
        cleared = _cleared(state, deciding, problems)
        others = sorted((f for f in problems if f is not deciding), key=urgency)
        worst = min(problems, key=urgency) if problems else None
        command = _command_for(state, ranked)
        drain = _drain_for(state, ranked)
        out.append(
            NodeVerdict(
                instance_id=iid,
                instance_group=node.group if node else top.instance_group,
                instance_type=node.instance_type if node else None,
                verdict=state,
                why=(hyperpod if state == "hyperpod-acting" and hyperpod else top.message)
                if problems or hyperpod
                else "no problem found",
                section=top.section if problems else None,
                checks=list(dict.fromkeys(f.check for f in problems)),
                next_step=None if state == "healthy" else _next_step(state, top, hyperpod),
                next_command=drain or command,
                then_command=command if drain else None,
                hyperpod=hyperpod,
                occupancy=occupancy.get(iid) if state in RUNGS else None,
                likely_cause=top.caused_by if problems else None,
                priority=deciding.priority if deciding else None,
                worst=_problem(worst, cleared)
                if worst is not None and deciding and urgency(worst) < urgency(deciding)
                else None,
                other_problems=[_problem(f, cleared) for f in others],
            )
        )
    out.sort(key=lambda v: (-RANK[v.verdict], v.instance_id))
    return out


def _command_for(state: str, ranked: list[Finding]) -> str | None:
    """The one command this rung asks for: the rung's own (reboot/replace), else the first read-only one."""
    if state in ("healthy", "hyperpod-acting"):
        return None
    for f in ranked:
        for c in f.suggested_commands:
            if state in RUNGS and c.step == state:
                return c.command
    for f in ranked:
        if state_of(f) == state or state == "watch":
            for c in f.suggested_commands:
                if not c.mutates:
                    return c.command
    return None


def _drain_for(state: str, ranked: list[Finding]) -> str | None:
    """The drain that goes with this rung's command (the same finding carries both)."""
    if state not in RUNGS:
        return None
    for f in ranked:
        if any(c.step == state for c in f.suggested_commands):
            return next((c.command for c in f.suggested_commands if c.step == "drain"), None)
    return None


def _next_step(state: str, top: Finding, hyperpod: str | None) -> str:
    if state == "hyperpod-acting":
        return (
            f"HyperPod is acting on this node ({hyperpod}): wait for it, then run the triage again; "
            "start no second action."
        )
    return top.next_step or {
        "replace": "Replace the node (drain it first).",
        "reboot": "Reboot the node (drain it first); replace it if the fault returns.",
        "investigate": "Investigate with the read-only commands before any node action.",
        "unknown": "Part of this node could not be read: restore access and run the triage again.",
        "fix-workload": "Fix the workload; the node needs no action.",
        "watch": "Nothing to do now; watch it.",
    }.get(state, "")
