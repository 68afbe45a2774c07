"""What every probe evaluator shares: the context, item access with skip/unknown semantics, and
a finding builder that fills the node's identity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from hyperpod_debugger.domain.checking import make_finding
from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Unobservable

if TYPE_CHECKING:
    from hyperpod_debugger.domain.model import Finding, Tag
    from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

Orchestrator = Literal["EKS", "Slurm"]
Role = Literal["compute", "controller"]


@dataclass(frozen=True, slots=True)
class ProbeContext:
    """What an evaluator knows besides the document. The time is passed in, never read."""

    instance_type: str  # "ml.p5.48xlarge" or "p5.48xlarge"
    now: datetime
    orchestrator: Orchestrator | None = None
    role: Role = "compute"
    #: kernel-log events older than this (relative to ``now``) are history, not alerts
    window: timedelta = timedelta(hours=24)
    instance_id: str | None = None
    instance_group: str | None = None
    cluster_arn: str | None = None
    cluster_name: str | None = None


def item(doc: ProbeDocument, item_id: str, *, what: str) -> ProbeItem:
    """The item's output, or the reason the check cannot use it.

    Absent or missing tool → :class:`NotApplicable` (skipped, with the reason); timed out →
    :class:`Unobservable` (unknown: we could not look, which is not a verdict).
    """
    found = doc.item(item_id)
    if found is None:
        raise NotApplicable(f"the probe document has no {item_id!r} item ({what})")
    if found.missing_tool:
        raise NotApplicable(f"{what}: the tool is not installed on this node ({item_id} exit {found.exit_code})")
    if found.timed_out:
        raise Unobservable(ApiFailure(f"probe:{item_id}", "timeout", f"{item_id} timed out on the node"))
    return found


def finding(ctx: ProbeContext, check: str, tag: Tag, message: str, **fields: Any) -> Finding:
    """A finding about the probed node, its identity taken from the context."""
    identity = {
        "cluster_arn": ctx.cluster_arn,
        "cluster_name": ctx.cluster_name,
        "instance_id": fields.pop("instance_id", ctx.instance_id),
        "instance_group": fields.pop("instance_group", ctx.instance_group),
    }
    return make_finding(identity, check, tag, message, **fields)
