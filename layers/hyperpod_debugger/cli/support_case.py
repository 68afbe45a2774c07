"""``hyperpod-debugger support-case --cluster C --node N`` (or ``--job ID``): a draft AWS Support case, printed
(Markdown or JSON).

Reads only: DescribeCluster, DescribeClusterNode, ListClusterEvents (the node's, over ``--days``) and the
monitor's findings table (the node's findings and their history); with ``--job``, what ``hyperpod-debugger job``
reads too (without probing), and the case is about the node the job's diagnosis names, with the job's context.
It never opens a case. What it cannot read (no table, an event API the cluster does not offer, a denied call)
is named in the draft.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Literal

from hyperpod_debugger.aws.region import region_for
from hyperpod_debugger.cli.common import PROFILE_HELP, REGION_HELP
from hyperpod_debugger.domain import validate
from hyperpod_debugger.report.case_facts import DEFAULT_DAYS, CaseError, build
from hyperpod_debugger.report.findings import TABLE_ENV

EXIT_INVALID = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    case = sub.add_parser(
        "support-case",
        help="print a draft AWS Support case for one node (never opens one)",
        description="Draft an AWS Support case for one node from the findings table and HyperPod's events: "
        "ids, instance type, findings with evidence and times, the reboots and replacements already tried, "
        "and the checklist of what Support asks for; with --job, for the node a Slurm job's diagnosis names, "
        "with the job's context. Read-only; it prints the draft and opens nothing.",
    )
    case.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    about = case.add_mutually_exclusive_group(required=True)
    about.add_argument("--node", help="the node's EC2 instance id")
    about.add_argument(
        "--job", help="a Slurm job id: the case is about the node its diagnosis names, with the job's context"
    )
    about.add_argument("--pytorchjob", help="a PyTorchJob as NAMESPACE/NAME (EKS), like --job")
    case.add_argument("--table", default=os.environ.get(TABLE_ENV), help=f"findings table (default ${TABLE_ENV})")
    case.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"how far back to read (default {DEFAULT_DAYS})")
    case.add_argument("--region", help=REGION_HELP)
    case.add_argument("--profile", help=PROFILE_HELP)
    case.add_argument("--json", action="store_true", help="print the draft as JSON")


def cmd_support_case(args: argparse.Namespace) -> int:
    try:
        cluster = validate.cluster(args.cluster)
        node = validate.instance_id(args.node) if args.node else None
        table = validate.table(args.table) if args.table else None
        if not 1 <= args.days <= 90:
            raise validate.InvalidArgument("--days must be between 1 and 90")
        region = region_for(cluster, args.region, profile=args.profile)
    except validate.InvalidArgument as exc:
        print(f"hyperpod-debugger support-case: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.job_diagnosis import refuse
    from hyperpod_debugger.report.case_facts import build_for_job
    from hyperpod_debugger.report.support_case import render_markdown

    kind: Literal["slurm", "pytorchjob"] = "pytorchjob" if args.pytorchjob else "slurm"
    job = args.job or args.pytorchjob
    refused = refuse(job, kind) if node is None else None
    if refused:
        print(f"hyperpod-debugger support-case: error: {refused}", file=sys.stderr)
        return EXIT_INVALID
    clients, now = AwsClients.for_profile(region, args.profile), datetime.now(UTC)
    try:
        if node is None:
            case = build_for_job(clients, cluster, job, table, now, args.days, kind=kind)
        else:
            case = build(clients, cluster, node, table, now, args.days)
    except CaseError as exc:
        print(f"hyperpod-debugger support-case: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(case.model_dump(mode="json"), indent=2))
    else:
        sys.stdout.write(render_markdown(case))
    return 0
