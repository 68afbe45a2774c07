"""DynamoDB adapter of the findings store: one on-demand table, every write conditional.

Item layout (single table, ``pk`` / ``sk`` strings):

* finding: ``pk=CLUSTER#<arn>``, ``sk=FINDING#<fingerprint>``; ``first_seen`` written once,
  ``last_seen``, ``count``, ``state`` (OPEN / ACKNOWLEDGED / RESOLVED), ``version`` (optimistic
  lock), ``last_transition`` / ``last_transition_at`` (a heartbeat leaves them alone, so a stream
  consumer notifies only when they change), trimmed evidence, suggested commands. A RESOLVED
  finding carries ``expires_at`` (history TTL) until it reopens.
* history: ``pk=NODE#<instance id or cluster arn>``, ``sk=<iso time>#<fingerprint>#<transition>``,
  with ``node_pk`` / ``last_seen`` for the ``by_node`` GSI, ``cluster_pk`` / ``last_seen`` for the
  ``by_cluster`` GSI (a cluster's transitions over a period: ``findings stats``), the runbook section, the
  node's group, type and logical id where known, and ``expires_at``.
* sweep coverage: ``pk=CLUSTER#<arn>``, ``sk=SWEEP#<iso time>``: checks ran / skipped / unknown
  (counts and lists), transitions applied, ``expires_at``.
* probe rotation: ``pk=CLUSTER#<arn>``, ``sk=PROBED#<instance id>``: when the node's probe document
  was last evaluated (``probed_at``) and what it ran then (``versions``: component → version, § E, for the
  sweep's whole-group comparison); ``expires_at`` lets records of departed nodes lapse. Plain puts: the
  newest time wins and a lost race only moves the node's next probe by one sweep.

A transition writes its finding item and its history item in one transaction. A
``ConditionalCheckFailed`` means another writer got there first: the transition is dropped, no
error and no notification. Throttling is retried by the clients' adaptive retry mode.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from hyperpod_debugger.aws.errors import ApiCallError, call, error_code
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import (
    PlannedChange,
    State,
    StoredFinding,
    SweepPlan,
    Transition,
    TransitionKind,
    iso,
    parse_iso,
)

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

HISTORY_TTL = timedelta(days=90)
PROBED_TTL = timedelta(days=7)
#: A sweep's stored probe plan is read within the sweep; kept a day for inspection.
PLAN_TTL = timedelta(days=1)
#: BatchWriteItem takes at most 25 requests; unprocessed ones are sent again this many times.
BATCH_WRITE_SIZE = 25
BATCH_WRITE_ROUNDS = 5
NODE_INDEX = "by_node"
#: history by cluster and time (`findings stats`): partition ``cluster_pk``, sort ``last_seen``; only history
#: items carry ``cluster_pk``, so the index holds nothing else
CLUSTER_INDEX = "by_cluster"
CONFLICT_RETRIES = 3

_SER = TypeSerializer()
_DESER = TypeDeserializer()


def cluster_pk(cluster_arn: str) -> str:
    return f"CLUSTER#{cluster_arn}"


def finding_sk(fingerprint: str) -> str:
    return f"FINDING#{fingerprint}"


def _plan_key(cluster_arn: str, sweep_id: str, batch: int) -> dict[str, str]:
    return {"pk": f"PLAN#{cluster_arn}", "sk": f"{sweep_id}#{batch:05d}"}


def node_pk(node: str) -> str:
    return f"NODE#{node}"


def typed(value: dict[str, Any]) -> dict[str, Any]:
    """Plain attributes to DynamoDB-typed ones."""
    return {k: _SER.serialize(v) for k, v in value.items()}


def plain(item: dict[str, Any]) -> dict[str, Any]:
    """DynamoDB-typed attributes to plain ones (numbers come back as Decimal)."""
    return {k: _DESER.deserialize(v) for k, v in item.items()}


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def create_table(clients: AwsClients, name: str) -> None:
    """The table as the CDK stack creates it (tests and the demo): on-demand, encrypted, PITR, TTL, stream."""
    ddb = clients.client("dynamodb")
    call(
        ddb,
        "dynamodb:CreateTable",
        "create_table",
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "node_pk", "AttributeType": "S"},
            {"AttributeName": "last_seen", "AttributeType": "S"},
            {"AttributeName": "cluster_pk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": NODE_INDEX,
                "KeySchema": [
                    {"AttributeName": "node_pk", "KeyType": "HASH"},
                    {"AttributeName": "last_seen", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": CLUSTER_INDEX,
                "KeySchema": [
                    {"AttributeName": "cluster_pk", "KeyType": "HASH"},
                    {"AttributeName": "last_seen", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        SSESpecification={"Enabled": True},
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    call(
        ddb,
        "dynamodb:UpdateTimeToLive",
        "update_time_to_live",
        TableName=name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
    )
    call(
        ddb,
        "dynamodb:UpdateContinuousBackups",
        "update_continuous_backups",
        TableName=name,
        PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
    )


def to_item(finding: StoredFinding) -> dict[str, Any]:
    """The plain (not yet DynamoDB-typed) attributes of a finding item, keys included."""
    item: dict[str, Any] = {
        "pk": cluster_pk(finding.cluster_arn),
        "sk": finding_sk(finding.fingerprint),
        "item_type": "FINDING",
        "fingerprint": finding.fingerprint,
        "cluster_arn": finding.cluster_arn,
        "instance_id": finding.instance_id,
        "check": finding.check,
        "section": finding.section,
        "tag": str(finding.tag),
        "priority": str(finding.priority) if finding.priority else None,
        "state": str(finding.state),
        "first_seen": finding.first_seen,
        "last_seen": finding.last_seen,
        "count": finding.count,
        "message": finding.message,
        "evidence": list(finding.evidence),
        "suggested_commands": list(finding.suggested_commands),
        "version": finding.version,
    }
    if finding.acknowledged_by:
        item["acknowledged_by"] = finding.acknowledged_by
    if finding.cluster_name:
        item["cluster_name"] = finding.cluster_name
    item |= _trigger_attributes(finding) | _verdict_attributes(finding)
    return item


def _verdict_attributes(finding: StoredFinding) -> dict[str, Any]:
    """What the node's verdict (and so its incident) is built from; absent when unknown."""
    named = {
        "instance_group": finding.instance_group,
        "instance_type": finding.instance_type,
        "node_logical_id": finding.node_logical_id,
        "node_action": finding.node_action,
        "next_step": finding.next_step,
        "root_cause": finding.root_cause,
    }
    return {k: v for k, v in named.items() if v}


