"""``hyperpod-debugger analyze``: evaluate a saved probe document (or a folder of raw outputs)
offline, with the same report as ``triage``."""

from __future__ import annotations

from datetime import datetime, timedelta

from hyperpod_debugger.domain.model import ClusterRef, Coverage, Finding, Tag, TriageReport
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.probe.base import Orchestrator, ProbeContext, Role
from hyperpod_debugger.probe.document import ProbeDocument
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.triage import build_report


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
