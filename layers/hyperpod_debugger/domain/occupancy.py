"""What runs on a node: the Slurm jobs or the Kubernetes pods a drain, reboot or replacement would touch.

Read-only and pure: the Slurm controller's ``jobs`` section (``squeue``) and the pods the API server lists
on a node are turned into an :class:`Occupancy`, whose sentences name what a node action stops
("stops job 4123 (alice, 64 nodes)", "evicts 3 pods of training/llama-70b"). What could not be read stays
an :class:`~hyperpod_debugger.domain.observations.Observed` failure, and the suggestions say so: an unread
node is never described as idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.observations import ApiFailure, Observed

if TYPE_CHECKING:
    from hyperpod_debugger.domain.orchestrators import K8sPod, SlurmJob

#: Pods of these owners come back by themselves on any node and are not the node's workload.
_NODE_BOUND_OWNERS = frozenset({"DaemonSet", "Node"})
#: Pod phases that no longer run anything.
_ENDED = frozenset({"Succeeded", "Failed"})
#: Jobs / workloads named in a sentence before "and N more".
_NAMED = 3


@dataclass(frozen=True, slots=True)
class Job:
    """A Slurm job on the node."""

    job_id: str
    user: str
    node_count: int | None
    state: str
    name: str

    def describe(self) -> str:
        size = f"{self.node_count} node{'s' if self.node_count != 1 else ''}" if self.node_count else "?"
        state = "" if self.state == "RUNNING" else f", {self.state}"
        return f"job {self.job_id} ({self.user}, {size}{state})"


@dataclass(frozen=True, slots=True)
class Workload:
    """Pods of one workload on the node: ``namespace/name``, the owner's kind, how many pods."""

    namespace: str
    name: str
    kind: str
    pods: int

    def describe(self) -> str:
        noun = "pod" if self.pods == 1 else "pods"
        kind = f" ({self.kind})" if self.kind and self.kind not in ("ReplicaSet", "Pod") else ""
        return f"{self.pods} {noun} of {self.namespace}/{self.name}{kind}"


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What was running on one node when it was read, and how we know."""

    instance_id: str
    #: the node's name in its orchestrator (``ip-10-1-2-3`` in Slurm, ``hyperpod-i-…`` in Kubernetes)
    node_name: str
    #: "squeue" (Slurm controller) or "kubernetes" (pods listed by the API server)
    source: str
    jobs: tuple[Job, ...] = ()
    workloads: tuple[Workload, ...] = ()
    #: the node's Slurm state as sinfo printed it (``down*``, ``drained``, ``mixed``…), when known
    state: str | None = None

    @property
    def occupied(self) -> bool:
        return bool(self.jobs or self.workloads)

    def summary(self) -> str:
        """One line: what runs there, or that nothing does."""
        if not self.occupied:
            return f"nothing ({self._checked()})"
        if self.jobs:
            return _listed([j.describe() for j in self.jobs], "job")
        return _listed([w.describe() for w in self.workloads], "workload")

    def stopped_by_action(self) -> str:
        """What a reboot or replacement stops, as the start of a sentence."""
        if not self.occupied:
            return f"nothing runs there now ({self._checked()})"
        if self.jobs:
            return "stops " + _listed([j.describe() for j in self.jobs], "job")
        return "evicts " + _listed([w.describe() for w in self.workloads], "workload")

    def _checked(self) -> str:
        if self.source != "squeue":
            return f"no pod outside DaemonSets on {self.node_name}"
        state = f"; Slurm state {self.state}" if self.state else ""
        return f"squeue lists no job on {self.node_name}{state}"


def _listed(items: list[str], noun: str) -> str:
    if len(items) <= _NAMED:
        return ", ".join(items)
    return ", ".join(items[:_NAMED]) + f" and {len(items) - _NAMED} more {noun}s"


# --------------------------------------------------------------------------- builders


def from_slurm(
    jobs: list[SlurmJob] | None,
    node_names: Mapping[str, str],
    *,
    states: Mapping[str, str] | None = None,
) -> dict[str, Observed[Occupancy]]:
    """Occupancy of each node in ``node_names`` (instance id -> Slurm node name) from the controller's
    ``jobs`` section, with each node's sinfo state from ``states`` (name -> state); ``jobs`` None (the
    section was not squeue's answer) makes every node unread."""
    states = states or {}
    if jobs is None:
        why = ApiFailure("ssm:StartSession", "malformed", "squeue on the controller gave no job list")
        return {iid: Observed.failed(why) for iid in node_names}
    on: dict[str, list[Job]] = {}
    for job in jobs:
        for name in job.nodes:
            on.setdefault(name, []).append(Job(job.job_id, job.user, job.node_count, job.state, job.name))
    return {
        iid: Observed.ok(Occupancy(iid, name, "squeue", jobs=tuple(on.get(name, ())), state=states.get(name)))
        for iid, name in node_names.items()
    }


def _owner(pod: K8sPod) -> tuple[str, str]:
    """The workload a pod belongs to: (kind, name). A ReplicaSet's name loses its pod-template hash, so the
    pods of one Deployment count together."""
    kind, name = pod.owner_kind or "Pod", pod.owner_name or pod.name
    template = pod.labels.get("pod-template-hash")
    if kind == "ReplicaSet" and template and name.endswith("-" + template):
        return "Deployment", name[: -len(template) - 1]
    return kind, name


def from_pods(instance_id: str, node_name: str, pods: Iterable[K8sPod]) -> Occupancy:
    """Occupancy of one Kubernetes node from the pods listed on it: DaemonSet and static pods (they run on
    every node and come back by themselves) and pods that already ended are left out."""
    counts: dict[tuple[str, str, str], int] = {}
    for pod in pods:
        if pod.phase in _ENDED or (pod.owner_kind or "") in _NODE_BOUND_OWNERS:
            continue
        kind, name = _owner(pod)
        key = (pod.namespace, name, kind)
        counts[key] = counts.get(key, 0) + 1
    workloads = tuple(
        Workload(ns, name, kind, n) for (ns, name, kind), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return Occupancy(instance_id, node_name, "kubernetes", workloads=workloads)


def describe(observed: Observed[Occupancy] | None, how_to_check: str | None = None) -> str:
    """One line for the verdict table and the alerts: what runs there, or why we do not know."""
    if observed is None:
        return "not read" + (f": check with `{how_to_check}` before acting" if how_to_check else "")
    if observed.available and observed.value is not None:
        return observed.value.summary()
    reason = observed.failure.describe() if observed.failure else (observed.skipped or "not read")
    tail = f"; check with `{how_to_check}` before acting" if how_to_check else ""
    return f"not read ({reason}){tail}"