def _trigger_attributes(finding: StoredFinding) -> dict[str, Any]:
    if not finding.trigger:
        return {}
    return {"trigger_kind": finding.trigger_kind, "trigger": finding.trigger, "trigger_node": finding.trigger_node}


def from_item(item: dict[str, Any]) -> StoredFinding:
    """A plain item (already deserialised) back to a :class:`StoredFinding`."""
    return StoredFinding(
        fingerprint=str(item["fingerprint"]),
        cluster_arn=str(item["cluster_arn"]),
        instance_id=item.get("instance_id"),
        check=str(item["check"]),
        section=item.get("section"),
        tag=Tag(item["tag"]),
        priority=Priority(item["priority"]) if item.get("priority") else None,
        state=State(item["state"]),
        first_seen=str(item["first_seen"]),
        last_seen=str(item["last_seen"]),
        count=int(item.get("count", 0)),
        message=str(item.get("message", "")),
        evidence=tuple(str(line) for line in item.get("evidence") or ()),
        suggested_commands=tuple(dict(c) for c in item.get("suggested_commands") or ()),
        version=int(item.get("version", 0)),
        acknowledged_by=item.get("acknowledged_by"),
        cluster_name=str(item["cluster_name"]) if item.get("cluster_name") else None,
        trigger_kind=str(item["trigger_kind"]) if item.get("trigger_kind") else None,
        trigger=str(item["trigger"]) if item.get("trigger") else None,
        trigger_node=str(item["trigger_node"]) if item.get("trigger_node") else None,
        instance_group=str(item["instance_group"]) if item.get("instance_group") else None,
        node_action=str(item["node_action"]) if item.get("node_action") else None,
        next_step=str(item["next_step"]) if item.get("next_step") else None,
        root_cause=str(item["root_cause"]) if item.get("root_cause") else None,
        instance_type=str(item["instance_type"]) if item.get("instance_type") else None,
        node_logical_id=str(item["node_logical_id"]) if item.get("node_logical_id") else None,
    )


