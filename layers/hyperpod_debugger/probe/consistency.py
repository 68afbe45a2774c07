"""Software consistency across a group (§ E): the nodes of one instance group that run another NVIDIA driver,
CUDA, kernel, EFA installer, libfabric, aws-ofi-nccl, NCCL or Neuron version than their peers, and stacks
older than the floor this tool knows.

Pure: the nodes' version sets in (:mod:`hyperpod_debugger.probe.versions`), findings out. The comparison
needs several nodes' probe documents at once, so it runs where a probe run holds them all
(:func:`hyperpod_debugger.probe.runner.probe_cluster`): over every probed node in ``triage``, and over the
batch's nodes in the sweep's probe batches (the coverage says which; a partial view never resolves a stored
skew, see :func:`compare`). Each batch also records what its nodes run, and the sweep's cluster step compares
those records across the whole group (:func:`compare_recorded`): a skew whose odd nodes all fell in one batch
is seen there.

A node whose version of a component could not be read is listed as not read and is not counted: UNKNOWN is
neither a vote for the majority nor a difference. The majority is not assumed right: the finding says which
version is the newer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.commands import IAC_WARNING, describe_node, mutating, sagemaker_argv
from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.probe.parse.klog import window_label
from hyperpod_debugger.probe.versions import COMPONENTS, Reading, SoftwareVersions, version_key

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import Cluster, ClusterNode

CHECK_SKEW = "probe.software_skew"
CHECK_FLOOR = "probe.software_floor"
SECTION = "E"
#: node ids named in one evidence line at most
IDS_SHOWN = 25
#: what a node with the component nowhere to be found is counted as (a real difference from peers that have it)
NONE_FOUND = "none found"


@dataclass(frozen=True, slots=True)
class Floor:
    version: str
    source: str


#: The oldest version of each component this tool accepts without a warning: a stack older than these is older
#: than any HyperPod AMI released in the last year ships. Only components with a dated public AWS source are
#: listed (read 2026-12-04):
#:
#: * NVIDIA driver 570.195.03: the Amazon Linux 2 builds of the HyperPod AMI releases for Amazon EKS of
#:   October 22, October 29 and November 7, 2025 (SageMaker developer guide, "SageMaker HyperPod AMI releases for
#:   Amazon EKS"); every later release with a stated driver ships 580.x (the Slurm releases of December 29, 2025
#:   and January 25, 2026: 580.105.08, 580.126.09).
#: * aws-ofi-nccl 1.16.3: the EKS release of October 22, 2025 (its ``ofi_nccl_version``); later releases carry
#:   the EFA installer's 1.17.x and newer.
#: * Neuron driver 2.23.9.0: the EKS release of September 29, 2025 (``aws-neuronx-dkms``); the Slurm releases
#:   of December 2025 and January 2026 carry 2.25.4.0.
#: * EFA installer 1.38.0, libfabric 1.22.0, EFA kernel driver 2.13.0: the stack AWS ParallelCluster adopted in
#:   February 2025 (aws-parallelcluster-cookbook #2892); the EFA release notes list 1.51.0 as current
#:   (2026-10-22), and every HyperPod release of the last year ships 1.43 or newer.
#:
#: No floor for CUDA (the default toolkit differs by AMI and lifecycle scripts repoint it), NCCL (no HyperPod
#: page has stated it since August 2025) or the Neuron runtime (since August 2025): a guessed floor would warn
#: on healthy nodes.
FLOORS: dict[str, Floor] = {
    "nvidia_driver": Floor(
        "570.195.03", "HyperPod AMI for EKS (Amazon Linux 2), October-November 2025; current releases ship 580.x"
    ),
    "aws_ofi_nccl": Floor("1.16.3", "HyperPod AMI for EKS of October 22, 2025; current releases ship 1.17 or newer"),
    "neuron_driver": Floor("2.23.9.0", "HyperPod AMI for EKS of September 29, 2025 (Slurm, January 2026: 2.25.4.0)"),
    "efa_installer": Floor("1.38.0", "EFA installer 1.38.0, February 2025 (current: 1.51.0, October 2026)"),
    "libfabric": Floor("1.22.0", "libfabric of EFA installer 1.38.0, February 2025 (current: 2.7.0amzn2.0)"),
    "efa_driver": Floor("2.13.0", "EFA kernel driver of EFA installer 1.38.0, February 2025 (current: 3.3.1)"),
}


@dataclass(frozen=True, slots=True)
class NodeVersions:
    instance_id: str
    group: str
    versions: SoftwareVersions


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:IDS_SHOWN])
    return shown + (f" … and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else "")


def _order(version: str) -> tuple[int, tuple[tuple[int, int | str], ...]]:
    return (0, ()) if version == NONE_FOUND else (1, version_key(version))


def _update_group(cluster: Cluster, group: str) -> SuggestedCommand:
    return mutating(
        [*sagemaker_argv(cluster, "update-cluster-software"), "--instance-groups", f"InstanceGroupName={group}"],
        f"Roll instance group {group} onto HyperPod's current AMI release, so that its nodes run one software stack",
        blast_radius=f"every node of instance group {group}: each is re-imaged (its root volume is replaced by the "
        "new AMI, so data kept there is lost) and restarted; HyperPod does not drain the jobs running on them",
        changes_configuration=True,
        preconditions=[
            "Stop or checkpoint the group's jobs first, and copy anything kept on the nodes' root volumes to S3 or FSx",
            "Read the AMI release notes: the update brings every node to the current release, which may be newer "
            "than both versions seen here",
            "A version installed by a lifecycle script comes back after the update unless the script changes",
        ],
        resource=cluster.arn,
        step="change",
        iac_note=IAC_WARNING,
    )


def stored_form(versions: SoftwareVersions) -> dict[str, str]:
    """What a node runs, as the sweep records it between batches: component → version, or ``none found``;
    components that could not be read are left out (they are not known, so they are not recorded)."""
    out: dict[str, str] = {}
    for component, reading in versions:
        if reading.state == "read" and reading.version:
            out[component] = reading.version
        elif reading.state == "absent":
            out[component] = NONE_FOUND
    return out


def from_stored(table: Mapping[str, str], when: str) -> SoftwareVersions:
    """:func:`stored_form` read back; ``when`` says where the versions come from (shown in the evidence)."""
    readings = {
        c: Reading("absent", detail=when) if v == NONE_FOUND else Reading("read", v, when)
        for c, v in table.items()
        if c in COMPONENTS and isinstance(v, str) and v
    }
    return SoftwareVersions(readings)


def compare_recorded(
    recorded: Mapping[str, tuple[datetime, Mapping[str, str]]],
    running: Sequence[ClusterNode],
    cluster: Cluster,
    *,
    now: datetime,
    period: timedelta,
) -> tuple[list[Finding], list[CheckCoverage]]:
    """The sweep's whole-group view: the versions its probe batches recorded (instance id → (when, what)) of
    the nodes Running now, none older than ``period`` (the rotation probes every node once per period), compared
    per group. A skew whose odd nodes were all probed in one batch (replacements are probed first, together) is
    seen here; a group with a Running node that has no fresh record is a partial view, which resolves no
    stored skew."""
    fresh = [
        NodeVersions(node.instance_id, node.group, from_stored(table, f"probed {when:%Y-%m-%d %H:%M} UTC"))
        for node in running
        if (entry := recorded.get(node.instance_id)) is not None
        for when, table in (entry,)
        if table and timedelta(0) <= now - when <= period
    ]
    sizes = Counter(node.group for node in running)
    return compare(fresh, cluster, group_sizes=dict(sizes), recorded=period)


def compare(
    nodes: Sequence[NodeVersions],
    cluster: Cluster,
    *,
    group_sizes: dict[str, int] | None = None,
    partial: bool = False,
    recorded: timedelta | None = None,
) -> tuple[list[Finding], list[CheckCoverage]]:
    """Per instance group: one FAIL P1 per skewed component, a PASS per group whose read nodes agree, one WARN
    P2 per component below its floor, an UNKNOWN where a group's versions could not be read on two nodes.

    ``group_sizes``: the Running nodes of each group in the cluster; when fewer were compared, the findings and
    the coverage say so, and the coverage names the compared nodes (so a partial view resolves no stored skew).
    ``partial``: the nodes are a sample (a sweep batch) whatever the sizes say. ``recorded``: the versions are
    the records of the probes of that last period, not this run's documents (the words say so)."""
    by_group: dict[str, list[NodeVersions]] = defaultdict(list)
    for node in nodes:
        by_group[node.group].append(node)
    findings: list[Finding] = []
    compared: list[str] = []
    skews = 0
    for group in sorted(by_group):
        members = sorted(by_group[group], key=lambda n: n.instance_id)
        scope = _scope(group, len(members), (group_sizes or {}).get(group, len(members)), recorded)
        partial = partial or bool(scope)
        readable = [n for n in members if n.versions.any_read]
        compared += [n.instance_id for n in readable]
        if len(members) >= 2 and len(readable) < 2:
            findings.append(_not_comparable(cluster, group, members, readable))
            continue
        group_findings, group_skews = _compare_group(cluster, group, members, readable, scope)
        findings += group_findings
        skews += group_skews
    return findings, _coverage(findings, compared, len(by_group), skews, partial=partial, recorded=recorded)


