"""``hyperpod-debugger demo``: triage two simulated clusters, no AWS account, no network."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.model import TriageReport
from hyperpod_debugger.render import render_text
from hyperpod_debugger.sim.scenarios import REGION, seed_demo
from hyperpod_debugger.sim.server import simulated_aws
from hyperpod_debugger.triage import TriageRequest, run_triage


def demo_reports(now: datetime | None = None) -> list[TriageReport]:
    now = now or datetime.now(UTC)
    with simulated_aws():
        demo = seed_demo(AwsClients(REGION, max_attempts=2), now)
        return [
            run_triage(TriageRequest(cluster=seeded.name, region=REGION, now=now)) for seeded in (demo.eks, demo.slurm)
        ]


def run_demo(json_output: bool = False, colour: bool = False) -> int:
    reports = demo_reports()
    if json_output:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in reports], indent=2) + "\n")
        return 0
    for index, report in enumerate(reports):
        if index:
            sys.stdout.write("\n" + "=" * 100 + "\n\n")
        sys.stdout.write(render_text(report, colour=colour))
    sys.stdout.write(
        "\nThis was a simulated account (moto, in-process). Run the same triage against a real cluster with:\n"
        "  hyperpod-debugger triage --cluster <name-or-arn> --region <region>\n"
    )
    return 0
