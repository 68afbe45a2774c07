"""The DynamoDB findings store against moto: conditional writes, history, coverage, TTL."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from moto.dynamodb.models import DynamoDBBackend

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.errors import ApiCallError
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
from hyperpod_debugger.lifecycle.findings import State, TransitionKind, iso, plan_sweep
from hyperpod_debugger.store.findings import FindingStore, create_table, to_item, typed
from hyperpod_sim import scenarios

TABLE = "hyperpod-findings"
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
NODE_A = "i-0123456789abcdef0"
NODE_B = "i-0fedcba9876543210"
CHECK = "nodes.health_status"


def finding(**kw) -> Finding:
    base = dict(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check=CHECK,
        section="F",
        message="node unhealthy",
        cluster_arn=ARN,
        instance_id=NODE_A,
        evidence=[f"line {i}" for i in range(30)],
    )
    base.update(kw)
    return Finding(**base)


def report(findings, *, ran=(CHECK,), unknown=(), skipped=()) -> TriageReport:
    checks = [CheckCoverage(check=c, status=CheckStatus.RAN) for c in ran]
    checks += [CheckCoverage(check=c, status=CheckStatus.SKIPPED) for c in skipped]
    checks += [CheckCoverage(check=c, status=CheckStatus.UNKNOWN, reason="denied") for c in unknown]
    return TriageReport(
        tool_version="0",
        generated_at="2026-11-30T12:00:00+00:00",
        cluster=ClusterRef(name="c", arn=ARN, region=scenarios.REGION),
        findings=list(findings),
        coverage=Coverage(checks=checks),
        exit_code=TriageReport.exit_code_for(list(findings)),
    )


@pytest.fixture
def store(clients) -> FindingStore:
    create_table(clients, TABLE)
    return FindingStore(clients, TABLE)


@pytest.fixture
def serialised_moto(monkeypatch):
    """DynamoDB serialises the writes to one item; moto's in-memory backend does not (its
    transactions back up and restore whole tables). Serialise moto's write entry points so a
    threaded test sees DynamoDB's semantics rather than moto's races."""
    lock = threading.RLock()
    for name in ("transact_write_items", "put_item", "update_item"):
        original = getattr(DynamoDBBackend, name)

        def locked(self, *args, _original=original, **kwargs):
            with lock:
                return _original(self, *args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, locked)


def sweep(store: FindingStore, findings, now: datetime, **kw):
    plan = plan_sweep(store.open_findings(ARN), report(findings, **kw), now)
    return plan, store.apply(plan, now)


def raw(clients: AwsClients, pk: str, prefix: str) -> list[dict]:
    response = clients.client("dynamodb").query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": pk}, ":p": {"S": prefix}},
    )
    return response["Items"]


def test_table_has_the_documented_shape(clients, store):
    ddb = clients.client("dynamodb")
    table = ddb.describe_table(TableName=TABLE)["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert [g["IndexName"] for g in table["GlobalSecondaryIndexes"]] == ["by_node", "by_cluster"]
    ttl = ddb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_round_trip_of_a_new_finding(store, now):
    # GIVEN a first sweep with one problem
    plan, happened = sweep(store, [finding()], now)
    # THEN one NEW transition happened and the stored item reads back the same
    assert [t.kind for t in happened] == [TransitionKind.NEW]
    assert happened[0].notify
    stored = store.open_findings(ARN)
    assert list(stored) == [plan.new[0].item.fingerprint]
    item = stored[plan.new[0].item.fingerprint]
    assert (item.state, item.count, item.version) == (State.OPEN, 1, 1)
    assert item.first_seen == item.last_seen == iso(now)
    assert item.priority is Priority.P1 and item.tag is Tag.FAIL and item.instance_id == NODE_A
    assert len(item.evidence) == 20
    # the cluster's name travels with the item, so alerts can say which cluster in people's words
    assert item.cluster_name == "c"


def test_first_seen_never_moves(store, clients, now):
    _, first = sweep(store, [finding()], now)
    fp = first[0].fingerprint
    later = now + timedelta(hours=2)
    _, happened = sweep(store, [finding(message="node unhealthy")], later)
    assert happened == []  # a heartbeat is written but is no transition
    item = store.get(ARN, fp)
    assert item.first_seen == iso(now) and item.last_seen == iso(later) and item.count == 2
    # a heartbeat leaves the transition marker alone (the stream consumer notifies on it only)
    attrs = raw(clients, f"CLUSTER#{ARN}", "FINDING#")[0]
    assert attrs["last_transition"] == {"S": "NEW"} and attrs["last_transition_at"] == {"S": iso(now)}
    # escalation, resolution and reopening keep first_seen too
    _, esc = sweep(store, [finding(priority=Priority.P0)], later + timedelta(minutes=1))
    _, res = sweep(store, [], later + timedelta(minutes=2))
    _, reo = sweep(store, [finding(priority=Priority.P0)], later + timedelta(minutes=3))
    assert [t.kind for t in esc + res + reo] == [
        TransitionKind.ESCALATED,
        TransitionKind.RESOLVED,
        TransitionKind.REOPENED,
    ]
    assert store.get(ARN, fp).first_seen == iso(now)


def test_a_duplicate_apply_of_the_same_plan_is_no_transition(store, now):
    plan = plan_sweep(store.open_findings(ARN), report([finding(), finding(instance_id=NODE_B)]), now)
    assert len(store.apply(plan, now)) == 2
    assert store.apply(plan, now) == []
    assert store.apply(plan, now + timedelta(seconds=1)) == []
    # the same for a resolution plan and an escalation plan
    later = now + timedelta(minutes=5)
    resolve = plan_sweep(store.open_findings(ARN), report([finding(priority=Priority.P0)]), later)
    assert len(store.apply(resolve, later)) == 2  # one escalated, one resolved
    assert store.apply(resolve, later) == []


def test_a_stale_plan_loses_to_the_writer_that_got_there_first(store, now):
    sweep(store, [finding()], now)
    previous = store.open_findings(ARN)
    a = plan_sweep(previous, report([finding(priority=Priority.P0)]), now + timedelta(minutes=1))
    b = plan_sweep(previous, report([]), now + timedelta(minutes=1))
    assert [t.kind for t in store.apply(a, now + timedelta(minutes=1))] == [TransitionKind.ESCALATED]
    assert store.apply(b, now + timedelta(minutes=1)) == []  # version moved: resolution dropped
    assert next(iter(store.open_findings(ARN).values())).state is State.OPEN


def test_concurrent_writers_make_exactly_one_transition(store, now, serialised_moto):
    # GIVEN two sweeps that both planned the same NEW findings
    problems = [finding(instance_id=f"i-{n:017x}") for n in range(10)]
    plan = plan_sweep({}, report(problems), now)
    results: list[list] = [[], []]
    barrier = threading.Barrier(2)

    def writer(slot: int) -> None:
        barrier.wait()
        results[slot] = store.apply(plan, now)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # THEN each finding made exactly one transition in total
    fingerprints = [t.fingerprint for r in results for t in r]
    assert len(fingerprints) == 10 and len(set(fingerprints)) == 10
    assert len(store.history(f"i-{0:017x}")) == 1


def test_resolution_and_reopening_through_a_new_plan(store, clients, now):
    _, (new,) = sweep(store, [finding()], now)
    # a check that could not run resolves nothing
    _, none = sweep(store, [], now + timedelta(minutes=1), ran=(), unknown=(CHECK,))
    assert none == []
    _, (resolved,) = sweep(store, [], now + timedelta(minutes=2))
    assert resolved.kind is TransitionKind.RESOLVED and resolved.fingerprint == new.fingerprint
    assert store.open_findings(ARN) == {}
    assert store.open_findings(ARN, include_resolved=True)[new.fingerprint].state is State.RESOLVED
    # seen again: the NEW planned without the resolved item becomes a REOPENED in the adapter
    _, (reopened,) = sweep(store, [finding()], now + timedelta(minutes=3))
    assert reopened.kind is TransitionKind.REOPENED
    item = store.get(ARN, new.fingerprint)
    assert item.state is State.OPEN and item.first_seen == iso(now) and item.count == 2
    attrs = raw(clients, f"CLUSTER#{ARN}", "FINDING#")[0]
    assert "expires_at" not in attrs  # a reopened finding no longer expires


def test_acknowledge_is_conditional(store, now):
    _, (new,) = sweep(store, [finding()], now)
    ack = store.acknowledge(ARN, new.fingerprint, "alice", now + timedelta(minutes=1))
    assert ack is not None and ack.kind is TransitionKind.ACKNOWLEDGED and not ack.notify
    assert store.acknowledge(ARN, new.fingerprint, "bob", now + timedelta(minutes=2)) is None
    item = store.get(ARN, new.fingerprint)
    assert item.state is State.ACKNOWLEDGED and item.acknowledged_by == "alice"
    # an acknowledged finding stays acknowledged on a heartbeat
    sweep(store, [finding()], now + timedelta(hours=2))
    assert store.get(ARN, new.fingerprint).state is State.ACKNOWLEDGED


def test_history_of_a_node_newest_first(store, now):
    sweep(store, [finding(), finding(instance_id=NODE_B), finding(instance_id=None, message="cluster wide")], now)
    sweep(
        store,
        [finding(priority=Priority.P0), finding(instance_id=None, message="cluster wide")],
        now + timedelta(minutes=1),
    )
    records = store.history(NODE_A)
    assert [r.transition for r in records] == [TransitionKind.ESCALATED, TransitionKind.NEW]
    assert records[0].at == iso(now + timedelta(minutes=1)) and records[0].priority is Priority.P0
    assert [r.transition for r in store.history(NODE_B)] == [TransitionKind.RESOLVED, TransitionKind.NEW]
    assert [r.transition for r in store.history(ARN)] == [TransitionKind.NEW]  # cluster-wide findings
    assert len(store.history(NODE_A, limit=1)) == 1


def test_each_sweep_records_its_coverage(store, now):
    sweep(store, [finding()], now, ran=(CHECK, "vpc.dns"), skipped=("slurm.partitions",), unknown=("eks.access",))
    (record,) = store.sweeps(ARN)
    assert record["sk"] == f"SWEEP#{iso(now)}"
    assert record["checks"] == {"ran": 2, "skipped": 1, "unknown": 1}
    assert record["ran"] == [CHECK, "vpc.dns"] and record["unknown"] == ["eks.access"]
    assert record["transitions"] == {"NEW": 1}


def test_history_and_sweep_items_carry_a_ttl(store, clients, now):
    sweep(store, [finding()], now)
    expected = int((now + timedelta(days=90)).timestamp())
    (sweep_item,) = raw(clients, f"CLUSTER#{ARN}", "SWEEP#")
    (history_item,) = raw(clients, f"NODE#{NODE_A}", "20")
    (finding_item,) = raw(clients, f"CLUSTER#{ARN}", "FINDING#")
    assert sweep_item["expires_at"] == {"N": str(expected)}
    assert history_item["expires_at"] == {"N": str(expected)}
    assert "expires_at" not in finding_item  # an open finding never expires
    sweep(store, [], now + timedelta(minutes=1))
    (finding_item,) = raw(clients, f"CLUSTER#{ARN}", "FINDING#")
    assert finding_item["expires_at"] == {"N": str(int((now + timedelta(minutes=1, days=90)).timestamp()))}


def test_other_errors_raise_api_call_error(clients, now):
    store = FindingStore(clients, "no-such-table")
    with pytest.raises(ApiCallError):
        store.open_findings(ARN)
    plan = plan_sweep({}, report([finding()]), now)
    with pytest.raises(ApiCallError):
        store.apply(plan, now)


def test_pagination_reads_every_open_finding(store, clients, now):
    # GIVEN 300 open findings of ~4 KB each (over the 1 MB a Query page holds), seeded directly
    # (moto's transactions copy the table on every call, too slow for a bulk seed)
    bulky = ["x" * 200] * 20
    plan = plan_sweep({}, report([finding(instance_id=f"i-{n:017x}", evidence=bulky) for n in range(300)]), now)
    ddb = clients.client("dynamodb")
    for change in plan.new:
        ddb.put_item(TableName=TABLE, Item=typed(to_item(change.item)))
    before = clients.calls["dynamodb:Query"]
    # THEN every one is read, over more than one page
    assert len(store.open_findings(ARN)) == 300
    assert clients.calls["dynamodb:Query"] - before > 1


def test_each_transition_records_what_made_the_monitor_look(store, now):
    from hyperpod_debugger.lifecycle.findings import SWEEP, Trigger

    event = Trigger("event", f"Node Health Event for {NODE_A}", NODE_A)
    # GIVEN a finding an event's triage opened
    plan = plan_sweep(store.open_findings(ARN), report([finding()]), now, trigger=event)
    (new,) = store.apply(plan, now)
    item = store.get(ARN, new.fingerprint)
    assert (item.trigger_kind, item.trigger, item.trigger_node) == ("event", f"Node Health Event for {NODE_A}", NODE_A)
    # WHEN the sweep later finds it gone
    later = now + timedelta(minutes=15)
    (resolved,) = store.apply(plan_sweep(store.open_findings(ARN), report([]), later, trigger=SWEEP), later)
    # THEN the resolution names the sweep, and the stored item says so too
    assert resolved.kind is TransitionKind.RESOLVED
    item = store.get(ARN, new.fingerprint)
    assert (item.trigger_kind, item.trigger, item.trigger_node) == ("sweep", "the scheduled sweep", None)


def test_a_stored_plan_is_read_back_batch_by_batch_and_expires(store, clients, now):
    from hyperpod_debugger.lifecycle.rotation import describe_node

    nodes = [describe_node(scenarios_node(n)) for n in range(60 * 50)]
    batches = [{"nodes": nodes[i : i + 50], "rate": 0.9, "slots": 56} for i in range(0, len(nodes), 50)]
    assert store.put_plan(ARN, "sweep-9", batches, now) == 60  # more than one BatchWriteItem page
    assert store.plan_batch(ARN, "sweep-9", 59) == batches[59]  # the rate comes back a float, the slots an int
    assert store.plan_batch(ARN, "sweep-9", 60) is None and store.plan_batch(ARN, "other", 0) is None
    (item,) = [i for i in raw(clients, f"PLAN#{ARN}", "sweep-9#00000")]
    assert item["item_type"] == {"S": "PLAN"} and int(item["expires_at"]["N"]) > now.timestamp()


def scenarios_node(n: int):
    from hyperpod_debugger.domain.observations import ClusterNode

    return ClusterNode(
        f"i-{n:017x}", "workers", "ml.p5.48xlarge", "Running", "", None, hostname=f"ip-10-1-{n // 250}-{n % 250}"
    )