def _scope(group: str, compared: int, size: int, recorded: timedelta | None) -> str:
    """The sentence that says a group was seen in part ("" when every Running node of it was compared)."""
    if size <= compared:
        return ""
    if recorded is not None:
        return (
            f"{compared} of the {size} Running nodes of {group} have versions recorded by the probes of "
            f"the last {window_label(recorded)}"
        )
    return f"{compared} of the {size} Running nodes of {group} were probed in this run"


def _not_comparable(cluster: Cluster, group: str, members: list[NodeVersions], readable: list[NodeVersions]) -> Finding:
    return Finding(
        tag=Tag.UNKNOWN,
        priority=Priority.P2,
        check=CHECK_SKEW,
        section=SECTION,
        message=f"Could not compare the software of {group}: versions read on {len(readable)} of "
        f"{len(members)} probed nodes",
        cluster_arn=cluster.arn,
        cluster_name=cluster.name,
        instance_group=group,
        evidence=[
            f"{n.instance_id}: {n.versions.get('kernel').detail or 'no version read'}"
            for n in members
            if not n.versions.any_read
        ][:IDS_SHOWN],
        node_action="investigate",
        next_step="Probe the nodes with a current probe (it collects software_versions), then compare.",
    )


def _compare_group(
    cluster: Cluster, group: str, members: list[NodeVersions], readable: list[NodeVersions], scope: str
) -> tuple[list[Finding], int]:
    """One group's findings, component by component (below the floor, skewed, or the same on every node
    read), and how many of its components are skewed."""
    unread_all = [n.instance_id for n in members if not n.versions.any_read]
    findings: list[Finding] = []
    same: list[str] = []
    skews = 0
    for component, label in COMPONENTS.items():
        values, wheres, unread = _tally(readable, component)
        real = [v for v in values if v != NONE_FOUND]
        if not real:
            continue  # nowhere on this group (e.g. Neuron on GPU nodes): nothing to compare
        findings.extend(_below_floor(cluster, group, component, label, values))
        if len(values) == 1:
            if len(values[real[0]]) >= 2:
                same.append(f"{label} {real[0]}")
            continue
        skews += 1
        findings.append(_skew(cluster, group, component, label, values, wheres, unread + unread_all, scope))
    if same and len(readable) >= 2:
        findings.append(_agreement(cluster, group, len(readable), same, skews, unread_all, scope))
    return findings, skews


