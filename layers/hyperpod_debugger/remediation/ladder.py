"""The suggestion engine: turns what the checks concluded about a node (``Finding.node_action``)
into the commands an operator may run, in the order investigate → reboot → replace, and applies
the rules that keep those commands safe:

- ``UNKNOWN`` evidence never leads to a reboot or replacement, only to investigation;
- while HyperPod's own recovery is already acting on a node, no second action is suggested;
- application-class faults (Xid 13/31/43, a job's own OOM) call for fixing the workload;
- a Slurm controller node is never replaced, and every replacement says it destroys the root
  and secondary volumes;
- configuration changes carry a drift note that names the owning stack when tags reveal it;
- node actions for several nodes are also offered as batch calls of at most 25 node ids.

Pure: the observation and the run context come in, refined findings go out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.checks.k8s_nodes import pending_recovery
from hyperpod_debugger.checks.logs import hma_detections
from hyperpod_debugger.domain import occupancy as occ
from hyperpod_debugger.domain.commands import aws_argv, batches, mutating, read_only, shell_join
from hyperpod_debugger.domain.model import STEP_ORDER, Finding, NodeVerdict, SuggestedCommand, Tag
from hyperpod_debugger.remediation.iac import drift_note
from hyperpod_debugger.remediation.rootcause import link_causes
from hyperpod_debugger.remediation.verdict import node_verdicts
from hyperpod_debugger.slurm.parse import parse_state

if TYPE_CHECKING:
    from hyperpod_debugger.checks.base import CheckContext
    from hyperpod_debugger.domain.observations import Cluster, ClusterNode, ClusterObservation, Observed
    from hyperpod_debugger.domain.occupancy import Occupancy

#: How long after HyperPod announced a reboot/replacement we still consider it under way.
#: A replacement normally takes 20-30 minutes.
RECOVERY_WINDOW = timedelta(minutes=45)
REPLACEMENT_TIME = "a replacement normally takes about 20–30 minutes"

#: Node statuses in which HyperPod itself is working on the node.
RECOVERY_STATUSES = frozenset({"ShuttingDown", "SystemUpdating", "DeepHealthCheckInProgress", "Pending"})
_RECOVERY_EVENT = re.compile(
    r"reboot of ec2 instance .*in progress|starting as part of instance replacement|"
    r"termination of ec2 instance .*in progress|replacement .*in progress",
    re.I,
)
_EVENT_INSTANCE = re.compile(r"\bi-[0-9a-f]{8,17}\b")
_HMA_ACTION = re.compile(r"reboot|replace", re.I)
#: Group names that mark the Slurm controller until the controller is confirmed on the node.
_CONTROLLER_GROUP = re.compile(r"controller|head|master", re.I)

_NODE_STEPS = ("drain", "reboot", "replace")


@dataclass(frozen=True, slots=True)
class Target:
    """The cluster that node commands point at, as the AWS CLI names it. Offline analysis of a
    probe document may not know it; then no node command can be filled in."""

    arn: str | None
    name: str | None
    region: str | None
    orchestrator: str | None
    eks_cluster_arn: str | None
    #: NodeProvisioningMode is Continuous: the batch calls take NodeLogicalIds
    continuous: bool = False

    @classmethod
    def of(cls, cluster: Cluster) -> Target:
        return cls(
            cluster.arn,
            cluster.name,
            cluster.region,
            cluster.orchestrator,
            cluster.eks_cluster_arn,
            cluster.provisioning_mode == "Continuous",
        )

    def node_args(self, ids: list[str], nodes: dict[str, ClusterNode]) -> list[str]:
        """``--node-ids`` for the batch calls, or under Continuous provisioning ``--node-logical-ids`` for the
        nodes whose NodeLogicalId was listed (the call accepts both lists at once)."""
        logical = [nodes[i].logical_id for i in ids if self.continuous and i in nodes and nodes[i].logical_id]
        plain = [i for i in ids if not (self.continuous and i in nodes and nodes[i].logical_id)]
        args = ["--node-ids", *plain] if plain else []
        return args + (["--node-logical-ids", *[str(x) for x in logical]] if logical else [])

    @property
    def known(self) -> bool:
        return bool(self.name and self.region)

    def sagemaker(self, operation: str, *args: str) -> list[str]:
        return aws_argv("sagemaker", operation, str(self.region), "--cluster-name", str(self.name), *args)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    node: ClusterNode | None
    recovering: str | None
    slurm_controller: bool
    #: what runs on the node, read before a drain, reboot or replace is suggested (None: not read in this run)
    occupancy: Observed[Occupancy] | None = None

    @property
    def seen(self) -> Occupancy | None:
        """What was read of the node's occupancy; None when it was not read."""
        return self.occupancy.value if self.occupancy is not None and self.occupancy.available else None

    @property
    def occupied(self) -> Occupancy | None:
        return self.seen if self.seen is not None and self.seen.occupied else None


