"""The Slurm controller's own view (§ H): is the controller answering, which nodes does it hold
out of service and why, and which jobs are stuck finishing.

Pure: they read what the controller printed for :func:`hyperpod_debugger.slurm.parse.slurm_query_command`
(``obs.slurm``). The controller is only believed healthy when ``scontrol ping`` answered UP: a
node guessed from its instance-group name proves nothing by itself. Node names come from the
controller and may be anything; every command built from them goes through the argv quoting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_types import TargetError, session_target
from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable
from hyperpod_debugger.slurm.parse import (
    CONTROLLER_SERVICES,
    NodeState,
    controller_up,
    parse_ping,
    parse_scontrol_nodes,
    parse_services,
    parse_sinfo,
    parse_squeue,
)

if TYPE_CHECKING:
    from hyperpod_debugger.domain.orchestrators import SlurmObservation

SECTION = "H"
#: A job COMPLETING or CONFIGURING longer than this is stuck.
STUCK_JOB_S = 10 * 60
ON_CONTROLLER = "run it on the Slurm controller, in a Session Manager session (§ K)"

_UNEXPECTED_REBOOT = re.compile(r"node unexpectedly rebooted", re.I)
_NOT_RESPONDING = re.compile(r"not responding", re.I)
_KILL_TASK = re.compile(r"kill task failed", re.I)
_RECOVERY = re.compile(r"\baction\s*:\s*(?P<action>reboot|replace)\b", re.I)


def _slurm(obs: ClusterObservation) -> SlurmObservation:
    if obs.cluster.orchestrator != "Slurm":
        raise NotApplicable(f"the cluster is orchestrated by {obs.cluster.orchestrator}, not Slurm")
    return obs.slurm.get()


def _session(obs: ClusterObservation, s: SlurmObservation) -> list[SuggestedCommand]:
    """``aws ssm start-session`` to the controller, when the target can be built."""
    c = s.controller
    try:
        target = session_target(obs.cluster.arn, c.group, c.instance_id)
    except TargetError:
        return []
    return [
        read_only(
            ["aws", "ssm", "start-session", "--region", obs.cluster.region, "--target", target],
            f"Open a shell on the controller {c.instance_id} ({c.group}) to run the commands below",
        )
    ]


def _lines(text: str, limit: int = 10) -> list[str]:
    return trim_evidence([line for line in text.splitlines() if line.strip()], limit)


# --------------------------------------------------------------------------- slurm.controller


def _service_cause(unit: str) -> str:
    if unit == "slurmctld":
        return "slurmctld is not running on the controller: no job is scheduled and every Slurm command fails."
    return (
        f"{unit} is not running on the controller: Slurm daemons and commands cannot authenticate to each "
        "other, so the controller rejects every request."
    )


def _daemon_commands(obs: ClusterObservation, s: SlurmObservation, units: list[str]) -> list[SuggestedCommand]:
    return [
        *_session(obs, s),
        read_only(["systemctl", "status", *units], f"See the daemons' state and last messages; {ON_CONTROLLER}"),
        *(
            read_only(
                ["journalctl", "-u", unit, "-n", "100", "--no-pager"],
                f"Read {unit}'s last 100 log lines; {ON_CONTROLLER}",
            )
            for unit in units
        ),
    ]


def check_controller(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Whether the controller answers ``scontrol ping``, and whether its daemons run on the node asked."""
    s = _slurm(obs)
    c = s.controller
    ping_text = s.outputs.get("ping", "")
    pings = parse_ping(ping_text)
    who = f"{c.instance_id} ({c.group}, identified by {c.confirmed_by})"
    services = parse_services(s.outputs["services"]) if "services" in s.outputs else {}
    service_lines = [f"systemctl is-active {unit}: {state}" for unit, state in services.items()]
    #: controller daemon -> its state, for those not active
    stopped = {u: services[u] for u in CONTROLLER_SERVICES if services.get(u, "active") != "active"}
    if not controller_up(ping_text):
        # One finding for one outage: a stopped daemon, when we saw one, is its cause.
        message, cause = _not_answering(who, bool(pings), c.confirmed_by != "scontrol ping", stopped)
        return [
            finding(
                obs,
                "slurm.controller",
                Tag.FAIL,
                message,
                priority=Priority.P0,
                section=SECTION,
                evidence=(_lines(ping_text) or ["scontrol ping: (no output)"]) + service_lines,
                root_cause=cause,
                suggested_commands=_daemon_commands(obs, s, list(stopped) or list(CONTROLLER_SERVICES)),
                next_step="Find why the controller is not answering (the daemons' journal, the disk holding "
                "StateSaveLocation, munge) before restarting anything.",
            )
        ]
    evidence = [*(p.line for p in pings), *service_lines]
    out = [_daemon_stopped(obs, s, unit, state, evidence) for unit, state in stopped.items()]
    if out:
        return out
    answered = next(p for p in pings if p.status == "UP")
    return [
        finding(
            obs,
            "slurm.controller",
            Tag.PASS,
            f"Slurm controller answers: slurmctld ({answered.role}) at {answered.host} is UP, asked on {who}",
            section=SECTION,
            evidence=[p.line for p in pings] + (service_lines or ["services: not reported"]),
        )
    ]