@dataclass(frozen=True)
class HistoryRecord:
    node: str
    at: str
    fingerprint: str
    transition: TransitionKind
    cluster_arn: str
    check: str
    tag: Tag
    priority: Priority | None
    state: State
    message: str
    #: absent on records written before they were kept
    instance_id: str | None = None
    section: str | None = None
    instance_group: str | None = None
    instance_type: str | None = None
    node_logical_id: str | None = None


def _history_record(item: dict[str, Any], node: str | None = None) -> HistoryRecord:
    """A history item read back; raises KeyError/ValueError for one that is not."""
    text = {
        k: str(item[k]) if item.get(k) else None
        for k in ("instance_id", "section", "instance_group", "instance_type", "node_logical_id")
    }
    return HistoryRecord(
        node=node or str(item["pk"]).removeprefix("NODE#"),
        at=str(item["last_seen"]),
        fingerprint=str(item["fingerprint"]),
        transition=TransitionKind(item["transition"]),
        cluster_arn=str(item["cluster_arn"]),
        check=str(item["check"]),
        tag=Tag(item["tag"]),
        priority=Priority(item["priority"]) if item.get("priority") else None,
        state=State(item["state"]),
        message=str(item.get("message", "")),
        **text,
    )


def batch_write(ddb: Any, table: str, requests: list[dict[str, Any]]) -> int:
    """BatchWriteItem in pages of 25, sending back what DynamoDB left unprocessed; how many were written."""
    written = 0
    for start in range(0, len(requests), BATCH_WRITE_SIZE):
        pending = requests[start : start + BATCH_WRITE_SIZE]
        for attempt in range(BATCH_WRITE_ROUNDS):
            response = call(ddb, "dynamodb:BatchWriteItem", "batch_write_item", RequestItems={table: pending})
            left = (response.get("UnprocessedItems") or {}).get(table) or []
            written += len(pending) - len(left)
            if not left:
                break
            pending = left
            time.sleep(0.05 * 2**attempt)  # throttled shards: back off before sending the rest
    return written


