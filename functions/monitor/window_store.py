"""The event windows' adapter (:mod:`functions.monitor.logic.windows`): kept events and open windows in the
findings table, window messages on the window queue (an SQS message delay).

Items (the notifier's stream filter passes only ``item_type`` FINDING, so none of these alerts anyone):

* kept event: ``pk=EVENTS#<cluster arn>``, ``sk=EVENT#<event id>``, the event's record as JSON, its
  arrival time; expires after ``EVENT_TTL`` (a window that fails for that long has raised its alarms).
* the cluster's window: ``pk=WINDOW#<cluster arn>``, ``sk=WINDOW``, its id, when it opened and is due, its
  place in its run (``seq``, ``led``) and the cooldown after it (``cooldown_s``); ``claimed_at`` once claimed.
  Every write is conditional on the record as it was last seen (absent, or this window id open or claimed):
  one opener, and nothing opened over a window that changed meanwhile. A claimed record stays (the next
  window's cooldown is read from it) until the next window replaces it or it expires ``EVENT_TTL`` after
  its claim (a cluster quiet that long has no record: the same as quiet).

The event function writes only (``PutItem``, ``DeleteItem``): what a refused conditional write found comes
back with the refusal (``ReturnValuesOnConditionCheckFailure``), so opening reads nothing first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from functions.monitor.logic.windows import WINDOW_S, LastWindow, Opened, Window
from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.lifecycle.findings import iso, parse_iso
from hyperpod_debugger.store.findings import batch_write, plain, typed

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

EVENT_TTL = timedelta(days=2)
_WINDOW_SK = "WINDOW"


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def _events_pk(cluster_arn: str) -> str:
    return f"EVENTS#{cluster_arn}"


def _window_key(cluster_arn: str) -> dict[str, Any]:
    return typed({"pk": f"WINDOW#{cluster_arn}", "sk": _WINDOW_SK})


def _conditional_failed(exc: ApiCallError) -> bool:
    return "ConditionalCheckFailed" in (exc.failure.code or "")


def _found(exc: ApiCallError) -> dict[str, Any] | None:
    """The item a refused conditional write found (asked for with ``ReturnValuesOnConditionCheckFailure``)."""
    cause = exc.__cause__
    item = cause.response.get("Item") if isinstance(cause, ClientError) else None
    return plain(item) if isinstance(item, dict) and item else None


def _item_of(window: Window, claimed_at: datetime | None = None) -> dict[str, Any]:
    item = {
        **plain(_window_key(window.cluster_arn)),
        "item_type": "WINDOW",
        "window_id": window.window_id,
        "region": window.region,
        "opened_at": iso(window.opened_at),
        "due_at": iso(window.due_at),
        "seq": window.seq,
        "led": window.led,
        "cooldown_s": window.cooldown_s,
        "expires_at": _epoch((claimed_at or window.due_at) + EVENT_TTL),
    }
    if claimed_at is not None:
        item["claimed_at"] = iso(claimed_at)
    return item


def _last_of(item: dict[str, Any]) -> LastWindow:
    """The record as the logic reads it; a record written before runs and cooldowns were kept is an open
    window of a run of its own."""
    window = Window(
        cluster_arn=str(item["pk"]).removeprefix("WINDOW#"),
        region=str(item.get("region") or ""),
        window_id=str(item["window_id"]),
        opened_at=parse_iso(str(item["opened_at"])),
        due_at=parse_iso(str(item["due_at"])),
        seq=int(item.get("seq") or 0),
        led=bool(item.get("led") or False),
        cooldown_s=int(item.get("cooldown_s") or WINDOW_S),
    )
    claimed = item.get("claimed_at")
    return LastWindow(window, parse_iso(str(claimed)) if claimed else None)


def _as_seen(last: LastWindow | None) -> tuple[str, dict[str, Any]]:
    """A condition that holds while the record is still ``last`` (None: no record), and its values."""
    if last is None:
        return "attribute_not_exists(pk)", {}
    state = "attribute_not_exists(claimed_at)" if last.open else "attribute_exists(claimed_at)"
    return f"window_id = :seen AND {state}", {":seen": last.window.window_id}


class TableWindows:
    """:class:`~functions.monitor.logic.windows.WindowsPort` on the findings table."""

    def __init__(self, clients: AwsClients, table_name: str) -> None:
        self._ddb = clients.client("dynamodb")
        self.table = table_name

    def keep(self, cluster_arn: str, record: dict[str, Any], now: datetime) -> None:
        item = {
            "pk": _events_pk(cluster_arn),
            "sk": f"EVENT#{record['event_id']}",
            "item_type": "EVENT",
            "received_at": record.get("received_at") or iso(now),
            "record": json.dumps(record, ensure_ascii=False, sort_keys=True),
            "expires_at": _epoch(now + EVENT_TTL),
        }
        call(self._ddb, "dynamodb:PutItem", "put_item", TableName=self.table, Item=typed(item))

    def latest(self, cluster_arn: str) -> LastWindow | None:
        """The cluster's window record (a consistent read; for tests and tools: the event function reads
        nothing, its refused writes say what they found)."""
        item = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=_window_key(cluster_arn),
            ConsistentRead=True,
        ).get("Item")
        return _last_of(plain(item)) if item else None

    def open(self, window: Window, *, replacing: LastWindow | None) -> Opened:
        condition, values = _as_seen(replacing)
        try:
            call(
                self._ddb,
                "dynamodb:PutItem",
                "put_item",
                TableName=self.table,
                Item=typed(_item_of(window)),
                ConditionExpression=condition,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **({"ExpressionAttributeValues": typed(values)} if values else {}),
            )
        except ApiCallError as exc:
            if not _conditional_failed(exc):
                raise
            found = _found(exc)
            return Opened(False, _last_of(found) if found else None)
        return Opened(True)

    def cancel(self, window: Window, *, restore: LastWindow | None) -> None:
        condition = "window_id = :id AND attribute_not_exists(claimed_at)"
        values = typed({":id": window.window_id})
        try:
            if restore is None:
                call(
                    self._ddb,
                    "dynamodb:DeleteItem",
                    "delete_item",
                    TableName=self.table,
                    Key=_window_key(window.cluster_arn),
                    ConditionExpression=condition,
                    ExpressionAttributeValues=values,
                )
            else:
                call(
                    self._ddb,
                    "dynamodb:PutItem",
                    "put_item",
                    TableName=self.table,
                    Item=typed(_item_of(restore.window, restore.claimed_at)),
                    ConditionExpression=condition,
                    ExpressionAttributeValues=values,
                )
        except ApiCallError as exc:
            if not _conditional_failed(exc):
                raise

    def claim(self, window: Window, now: datetime) -> Literal["claimed", "gone", "superseded"]:
        try:
            call(
                self._ddb,
                "dynamodb:UpdateItem",
                "update_item",
                TableName=self.table,
                Key=_window_key(window.cluster_arn),
                UpdateExpression="SET claimed_at = :now, expires_at = :expires",
                ConditionExpression="window_id = :id AND attribute_not_exists(claimed_at)",
                ExpressionAttributeValues=typed(
                    {":now": iso(now), ":expires": _epoch(now + EVENT_TTL), ":id": window.window_id}
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ApiCallError as exc:
            if not _conditional_failed(exc):
                raise
            current = _found(exc)
        else:
            return "claimed"
        if current is None or current.get("window_id") == window.window_id:
            return "gone"  # claimed before: a repeat delivery, or a retry after a failed triage
        # a window that started no later than this one took it over (this message was thought lost);
        # a later one was opened after this window's claim (this is a retry)
        opened = parse_iso(str(current.get("opened_at") or iso(window.opened_at)))
        return "superseded" if opened <= window.opened_at else "gone"

    def kept(self, cluster_arn: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
                "ExpressionAttributeValues": typed({":pk": _events_pk(cluster_arn), ":prefix": "EVENT#"}),
                "ConsistentRead": True,
            }
            if start:
                request["ExclusiveStartKey"] = start
            response = call(self._ddb, "dynamodb:Query", "query", **request)
            items.extend(plain(i) for i in response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        records = []
        for item in sorted(items, key=lambda i: (str(i.get("received_at") or ""), str(i["sk"]))):
            event_id = str(item["sk"]).removeprefix("EVENT#")
            try:
                record = json.loads(str(item.get("record")))
            except ValueError:
                record = None
            if not isinstance(record, dict):
                record = {"damaged": str(item.get("record"))[:500]}
            records.append({**record, "event_id": event_id})
        return records

    def discard(self, cluster_arn: str, event_ids: Sequence[str]) -> int:
        keys = [{"pk": _events_pk(cluster_arn), "sk": f"EVENT#{e}"} for e in dict.fromkeys(event_ids)]
        return batch_write(self._ddb, self.table, [{"DeleteRequest": {"Key": typed(k)}} for k in keys])


class WindowQueue:
    """:class:`~functions.monitor.logic.windows.QueuePort` on SQS: the window's message, delayed until due."""

    #: SQS's longest message delay
    MAX_DELAY_S = 900

    def __init__(self, clients: AwsClients, queue_url: str) -> None:
        self._sqs = clients.client("sqs")
        self.queue_url = queue_url

    def schedule(self, window: Window, delay_s: int) -> None:
        call(
            self._sqs,
            "sqs:SendMessage",
            "send_message",
            QueueUrl=self.queue_url,
            MessageBody=json.dumps(window.message()),
            DelaySeconds=max(0, min(self.MAX_DELAY_S, delay_s)),
        )