def _not_answering(who: str, pinged: bool, guessed: bool, stopped: dict[str, str]) -> tuple[str, str]:
    """(message, root cause) of a controller that does not answer ``scontrol ping``: a stopped daemon,
    when one was seen, is the cause."""
    if pinged:
        message = f"Slurm controller does not answer: scontrol ping on {who} reports it DOWN"
        cause = (
            "slurmctld is not running or not answering (crashed, hung on StateSaveLocation, or blocked by "
            "munge); until it answers no job starts and sinfo/squeue fail."
        )
    else:
        message = f"Slurm controller not confirmed: scontrol ping on {who} gave no answer"
        cause = (
            "scontrol ping printed no controller state: slurmctld is unreachable, the Slurm tools are missing "
            "on this node, or this node is not the controller"
            + (" (it was only guessed from its instance-group name)." if guessed else ".")
        )
    if stopped:
        message += "; " + ", ".join(f"{u} is {state}" for u, state in stopped.items())
        cause = " ".join(_service_cause(u) for u in stopped)
    return message, cause


def _daemon_stopped(
    obs: ClusterObservation, s: SlurmObservation, unit: str, state: str, evidence: list[str]
) -> Finding:
    """A controller daemon not active although the controller answers ping."""
    c = s.controller
    if unit == "slurmctld":
        # The controller answers, yet slurmctld is not running here: we asked another node.
        return finding(
            obs,
            "slurm.controller",
            Tag.WARN,
            f"slurmctld is {state} on {c.instance_id} ({c.group}), yet the controller answers "
            "ping: this node is probably not the controller host",
            priority=Priority.P1,
            section=SECTION,
            evidence=evidence,
            root_cause="scontrol ping reaches the controller from any Slurm node; the controller runs "
            "elsewhere (the host named in the ping line), or a backup controller has taken over.",
        )
    return finding(
        obs,
        "slurm.controller",
        Tag.FAIL,
        f"{unit} is {state} on the Slurm controller {c.instance_id} ({c.group})",
        priority=Priority.P0,
        section=SECTION,
        evidence=evidence,
        root_cause=_service_cause(unit),
        suggested_commands=_daemon_commands(obs, s, [unit]),
    )


# --------------------------------------------------------------------------- slurm.nodes


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    state: NodeState
    reason: str | None
    evidence: list[str]


def _nodes(s: SlurmObservation) -> list[_Node]:
    """sinfo's rows (state with its symbols), with scontrol's reason and flags where it has the node."""
    detailed = {n.name: n for n in parse_scontrol_nodes(s.outputs.get("nodes", ""))}
    out: list[_Node] = []
    seen: set[str] = set()
    for row in parse_sinfo(s.outputs.get("sinfo", "")):
        seen.add(row.name)
        extra = detailed.get(row.name)
        state = row.state
        if extra is not None:
            state = NodeState(row.state.raw, row.state.base, row.state.flags | extra.state.flags)
        evidence = [f"sinfo: {row.line}"]
        if extra is not None and extra.reason:
            evidence.append(f"scontrol: State={extra.state.raw} Reason={extra.fields.get('Reason', '')}")
        out.append(_Node(row.name, state, row.reason or (extra.reason if extra else None), evidence))
    for name, extra in detailed.items():
        if name not in seen:
            evidence = [f"scontrol: NodeName={name} State={extra.state.raw} Reason={extra.fields.get('Reason', '')}"]
            out.append(_Node(name, extra.state, extra.reason, evidence))
    return out


