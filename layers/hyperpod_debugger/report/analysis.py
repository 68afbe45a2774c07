"""A saved probe document (or a folder of raw outputs) evaluated offline, with the same report as ``triage``:
``hyperpod-debugger analyze`` and the agent interface's ``analyze_probe_output``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.probe.base import Orchestrator, ProbeContext, Role
from hyperpod_debugger.probe.delivery import item_ids
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.run_report import build_report

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument


def analyze(
    doc: ProbeDocument,
    *,
    instance_type: str,
    now: datetime,
    orchestrator: Orchestrator | None = None,
    role: Role = "compute",
    window: timedelta = timedelta(hours=24),
    instance_id: str | None = None,
    instance_group: str | None = None,
    cluster_name: str | None = None,
    region: str | None = None,
    notes: tuple[str, ...] = (),
) -> TriageReport:
    ctx = ProbeContext(
        instance_type=instance_type,
        now=now,
        orchestrator=orchestrator,
        role=role,
        window=window,
        instance_id=instance_id,
        instance_group=instance_group,
        cluster_name=cluster_name,
    )
    findings, coverage = evaluate(doc, ctx)
    findings.extend(_what_was_read(doc, coverage, notes))
    target = ladder.Target(None, cluster_name, region, orchestrator, None)
    nodes = {}
    if instance_id:
        nodes[instance_id] = ClusterNode(
            instance_id, instance_group or "", instance_type, "Running", "", doc.boot_time, hostname=doc.hostname
        )
    findings = ladder.apply(findings, target, nodes)
    if not instance_id and any(f.node_action in ("reboot", "replace") for f in findings):
        findings.append(
            Finding(
                tag=Tag.INFO,
                check="probe.analysis",
                message="The evidence calls for a node action: give --instance-id, --cluster and --region to get "
                "the commands with the ids filled in",
            )
        )
    ref = ClusterRef(
        name=cluster_name or f"offline analysis of {doc.hostname}",
        region=region or "unknown",
        orchestrator=orchestrator,
        node_count=1,
    )
    return build_report(instance_id, now, ref, findings, Coverage(checks=coverage))


def _what_was_read(doc: ProbeDocument, coverage: list[CheckCoverage], notes: tuple[str, ...]) -> list[Finding]:
    """No PASS without having read: say when nothing could be judged, which files were not probe items,
    and what the evaluation time was taken from."""
    out = [Finding(tag=Tag.INFO, check="probe.analysis", message=note) for note in notes]
    if doc.ignored:
        shown = ", ".join(doc.ignored[:10]) + (f" and {len(doc.ignored) - 10} more" if len(doc.ignored) > 10 else "")
        out.append(
            Finding(
                tag=Tag.INFO,
                check="probe.analysis",
                message=f"Not read: {shown} (not named <item_id>.txt for a probe item)",
            )
        )
    if not any(c.status is CheckStatus.RAN for c in coverage):
        found = ", ".join(doc.ignored[:10]) or "no files"
        out.append(
            Finding(
                tag=Tag.UNKNOWN,
                priority=Priority.P1,
                check="probe.analysis",
                section="L",
                message=f"Nothing could be judged: no check had an output it could read (found: {found})",
                evidence=[
                    "each file must be named for the probe item whose output it holds, e.g. kernel_log.txt for "
                    "`journalctl -k` or dmesg text, nvidia_smi_q.txt for `nvidia-smi -q`",
                    f"item ids: {', '.join(item_ids())}",
                ],
            )
        )
    return out
