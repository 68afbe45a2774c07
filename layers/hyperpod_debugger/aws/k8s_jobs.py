"""A PyTorchJob read through the EKS cluster's Kubernetes API, with GETs only: the job object (the Kubeflow
training operator's ``kubeflow.org/v1`` PyTorchJob), its pods (``training.kubeflow.org/job-name=<name>``) and
the namespace's events about them; turned into a :class:`~hyperpod_debugger.domain.jobs.TrainingJob` and the
orchestrator's own evidence about nodes (a pod the node ended: lost, evicted, shut down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.aws.errors import ApiCallError
from hyperpod_debugger.aws.k8s import _map, _time, open_reader, parse_event, parse_pod
from hyperpod_debugger.domain.jobs import JobEvidence, JobNode, TrainingJob
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.domain.observations import Observed

if TYPE_CHECKING:
    from collections.abc import Callable

    from hyperpod_debugger.domain.observations import EksCluster
    from hyperpod_debugger.domain.orchestrators import K8sEvent, K8sPod

#: the label the training operator puts on every pod of a job (v1.7 and later)
JOB_LABEL = "training.kubeflow.org/job-name"
#: a namespace or a job name: a DNS-1123 label, as the API server requires
NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
#: pod status reasons and event reasons that say the node ended the pod, not the workload
NODE_REASONS = frozenset(
    {"NodeLost", "Evicted", "Shutdown", "NodeShutdown", "Terminated", "NodeNotReady", "TaintManagerEviction"}
)
#: the job conditions, most final first (a job that failed may also have been running)
_STATES = ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created")
_INSTANCE = re.compile(r"\bi-[0-9a-f]{8,17}\b")


@dataclass(frozen=True, slots=True)
class PyTorchJobRead:
    """What the API server answered: the job object, its pods, and the events about them (which may be missing)."""

    job: dict[str, Any]
    pods: list[K8sPod]
    events: Observed[list[K8sEvent]]


def read_pytorchjob(eks: EksCluster, token: str, namespace: str, name: str) -> Observed[PyTorchJobRead]:
    """The job, its pods and their events, read-only; the job's absence (or the CRD's) is a ``not_found``."""
    try:
        reader = open_reader(eks, token)
    except ApiCallError as exc:
        return Observed.failed(exc.failure)
    try:
        job = reader.get(
            f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}",
            what=f"get PyTorchJob {namespace}/{name}",
        )
        pods = [
            parse_pod(item)
            for item in reader.get_list(
                f"/api/v1/namespaces/{namespace}/pods",
                what=f"list the pods of PyTorchJob {namespace}/{name}",
                params={"labelSelector": f"{JOB_LABEL}={name}"},
            )
        ]
    except ApiCallError as exc:
        return Observed.failed(exc.failure)
    else:
        try:
            items = reader.get_list(f"/api/v1/namespaces/{namespace}/events", what=f"list events in {namespace}")
            names = {p.name for p in pods} | {name}
            events: Observed[list[K8sEvent]] = Observed.ok(
                [e for e in map(parse_event, items) if e.object_name in names]
            )
        except ApiCallError as exc:
            events = Observed.failed(exc.failure)
        return Observed.ok(PyTorchJobRead(job, pods, events))
    finally:
        reader.close()


def instance_of_node(name: str, known: dict[str, str]) -> str | None:
    """The instance behind a Kubernetes node name: from the cluster's node list, else HyperPod's naming
    (``hyperpod-i-…``)."""
    if name in known:
        return known[name]
    found = _INSTANCE.search(name)
    return found.group(0) if found else None


def as_training_job(
    read: PyTorchJobRead, namespace: str, name: str, instance_of: Callable[[str], str | None]
) -> TrainingJob:
    """The job as its condition, its times and its pods tell it: one :class:`JobNode` per node, with what the
    pods there said (how each ended, restarts)."""
    status = _map(read.job, "status")
    state, reason, message, changed = _condition(status)
    notes: dict[str, list[str]] = {}
    failed: set[str] = set()
    exit_code = None
    for pod in sorted(read.pods, key=lambda p: p.name):
        if not pod.node_name:
            continue
        notes.setdefault(pod.node_name, []).extend(_pod_notes(pod))
        if pod.phase == "Failed":
            failed.add(pod.node_name)
            code = next((c.exit_code for c in pod.containers if c.exit_code not in (None, 0)), None)
            exit_code = exit_code or (str(code) if code is not None else None)
    end = _time(status.get("completionTime")) or (changed if state in ("Failed", "Succeeded") else None)
    return TrainingJob(
        orchestrator="EKS",
        job_id=f"{namespace}/{name}",
        name=name,
        owner=namespace,
        state=state,
        exit_code=exit_code,
        reason=message or reason,
        start=_time(status.get("startTime")),
        end=end,
        nodes=tuple(
            JobNode(node, instance_of(node), tuple(lines), node in failed) for node, lines in sorted(notes.items())
        ),
        source_lines=(f"condition {state}: {reason or ''} {message or ''}".strip(),),
    )


def node_evidence(read: PyTorchJobRead, instance_of: Callable[[str], str | None]) -> list[JobEvidence]:
    """What the orchestrator itself says a node did to the job's pods: lost, evicted, shut down."""
    out = []
    node_of_pod = {p.name: p.node_name for p in read.pods if p.node_name}
    for pod in read.pods:
        if pod.node_name and pod.reason in NODE_REASONS:
            ended = max((c.finished_at for c in pod.containers if c.finished_at), default=None)
            out.append(_evidence(pod.node_name, instance_of, f"pod {pod.name}: {pod.reason}", pod.message, ended))
    events = read.events.value if read.events.available and read.events.value is not None else []
    for event in events:
        node = node_of_pod.get(event.object_name)
        if node and event.reason in NODE_REASONS:
            what = f"event on pod {event.object_name}: {event.reason}"
            out.append(_evidence(node, instance_of, what, event.message, event.last_seen))
    return out