def _problem(state: NodeState) -> tuple[Tag, str] | None:
    """(tag, what) for a node out of service, None for a node that is fine or only power-saving."""
    if state.down:
        return Tag.FAIL, "down" + (" and not responding" if state.not_responding else "")
    if state.fail:
        return Tag.FAIL, ("failing (FAIL set while a job still runs)" if state.failing else "in FAIL state")
    if state.drain:
        word = "draining (jobs still running)" if state.draining else "drained"
        if state.not_responding:
            return Tag.FAIL, f"{word} and not responding"
        return Tag.WARN, word
    if state.not_responding:
        return Tag.WARN, "not responding"
    if state.base in ("UNKNOWN", "INVAL", "ERROR"):
        return Tag.WARN, f"in state {state.base} (the controller has no valid registration from slurmd)"
    return None


def _cause(state: NodeState, reason: str | None) -> tuple[str, str | None]:
    """(root cause, next step) from the reason; the reason itself is always shown verbatim."""
    text = reason or ""
    recovery = _RECOVERY.search(text)
    if recovery:
        action = recovery["action"].lower()
        return (
            f"HyperPod's {action} path is in progress: the node was marked with reason {text!r}; it "
            + ("waits for its running jobs to end, then " if state.failing or state.draining else "")
            + ("is rebooted." if action == "reboot" else "is replaced by new hardware with the same hostname."),
            "Wait for HyperPod to finish (a replacement normally takes about 20–30 minutes). Do not change the "
            "node's state or restart slurmctld meanwhile; if it stays in this state much longer, read the "
            "SagemakerHealthMonitoringAgent and LifecycleConfig log streams of the instance (§ F).",
        )
    if _UNEXPECTED_REBOOT.search(text):
        return (
            "slurmd restarted without telling the controller (the instance rebooted or slurmd was restarted "
            "outside Slurm), so the controller set the node DOWN; fix slurmd first (is it running, and enabled "
            "to start at boot?), then resume the node.",
            None,
        )
    if _NOT_RESPONDING.search(text) or (state.not_responding and not text):
        return (
            "The controller lost contact with slurmd on the node: slurmd is likely down (crashed, not started "
            "after a reboot, out of memory or disk), or the network between the node and the controller is "
            "broken (security group, routing).",
            None,
        )
    if _KILL_TASK.search(text):
        return (
            "slurmd could not kill the processes of a finished job: they are stuck (uninterruptible D state on "
            "hung I/O or a GPU), or the job epilog failed. Find the stuck processes and the epilog errors in the "
            "slurmd log on the node; processes in D state only go away with a reboot.",
            None,
        )
    if state.fail:
        return "The node was set to FAIL; the reason says by whom and why.", None
    if state.drain and text:
        return (
            "The node was drained with this reason, by an administrator or a health check; find out why "
            "before returning it to service.",
            None,
        )
    return ("The controller gave no reason." if not text else f"Reason given: {text}.", None)


def _resume_allowed(state: NodeState, reason: str | None) -> bool:
    text = reason or ""
    if state.fail or _RECOVERY.search(text):
        return False
    return bool(_UNEXPECTED_REBOOT.search(text) or _NOT_RESPONDING.search(text))