# --------------------------------------------------------------------------- what we know


def recovery_in_progress(obs: ClusterObservation, now: datetime) -> dict[str, str]:
    """instance id -> why we believe HyperPod is already rebooting or replacing it."""
    found: dict[str, str] = {}
    for node in obs.nodes.value or () if obs.nodes.available else ():
        if node.status in RECOVERY_STATUSES:
            found[node.instance_id] = f"node status {node.status}"
    since = now - RECOVERY_WINDOW
    if obs.events.available and obs.events.value is not None:
        latest: dict[str, tuple[datetime, str]] = {}
        for event in obs.events.value.events:
            ids = [event.instance_id] if event.instance_id else _EVENT_INSTANCE.findall(event.description)
            for iid in ids:
                if iid not in latest or event.time > latest[iid][0]:
                    latest[iid] = (event.time, event.description)
        for iid, (when, description) in latest.items():
            if when >= since and _RECOVERY_EVENT.search(description):
                found.setdefault(iid, f"cluster event at {when.isoformat()}: {description}")
    if obs.logs.hma_events.available and obs.logs.hma_events.value:
        for detection in hma_detections(obs.logs.hma_events.value, since):
            action = detection.condition or detection.reason or ""
            iid = detection.stream.instance_id
            if iid and _HMA_ACTION.search(action):
                found.setdefault(iid, f"health agent recorded {action} at {detection.timestamp.isoformat()}")
    for iid, reason in pending_recovery(obs).items():  # EKS labels UnschedulablePendingReboot/Replacement
        found.setdefault(iid, reason)
    return found


def is_controller(cluster: Cluster, node: ClusterNode) -> bool:
    return cluster.orchestrator == "Slurm" and bool(_CONTROLLER_GROUP.search(node.group))


def slurm_controllers(obs: ClusterObservation) -> set[str]:
    if not obs.nodes.available:
        return set()
    return {n.instance_id for n in obs.nodes.value or () if is_controller(obs.cluster, n)}


def resource_tags(obs: ClusterObservation) -> dict[str, dict[str, str]]:
    """Tags of every resource a suggested configuration change may touch, by id or ARN."""
    tags: dict[str, dict[str, str]] = {}
    net = obs.network
    for observed in (net.security_groups, net.subnets, net.vpcs):
        if observed.available and observed.value:
            tags.update({rid: dict(r.tags) for rid, r in observed.value.items()})
    if obs.cluster_tags.available and obs.cluster_tags.value is not None:
        tags[obs.cluster.arn] = dict(obs.cluster_tags.value)
    if obs.eks.available and obs.eks.value is not None:
        tags[obs.eks.value.arn] = dict(obs.eks.value.tags)
    return tags


# --------------------------------------------------------------------------- commands


