"""DynamoDB adapter of the incidents (:mod:`hyperpod_debugger.lifecycle.incidents`), in the findings table.

Items:

* incident: ``pk=CLUSTER#<arn>``, ``sk=INCIDENT#<key>`` (``NODE#<id>``, ``CAUSE#<fingerprint>``, ``COVERAGE``),
  ``item_type=INCIDENT``; what it says, where it is in its life, ``version`` (every write is conditional on
  the version it replaces) and ``pending``, the paged transitions no channel was told of yet (a map, so the
  alert group's flush removes exactly what it told). A RESOLVED incident carries ``expires_at``.
* baseline marker: ``pk=CLUSTER#<arn>``, ``sk=BASELINE``: the cluster's first triage was recorded; what that
  triage opens is told as one baseline summary.

The findings stream carries incident items to the notifier (its filter passes ``INCIDENT``), which arms the
cluster's alert group; nothing else here alerts anyone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.domain.model import Priority
from hyperpod_debugger.lifecycle.incidents import (
    Explained,
    Incident,
    IncidentChange,
    IncidentPlan,
    IncidentState,
    IncidentTransition,
    NodeIssue,
    StoredIncident,
)
from hyperpod_debugger.store.findings import HISTORY_TTL, cluster_pk, plain, typed

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

INCIDENT_PREFIX = "INCIDENT#"
BASELINE_SK = "BASELINE"
CONFLICT_ROUNDS = 3


def incident_sk(key: str) -> str:
    return f"{INCIDENT_PREFIX}{key}"


def _priority(value: Any) -> Priority | None:
    """None when absent; a priority this layer does not know (written by another version) makes the item
    unreadable, to be set aside whole, rather than read as "no priority" and never told."""
    return Priority(str(value)) if value else None


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def to_item(stored: StoredIncident, *, ttl: timedelta = HISTORY_TTL) -> dict[str, Any]:
    """The plain attributes of an incident item, keys included."""
    i = stored.incident
    item: dict[str, Any] = {
        "pk": cluster_pk(i.cluster_arn),
        "sk": incident_sk(i.key),
        "item_type": "INCIDENT",
        "key": i.key,
        "kind": i.kind,
        "cluster_arn": i.cluster_arn,
        "cluster_name": i.cluster_name,
        "priority": str(i.priority) if i.priority else None,
        "verdict": i.verdict,
        "title": i.title,
        "check": i.check,
        "section": i.section,
        "fingerprint": i.fingerprint,
        "instance_id": i.instance_id,
        "instance_group": i.instance_group,
        "instance_type": i.instance_type,
        "likely_cause": i.likely_cause,
        "next_step": i.next_step,
        "next_command": i.next_command,
        "then_command": i.then_command,
        "occupancy": i.occupancy,
        "hyperpod": i.hyperpod,
        "checks": list(i.checks),
        "evidence": list(i.evidence),
        "explains": [{"check": e.check, "message": e.message, "instance_id": e.instance_id} for e in i.explains],
        "nodes": list(i.nodes),
        "reasons": [[reason, n] for reason, n in i.reasons],
        "worst": _issue_item(i.worst) if i.worst else None,
        "others": [_issue_item(o) for o in i.others] or None,
        "state": str(stored.state),
        "incident_id": stored.incident_id,
        "opened_at": stored.opened_at,
        "updated_at": stored.updated_at,
        "resolved_at": stored.resolved_at,
        "peak_priority": str(stored.peak_priority) if stored.peak_priority else None,
        "peak_rank": stored.peak_rank,
        "paged": stored.paged,
        "held": stored.held,
        "acting_since": stored.acting_since,
        "baseline": stored.baseline,
        "occurrences": stored.occurrences,
        "version": stored.version,
        "last_transition": str(stored.last_transition) if stored.last_transition else None,
        "last_transition_at": stored.last_transition_at,
        "reason": stored.reason,
        "trigger": stored.trigger,
        "pending": dict(stored.pending),
    }
    if stored.state is IncidentState.RESOLVED and stored.resolved_at:
        item["expires_at"] = int((_parse(stored.resolved_at) + ttl).timestamp())
    return {k: v for k, v in item.items() if v is not None}


def _issue_item(issue: NodeIssue) -> dict[str, Any]:
    out = {
        "check": issue.check,
        "message": issue.message,
        "priority": str(issue.priority) if issue.priority else None,
        "tag": issue.tag,
        "section": issue.section,
        "fixed_by_rung": issue.fixed_by_rung,
    }
    return {k: v for k, v in out.items() if v is not None}


def _issue(item: Mapping[str, Any]) -> NodeIssue:
    """A stored problem of a node incident (items written before these were kept simply have none)."""
    return NodeIssue(
        check=str(item.get("check") or "-"),
        message=str(item.get("message") or ""),
        priority=_priority(item.get("priority")),
        tag=str(item.get("tag") or "FAIL"),
        section=_text(item.get("section")),
        fixed_by_rung=bool(item.get("fixed_by_rung")),
    )


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def from_item(item: Mapping[str, Any]) -> StoredIncident:
    """A plain item back to a :class:`StoredIncident`; raises ``KeyError``/``ValueError`` for one that is not."""
    explains = tuple(
        Explained(str(e.get("check") or ""), str(e.get("message") or ""), _text(e.get("instance_id")))
        for e in item.get("explains") or ()
        if isinstance(e, Mapping)
    )
    incident = Incident(
        key=str(item["key"]),
        kind=str(item["kind"]),  # type: ignore[arg-type]  # checked below
        cluster_arn=str(item["cluster_arn"]),
        cluster_name=_text(item.get("cluster_name")),
        priority=_priority(item.get("priority")),
        verdict=str(item.get("verdict") or "investigate"),
        title=str(item.get("title") or item["key"]),
        check=str(item.get("check") or "-"),
        section=_text(item.get("section")),
        fingerprint=_text(item.get("fingerprint")),
        instance_id=_text(item.get("instance_id")),
        instance_group=_text(item.get("instance_group")),
        instance_type=_text(item.get("instance_type")),
        likely_cause=_text(item.get("likely_cause")),
        next_step=_text(item.get("next_step")),
        next_command=dict(item["next_command"]) if isinstance(item.get("next_command"), Mapping) else None,
        then_command=dict(item["then_command"]) if isinstance(item.get("then_command"), Mapping) else None,
        occupancy=_text(item.get("occupancy")),
        hyperpod=_text(item.get("hyperpod")),
        checks=tuple(str(c) for c in item.get("checks") or ()),
        evidence=tuple(str(line) for line in item.get("evidence") or ()),
        explains=explains,
        nodes=tuple(str(n) for n in item.get("nodes") or ()),
        reasons=tuple((str(r[0]), int(r[1])) for r in item.get("reasons") or () if len(r) == 2),
        worst=_issue(item["worst"]) if isinstance(item.get("worst"), Mapping) else None,
        others=tuple(_issue(o) for o in item.get("others") or () if isinstance(o, Mapping)),
    )
    if incident.kind not in ("node", "cause", "coverage"):
        raise ValueError(f"unknown incident kind {incident.kind!r}")
    last = item.get("last_transition")
    pending = item.get("pending") if isinstance(item.get("pending"), Mapping) else {}
    return StoredIncident(
        incident=incident,
        state=IncidentState(str(item["state"])),
        incident_id=str(item["incident_id"]),
        opened_at=str(item["opened_at"]),
        updated_at=str(item.get("updated_at") or item["opened_at"]),
        resolved_at=_text(item.get("resolved_at")),
        peak_priority=_priority(item.get("peak_priority")),
        peak_rank=int(item.get("peak_rank") or 0),
        paged=bool(item.get("paged")),
        held=bool(item.get("held")),
        acting_since=_text(item.get("acting_since")),
        baseline=bool(item.get("baseline")),
        occurrences=int(item.get("occurrences") or 1),
        version=int(item.get("version") or 0),
        last_transition=IncidentTransition(str(last)) if last else None,
        last_transition_at=_text(item.get("last_transition_at")),
        reason=_text(item.get("reason")),
        trigger=_text(item.get("trigger")),
        pending={str(k): str(v) for k, v in (pending or {}).items()},
    )


class IncidentStore:
    def __init__(self, clients: AwsClients, table_name: str, *, ttl: timedelta = HISTORY_TTL) -> None:
        self._ddb = clients.client("dynamodb")
        self.table = table_name
        self.ttl = ttl
        #: items that could not be read (sort key → reason, and the item itself): left alone, never
        #: overwritten blindly
        self.unreadable: dict[str, str] = {}
        self.unreadable_items: dict[str, dict[str, Any]] = {}
        #: every change this store wrote (the handler logs and counts them)
        self.written: list[IncidentChange] = []

    # --- reads ---------------------------------------------------------------------------------------

    def _query(self, cluster_arn: str, **extra: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        values = typed({":pk": cluster_pk(cluster_arn), ":prefix": INCIDENT_PREFIX}) | extra.pop("values", {})
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
                "ExpressionAttributeValues": values,
                "ConsistentRead": True,
                **extra,
            }
            if start:
                request["ExclusiveStartKey"] = start
            response = call(self._ddb, "dynamodb:Query", "query", **request)
            out.extend(plain(i) for i in response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                return out

    def _read(self, items: Sequence[dict[str, Any]]) -> dict[str, StoredIncident]:
        out: dict[str, StoredIncident] = {}
        for item in items:
            try:
                stored = from_item(item)
            except (KeyError, TypeError, ValueError) as exc:
                self.unreadable[str(item.get("sk"))] = f"{type(exc).__name__}: {exc}"[:300]
                self.unreadable_items[str(item.get("sk"))] = dict(item)
                continue
            out[stored.key] = stored
        return out

    def incidents(self, cluster_arn: str) -> dict[str, StoredIncident]:
        """Every incident item of the cluster (open and resolved), by key."""
        return self._read(self._query(cluster_arn))

    def pending(self, cluster_arn: str) -> list[StoredIncident]:
        """The cluster's incidents with transitions no channel was told of yet."""
        items = self._query(cluster_arn, FilterExpression="size(pending) > :zero", values=typed({":zero": 0}))
        return sorted(self._read(items).values(), key=lambda s: s.incident.key)

    def get(self, cluster_arn: str, key: str) -> StoredIncident | None:
        raw = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=typed({"pk": cluster_pk(cluster_arn), "sk": incident_sk(key)}),
            ConsistentRead=True,
        ).get("Item")
        return self._read([plain(raw)]).get(key) if raw else None

    def is_new_cluster(self, cluster_arn: str) -> bool:
        """True until the cluster's first triage was recorded (:meth:`mark_baseline`)."""
        raw = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=typed({"pk": cluster_pk(cluster_arn), "sk": BASELINE_SK}),
            ConsistentRead=True,
            ProjectionExpression="pk",
        ).get("Item")
        return raw is None

    # --- writes --------------------------------------------------------------------------------------

    def mark_baseline(self, cluster_arn: str, at: str) -> None:
        item = {"pk": cluster_pk(cluster_arn), "sk": BASELINE_SK, "item_type": "BASELINE", "at": at}
        try:
            call(
                self._ddb,
                "dynamodb:PutItem",
                "put_item",
                TableName=self.table,
                Item=typed(item),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ApiCallError as exc:
            if "ConditionalCheckFailed" not in (exc.failure.code or ""):
                raise

    def _put(self, change: IncidentChange) -> bool:
        """Write one change; False when another writer changed the item first."""
        item = to_item(change.item, ttl=self.ttl)
        if change.previous is None:
            condition, values = "attribute_not_exists(pk)", None
        else:
            condition, values = "#version = :expected", typed({":expected": change.previous.version})
        params: dict[str, Any] = {"TableName": self.table, "Item": typed(item), "ConditionExpression": condition}
        if values:
            params |= {"ExpressionAttributeValues": values, "ExpressionAttributeNames": {"#version": "version"}}
        try:
            call(self._ddb, "dynamodb:PutItem", "put_item", **params)
        except ApiCallError as exc:
            if "ConditionalCheckFailed" in (exc.failure.code or ""):
                return False
            raise
        return True

    def apply(
        self, plan: IncidentPlan, replan: Callable[[str, StoredIncident | None], IncidentChange | None]
    ) -> list[IncidentChange]:
        """Write every change; one that lost a race is planned again over the item as it is now (``replan``:
        key, the stored incident or None → the change to make, or None) up to :data:`CONFLICT_ROUNDS` times.
        Returns the changes written."""
        written: list[IncidentChange] = []
        for change in plan.changes:
            key = change.item.key
            current: IncidentChange | None = change
            for attempt in range(CONFLICT_ROUNDS):
                if current is None:
                    break
                if incident_sk(key) in self.unreadable:
                    break  # a damaged item is not overwritten: it stays for inspection
                if self._put(current):
                    written.append(current)
                    self.written.append(current)
                    break
                time.sleep(0.02 * 2**attempt)
                current = replan(key, self.get(plan.cluster_arn, key))
        return written

    def clear_pending(self, cluster_arn: str, key: str, entries: Sequence[str]) -> bool:
        """Remove these pending entries (told); the version moves, so a writer that read the item before
        plans again. False when the item is gone."""
        if not entries:
            return True
        names = {f"#p{i}": e for i, e in enumerate(entries)}
        expression = "REMOVE " + ", ".join(f"pending.{n}" for n in names) + " SET #version = #version + :one"
        try:
            call(
                self._ddb,
                "dynamodb:UpdateItem",
                "update_item",
                TableName=self.table,
                Key=typed({"pk": cluster_pk(cluster_arn), "sk": incident_sk(key)}),
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={**names, "#version": "version"},
                ExpressionAttributeValues=typed({":one": 1}),
            )
        except ApiCallError as exc:
            if "ConditionalCheckFailed" in (exc.failure.code or ""):
                return False
            raise
        return True

    def drop_pending(self, cluster_arn: str, sk: str) -> None:
        """Forget the pending transitions of an item that cannot be read (it was kept aside whole)."""
        call(
            self._ddb,
            "dynamodb:UpdateItem",
            "update_item",
            TableName=self.table,
            Key=typed({"pk": cluster_pk(cluster_arn), "sk": sk}),
            # an empty map, as a told incident keeps (every incident item has the attribute)
            UpdateExpression="SET pending = :none",
            ExpressionAttributeValues=typed({":none": {}}),
        )
