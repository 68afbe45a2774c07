"""A training job as its orchestrator reports it, and what was read about its nodes while it ran.

The job-centric diagnosis starts from what an ML engineer knows (a Slurm job id, a PyTorchJob's name) and goes
to the nodes: :class:`TrainingJob` is the job (its nodes, when it ran, how it ended), :class:`JobEvidence` one
thing read about a node or the cluster with the time it held, and :class:`JobDiagnosis` the answer
(:func:`hyperpod_debugger.remediation.culprits.diagnose`). Pure types: no AWS, no Slurm, no Kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from datetime import datetime

    from hyperpod_debugger.domain.model import Priority, SuggestedCommand, Tag

#: Slurm job states (``sacct``/``scontrol``) that end a job without success, and PyTorchJob's ``Failed``.
FAILED_STATES = frozenset(
    {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "DEADLINE", "BOOT_FAIL", "PREEMPTED"}
)
#: The states that say a node, not the job, ended it (Slurm's NODE_FAIL and BOOT_FAIL).
NODE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
#: States of a job that has not ended.
RUNNING_STATES = frozenset({"RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"})

Source = Literal["finding", "hyperpod_event", "health_agent", "probe_now", "orchestrator"]
DiagnosisKind = Literal["node", "cluster", "own", "unexplained", "running"]


@dataclass(frozen=True, slots=True)
class JobNode:
    """One node the job ran on: its name in the orchestrator, the instance behind it (None: not resolved,
    which the diagnosis says), and what the orchestrator said of the job there."""

    name: str
    instance_id: str | None = None
    #: the orchestrator's own words about the job on this node ("pod worker-3 terminated: OOMKilled, exit 137")
    notes: tuple[str, ...] = ()
    #: the orchestrator names this node as where the job failed (the pod that failed, the step's node)
    failed_here: bool = False


@dataclass(frozen=True, slots=True)
class TrainingJob:
    """A Slurm job or a PyTorchJob, as read: who, where, when, and how it ended."""

    orchestrator: Literal["Slurm", "EKS"]
    #: ``4123`` (Slurm) or ``namespace/name`` (PyTorchJob)
    job_id: str
    name: str
    state: str
    nodes: tuple[JobNode, ...]
    #: the Slurm user, or the Kubernetes namespace
    owner: str | None = None
    #: Slurm's ``exit:signal`` (``1:0``, ``0:9``), or the failing container's exit code
    exit_code: str | None = None
    #: Slurm's Reason, or the PyTorchJob's failure message
    reason: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    #: the line(s) the job was read from, kept as evidence
    source_lines: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        return self.end is not None and self.state.upper() not in RUNNING_STATES

    @property
    def failed(self) -> bool:
        return self.state.upper().split()[0] in FAILED_STATES if self.state.strip() else False

    @property
    def node_ended_it(self) -> bool:
        """The orchestrator itself says a node ended the job (Slurm NODE_FAIL / BOOT_FAIL)."""
        return self.state.upper().split()[0] in NODE_STATES if self.state.strip() else False

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(n.instance_id for n in self.nodes if n.instance_id)

    def node_named(self, instance_id: str) -> JobNode | None:
        return next((n for n in self.nodes if n.instance_id == instance_id), None)


@dataclass(frozen=True, slots=True)
class JobEvidence:
    """One thing read about a node (``instance_id``) or the whole cluster (None), and the time it held: from
    ``at`` (opened, happened) to ``until`` (resolved; None: still open, or a moment when ``at`` is all)."""

    source: Source
    check: str
    tag: Tag
    message: str
    instance_id: str | None = None
    at: datetime | None = None
    until: datetime | None = None
    #: a moment (an event, a detection), not a state that lasts until resolved
    instant: bool = False
    priority: Priority | None = None
    section: str | None = None
    #: the next step the finding's verdict names, when known
    next_step: str | None = None


@dataclass(frozen=True, slots=True)
class Placed:
    """Evidence inside the job's window, with the sentence that places it against the job's times."""

    evidence: JobEvidence
    when: str


@dataclass(frozen=True, slots=True)
class Culprit:
    """A node the evidence points at: ``likely`` (a failure in the window) or ``possible`` (a warning only)."""

    instance_id: str
    node_name: str
    strength: Literal["likely", "possible"]
    evidence: tuple[Placed, ...]
    next_step: str | None = None
    #: the commands of the node's next rung (its verdict's), ids filled in: read-only ones to investigate, or
    #: the drain and the node action with their blast radius and IaC note
    commands: tuple[SuggestedCommand, ...] = ()


@dataclass(frozen=True, slots=True)
class JobDiagnosis:
    """The answer for one job: the culprit nodes, or what all its nodes share, or that the job ended by itself,
    or that nothing read explains it; always with what was read and what could not be."""

    job: TrainingJob
    window_start: datetime
    window_end: datetime
    kind: DiagnosisKind
    conclusion: str
    culprits: tuple[Culprit, ...] = ()
    common: tuple[Placed, ...] = ()
    #: sources read, in words ("the findings history of 4 nodes, 2026-11-30 02:40 to 03:42", ...)
    read: tuple[str, ...] = ()
    #: what could not be read or placed (UNKNOWN findings, unresolved nodes, evidence without a time)
    unknown: tuple[str, ...] = ()
    #: the orchestrator's words about nodes none of the evidence names (kept, not weighed)
    notes: tuple[str, ...] = field(default_factory=tuple)
