"""The alert groups' adapter (:mod:`functions.monitor.logic.alert_groups`): one item per cluster in the findings
table, and the flush messages on the alert-group queue (an SQS message delay).

Item: ``pk=ALERTGROUP``, ``sk=<cluster arn>``: the region and name, the armed window (``window_id``,
``due_at``) and when the group last flushed. One partition holds every cluster's group, so the daily summary
lists them with one Query; the notifier's stream filter passes ``FINDING`` and ``INCIDENT`` items only, so none
of these wakes it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.monitor.logic.alert_groups import ClusterRef, Group
from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.lifecycle.findings import iso, parse_iso
from hyperpod_debugger.store.findings import plain, typed

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

GROUP_PK = "ALERTGROUP"


def _key(cluster_arn: str) -> dict[str, Any]:
    return typed({"pk": GROUP_PK, "sk": cluster_arn})


def _conditional_failed(exc: ApiCallError) -> bool:
    return "ConditionalCheckFailed" in (exc.failure.code or "")


def _time(value: Any) -> datetime | None:
    try:
        return parse_iso(str(value)) if value else None
    except ValueError:
        return None


def _group(item: dict[str, Any]) -> Group:
    ref = ClusterRef(str(item["sk"]), str(item.get("region") or ""), str(item.get("cluster_name") or ""))
    return Group(
        ref,
        window_id=str(item["window_id"]) if item.get("window_id") else None,
        due_at=_time(item.get("due_at")),
        last_flush_at=_time(item.get("last_flush_at")),
    )


class TableAlertGroups:
    """:class:`~functions.monitor.logic.alert_groups.GroupsPort` on the findings table."""

    def __init__(self, clients: AwsClients, table_name: str) -> None:
        self._ddb = clients.client("dynamodb")
        self.table = table_name

    def get(self, cluster_arn: str) -> Group | None:
        raw = call(
            self._ddb,
            "dynamodb:GetItem",
            "get_item",
            TableName=self.table,
            Key=_key(cluster_arn),
            ConsistentRead=True,
        ).get("Item")
        return _group(plain(raw)) if raw else None

    def arm(self, ref: ClusterRef, window_id: str, due_at: datetime, *, stale_before: datetime) -> bool:
        try:
            call(
                self._ddb,
                "dynamodb:UpdateItem",
                "update_item",
                TableName=self.table,
                Key=_key(ref.cluster_arn),
                UpdateExpression="SET item_type = :type, #region = :region, cluster_name = :name, "
                "window_id = :window, due_at = :due",
                ConditionExpression="attribute_not_exists(due_at) OR due_at < :stale",
                ExpressionAttributeNames={"#region": "region"},
                ExpressionAttributeValues=typed(
                    {
                        ":type": "ALERTGROUP",
                        ":region": ref.region,
                        ":name": ref.cluster_name,
                        ":window": window_id,
                        ":due": iso(due_at),
                        ":stale": iso(stale_before),
                    }
                ),
            )
        except ApiCallError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def _disarm(self, cluster_arn: str, window_id: str, at: datetime | None) -> bool:
        expression = "REMOVE window_id, due_at"
        values: dict[str, Any] = {":window": window_id}
        if at is not None:
            expression = "SET last_flush_at = :at " + expression
            values[":at"] = iso(at)
        try:
            call(
                self._ddb,
                "dynamodb:UpdateItem",
                "update_item",
                TableName=self.table,
                Key=_key(cluster_arn),
                UpdateExpression=expression,
                ConditionExpression="window_id = :window",
                ExpressionAttributeValues=typed(values),
            )
        except ApiCallError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def cancel(self, cluster_arn: str, window_id: str) -> None:
        self._disarm(cluster_arn, window_id, None)

    def close(self, cluster_arn: str, window_id: str, at: datetime | None) -> bool:
        return self._disarm(cluster_arn, window_id, at)

    def clusters(self) -> list[Group]:
        out: list[Group] = []
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": typed({":pk": GROUP_PK}),
            }
            if start:
                request["ExclusiveStartKey"] = start
            response = call(self._ddb, "dynamodb:Query", "query", **request)
            out.extend(_group(plain(i)) for i in response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                return out


class AlertGroupQueue:
    """:class:`~functions.monitor.logic.alert_groups.FlushQueue` on SQS: the flush message, delayed until due."""

    #: SQS's longest message delay
    MAX_DELAY_S = 900

    def __init__(self, clients: AwsClients, queue_url: str) -> None:
        self._sqs = clients.client("sqs")
        self.queue_url = queue_url

    def schedule(self, message: dict[str, str], delay_s: int) -> None:
        call(
            self._sqs,
            "sqs:SendMessage",
            "send_message",
            QueueUrl=self.queue_url,
            MessageBody=json.dumps(message),
            DelaySeconds=max(0, min(self.MAX_DELAY_S, delay_s)),
        )
