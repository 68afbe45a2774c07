"""``hyperpod-debugger support-case --cluster C --node N``: a draft AWS Support case, printed (Markdown or JSON).

Reads only: DescribeCluster, DescribeClusterNode, ListClusterEvents (the node's, over ``--days``) and the
monitor's findings table (the node's findings and their history). It never opens a case. What it cannot
read (no table, an event API the cluster does not offer, a denied call) is named in the draft.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.cli.common import PROFILE_HELP, REGION_HELP, region_for
from hyperpod_debugger.cli.findings import TABLE_ENV, check_table
from hyperpod_debugger.domain import validate

if TYPE_CHECKING:  # the SDK and the draft are imported when the command runs, not with the CLI
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.store import HistoryRecord
    from hyperpod_debugger.domain.observations import ClusterEvent
    from hyperpod_debugger.lifecycle.findings import StoredFinding
    from hyperpod_debugger.report.support_case import CaseFacts, SupportCase

EXIT_INVALID = 2
DEFAULT_DAYS = 14


class CaseError(Exception):
    """The draft cannot be made at all: ``kind`` as the triage report's errors name them."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def add_parser(sub: argparse._SubParsersAction) -> None:
    case = sub.add_parser(
        "support-case",
        help="print a draft AWS Support case for one node (never opens one)",
        description="Draft an AWS Support case for one node from the findings table and HyperPod's events: "
        "ids, instance type, findings with evidence and times, the reboots and replacements already tried, "
        "and the checklist of what Support asks for. Read-only; it prints the draft and opens nothing.",
    )
    case.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    case.add_argument("--node", required=True, help="the node's EC2 instance id")
    case.add_argument("--table", default=os.environ.get(TABLE_ENV), help=f"findings table (default ${TABLE_ENV})")
    case.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"how far back to read (default {DEFAULT_DAYS})")
    case.add_argument("--region", help=REGION_HELP)
    case.add_argument("--profile", help=PROFILE_HELP)
    case.add_argument("--json", action="store_true", help="print the draft as JSON")


def gather(
    clients: AwsClients, cluster: str, node: str, table: str | None, now: datetime, days: int = DEFAULT_DAYS
) -> CaseFacts:
    """Everything the draft says, read-only. Raises :class:`CaseError` only when the cluster itself cannot
    be read; anything else missing becomes a gap the draft names."""
    from hyperpod_debugger.aws import sagemaker
    from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
    from hyperpod_debugger.aws.store import FindingStore
    from hyperpod_debugger.report.support_case import CaseFacts

    gaps: list[str] = []
    try:
        described = sagemaker.describe_cluster(clients, cluster)
    except sagemaker.ClusterNotFound as exc:
        raise CaseError("cluster_not_found", f"no HyperPod cluster {cluster!r} in {clients.region}: {exc}") from exc
    except CredentialsError as exc:
        raise CaseError("credentials", f"AWS credentials are missing, expired or rejected: {exc}") from exc
    except ApiCallError as exc:
        raise CaseError("endpoint", f"DescribeCluster failed: {exc.failure.describe()}") from exc
    detail = None
    try:
        detail = sagemaker.describe_cluster_node(clients, described, node)
    except ApiCallError as exc:
        gaps.append(f"the node's details (DescribeClusterNode: {exc.failure.describe()})")
    events: tuple[ClusterEvent, ...] = ()
    if described.provisioning_mode != "Continuous":
        gaps.append(
            "HyperPod's events for the node: the cluster's NodeProvisioningMode is not Continuous, so "
            "ListClusterEvents does not serve it; copy the node's reboots and replacements from the console"
        )
    else:
        try:
            events = tuple(sagemaker.list_cluster_events(clients, described, now - timedelta(days=days), now, node))
        except ApiCallError as exc:
            gaps.append(f"HyperPod's events for the node (ListClusterEvents: {exc.failure.describe()})")
    findings: tuple[StoredFinding, ...] = ()
    history: tuple[HistoryRecord, ...] = ()
    if not table:
        gaps.append(f"the monitor's findings and their history: no findings table (pass --table or set {TABLE_ENV})")
    else:
        store = FindingStore(clients, table)
        try:
            findings = tuple(store.open_findings(described.arn, include_resolved=True).values())
            history = tuple(store.history(node, limit=100))
        except ApiCallError as exc:
            gaps.append(f"the monitor's findings ({table}: {exc.failure.describe()})")
    gaps.append('the node-scoped triage report (run the command under "What Support asks for")')
    gaps.append("the S3 location of on-node bundles (nvidia-bug-report, DCGM logs), if you collected them (§ L)")
    return CaseFacts(
        cluster=described,
        node_id=node,
        generated_at=now,
        window_days=days,
        node=detail,
        findings=findings,
        history=history,
        events=events,
        gaps=tuple(gaps),
    )


def build(
    clients: AwsClients, cluster: str, node: str, table: str | None, now: datetime, days: int = DEFAULT_DAYS
) -> SupportCase:
    from hyperpod_debugger.report.support_case import draft

    return draft(gather(clients, cluster, node, table, now, days))


def cmd_support_case(args: argparse.Namespace) -> int:
    try:
        cluster = validate.cluster(args.cluster)
        node = validate.instance_id(args.node)
        table = check_table(args.table) if args.table else None
        if not 1 <= args.days <= 90:
            raise validate.InvalidArgument("--days must be between 1 and 90")
        region = region_for(cluster, args.region, profile=args.profile)
    except validate.InvalidArgument as exc:
        print(f"hyperpod-debugger support-case: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.report.support_case import render_markdown

    try:
        case = build(AwsClients.for_profile(region, args.profile), cluster, node, table, datetime.now(UTC), args.days)
    except CaseError as exc:
        print(f"hyperpod-debugger support-case: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(case.model_dump(mode="json"), indent=2))
    else:
        sys.stdout.write(render_markdown(case))
    return 0
