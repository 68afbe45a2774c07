"""All on-node evaluators, in report order, and the runner over one probe document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.domain.checking import execute
from hyperpod_debugger.probe import efa, fabric, gpu, kernel, neuron, resources, services, timesync

if TYPE_CHECKING:
    from hyperpod_debugger.domain.checking import Check
    from hyperpod_debugger.domain.model import CheckCoverage, Finding
    from hyperpod_debugger.probe.base import ProbeContext
    from hyperpod_debugger.probe.document import ProbeDocument

PROBE_CHECKS: tuple[Check, ...] = (
    *gpu.CHECKS,
    *fabric.CHECKS,
    *kernel.CHECKS,
    *neuron.CHECKS,
    *efa.CHECKS,
    *resources.CHECKS,
    *timesync.CHECKS,
    *services.CHECKS,
)


def evaluate(doc: ProbeDocument, ctx: ProbeContext) -> tuple[list[Finding], list[CheckCoverage]]:
    """Every evaluator over one document; a missing tool skips a check, a timeout makes it unknown."""
    identity = {
        "cluster_arn": ctx.cluster_arn,
        "cluster_name": ctx.cluster_name,
        "instance_id": ctx.instance_id,
        "instance_group": ctx.instance_group,
    }
    try:
        findings, coverage, _ = execute(PROBE_CHECKS, doc, ctx, identity)
    finally:
        # The parse results were shared by this run's checks only. Some point back at the document (the
        # GPU set reads -q through it), a cycle only the garbage collector would free: dropping them
        # now frees the document's parses as soon as the caller lets go of it.
        doc.forget_parsed()
    return findings, coverage