def occupancy_argv(target: Target, node: ClusterNode | None, iid: str) -> list[str] | None:
    """The read-only command that lists what runs on the node (its jobs or pods)."""
    if target.orchestrator == "Slurm":
        name = node.slurm_name if node else None
        return ["squeue", "-w", name] if name else None
    if target.orchestrator == "EKS":
        name = node.eks_name if node else f"hyperpod-{iid}"
        return ["kubectl", "get", "pods", "-A", "-o", "wide", "--field-selector", f"spec.nodeName={name}"]
    return None


def _occupancy_check(target: Target, facts: NodeFacts, iid: str) -> SuggestedCommand | None:
    argv = occupancy_argv(target, facts.node, iid)
    if argv is None:
        return None
    where = "on the Slurm controller" if target.orchestrator == "Slurm" else "with kubectl"
    return read_only(argv, f"See what runs on the node before you drain it ({where})")


def occupancy_line(target: Target, facts: NodeFacts, iid: str) -> str:
    """What runs on the node, in one line, or why it is not known and how to look."""
    argv = occupancy_argv(target, facts.node, iid)
    return occ.describe(facts.occupancy, shell_join(argv) if argv else None)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _stops(target: Target, facts: NodeFacts, iid: str) -> str:
    """What a reboot or replacement of the node stops, as read (or that it was not read)."""
    if facts.seen is not None:
        return facts.seen.stopped_by_action()
    return f"stops whatever runs there ({occupancy_line(target, facts, iid)})"


def _already_drained(facts: NodeFacts) -> str | None:
    """The Slurm state of a node that is drained or draining already (a drain would change nothing)."""
    state = facts.seen.state if facts.seen is not None else None
    return state if state and parse_state(state).drain else None


def _drain(target: Target, facts: NodeFacts, iid: str, reason: str) -> SuggestedCommand | None:
    busy = facts.occupied
    if target.orchestrator == "Slurm":
        name = facts.node.slurm_name if facts.node else None
        if not name or _already_drained(facts):
            return None
        running = f"running jobs continue: {busy.summary()}" if busy else "running jobs continue"
        return mutating(
            ["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"],
            f"Drain Slurm node {name} ({iid}) so no new job lands on it; running jobs finish",
            blast_radius=f"Only {name}: it takes no new jobs; {running}. Undo with state=resume.",
            changes_configuration=False,
            preconditions=["Run it on the Slurm controller (through an SSM session, § K)."],
            step="drain",
        )
    if target.orchestrator == "EKS":
        name = facts.node.eks_name if facts.node else f"hyperpod-{iid}"
        running = f"; running pods keep running: {busy.summary()}" if busy else ""
        return mutating(
            ["kubectl", "cordon", name],
            f"Stop new pods from being scheduled on {name}; running pods keep running",
            blast_radius=f"Only {name}: marked unschedulable until `kubectl uncordon {name}`{running}.",
            changes_configuration=False,
            preconditions=[
                f"kubectl points at the EKS cluster {target.eks_cluster_arn or 'of this HyperPod cluster'}."
            ],
            step="drain",
        )
    return None


def _busy_precondition(busy: Occupancy | None, action: str) -> list[str]:
    """An occupied node's own precondition: what the action stops, said before it is run."""
    if busy is None:
        return []
    return [
        f"The {action} stops what runs there: {busy.summary()}. Drain first, then let the work finish, or "
        "checkpoint it and requeue it elsewhere."
    ]


def _reboot(
    target: Target,
    ids: list[str],
    stops: str | None = None,
    busy: Occupancy | None = None,
    nodes: dict[str, ClusterNode] | None = None,
) -> SuggestedCommand:
    who = ids[0] if len(ids) == 1 else f"these {len(ids)} nodes"
    return mutating(
        target.sagemaker("batch-reboot-cluster-nodes", *target.node_args(ids, nodes or {})),
        f"Reboot {who} (the second rung, after investigating)",
        blast_radius=(
            f"Reboots {who}: {stops or 'jobs running there stop'}; each instance keeps its id and its root and "
            "secondary volumes; on EKS its pods come back once the node is Ready."
        ),
        changes_configuration=False,
        preconditions=[
            "The read-only commands above do not point at a workload or configuration cause.",
            *_busy_precondition(busy, "reboot"),
            "The jobs on the node can be interrupted (drain or cordon it first).",
            "describe-cluster-node does not already show HyperPod rebooting or replacing it.",
        ],
        step="reboot",
    )


