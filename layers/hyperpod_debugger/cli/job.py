"""``hyperpod-debugger job --cluster C --job ID`` (Slurm) or ``--pytorchjob NAMESPACE/NAME`` (EKS): why did my
training job die?

Reads only: the cluster and its nodes (DescribeCluster, ListClusterNodes), the job on the Slurm controller
through one fixed read-only Session Manager command (``scontrol show job``, ``sacct``) or the PyTorchJob, its
pods and their events through the EKS cluster's Kubernetes API (GETs), a triage of the job's
nodes over its window (HyperPod's events, the health agent's log, the probes of the nodes still running),
and the monitor's findings history when ``--table`` names it. It changes nothing: the commands it prints are
for the operator to run.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import Literal

from hyperpod_debugger.aws.region import region_for
from hyperpod_debugger.cli.common import PROFILE_HELP, REGION_HELP
from hyperpod_debugger.domain import validate
from hyperpod_debugger.report.findings import TABLE_ENV

EXIT_INVALID = 2
EXIT_COULD_NOT_LOOK = 3
#: exit codes by what the diagnosis found: a culprit node or a cluster cause is a problem (1)
_EXIT_BY_KIND = {"node": 1, "cluster": 1, "own": 0, "unexplained": 0, "running": 0}


def add_parser(sub: argparse._SubParsersAction) -> None:
    job = sub.add_parser(
        "job",
        help="why did a training job die: its nodes and window against everything read about them",
        description="Start from a Slurm job id or a PyTorchJob: read the job (its nodes, start, end, state, "
        "exit code, reason; a PyTorchJob's pods, restarts, termination reasons and events), then what happened "
        "to those nodes in the job's window (the monitor's findings history, HyperPod's events, the health "
        "agent's detections, and probes of the nodes still running), and name the likely culprit node(s), a "
        "cause common to all of them, or say that nothing read explains it. Read-only.",
        epilog="example:\n  hyperpod-debugger job --cluster ml-slurm-train --job 4123\n"
        "  hyperpod-debugger job --cluster ml-eks-prod --pytorchjob training/llama-70b\n"
        "  hyperpod-debugger job --cluster ml-slurm-train --job 4123 --table HyperPodDebugger-Findings --json\n\n"
        "exit codes: 0 no node or cluster cause found; 1 a culprit node or a common cause; 2 invalid arguments; "
        "3 the cluster or the job could not be read",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    job.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    which = job.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", help="the Slurm job id (4123, or an array task 4123_7)")
    which.add_argument("--pytorchjob", help="the PyTorchJob, as NAMESPACE/NAME (EKS-orchestrated clusters)")
    job.add_argument("--table", default=os.environ.get(TABLE_ENV), help=f"findings table (default ${TABLE_ENV})")
    job.add_argument("--no-probe", action="store_true", help="do not probe the job's nodes that still run")
    job.add_argument("--region", help=REGION_HELP)
    job.add_argument("--profile", help=PROFILE_HELP)
    job.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def cmd_job(args: argparse.Namespace) -> int:
    try:
        cluster = validate.cluster(args.cluster)
        table = validate.table(args.table) if args.table else None
        region = region_for(cluster, args.region, profile=args.profile)
    except validate.InvalidArgument as exc:
        print(f"hyperpod-debugger job: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.job_diagnosis import JobRequest, diagnose_job, refuse
    from hyperpod_debugger.report.job import render_json, render_text

    kind: Literal["slurm", "pytorchjob"] = "slurm" if args.job else "pytorchjob"
    wanted = args.job or args.pytorchjob
    refused = refuse(wanted, kind)
    if refused:
        print(f"hyperpod-debugger job: error: {refused}", file=sys.stderr)
        return EXIT_INVALID
    clients = AwsClients.for_profile(region, args.profile)
    store = None
    if table is not None:
        from hyperpod_debugger.store.findings import FindingStore

        store = FindingStore(clients, table)
    progress = None if args.json or not sys.stderr.isatty() else (lambda line: print(line, file=sys.stderr))
    request = JobRequest(
        cluster=cluster,
        region=region,
        job=wanted,
        kind=kind,
        now=datetime.now(UTC),
        probe=not args.no_probe,
        progress=progress,
    )
    run = diagnose_job(request, clients, store)
    if run.diagnosis is None:
        print(f"hyperpod-debugger job: {run.error}", file=sys.stderr)
        return EXIT_COULD_NOT_LOOK
    sys.stdout.write(render_json(run.diagnosis) if args.json else render_text(run.diagnosis))
    return _EXIT_BY_KIND[run.diagnosis.kind]
