"""The sweep's two steps through the real handlers: the cluster step plans probe batches, each batch is
probed through the fake Session Manager agent, and the store keeps what only a probe can tell."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.monitor import handlers
from functions.shared import env as env_module
from functions.shared.events import PROBE_ITEM_SELECTOR
from hyperpod_debugger.aws.clients import AwsClients
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
from hyperpod_debugger.lifecycle.findings import State, plan_sweep
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import scenarios
from hyperpod_sim.fake_k8s import FakeKubernetes
from hyperpod_sim.fake_ssm import FakeSsm
from hyperpod_sim.lambda_harness import lambda_context as new_context
from hyperpod_sim.lambda_harness import map_items as harness_map_items
from hyperpod_sim.server import simulated_aws

TABLE = "hyperpod-findings-rotation"


def sweep_context():
    return new_context("hyperpod-sweep", timeout_s=600)


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with (
        simulated_aws() as endpoint,
        FakeSsm(start_session_rate=50.0) as ssm,
        FakeKubernetes(cluster_name=f"{scenarios.EKS_CLUSTER}-eks") as kube,
    ):
        clients = AwsClients(scenarios.REGION, max_attempts=1)
        demo = scenarios.seed_demo(clients, now)
        scenarios.register_probe_nodes(ssm, demo, now)
        scenarios.register_kubernetes(kube, demo)
        yield demo, ssm, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    demo, ssm, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    clients = AwsClients(scenarios.REGION, max_attempts=1)
    ddb = clients.client("dynamodb")
    if TABLE in ddb.list_tables()["TableNames"]:
        ddb.delete_table(TableName=TABLE)
    create_table(clients, TABLE)
    for name, value in {
        "AWS_REGION": scenarios.REGION,
        "FINDINGS_TABLE": TABLE,
        "PROBE_ENABLED": "true",
        "START_SESSION_RATE": "50",
        "PROBE_TIMEOUT_S": "10",
        "PROBE_BATCH_SIZE": "2",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    env_module.clear_env_cache()
    yield demo, FindingStore(clients, TABLE)
    env_module.clear_env_cache()
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def sweep_input(cluster) -> dict:
    return {"cluster_name": cluster.name, "cluster_arn": cluster.arn, "sweep_id": "sweep-1"}


def map_items(cluster_output: dict) -> list[dict]:
    """The inner Map's items, as the state machine builds them from the cluster step's output."""
    return harness_map_items(cluster_output, "$.batches", PROBE_ITEM_SELECTOR)


def descriptors(store: FindingStore, item: dict) -> list[dict]:
    """The node descriptors the cluster step stored for one Map item."""
    stored = store.plan_batch(item["cluster_arn"], item["sweep_id"], item["batch"])
    assert stored is not None, item
    return stored["nodes"]


def batch_nodes(store: FindingStore, item: dict) -> list[str]:
    return [n["instance_id"] for n in descriptors(store, item)]


def test_cluster_step_plans_batches_of_running_nodes_without_probing_them(world):
    demo, store = world
    cluster = demo.eks

    result = handlers.sweep_cluster(sweep_input(cluster), sweep_context())

    assert result["status"] == "processed" and result["cluster_arn"] == cluster.arn
    # the state carries batch numbers only; the nodes are in the table, under the sweep's id
    assert [b["batch"] for b in result["batches"]] == list(range(len(result["batches"])))
    assert result["sweep_id"] == "sweep-1" and all(b["at"].endswith("Z") for b in result["batches"])
    assert result["concurrency"] >= 1
    batches = map_items(result)
    assert batches and all(1 <= len(descriptors(store, b)) <= 2 for b in batches)  # PROBE_BATCH_SIZE
    assert all(b["cluster_arn"] == cluster.arn and b["sweep_id"] == "sweep-1" for b in batches)
    planned = [iid for b in batches for iid in batch_nodes(store, b)]
    assert len(planned) == len(set(planned)) == result["rotation"]["planned"]
    running = {n["instance_id"] for b in batches for n in descriptors(store, b) if n["status"] == "Running"}
    assert running == set(planned)  # only Running nodes are planned
    # the cluster step itself probed nothing: no on-node finding and no probe record yet
    assert not any(f.check.startswith("probe.") for f in store.open_findings(cluster.arn).values())
    assert store.last_probed(cluster.arn) == {}


def test_probe_batches_store_on_node_findings_and_the_rotation_clock(world):
    demo, store = world
    cluster = demo.eks
    plan = handlers.sweep_cluster(sweep_input(cluster), sweep_context())

    results = [handlers.probe_batch(b, sweep_context()) for b in map_items(plan)]

    assert all(r["status"] == "processed" for r in results)
    stored = store.open_findings(cluster.arn)
    faulty = scenarios.PROBE_FAULTS
    xid_node = cluster.nodes["gpu-workers"][1]  # xid79 twice (see scenarios.PROBE_FAULTS)
    assert ("xid79_twice", "gpu_missing") == faulty[(scenarios.EKS_CLUSTER, "gpu-workers", 1)]
    assert any(f.check == "probe.xid" and f.instance_id == xid_node for f in stored.values())
    probed = store.last_probed(cluster.arn)
    assert xid_node in probed
    # the system node has no agent behind the fake Session Manager: unknown, never "probed"
    system = cluster.nodes["system"][0]
    planned = {iid for b in map_items(plan) for iid in batch_nodes(store, b)}
    assert system in planned and system not in probed
    assert any(f.check == "probe.session" and f.instance_id == system for f in stored.values())
    assert sum(r["probed"] for r in results) == len(probed)


def test_a_batch_resolves_nothing_on_nodes_it_did_not_probe(world):
    demo, store = world
    cluster = demo.eks
    plan = handlers.sweep_cluster(sweep_input(cluster), sweep_context())
    for batch in map_items(plan):
        handlers.probe_batch(batch, sweep_context())
    xid_node = cluster.nodes["gpu-workers"][1]
    other = cluster.nodes["gpu-workers"][0]
    before = {fp for fp, f in store.open_findings(cluster.arn).items() if f.instance_id == xid_node}
    assert before

    # WHEN a later batch probes only another node
    [descriptor] = [n for b in map_items(plan) for n in descriptors(store, b) if n["instance_id"] == other]
    result = handlers.probe_batch(
        {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": "sweep-2", "nodes": [descriptor]},
        sweep_context(),
    )

    # THEN the first node's on-node findings stay open
    assert result["status"] == "processed" and result["probed"] == 1
    assert not result["transitions"].get("RESOLVED")
    after = store.open_findings(cluster.arn)
    assert before <= set(after) and all(after[fp].state is State.OPEN for fp in before)


def test_the_next_sweep_plans_the_nodes_the_last_one_did_not_reach(world, monkeypatch):
    demo, store = world
    cluster = demo.slurm  # two Running nodes: a g5 worker and the c5 controller
    monkeypatch.setenv("PROBE_MAX_NODES", "1")  # one node per sweep (suspects get at most half: none)
    monkeypatch.setenv("SWEEP_INTERVAL_S", "60")
    monkeypatch.setenv("PROBE_PERIOD_S", "3600")
    env_module.clear_env_cache()

    rounds: list[list[str]] = []
    for _ in range(2):
        plan = handlers.sweep_cluster(sweep_input(cluster), sweep_context())
        assert plan["status"] == "processed"
        for batch in map_items(plan):
            handlers.probe_batch(batch, sweep_context())
        rounds.append([iid for b in map_items(plan) for iid in batch_nodes(store, b)])

    worker = cluster.nodes["worker-group-1"][0]
    controller = cluster.nodes["controller-machine"][0]
    # the accelerator node first, then the one the first sweep could not reach; both are now on the clock
    assert rounds == [[worker], [controller]]
    assert set(store.last_probed(cluster.arn)) == {worker, controller}


def test_the_cluster_step_resolves_findings_of_nodes_that_left_the_cluster(world):
    demo, store = world
    cluster = demo.eks
    gone = "i-0badc0ffee0000001"  # replaced by HyperPod: no longer in ListClusterNodes
    report = TriageReport(
        tool_version="0",
        generated_at=datetime.now(UTC).isoformat(),
        cluster=ClusterRef(name=cluster.name, arn=cluster.arn, region=scenarios.REGION),
        findings=[
            Finding(
                tag=Tag.FAIL,
                priority=Priority.P0,
                check="probe.xid",
                section="F",
                cluster_arn=cluster.arn,
                instance_id=gone,
                message="Xid 79 (GPU has fallen off the bus)",
            )
        ],
        coverage=Coverage(checks=[CheckCoverage(check="probe.xid", status=CheckStatus.RAN)], probed_nodes=[gone]),
        exit_code=1,
    )
    now = datetime.now(UTC)
    store.apply(plan_sweep(store.open_findings(cluster.arn), report, now), now)
    assert any(f.instance_id == gone for f in store.open_findings(cluster.arn).values())

    result = handlers.sweep_cluster(sweep_input(cluster), sweep_context())

    assert result["transitions"].get("RESOLVED", 0) >= 1
    assert not any(f.instance_id == gone for f in store.open_findings(cluster.arn).values())


@pytest.mark.parametrize(
    "batch",
    [
        {"cluster_arn": "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdefghijkl", "nodes": []},
        {"cluster_arn": "not-an-arn", "nodes": [{"instance_id": "i-0123456789abcdef0"}]},
        {"cluster_arn": "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdefghijkl", "nodes": [{"group": "g"}]},
        "not an object",
    ],
)
def test_a_malformed_batch_is_rejected_without_raising(world, batch):
    result = handlers.probe_batch(batch, sweep_context())
    assert result["status"] == "rejected" and result["errors"]


def test_probing_disabled_plans_no_batches(world, monkeypatch):
    demo, store = world
    monkeypatch.setenv("PROBE_ENABLED", "false")
    env_module.clear_env_cache()

    result = handlers.sweep_cluster(sweep_input(demo.eks), sweep_context())

    assert result["status"] == "processed" and result["batches"] == [] and result["rotation"] is None


def test_a_batch_reference_that_names_no_stored_plan_is_rejected_with_its_reason(world):
    demo, _ = world
    cluster = demo.eks
    item = {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": "never-ran", "batch": 3}
    result = handlers.probe_batch(item, sweep_context())
    assert result["status"] == "rejected"
    assert "no stored plan batch 3 of sweep 'never-ran'" in result["errors"][0]["error"]
    both = {**item, "nodes": [{"instance_id": cluster.nodes["gpu-workers"][0]}]}
    assert handlers.probe_batch(both, sweep_context())["status"] == "rejected"


def test_a_skew_a_batch_found_stays_open_when_a_later_batch_sees_part_of_the_group(world):
    # GIVEN the sweep's batches probed gpu-workers 0 (NVIDIA driver 570.195.03) and 1 (580.95.05) together (§ E)
    demo, store = world
    cluster = demo.eks
    plan = handlers.sweep_cluster(sweep_input(cluster), sweep_context())
    for batch in map_items(plan):
        handlers.probe_batch(batch, sweep_context())
    skews = [f for f in store.open_findings(cluster.arn).values() if f.check == "probe.software_skew"]
    assert [(f.instance_group, f.instance_id) for f in skews] == [("gpu-workers", None)]

    # WHEN a later batch probes only one of them (no comparison is possible, and it saw part of the group)
    old = cluster.nodes["gpu-workers"][0]
    [descriptor] = [n for b in map_items(plan) for n in descriptors(store, b) if n["instance_id"] == old]
    handlers.probe_batch(
        {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": "sweep-3", "nodes": [descriptor]},
        sweep_context(),
    )

    # THEN the stored skew is still open: a partial view resolves nothing
    after = store.open_findings(cluster.arn)
    assert all(after[f.fingerprint].state is State.OPEN for f in skews)


def test_a_skew_split_across_batches_is_found_by_the_next_cluster_step_from_what_the_batches_recorded(
    world, monkeypatch
):
    # GIVEN batches of one node each: no batch can compare gpu-workers 0 (NVIDIA driver 570.195.03) with
    # gpu-workers 1 (580.95.05), as when replacements are probed first, together, apart from their peers (§ E)
    demo, store = world
    cluster = demo.eks
    monkeypatch.setenv("PROBE_BATCH_SIZE", "1")
    env_module.clear_env_cache()
    plan = handlers.sweep_cluster(sweep_input(cluster), sweep_context())
    for batch in map_items(plan):
        handlers.probe_batch(batch, sweep_context())
    skews = [f for f in store.open_findings(cluster.arn).values() if f.check == "probe.software_skew"]
    assert skews == []
    # each batch recorded what its node runs
    records = store.probe_records(cluster.arn)
    old, new = cluster.nodes["gpu-workers"][0], cluster.nodes["gpu-workers"][1]
    assert records[old][1]["nvidia_driver"] == "570.195.03" and records[new][1]["nvidia_driver"] == "580.95.05"

    # WHEN the next sweep's cluster step runs
    handlers.sweep_cluster({**sweep_input(cluster), "sweep_id": "sweep-2"}, sweep_context())

    # THEN it compares the whole group from those records and opens the skew, once, for the group
    skews = [f for f in store.open_findings(cluster.arn).values() if f.check == "probe.software_skew"]
    assert [(f.instance_group, f.instance_id, f.tag) for f in skews] == [("gpu-workers", None, Tag.FAIL)]
    assert "570.195.03" in skews[0].message and "580.95.05" in skews[0].message
    assert any(old in line for line in skews[0].evidence)

    # AND once the odd node runs its peers' stack (as its next probe records), the following cluster step,
    # which sees every Running node of the group, resolves it
    later = datetime.now(UTC)
    store.record_probed(cluster.arn, [old], later, {old: records[new][1]})
    handlers.sweep_cluster({**sweep_input(cluster), "sweep_id": "sweep-3"}, sweep_context())
    assert store.open_findings(cluster.arn, include_resolved=True)[skews[0].fingerprint].state is State.RESOLVED


def test_a_node_without_a_fresh_record_makes_the_recorded_view_partial_and_resolves_nothing(world, monkeypatch):
    # GIVEN a skew the cluster step found from the batches' records
    demo, store = world
    cluster = demo.eks
    monkeypatch.setenv("PROBE_BATCH_SIZE", "1")
    env_module.clear_env_cache()
    for batch in map_items(handlers.sweep_cluster(sweep_input(cluster), sweep_context())):
        handlers.probe_batch(batch, sweep_context())
    handlers.sweep_cluster({**sweep_input(cluster), "sweep_id": "sweep-2"}, sweep_context())
    [skew] = [f for f in store.open_findings(cluster.arn).values() if f.check == "probe.software_skew"]
    old, new = cluster.nodes["gpu-workers"][0], cluster.nodes["gpu-workers"][1]

    # WHEN the node on the majority's stack has only a record older than the rotation's period (a day)
    records = store.probe_records(cluster.arn)
    store.record_probed(cluster.arn, [new], datetime(2020, 1, 1, tzinfo=UTC), {new: records[new][1]})
    store.record_probed(cluster.arn, [old], datetime.now(UTC), {old: records[new][1]})
    handlers.sweep_cluster({**sweep_input(cluster), "sweep_id": "sweep-3"}, sweep_context())

    # THEN one fresh record is no comparison, and a partial view leaves the stored skew open
    assert store.open_findings(cluster.arn)[skew.fingerprint].state is State.OPEN