def _replace(
    target: Target,
    ids: list[str],
    stops: str | None = None,
    busy: Occupancy | None = None,
    nodes: dict[str, ClusterNode] | None = None,
) -> SuggestedCommand:
    who = ids[0] if len(ids) == 1 else f"these {len(ids)} nodes"
    return mutating(
        target.sagemaker("batch-replace-cluster-nodes", *target.node_args(ids, nodes or {})),
        f"Replace {who} with new hardware (the last rung: the fault survived a reboot)",
        blast_radius=(
            f"Terminates {who} and launches new hardware with the same configuration: this permanently "
            f"destroys the root and secondary volumes of the node; {stops or 'its jobs stop'}; "
            f"{REPLACEMENT_TIME}."
        ),
        changes_configuration=False,
        preconditions=[
            "The node was rebooted (by HyperPod or by you) and the same fault came back.",
            *_busy_precondition(busy, "replacement"),
            "Anything needed from its root and secondary volumes (checkpoints, logs) is copied elsewhere.",
            "It is not a Slurm controller node (replacement is not supported there).",
            "describe-cluster-node does not already show HyperPod rebooting or replacing it.",
        ],
        step="replace",
    )


def _occupancy_step(target: Target, facts: NodeFacts, iid: str, action: str) -> str:
    """What the next step adds about the node's occupancy: drain an occupied node first; an unread one
    is looked at before anything is run."""
    busy = facts.occupied
    drained = _already_drained(facts)
    if drained:
        return f" It is drained already (Slurm state {drained}): no drain needed."
    if busy is not None:
        noun = "replacement" if action == "replace" else action
        return f" Drain it first, since the {noun} stops what runs there: {busy.summary()}."
    if facts.seen is not None:
        return f" {_cap(facts.seen.stopped_by_action())}."
    line = occupancy_line(target, facts, iid)
    return f" What runs there was not read{line.removeprefix('not read')}."


def _with_drift_note(cmd: SuggestedCommand, tags: dict[str, dict[str, str]]) -> SuggestedCommand:
    if cmd.step != "change" or not cmd.resource:
        return cmd
    return SuggestedCommand.model_validate(
        {**cmd.model_dump(), "iac_warning": drift_note(cmd.resource, tags.get(cmd.resource))}
    )


def _ordered(commands: list[SuggestedCommand]) -> list[SuggestedCommand]:
    return sorted(commands, key=lambda c: STEP_ORDER[c.step])


# --------------------------------------------------------------------------- rules


