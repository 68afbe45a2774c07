"""``hyperpod-debugger findings``: read the monitor's findings table, and acknowledge a finding.

    findings list    --table T --cluster NAME|ARN [--all] [--json]   open (or every) finding of a cluster
    findings history --table T --node i-… | --cluster … [--limit N]  transitions, newest first
    findings sweeps  --table T --cluster NAME|ARN [--limit N]        what each recent sweep could check
    findings stats   --table T --cluster NAME|ARN [--days 30] [--until T] [--by node|group|type|check|cause]
                                                                      repeat offenders, failures per group and
                                                                      type, top checks and causes, time to
                                                                      resolve, what is still open
    findings ack     --table T --cluster NAME|ARN --fingerprint F --by NAME   (F: the fingerprint or a unique
                                                                      prefix of it, 4 characters or more)

Everything here reads or writes only the monitor's own DynamoDB table (the stack output
``FindingsTableName``; ``--table`` defaults to ``HYPERPOD_DEBUGGER_TABLE``). A cluster given by name is
turned into its ARN with one DescribeCluster call, because the table is keyed by ARN.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.region import region_for
from hyperpod_debugger.cli.common import PROFILE_HELP, REGION_HELP
from hyperpod_debugger.domain import validate
from hyperpod_debugger.domain.untrusted import visible
from hyperpod_debugger.lifecycle.findings import FINGERPRINT_CHARS
from hyperpod_debugger.report import stats as stats_report
from hyperpod_debugger.report.findings import (
    TABLE_ENV,
    finding_json,
    jsonable,
    render_findings,
    render_history,
    render_sweeps,
    sort_key,
)
from hyperpod_debugger.report.stats import BY, history_stats

EXIT_INVALID = 2
_FINGERPRINT = re.compile(rf"^[0-9a-f]{{4,{FINGERPRINT_CHARS}}}$")


def add_parser(sub: Any) -> None:
    findings = sub.add_parser("findings", help="read the monitor's findings table; acknowledge a finding")
    verbs = findings.add_subparsers(dest="verb", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--table", default=os.environ.get(TABLE_ENV), help=f"findings table (default ${TABLE_ENV})")
        parser.add_argument("--region", help=REGION_HELP)
        parser.add_argument("--profile", help=PROFILE_HELP)
        parser.add_argument("--json", action="store_true", help="print JSON")

    listing = verbs.add_parser("list", help="open findings of a cluster, most urgent first")
    common(listing)
    listing.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    listing.add_argument("--all", action="store_true", help="include RESOLVED findings still kept (history TTL)")

    history = verbs.add_parser("history", help="transitions of one node (or of a cluster's cluster-wide findings)")
    common(history)
    target = history.add_mutually_exclusive_group(required=True)
    target.add_argument("--node", help="EC2 instance id")
    target.add_argument("--cluster", help="cluster name or ARN: its cluster-wide findings")
    history.add_argument("--limit", type=int, default=50, help="newest N transitions (default 50)")

    sweeps = verbs.add_parser("sweeps", help="coverage of the latest sweeps of a cluster")
    common(sweeps)
    sweeps.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    sweeps.add_argument("--limit", type=int, default=10, help="newest N sweeps (default 10)")

    stats = verbs.add_parser(
        "stats", help="the history over a period: repeat offenders, failures per group and type, time to resolve"
    )
    common(stats)
    stats.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    stats.add_argument("--days", type=int, default=30, help="length of the period in days, 1-90 (default 30)")
    stats.add_argument("--until", help="end of the period, ISO 8601 (default: now), e.g. 2026-12-01")
    stats.add_argument("--by", choices=BY, dest="by_table", help="one table: node, group, type, check or cause")

    ack = verbs.add_parser("ack", help="acknowledge an OPEN finding (it stays open; escalation reopens it)")
    common(ack)
    ack.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    ack.add_argument(
        "--fingerprint", required=True, help="the finding's fingerprint (from `findings list`) or a unique prefix of it"
    )
    ack.add_argument("--by", required=True, help="who acknowledges (recorded with the finding)")


# --------------------------------------------------------------------------- the command


def _period(args: argparse.Namespace) -> tuple[datetime, datetime]:
    """``(since, until)`` of ``findings stats``; raises InvalidArgument for a period it cannot read."""
    if not 1 <= args.days <= 90:
        raise validate.InvalidArgument("--days must be between 1 and 90 (the history is kept for 90 days)")
    until = datetime.now(UTC)
    if args.until:
        try:
            until = datetime.fromisoformat(args.until.replace("Z", "+00:00"))
        except ValueError:
            raise validate.InvalidArgument(f"--until {args.until!r} is not an ISO 8601 date or time") from None
        until = until if until.tzinfo else until.replace(tzinfo=UTC)
    return until - timedelta(days=args.days), until


def _fail(message: str, code: int = EXIT_INVALID) -> int:
    print(f"hyperpod-debugger findings: error: {message}", file=sys.stderr)
    return code


@dataclass(frozen=True)
class _Request:
    """The arguments of a ``findings`` verb once checked: the cluster (name or ARN) and node given, the Region to
    call, the period of ``stats`` and the ``--limit`` of ``history`` and ``sweeps``."""

    cluster: str | None
    node: str | None
    region: str
    period: tuple[datetime, datetime] | None
    limit: int


def _checked(args: argparse.Namespace) -> _Request:
    """The request ``args`` make, before anything is called; raises InvalidArgument for one it cannot make."""
    if not args.table:
        raise validate.InvalidArgument(f"no findings table: pass --table or set {TABLE_ENV}")
    validate.table(args.table)
    cluster = validate.cluster(args.cluster) if getattr(args, "cluster", None) else None
    node = validate.instance_id(args.node) if getattr(args, "node", None) else None
    region = region_for(getattr(args, "cluster", None), args.region, profile=args.profile)
    if getattr(args, "fingerprint", None) is not None and not _FINGERPRINT.match(args.fingerprint):
        raise validate.InvalidArgument(
            f"--fingerprint {args.fingerprint!r} is not a fingerprint: 4 to {FINGERPRINT_CHARS} hex digits"
        )
    period = _period(args) if args.verb == "stats" else None
    if getattr(args, "by", None) is not None and not args.by.strip():
        raise validate.InvalidArgument("--by must name who acknowledges")
    limit = getattr(args, "limit", 1)
    if not 1 <= limit <= 1000:
        raise validate.InvalidArgument("--limit must be between 1 and 1000")
    return _Request(cluster, node, region, period, limit)


def _list(store: Any, arn: str, request: _Request, args: argparse.Namespace) -> int:
    found = list(store.open_findings(arn, include_resolved=args.all).values())
    if args.json:
        print(json.dumps([finding_json(f) for f in sorted(found, key=sort_key)], indent=2))
    else:
        sys.stdout.write(visible(render_findings(found, request.cluster or arn, args.table), newlines=True))
    return 0


def _history(store: Any, arn: str, request: _Request, args: argparse.Namespace) -> int:
    key = request.node or arn
    records = store.history(key, limit=request.limit)
    if args.json:
        print(json.dumps([jsonable(asdict(r)) for r in records], indent=2))
    else:
        sys.stdout.write(visible(render_history(records, key), newlines=True))
    return 0


def _stats(store: Any, arn: str, request: _Request, args: argparse.Namespace) -> int:
    assert request.period is not None
    result = history_stats(store, arn, request.cluster or arn, request.period)
    if args.json:
        print(json.dumps(stats_report.as_json(result), indent=2))
    else:
        sys.stdout.write(visible(stats_report.render(result, args.by_table), newlines=True))
    return 0


def _sweeps(store: Any, arn: str, request: _Request, args: argparse.Namespace) -> int:
    records = [jsonable(r) for r in store.sweeps(arn, limit=request.limit)]
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        sys.stdout.write(visible(render_sweeps(records, arn), newlines=True))
    return 0


def _ack(store: Any, arn: str, request: _Request, args: argparse.Namespace) -> int:
    """Acknowledge the OPEN finding whose fingerprint is, or starts with, ``--fingerprint`` (one finding only)."""
    fingerprint = args.fingerprint
    if len(fingerprint) < FINGERPRINT_CHARS:
        known = store.open_findings(arn, include_resolved=True)
        matches = sorted(fp for fp in known if fp.startswith(fingerprint))
        if len(matches) != 1:
            which = "no finding" if not matches else f"{len(matches)} findings ({', '.join(matches[:5])})"
            return _fail(f"{which} of {request.cluster} start with {fingerprint}: give more of the fingerprint", 1)
        fingerprint = matches[0]
    done = store.acknowledge(arn, fingerprint, args.by.strip(), datetime.now(UTC))
    if done is None:
        current = store.get(arn, fingerprint)
        if current is None:
            return _fail(f"no finding {fingerprint} for {request.cluster} in {args.table}", 1)
        return _fail(f"finding {fingerprint} is {current.state.value}, not OPEN: nothing to acknowledge", 1)
    by = args.by.strip()
    if args.json:
        state = done.finding.state.value
        print(json.dumps({"fingerprint": fingerprint, "state": state, "acknowledged_by": by}))
    else:
        print(f"Acknowledged {fingerprint} ({visible(done.finding.message)}) by {by}")
    return 0


#: what each verb does with the store, the cluster's ARN, the checked request and the arguments
_VERBS: dict[str, Callable[[Any, str, _Request, argparse.Namespace], int]] = {
    "list": _list,
    "history": _history,
    "stats": _stats,
    "sweeps": _sweeps,
    "ack": _ack,
}


def cmd_findings(args: argparse.Namespace) -> int:
    from hyperpod_debugger.aws import sagemaker
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
    from hyperpod_debugger.store.findings import FindingStore

    try:
        request = _checked(args)
    except validate.InvalidArgument as exc:
        return _fail(str(exc))

    clients = AwsClients.for_profile(request.region, args.profile)
    store = FindingStore(clients, args.table)
    cluster = request.cluster
    try:
        arn = cluster
        if cluster is not None and not cluster.startswith("arn:"):
            arn = sagemaker.describe_cluster(clients, cluster).arn
        return _VERBS[args.verb](store, str(arn), request, args)
    except sagemaker.ClusterNotFound as exc:
        return _fail(f"no HyperPod cluster {cluster!r} in {request.region}: {exc}", 1)
    except CredentialsError as exc:
        return _fail(f"AWS credentials are missing, expired or rejected: {exc}", 1)
    except ApiCallError as exc:
        return _fail(f"{args.table}: {exc.failure.describe()}", 1)
