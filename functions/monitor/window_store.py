"""The event windows' adapter (:mod:`functions.monitor.logic.windows`): kept events and open windows in the
findings table, window messages on the window queue (an SQS message delay).

Items (the notifier's stream filter passes only ``item_type`` FINDING, so none of these alerts anyone):

* kept event: ``pk=EVENTS#<cluster arn>``, ``sk=EVENT#<event id>``, the event's record as JSON, its
  arrival time; expires after ``EVENT_TTL`` (a window that fails for that long has raised its alarms).
* open window: ``pk=WINDOW#<cluster arn>``, ``sk=WINDOW``, its id and due time; created with
  ``attribute_not_exists`` (one opener), taken over only when stale, deleted by the claim on its id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from functions.monitor.logic.windows import Window
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.aws.store import batch_write, plain, typed
from hyperpod_debugger.lifecycle.findings import iso, parse_iso

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

    def open(self, window: Window, *, stale_before: datetime) -> Window | None:
        item = {
            **plain(_window_key(window.cluster_arn)),
            "item_type": "WINDOW",
            "window_id": window.window_id,
            "region": window.region,
            "opened_at": iso(window.opened_at),
            "due_at": iso(window.due_at),
            "expires_at": _epoch(window.due_at + EVENT_TTL),
        }
        try:
            # a new window, or the takeover of one whose message never came (due long ago)
            replaced = call(
                self._ddb,
                "dynamodb:PutItem",
                "put_item",
                TableName=self.table,
                Item=typed(item),
                ConditionExpression="attribute_not_exists(pk) OR due_at < :stale",
                ExpressionAttributeValues=typed({":stale": iso(stale_before)}),
                ReturnValues="ALL_OLD",
            ).get("Attributes")
        except ApiCallError as exc:
            if _conditional_failed(exc):
                return None
            raise
        if replaced and isinstance(plain(replaced).get("opened_at"), str):
            # a takeover covers the lost window's events too: it starts where that one started
            taken = replace(window, opened_at=parse_iso(str(plain(replaced)["opened_at"])))
            self._set_opened(taken)
            return taken
        return window

    def _set_opened(self, window: Window) -> None:
        call(
            self._ddb,
            "dynamodb:UpdateItem",
            "update_item",
            TableName=self.table,
            Key=_window_key(window.cluster_arn),
            UpdateExpression="SET opened_at = :opened",
            ConditionExpression="window_id = :id",
            ExpressionAttributeValues=typed({":opened": iso(window.opened_at), ":id": window.window_id}),
        )

    def _delete(self, window: Window) -> bool:
        """Delete the window's record if it is still that window's; False when it is not (or is gone)."""
        try:
            call(
                self._ddb,
                "dynamodb:DeleteItem",
                "delete_item",
                TableName=self.table,
                Key=_window_key(window.cluster_arn),
                ConditionExpression="window_id = :id",
                ExpressionAttributeValues=typed({":id": window.window_id}),
            )
        except ApiCallError as exc:
            if not _conditional_failed(exc):
                raise
            return False
        return True

    def cancel(self, window: Window) -> None:
        self._delete(window)

    def claim(self, window: Window) -> Literal["claimed", "gone", "superseded"]:
        if self._delete(window):
            return "claimed"
        current = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=_window_key(window.cluster_arn),
            ConsistentRead=True,
        ).get("Item")
        if current is None:
            return "gone"
        # a window that started no later than this one took it over (this message was thought lost);
        # a later one was opened after this window's claim (this is a retry)
        opened = parse_iso(str(plain(current).get("opened_at") or iso(window.opened_at)))
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