def _evidence(
    node: str, instance_of: Callable[[str], str | None], what: str, detail: str | None, at: datetime | None
) -> JobEvidence:
    return JobEvidence(
        source="orchestrator",
        check="k8s.job_pod",
        tag=Tag.FAIL,
        message=f"{what} on node {node}" + (f" ({detail})" if detail else ""),
        instance_id=instance_of(node),
        at=at,
        instant=True,
        section="F",
    )


def _condition(status: dict[str, Any]) -> tuple[str, str | None, str | None, datetime | None]:
    """(state, reason, message, when) of the job's most final true condition."""
    true = {
        str(c.get("type")): c
        for c in status.get("conditions") or ()
        if isinstance(c, dict) and str(c.get("status")) == "True"
    }
    for state in _STATES:
        if state in true:
            c = true[state]
            reason, message = c.get("reason"), c.get("message")
            when = _time(c.get("lastTransitionTime")) or _time(c.get("lastUpdateTime"))
            return (
                state,
                reason if isinstance(reason, str) else None,
                message if isinstance(message, str) else None,
                when,
            )
    return "Unknown", None, None, None


def _pod_notes(pod: K8sPod) -> list[str]:
    """How a pod of the job ended or is doing, in the API server's words."""
    notes = []
    if pod.reason:
        notes.append(f"pod {pod.name} {pod.phase}: {pod.reason}" + (f" ({pod.message})" if pod.message else ""))
    for c in pod.containers:
        if c.state == "terminated" and (c.exit_code or c.reason not in (None, "Completed")):
            notes.append(f"pod {pod.name} container {c.name} terminated: {c.reason or 'no reason'}, exit {c.exit_code}")
        if c.restart_count:
            last = f", last ended {c.last_terminated_reason}" if c.last_terminated_reason else ""
            notes.append(f"pod {pod.name} container {c.name} restarted {c.restart_count} time(s){last}")
    return notes
