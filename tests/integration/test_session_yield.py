"""A probe batch yields StartSession to people (issue 27, item 8), through the real handlers: Session Manager
(the fake) throttles the batch's first StartSession, the clients count the throttled answers (botocore's own
retries included), the batch halves its pace for the rest of its round, the nodes it could not start before
the round closed are left unprobed and unjudged, and the next sweep's plan leads with them.

The pace runs on a simulated clock (``pace.SYSTEM_CLOCK`` replaced): what is asserted is which sessions
started and which were left, never how long anything took."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from functions.monitor import handlers
from functions.shared import env as env_module
from functions.shared.events import PROBE_ITEM_SELECTOR
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.ssm_types import session_target
from hyperpod_debugger.lifecycle.findings import iso
from hyperpod_debugger.probe import pace as pacing
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import seed
from hyperpod_sim.fake_ssm import FakeSsm, Faults
from hyperpod_sim.lambda_harness import lambda_context, map_items
from hyperpod_sim.nodes import add_probe_node
from hyperpod_sim.server import simulated_aws

REGION = "us-west-2"
TABLE = "hyperpod-findings-yield"
NODES = 8
#: the batch's rate and its round: 20 sessions a second, one at a time, closing 0.45 s in (9 turns at 20/s,
#: 5 at 10/s)
RATE, CLOSE_S = 20.0, 0.45


class SimClock:
    """The pace's clock: seconds pass only when the pace waits; wall time starts at ``start``."""

    def __init__(self, start: datetime) -> None:
        self.start, self.now = start, 0.0

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)

    def clock(self) -> pacing.PaceClock:
        return pacing.PaceClock(
            monotonic=lambda: self.now, sleep=self.sleep, wall=lambda: self.start + timedelta(seconds=self.now)
        )


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with simulated_aws() as endpoint, FakeSsm(start_session_rate=None) as ssm:
        clients = AwsClients(REGION, max_attempts=1)
        cluster = seed.create_cluster(
            clients.client("sagemaker"),
            REGION,
            "yield-cluster",
            [seed.GroupSpec("workers", "ml.p5.48xlarge", NODES)],
            None,
            orchestrator=None,
            node_recovery="Automatic",
            provisioning_mode="Continuous",
            launch_time=now - timedelta(days=1),
        )
        for iid in cluster.nodes["workers"]:
            add_probe_node(
                ssm,
                cluster_arn=cluster.arn,
                group="workers",
                instance_id=iid,
                instance_type="ml.p5.48xlarge",
                hostname=seed.node_hostname(cluster, iid),
                now=now,
                orchestrator=None,
            )
        yield cluster, ssm, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    cluster, ssm, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    clients = AwsClients(REGION, max_attempts=1)
    ddb = clients.client("dynamodb")
    if TABLE in ddb.list_tables()["TableNames"]:
        ddb.delete_table(TableName=TABLE)
    create_table(clients, TABLE)
    for name, value in {
        "AWS_REGION": REGION,
        "FINDINGS_TABLE": TABLE,
        "PROBE_ENABLED": "true",
        "PROBE_TIMEOUT_S": "10",
        "PROBE_BATCH_SIZE": str(NODES),
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    env_module.clear_env_cache()
    yield cluster, ssm, FindingStore(clients, TABLE)
    env_module.clear_env_cache()
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def _context():
    return lambda_context("hyperpod-sweep", timeout_s=600)


def _plan(cluster, sweep_id: str) -> dict:
    result = handlers.sweep_cluster(
        {"cluster_name": cluster.name, "cluster_arn": cluster.arn, "sweep_id": sweep_id}, _context()
    )
    assert result["status"] == "processed", result
    return result


def _run_batch(cluster, ssm, store: FindingStore, monkeypatch, *, throttled: int) -> tuple[dict, list[str], list[str]]:
    """The first sweep: the real cluster step plans every node in one batch; the batch is given a round of
    CLOSE_S simulated seconds at RATE, one session at a time (so the pace sees each answer before the next
    call), and probed by the real probe-batch handler while Session Manager throttles its first
    ``throttled`` StartSession requests. Returns the handler's response, the batch's nodes in order and the
    nodes whose session started, in the order they started."""
    plan = _plan(cluster, "sweep-1")
    [item] = map_items(plan, "$.batches", PROBE_ITEM_SELECTOR)
    stored = store.plan_batch(cluster.arn, "sweep-1", item["batch"])
    assert stored is not None
    nodes = [n["instance_id"] for n in stored["nodes"]]
    assert sorted(nodes) == sorted(cluster.nodes["workers"])
    began = datetime.now(UTC).replace(microsecond=0)
    store.put_plan(
        cluster.arn,
        "sweep-1",
        [
            {
                **stored,
                "rate": RATE,
                "slots": 1,
                "start_at": iso(began),
                "stop_at": iso(began + timedelta(seconds=CLOSE_S)),
            }
        ],
        began,
    )
    monkeypatch.setattr(pacing, "SYSTEM_CLOCK", SimClock(began).clock())
    first = session_target(cluster.arn, "workers", nodes[0])
    ssm.set_faults(Faults(throttle_first_n=throttled), target=first)
    before = len(ssm.start_calls)
    response = handlers.probe_batch(item, _context())
    calls = ssm.start_calls[before:]
    ssm.set_faults(None, target=first)
    assert response["status"] == "processed", response
    assert sum(1 for c in calls if c.error == "ThrottlingException") == throttled
    started = [c.target.rsplit("-i-", 1)[1] for c in calls if c.error is None]
    return response, nodes, ["i-" + s for s in started]


def test_an_unthrottled_batch_probes_every_node_its_round_allows(world, monkeypatch):
    cluster, ssm, store = world
    response, nodes, started = _run_batch(cluster, ssm, store, monkeypatch, throttled=0)
    assert started == nodes and response["probed"] == NODES and response["not_started"] == 0
    assert set(store.last_probed(cluster.arn)) == set(nodes)


def test_a_throttled_batch_slows_down_leaves_the_rest_and_the_next_sweep_leads_with_them(world, monkeypatch, caplog):
    cluster, ssm, store = world

    response, nodes, started = _run_batch(cluster, ssm, store, monkeypatch, throttled=2)

    # the first StartSession got through on botocore's third attempt; the pace halved to 10/s: sessions at
    # 0, .1, .2, .3 and .4 s of a round that closes at .45; the three after them were never asked for
    assert started == nodes[:5]
    assert response["planned"] == NODES and response["probed"] == 5 and response["not_started"] == 3
    left = nodes[5:]
    assert set(store.last_probed(cluster.arn)) == set(nodes[:5])
    # nothing is concluded about the nodes left: no finding of any kind, resolved or open, names them
    stored = store.open_findings(cluster.arn, include_resolved=True)
    assert not any(f.instance_id in left for f in stored.values())
    # the batch says it yielded, and what it left for the next sweep
    [said] = [r for r in caplog.records if r.getMessage() == "probe batch yielded StartSession to people"]
    assert said.levelname == "WARNING"
    assert (said.throttles, said.rate, said.lowest_rate) == (2, RATE, RATE / 2)
    assert said.not_started == left

    # the next sweep, allowed three nodes, plans exactly the three left (never probed: due first)
    monkeypatch.setenv("PROBE_MAX_NODES", "3")
    env_module.clear_env_cache()
    monkeypatch.setattr(pacing, "SYSTEM_CLOCK", pacing.PaceClock())
    following = _plan(cluster, "sweep-2")
    planned = [
        n["instance_id"]
        for b in map_items(following, "$.batches", PROBE_ITEM_SELECTOR)
        for n in (store.plan_batch(cluster.arn, "sweep-2", b["batch"]) or {}).get("nodes", [])
    ]
    assert sorted(planned) == sorted(left)