def _refine(f: Finding, target: Target, facts: NodeFacts | None, tags: dict) -> Finding:
    commands = [_with_drift_note(c, tags) for c in f.suggested_commands]
    update: dict = {}
    if f.instance_id and f.node_action and facts is not None:
        iid = f.instance_id
        # Whatever a check may have built, node actions are decided here, once.
        commands = [c for c in commands if c.step not in _NODE_STEPS]
        action, next_step = f.node_action, f.next_step
        if f.tag is Tag.UNKNOWN:
            action = "investigate"
            next_step = (
                "We could not look at this node: restore access (the read-only commands, § K) and run the "
                "triage again. Do not reboot or replace on this evidence."
            )
        elif action == "fix-workload":
            next_step = (
                "The workload caused this: fix the job (its code, memory limits or inputs). The node needs "
                "no reboot or replacement."
            )
        elif facts.recovering:
            next_step = (
                f"HyperPod is already acting on this node ({facts.recovering}); {REPLACEMENT_TIME}. Run the "
                "triage again afterwards and do not start a second reboot or replacement."
            )
            action = "investigate"
        elif action in ("reboot", "replace") and not target.known:
            next_step = (next_step or f"The evidence calls for a {action}.") + (
                " Give --cluster and --region to get the command with the ids filled in."
            )
        elif action in ("reboot", "replace"):
            drain = _drain(target, facts, iid, f"hyperpod-debugger {f.check}")
            look = _occupancy_check(target, facts, iid)
            stops, busy = _stops(target, facts, iid), facts.occupied
            known = {iid: facts.node} if facts.node else {}
            if action == "replace" and facts.slurm_controller:
                commands += [c for c in (look, drain, _reboot(target, [iid], stops, busy, known)) if c]
                action = "reboot"
                next_step = (
                    "Replacement is not supported on the Slurm controller node: reboot it, and if the fault "
                    "returns open an AWS Support case (see references/node-issue-catalog.md)."
                )
            elif action == "replace":
                commands += [c for c in (look, drain, _replace(target, [iid], stops, busy, known)) if c]
                next_step = next_step or "The fault came back after a reboot: replace the node."
            else:
                commands += [c for c in (look, drain, _reboot(target, [iid], stops, busy, known)) if c]
                next_step = next_step or "Investigate first; if nothing points at the workload, reboot the node."
            next_step += _occupancy_step(target, facts, iid, action)
        else:
            next_step = next_step or "Investigate with the read-only commands before any node action."
        update = {"node_action": action, "next_step": next_step}
    update["suggested_commands"] = [c.model_dump() for c in _ordered(commands)]
    if facts is not None and facts.node is not None:
        # what the history groups by: the node's group and type, and the identity a replacement keeps
        node = facts.node
        update |= {
            "instance_group": f.instance_group or node.group or None,
            "instance_type": f.instance_type or node.instance_type or None,
            "node_logical_id": f.node_logical_id or node.logical_id,
        }
    # Validate again, so the model's invariants (no mutating command on UNKNOWN, ladder order,
    # replace names the destroyed volumes) hold for what the engine produced too.
    return Finding.model_validate({**f.model_dump(), **update})


def _batch_findings(findings: list[Finding], target: Target, nodes: dict[str, ClusterNode]) -> list[Finding]:
    out = []
    for step in ("reboot", "replace"):
        ids = sorted(
            {
                f.instance_id
                for f in findings
                if f.instance_id and f.is_problem and any(c.step == step for c in f.suggested_commands)
            }
        )
        if len(ids) < 2:
            continue
        chunks = list(batches(ids))
        build = _reboot if step == "reboot" else _replace
        out.append(
            Finding(
                tag=Tag.INFO,
                check="ladder.batch",
                section="F",
                message=f"Batch form of the suggested {step}: {len(ids)} node(s) in {len(chunks)} call(s) "
                "of at most 25 ids",
                cluster_arn=target.arn,
                cluster_name=target.name,
                evidence=[f"{step}: {', '.join(chunk)}" for chunk in chunks],
                suggested_commands=[build(target, chunk, nodes=nodes) for chunk in chunks],
                next_step=f"Read each node's finding first; these calls only group the per-node {step} commands.",
            )
        )
    return out


def apply(
    findings: list[Finding],
    target: Target,
    nodes: dict[str, ClusterNode],
    *,
    recovering: dict[str, str] | None = None,
    controllers: set[str] | frozenset[str] = frozenset(),
    tags: dict[str, dict[str, str]] | None = None,
    occupancy: dict[str, Observed[Occupancy]] | None = None,
) -> list[Finding]:
    """Apply the ladder and the safety rules to every finding, then add batch forms.

    ``occupancy``: what runs on the nodes about to be drained, rebooted or replaced, as read this run."""
    recovering = recovering or {}
    occupancy = occupancy or {}
    refined = []
    for f in findings:
        facts = None
        if f.instance_id:
            iid = f.instance_id
            facts = NodeFacts(nodes.get(iid), recovering.get(iid), iid in controllers, occupancy.get(iid))
        refined.append(_refine(f, target, facts, tags or {}))
    refined = one_rung_per_node(refined, node_verdicts(refined, nodes=nodes, recovering=recovering))
    return link_causes(refined + _batch_findings(refined, target, nodes))