def check_nodes(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Every node the controller holds out of service, with its reason; power-saving nodes are no failure."""
    s = _slurm(obs)
    nodes = _nodes(s)
    if not nodes:
        answered = controller_up(s.outputs.get("ping", ""))
        why = "sinfo listed no node" if answered else "the controller did not answer, so sinfo listed nothing"
        return [
            finding(
                obs,
                "slurm.nodes",
                Tag.UNKNOWN,
                f"Could not read the Slurm node states: {why}",
                priority=Priority.P1,
                section=SECTION,
                evidence=_lines(s.outputs.get("sinfo", "")) or ["sinfo: (no output)"],
            )
        ]
    if ctx.scope_node:
        wanted = {name for name, iid in s.node_instances.items() if iid == ctx.scope_node}
        nodes = [n for n in nodes if n.name in wanted] or nodes
    out: list[Finding] = []
    resting: list[str] = []
    fine = 0
    for node in nodes:
        problem = _problem(node.state)
        if problem is not None:
            out.append(_out_of_service(obs, s, node, *problem))
        elif node.state.power_saving:
            resting.append(f"{node.name} ({node.state.raw})")
        else:
            fine += 1
    if resting:
        out.append(
            finding(
                obs,
                "slurm.nodes",
                Tag.INFO,
                f"{len(resting)} Slurm node(s) powered off or changing power state (power saving, not a failure)",
                section=SECTION,
                evidence=trim_evidence(resting),
            )
        )
    if not any(f.is_problem for f in out):
        out.insert(
            0,
            finding(
                obs,
                "slurm.nodes",
                Tag.PASS,
                f"{fine} Slurm node(s) in service, none down, drained or failing",
                section=SECTION,
            ),
        )
    return out


def _out_of_service(obs: ClusterObservation, s: SlurmObservation, node: _Node, tag: Tag, what: str) -> Finding:
    iid = s.node_instances.get(node.name)
    where = f"instance {iid}" if iid else "instance id unknown (no cluster node has this hostname)"
    cause, next_step = _cause(node.state, node.reason)
    commands = [
        read_only(
            ["scontrol", "show", "node", node.name],
            f"Read the node's full state, reason and who set it; {ON_CONTROLLER}",
        )
    ]
    if iid and _resume_allowed(node.state, node.reason):
        commands.append(_resume(obs, node.name, iid))
    return finding(
        obs,
        "slurm.nodes",
        tag,
        f"Slurm node {node.name} ({where}) is {what}; reason: {node.reason or '(none given)'}",
        priority=Priority.P1,
        section=SECTION,
        instance_id=iid,
        evidence=node.evidence,
        root_cause=cause,
        suggested_commands=commands,
        node_action="investigate",
        **({"next_step": next_step} if next_step else {}),
    )


def _resume(obs: ClusterObservation, name: str, iid: str) -> SuggestedCommand:
    return mutating(
        ["scontrol", "update", f"nodename={name}", "state=resume"],
        f"Return {name} to service once slurmd on it is healthy again",
        blast_radius="The node takes jobs again; if the fault is still there jobs fail on it.",
        changes_configuration=False,
        preconditions=[
            "The node's own probe shows slurmd active and no fault (run `hyperpod-debugger probe "
            f"--cluster {obs.cluster.name} --region {obs.cluster.region} --node {iid}`).",
            "The root cause shown above is fixed.",
            f"Run it on the Slurm controller ({ON_CONTROLLER}).",
        ],
        step="change",
    )


# --------------------------------------------------------------------------- slurm.jobs


def check_jobs(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    s = _slurm(obs)
    if "squeue" not in s.outputs or not controller_up(s.outputs.get("ping", "")):
        return [
            finding(
                obs,
                "slurm.jobs",
                Tag.UNKNOWN,
                "Could not read the Slurm job queue: "
                + ("the controller did not answer" if "squeue" in s.outputs else "the query printed no squeue section"),
                priority=Priority.P2,
                section=SECTION,
                evidence=_lines(s.outputs.get("squeue", "")),
            )
        ]
    jobs = [j for j in parse_squeue(s.outputs["squeue"]) if j.state in ("COMPLETING", "CONFIGURING")]
    stuck = [j for j in jobs if j.elapsed_s is not None and j.elapsed_s > STUCK_JOB_S]
    if not stuck:
        note = f" ({len(jobs)} finishing or starting for less than {STUCK_JOB_S // 60} minutes)" if jobs else ""
        return [
            finding(
                obs, "slurm.jobs", Tag.PASS, f"No Slurm job stuck in COMPLETING or CONFIGURING{note}", section=SECTION
            )
        ]
    return [
        finding(
            obs,
            "slurm.jobs",
            Tag.WARN,
            f"{len(stuck)} Slurm job(s) stuck in COMPLETING or CONFIGURING for more than {STUCK_JOB_S // 60} minutes",
            priority=Priority.P1,
            section=SECTION,
            evidence=trim_evidence(
                [f"job {j.job_id} {j.state} for {j.elapsed} on {j.nodes or j.reason}" for j in stuck]
            ),
            root_cause="A job stuck COMPLETING waits for its nodes to confirm its processes ended (stuck "
            "processes or a failing epilog there); after a node replacement, slurmctld may also still hold "
            "stale state for the old node.",
            suggested_commands=[
                read_only(["scontrol", "show", "job", j.job_id], f"Read the job's state and nodes; {ON_CONTROLLER}")
                for j in stuck[:5]
            ],
            next_step="Check the nodes of these jobs (slurm.nodes findings, their slurmd log and epilog) first.",
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check("slurm.controller", SECTION, "Slurm controller", check_controller),
    Check("slurm.nodes", SECTION, "Slurm node states", check_nodes),
    Check("slurm.jobs", SECTION, "Stuck Slurm jobs", check_jobs),
)