class FindingStore:
    def __init__(self, clients: AwsClients, table_name: str, *, history_ttl: timedelta = HISTORY_TTL) -> None:
        self._ddb = clients.client("dynamodb")
        self.table = table_name
        self.history_ttl = history_ttl

    # --- reads ---------------------------------------------------------------------------

    def _query(self, action: str, **params: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        limit = params.pop("Limit", None)
        while True:
            request = {"TableName": self.table, **params}
            if start:
                request["ExclusiveStartKey"] = start
            if limit is not None:
                request["Limit"] = limit - len(out)
            response = call(self._ddb, action, "query", **request)
            out.extend(plain(i) for i in response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start or (limit is not None and len(out) >= limit):
                return out

    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict[str, StoredFinding]:
        """Stored findings of a cluster by fingerprint: OPEN and ACKNOWLEDGED (and RESOLVED if asked)."""
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": typed({":pk": cluster_pk(cluster_arn), ":prefix": "FINDING#"}),
            "ConsistentRead": True,
        }
        if not include_resolved:
            params["FilterExpression"] = "#state <> :resolved"
            params["ExpressionAttributeNames"] = {"#state": "state"}
            params["ExpressionAttributeValues"] |= typed({":resolved": str(State.RESOLVED)})
        items = self._query("dynamodb:Query", **params)
        return {f.fingerprint: f for f in map(from_item, items)}

    def get(self, cluster_arn: str, fingerprint: str) -> StoredFinding | None:
        response = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=typed({"pk": cluster_pk(cluster_arn), "sk": finding_sk(fingerprint)}),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return from_item(plain(item)) if item else None

    def history(self, node: str, limit: int = 50) -> list[HistoryRecord]:
        """Transitions of one node (instance id, or cluster ARN for cluster-wide findings), newest first."""
        items = self._query(
            "dynamodb:Query",
            IndexName=NODE_INDEX,
            KeyConditionExpression="node_pk = :node",
            ExpressionAttributeValues=typed({":node": node_pk(node)}),
            ScanIndexForward=False,
            Limit=limit,
        )
        return [_history_record(i, node) for i in items[:limit]]

    def cluster_history(self, cluster_arn: str, since: datetime, until: datetime | None = None) -> list[HistoryRecord]:
        """Every transition of a cluster's findings from ``since`` (to ``until``), oldest first: one Query on the
        ``by_cluster`` index (history items only carry its key), paged. Records written before the index existed
        are not in it; records that cannot be read are left out (and counted by the caller's total)."""
        condition = "cluster_pk = :c AND last_seen >= :since"
        values: dict[str, Any] = {":c": cluster_pk(cluster_arn), ":since": iso(since)}
        if until is not None:
            condition = "cluster_pk = :c AND last_seen BETWEEN :since AND :until"
            values[":until"] = iso(until)
        items = self._query(
            "dynamodb:Query",
            IndexName=CLUSTER_INDEX,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=typed(values),
        )
        out = []
        for item in items:
            try:
                out.append(_history_record(item))
            except (KeyError, ValueError):
                continue
        return out

    def sweeps(self, cluster_arn: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest sweep coverage records of a cluster, newest first."""
        return self._query(
            "dynamodb:Query",
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues=typed({":pk": cluster_pk(cluster_arn), ":prefix": "SWEEP#"}),
            ScanIndexForward=False,
            Limit=limit,
        )[:limit]

    def last_probed(self, cluster_arn: str) -> dict[str, datetime]:
        """Instance id → when its probe document was last evaluated (the sweep's rotation)."""
        return {iid: when for iid, (when, _) in self.probe_records(cluster_arn).items()}

    def probe_records(self, cluster_arn: str) -> dict[str, tuple[datetime, dict[str, str]]]:
        """Instance id → (when its probe document was last evaluated, what it ran then: component → version,
        empty where none was recorded). One Query over the cluster's ``PROBED#`` items."""
        items = self._query(
            "dynamodb:Query",
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues=typed({":pk": cluster_pk(cluster_arn), ":prefix": "PROBED#"}),
            ProjectionExpression="sk, probed_at, #v",
            ExpressionAttributeNames={"#v": "versions"},  # never mind DynamoDB's list of reserved words
        )
        out: dict[str, tuple[datetime, dict[str, str]]] = {}
        for item in items:
            try:
                when = parse_iso(str(item["probed_at"]))
            except (KeyError, ValueError):
                continue  # a damaged record only makes that node due again
            raw = item.get("versions")
            table = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
            out[str(item["sk"]).removeprefix("PROBED#")] = (when, table)
        return out

    # --- writes --------------------------------------------------------------------------

    def put_plan(self, cluster_arn: str, sweep_id: str, batches: list[dict[str, Any]], now: datetime) -> int:
        """Store one sweep's probe plan, one item per batch (its ``nodes`` and how it runs: rate, slots, start
        and stop), what each probe step reads by reference: the state machine carries batch numbers only.
        Expires after a day."""
        expires = _epoch(now + PLAN_TTL)
        requests = []
        for n, batch in enumerate(batches):
            attributes = {k: Decimal(str(v)) if isinstance(v, float) else v for k, v in batch.items()}
            item = {**attributes, **_plan_key(cluster_arn, sweep_id, n), "item_type": "PLAN", "expires_at": expires}
            requests.append({"PutRequest": {"Item": typed(item)}})
        return self._batch_write(requests)

    def plan_batch(self, cluster_arn: str, sweep_id: str, batch: int) -> dict[str, Any] | None:
        """One stored plan batch (``nodes`` and its schedule); None when there is no such batch (expired, or
        never written)."""
        raw = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=typed(_plan_key(cluster_arn, sweep_id, batch)),
            ConsistentRead=True,
        )
        item = raw.get("Item")
        if not item:
            return None
        found = plain(item)
        nodes = found.get("nodes")
        if not isinstance(nodes, list):
            return None
        out: dict[str, Any] = {k: v for k, v in found.items() if k not in ("pk", "sk", "item_type", "expires_at")}
        out["nodes"] = [dict(node) for node in nodes]
        if "rate" in out:
            out["rate"] = float(out["rate"])
        if "slots" in out:
            out["slots"] = int(out["slots"])
        return out

    def record_probed(
        self,
        cluster_arn: str,
        instance_ids: list[str],
        now: datetime,
        software: Mapping[str, Mapping[str, str]] | None = None,
    ) -> int:
        """Remember that these nodes were probed at ``now``, with what each runs where it was read (``software``:
        instance id → component → version, § E); returns how many records were written."""
        at = iso(now)
        expires = _epoch(now + PROBED_TTL)
        software = software or {}
        requests = []
        for iid in dict.fromkeys(instance_ids):
            item: dict[str, Any] = {
                "pk": cluster_pk(cluster_arn),
                "sk": f"PROBED#{iid}",
                "item_type": "PROBED",
                "probed_at": at,
                "expires_at": expires,
            }
            if software.get(iid):
                item["versions"] = {str(k): str(v) for k, v in software[iid].items()}
            requests.append({"PutRequest": {"Item": typed(item)}})
        return self._batch_write(requests)

    def _batch_write(self, requests: list[dict[str, Any]]) -> int:
        return batch_write(self._ddb, self.table, requests)

    def apply(self, plan: SweepPlan, now: datetime) -> list[Transition]:
        """Write a plan; return the transitions that happened (heartbeats are written, not returned)."""
        happened: list[Transition] = []
        for change in plan.changes():
            transition = self._apply_change(change, now)
            if transition is not None and transition.kind is not TransitionKind.UNCHANGED:
                happened.append(transition)
        self._record_sweep(plan, happened, now)
        return happened

    def acknowledge(self, cluster_arn: str, fingerprint: str, by: str, now: datetime) -> Transition | None:
        """OPEN → ACKNOWLEDGED; None when the finding is not OPEN (already acknowledged, resolved, absent)."""
        current = self.get(cluster_arn, fingerprint)
        if current is None or current.state is not State.OPEN:
            return None
        at = iso(now)
        item = replace(current, state=State.ACKNOWLEDGED, acknowledged_by=by, version=current.version + 1)
        update = self._update(
            item,
            TransitionKind.ACKNOWLEDGED,
            at,
            sets={"state": str(State.ACKNOWLEDGED), "acknowledged_by": by, "acknowledged_at": at},
            condition="#state = :expected_state AND #version = :expected_version",
            values={":expected_state": str(State.OPEN), ":expected_version": current.version},
        )
        if not self._transact([update, self._history_put(item, TransitionKind.ACKNOWLEDGED, at, now)]):
            return None
        return Transition(TransitionKind.ACKNOWLEDGED, fingerprint, cluster_arn, item.instance_id, at, item)

    def _apply_change(self, change: PlannedChange, now: datetime) -> Transition | None:
        at = iso(now)
        item, previous, kind = change.item, change.previous, change.kind
        if kind is TransitionKind.NEW:
            put = {
                "Put": {
                    "TableName": self.table,
                    "Item": typed(to_item(item) | {"last_transition": str(kind), "last_transition_at": at}),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            if self._transact([put, self._history_put(item, kind, at, now)]):
                return self._transition(kind, item, at, None)
            return self._reopen_collision(item, now)
        if previous is None:
            raise ValueError(f"a {kind} change needs the stored image it replaces")
        if kind is TransitionKind.RESOLVED:
            update = self._update(
                item,
                kind,
                at,
                sets={"state": str(State.RESOLVED), "resolved_at": at, "expires_at": _epoch(now + self.history_ttl)},
                condition="#state <> :resolved AND #version = :expected_version",
                values={":resolved": str(State.RESOLVED), ":expected_version": previous.version},
            )
        else:
            expected = {":expected_state": str(previous.state), ":expected_version": previous.version}
            update = self._update(
                item,
                kind,
                at,
                sets=_seen_attributes(item),
                condition="#state = :expected_state AND #version = :expected_version",
                values=expected,
                heartbeat=kind is TransitionKind.UNCHANGED,
                remove_ttl=kind is TransitionKind.REOPENED,
            )
        writes = [update]
        if kind is not TransitionKind.UNCHANGED:
            writes.append(self._history_put(item, kind, at, now))
        if self._transact(writes):
            return self._transition(kind, item, at, previous.priority)
        return None

    def _reopen_collision(self, item: StoredFinding, now: datetime) -> Transition | None:
        """A NEW whose item exists: reopen it if it is RESOLVED (first_seen stays); otherwise another
        writer got there first and the transition is dropped."""
        current = self.get(item.cluster_arn, item.fingerprint)
        if current is None or current.state is not State.RESOLVED:
            return None
        reopened = replace(item, first_seen=current.first_seen, count=current.count + 1, version=current.version + 1)
        return self._apply_change(PlannedChange(TransitionKind.REOPENED, reopened, current), now)

    def _update(
        self,
        item: StoredFinding,
        kind: TransitionKind,
        at: str,
        *,
        sets: dict[str, Any],
        condition: str,
        values: dict[str, Any],
        heartbeat: bool = False,
        remove_ttl: bool = False,
    ) -> dict[str, Any]:
        names = {"#state": "state", "#version": "version"}
        exprs: list[str] = []
        all_values = dict(values)
        sets = dict(sets)
        if not heartbeat:
            sets |= {"last_transition": str(kind), "last_transition_at": at} | _trigger_attributes(item)
        for i, (key, value) in enumerate(sets.items()):
            names[f"#a{i}"] = key
            all_values[f":a{i}"] = value
            exprs.append(f"#a{i} = :a{i}")
        exprs.append("#version = #version + :one")
        all_values[":one"] = 1
        expression = "SET " + ", ".join(exprs)
        if remove_ttl:
            names["#ttl"] = "expires_at"
            expression += " REMOVE #ttl"
        return {
            "Update": {
                "TableName": self.table,
                "Key": typed({"pk": cluster_pk(item.cluster_arn), "sk": finding_sk(item.fingerprint)}),
                "UpdateExpression": expression,
                "ConditionExpression": f"attribute_exists(pk) AND {condition}",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": typed(all_values),
            }
        }

    def _history_put(self, item: StoredFinding, kind: TransitionKind, at: str, now: datetime) -> dict[str, Any]:
        record = {
            "pk": node_pk(item.node),
            "sk": f"{at}#{item.fingerprint}#{kind}",
            "item_type": "HISTORY",
            "node_pk": node_pk(item.node),
            "last_seen": at,
            "transition": str(kind),
            "fingerprint": item.fingerprint,
            "cluster_arn": item.cluster_arn,
            "instance_id": item.instance_id,
            "check": item.check,
            "tag": str(item.tag),
            "priority": str(item.priority) if item.priority else None,
            "state": str(item.state),
            "message": item.message,
            "expires_at": _epoch(now + self.history_ttl),
            # what the history is grouped and counted by (`findings stats`): the cluster (its index), the
            # runbook section, the node's group, type and the identity a replacement keeps
            "cluster_pk": cluster_pk(item.cluster_arn),
            "section": item.section,
            "instance_group": item.instance_group,
            "instance_type": item.instance_type,
            "node_logical_id": item.node_logical_id,
        }
        record = {k: v for k, v in record.items() if v is not None}
        return {
            "Put": {
                "TableName": self.table,
                "Item": typed(record),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def _transact(self, writes: list[dict[str, Any]]) -> bool:
        """True when the transaction committed; False when a condition failed (another writer won)."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                call(self._ddb, "dynamodb:TransactWriteItems", "transact_write_items", TransactItems=writes)
                return True
            except ApiCallError as err:
                reasons = _cancellation_reasons(err)
                if reasons is None:
                    raise
                if "ConditionalCheckFailed" in reasons:
                    return False
                if "TransactionConflict" in reasons and attempt < CONFLICT_RETRIES:
                    time.sleep(0.05 * 2**attempt)  # another transaction holds the item: re-evaluate the condition
                    continue
                raise
        return False

    def _record_sweep(self, plan: SweepPlan, happened: list[Transition], now: datetime) -> None:
        cov = plan.coverage
        counts: dict[str, int] = {}
        for t in happened:
            counts[str(t.kind)] = counts.get(str(t.kind), 0) + 1
        record = {
            "pk": cluster_pk(plan.cluster_arn),
            "sk": f"SWEEP#{plan.at}",
            "item_type": "SWEEP",
            "at": plan.at,
            "scope_node": cov.scope_node,
            "error": cov.error,
            "checks": cov.counts(),
            "ran": list(cov.ran),
            "skipped": list(cov.skipped),
            "unknown": list(cov.unknown),
            "transitions": counts,
            "heartbeats": len(plan.unchanged),
            "heartbeat_skipped": plan.heartbeat_skipped,
            "expires_at": _epoch(now + self.history_ttl),
        }
        try:
            call(
                self._ddb,
                "dynamodb:PutItem",
                "put_item",
                TableName=self.table,
                Item=typed(record),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ApiCallError as err:
            if err.failure.code != "ConditionalCheckFailedException":
                raise
            # the same sweep recorded twice (duplicate event): the first record stays

    @staticmethod
    def _transition(
        kind: TransitionKind, item: StoredFinding, at: str, previous_priority: Priority | None
    ) -> Transition:
        return Transition(kind, item.fingerprint, item.cluster_arn, item.instance_id, at, item, previous_priority)


def _seen_attributes(item: StoredFinding) -> dict[str, Any]:
    sets: dict[str, Any] = {
        "tag": str(item.tag),
        "priority": str(item.priority) if item.priority else None,
        "section": item.section,
        "state": str(item.state),
        "last_seen": item.last_seen,
        "count": item.count,
        "message": item.message,
        "evidence": list(item.evidence),
        "suggested_commands": list(item.suggested_commands),
    }
    if item.state is not State.ACKNOWLEDGED:
        sets["acknowledged_by"] = None
    if item.cluster_name:
        sets["cluster_name"] = item.cluster_name  # fills the name in on items stored before it was kept
    sets |= {"node_action": item.node_action, "next_step": item.next_step, "root_cause": item.root_cause}
    if item.instance_group:
        sets["instance_group"] = item.instance_group
    return sets


def _cancellation_reasons(err: ApiCallError) -> list[str] | None:
    """The cancellation reason codes of a cancelled transaction; None for any other failure."""
    cause = err.__cause__
    if not isinstance(cause, ClientError) or error_code(cause) != "TransactionCanceledException":
        return None
    return [str(r.get("Code") or "") for r in cause.response.get("CancellationReasons", [])]
