"""The sweep's state stays small at 20,000 nodes: the plan goes to the table, the state carries numbers.

The bound is Step Functions' own (256 KiB per state payload; issue 15 asks for under 64 KiB). The sizes are
measured on what the real planner returns for a 20,000-node cluster, and on the items the inner Map builds
from it with the stack's ItemSelector.
"""

from __future__ import annotations

import json
from datetime import timedelta

from functions.monitor.logic.sweep import RotationSettings, SweepResult, plan_probe_batches
from functions.shared.sweep_items import PROBE_ITEM_SELECTOR, ProbeBatch
from hyperpod_debugger.domain.model import ClusterRef, Coverage
from hyperpod_debugger.domain.observations import Observed
from hyperpod_debugger.run_report import build_report
from hyperpod_sim.lambda_harness import map_items
from tests import builders as b

NODES = 20_000
ARN = b.cluster().arn


def test_a_20000_node_plan_passes_through_the_state_machine_as_numbers():
    nodes = [b.node(f"i-{n:017x}") for n in range(NODES)]
    obs = b.observation(nodes=Observed.ok(nodes))
    report = build_report(None, b.context().now, ClusterRef(name="c", arn=ARN, region="us-west-2"), [], Coverage())
    # a plan that probes every node in this sweep: the largest a plan can be
    settings = RotationSettings(period=timedelta(minutes=15), cap=NODES, batch_size=50)
    plan, items = plan_probe_batches(report, obs, {}, {}, b.context().now, settings=settings, sweep_id="s-1")
    assert len(plan.nodes) == NODES and len(items) == NODES // 50
    inline = len(json.dumps(items))
    at = "2026-12-01T00:00:05Z"
    batches = [{"batch": i, "at": at} for i in range(len(items))]
    result = SweepResult("processed", "c", ARN, sweep_id="s-1", plan=plan, batches=batches, concurrency=6)
    output = json.dumps(result.response())
    per_item = [json.dumps(item) for item in map_items(result.response(), "$.batches", PROBE_ITEM_SELECTOR)]
    assert len(output) < 64 * 1024, len(output)
    assert max(len(p) for p in per_item) < 512
    assert inline > 256 * 1024  # what the old inline plan would have carried: over Step Functions' limit
    # every Map item is a valid probe input that names its stored batch
    first = ProbeBatch.model_validate(json.loads(per_item[0]))
    assert (first.batch, first.sweep_id, first.cluster_arn, first.nodes) == (0, "s-1", ARN, None)