#: a command that undoes a drain ("state=resume"): never beside a drain for a reboot or a replace
_UNDRAIN = ("state=resume", "kubectl uncordon")


def one_rung_per_node(findings: list[Finding], verdicts: list[NodeVerdict]) -> list[Finding]:
    """Each node keeps the commands of its verdict's rung only: a replace supersedes a reboot, and a node
    about to be drained is not also offered to be resumed. A finding whose own rung was superseded says so."""
    rung = {v.instance_id: v.verdict for v in verdicts}
    out = []
    for f in findings:
        state = rung.get(f.instance_id or "")
        if state is None or f.check == "ladder.batch":
            out.append(f)
            continue
        own = f.node_action if f.node_action in ("reboot", "replace") else None
        keep = []
        for c in f.suggested_commands:
            if c.step in _NODE_STEPS and state in ("reboot", "replace") and own != state:
                continue  # drain / reboot of a superseded rung
            if c.step in ("reboot", "replace") and state not in ("reboot", "replace"):
                continue
            if state in ("reboot", "replace") and any(u in c.command for u in _UNDRAIN):
                continue
            keep.append(c)
        if len(keep) == len(f.suggested_commands):
            out.append(f)
            continue
        update: dict = {"suggested_commands": [c.model_dump() for c in keep]}
        if own and own != state:
            update["next_step"] = (
                f"This node's verdict is {state} (another finding on it weighs more): follow that one; "
                f"the {own} this finding alone would call for is superseded."
            )
            update["node_action"] = "investigate"
        out.append(Finding.model_validate({**f.model_dump(), **update}))
    return out


def refine(
    findings: list[Finding],
    obs: ClusterObservation,
    ctx: CheckContext,
    *,
    acting: dict[str, str] | None = None,
    occupancy: dict[str, Observed[Occupancy]] | None = None,
) -> list[Finding]:
    """The engine over a triage: what the observation knows about each node decides the rules.

    ``acting``: nodes HyperPod said it is repairing outside the observation (a Node Health Event).
    ``occupancy``: what runs on the nodes the first pass put on the reboot or replace rung.
    """
    nodes = {n.instance_id: n for n in obs.nodes.value or ()} if obs.nodes.available else {}
    return apply(
        findings,
        Target.of(obs.cluster),
        nodes,
        recovering={**(acting or {}), **recovery_in_progress(obs, ctx.now)},
        controllers=slurm_controllers(obs),
        tags=resource_tags(obs),
        occupancy=occupancy,
    )


def verdicts(
    findings: list[Finding],
    obs: ClusterObservation,
    ctx: CheckContext,
    *,
    acting: dict[str, str] | None = None,
    occupancy: dict[str, Observed[Occupancy]] | None = None,
) -> list[NodeVerdict]:
    """The node verdicts of a triage, with what HyperPod is doing itself beside ours, and what runs on
    each node on the reboot or replace rung."""
    nodes = {n.instance_id: n for n in obs.nodes.value or ()} if obs.nodes.available else {}
    target = Target.of(obs.cluster)
    occupancy = occupancy or {}
    lines = {
        iid: occupancy_line(target, NodeFacts(nodes.get(iid), None, False, occupancy.get(iid)), iid)
        for iid in {f.instance_id for f in findings if f.instance_id}
    }
    return node_verdicts(
        findings,
        nodes=nodes,
        recovering={**(acting or {}), **recovery_in_progress(obs, ctx.now)},
        occupancy=lines,
    )