def _tally(readable: list[NodeVersions], component: str) -> tuple[dict[str, list[str]], dict[str, str], list[str]]:
    """(version or ``none found`` → the nodes that run it, version → where it was first read, the nodes whose
    version could not be read)."""
    values: dict[str, list[str]] = defaultdict(list)
    wheres: dict[str, str] = {}
    unread: list[str] = []
    for node in readable:
        reading = node.versions.get(component)
        if reading.state == "read" and reading.version:
            values[reading.version].append(node.instance_id)
            wheres.setdefault(reading.version, reading.detail)
        elif reading.state == "absent":
            values[NONE_FOUND].append(node.instance_id)
        else:
            unread.append(f"{node.instance_id} ({reading.detail})" if reading.detail else node.instance_id)
    return values, wheres, unread


def _agreement(
    cluster: Cluster, group: str, readable: int, same: list[str], skews: int, unread_all: list[str], scope: str
) -> Finding:
    evidence = [f"not read on {_ids(unread_all)}"] if unread_all else []
    if scope:
        evidence.append(scope)
    return Finding(
        tag=Tag.PASS,
        check=CHECK_SKEW,
        section=SECTION,
        message=f"The {readable} compared nodes of {group} "
        + ("agree on the rest of their software: " if skews else "run the same software: ")
        + ", ".join(same),
        cluster_arn=cluster.arn,
        cluster_name=cluster.name,
        instance_group=group,
        evidence=evidence,
    )


def _coverage(
    findings: list[Finding],
    compared: list[str],
    groups: int,
    skews: int,
    *,
    partial: bool,
    recorded: timedelta | None,
) -> list[CheckCoverage]:
    """The skew and floor checks' coverage: what was compared, and (for a partial view) which nodes."""
    where = "every probed node"
    if recorded is not None:
        where = f"the versions the probes of the last {window_label(recorded)} recorded"
        if partial:
            where += " (not every Running node has one yet)"
    elif partial:
        where = "the nodes probed in this run only (a sweep batch compares its own batch)"
    if not compared:
        status, reason = CheckStatus.SKIPPED, "no probed node reported its software versions"
        if any(f.tag is Tag.UNKNOWN for f in findings):
            status = CheckStatus.UNKNOWN
    else:
        status = CheckStatus.RAN
        reason = f"compared {len(compared)} node(s) in {groups} group(s), {where}: {skews} skewed component(s)"
    return [
        CheckCoverage(check=CHECK_SKEW, status=status, reason=reason, nodes=sorted(compared) if partial else None),
        CheckCoverage(
            check=CHECK_FLOOR,
            status=status,
            reason=f"floors known for {', '.join(COMPONENTS[c] for c in FLOORS)}" if compared else reason,
            nodes=sorted(compared) if partial else None,
        ),
    ]


def _skew(
    cluster: Cluster,
    group: str,
    component: str,
    label: str,
    values: dict[str, list[str]],
    wheres: dict[str, str],
    unread: list[str],
    scope: str,
) -> Finding:
    counted = sum(len(ids) for ids in values.values())
    ranked = sorted(values.items(), key=lambda kv: (len(kv[1]), _order(kv[0])))  # the fewest first
    newest = max((v for v in values if v != NONE_FOUND), key=version_key)
    parts = [f"{len(ranked[0][1])} of {counted} nodes of {group} run {label} {ranked[0][0]}"]
    parts += [f"{len(ids)} run {version}" for version, ids in ranked[1:]]
    message = (
        "; ".join(parts)
        .replace(f"run {label} {NONE_FOUND}", f"show no {label}")
        .replace(f"run {NONE_FOUND}", f"show no {label}")
    )
    top = max(len(ids) for ids in values.values())
    leaders = [v for v, ids in values.items() if len(ids) == top]
    majority = leaders[0]
    if len(leaders) > 1:
        verdict = f"no majority: {newest} is the newer"
    elif majority == newest:
        verdict = f"{newest} (the majority's) is the newer: the odd nodes are behind"
    else:
        verdict = f"{newest} is the newer, not the majority's {majority}: the odd nodes may be the updated ones"
    evidence = [
        f"{version}{f' ({wheres[version]})' if version in wheres else ''}: {_ids(ids)}"
        for version, ids in sorted(values.items(), key=lambda kv: _order(kv[0]), reverse=True)
    ]
    if unread:  # in the evidence, not the message: a node that flaps between read and not read keeps one finding
        evidence.append(f"{len(unread)} not read (not counted): {_ids(unread)}")
    if scope:
        evidence.append(scope)
    odd = ranked[0][1]
    commands = [
        describe_node(
            cluster,
            odd[0],
            "See when this odd node was launched or replaced (a replacement gets the AMI release of its day)",
        ),
        _update_group(cluster, group),
    ]
    return Finding(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check=CHECK_SKEW,
        section=SECTION,
        message=message,
        cluster_arn=cluster.arn,
        cluster_name=cluster.name,
        instance_group=group,
        evidence=[f"{verdict}", *evidence],
        root_cause=f"The nodes of {group} do not run one {label} version: a partial patch, a rollback, a "
        "replacement launched on another AMI release, or a lifecycle script installing 'latest'. Collectives "
        "across mixed versions can hang or fall back to slower transports (NCCL hangs).",
        suggested_commands=commands,
        node_action="investigate",
        next_step=f"Keep jobs off the mix: bring {group} to one release (the newer one, {newest}, unless it is "
        "the bad one), then run a short NCCL test across the group.",
    )


def _below_floor(
    cluster: Cluster, group: str, component: str, label: str, values: dict[str, list[str]]
) -> list[Finding]:
    floor = FLOORS.get(component)
    if floor is None:
        return []
    old = {v: ids for v, ids in values.items() if v != NONE_FOUND and version_key(v) < version_key(floor.version)}
    if not old:
        return []
    ids = sorted(i for group_ids in old.values() for i in group_ids)
    versions = ", ".join(sorted(old, key=version_key))
    return [
        Finding(
            tag=Tag.WARN,
            priority=Priority.P2,
            check=CHECK_FLOOR,
            section=SECTION,
            message=f"{len(ids)} node(s) of {group} run {label} {versions}, older than {floor.version}",
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
            instance_group=group,
            evidence=[f"floor: {floor.source}", f"{versions}: {_ids(ids)}"],
            root_cause=f"An {label} older than any current HyperPod AMI ships: the node was not updated, or a "
            "lifecycle script or custom AMI pins an old stack.",
            suggested_commands=[_update_group(cluster, group)],
            node_action="investigate",
            next_step="Update the group's software (or the custom AMI / lifecycle script that pins the old stack).",
        )
    ]
