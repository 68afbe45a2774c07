"""The monitor's adapters: Secrets Manager (the Slack webhook URL), Slack, SNS, the idempotency store,
the notifier's delivery ledger and the queue that keeps inputs the monitor could not process.

Every boto3 client comes from :class:`hyperpod_debugger.aws.clients.AwsClients`, built lazily (never
at import). The webhook URL is a secret: it is never logged, and errors name only a hash of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from botocore.exceptions import BotoCoreError, ClientError

from functions.monitor.logic import ChannelError
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.notify.slack import DeliveryError, post_to_webhook


@lru_cache(maxsize=4)
def idempotency_store(table_name: str, region: str) -> DynamoDBPersistenceLayer:
    return DynamoDBPersistenceLayer(table_name=table_name, boto3_client=AwsClients(region).client("dynamodb"))


def webhook_url(clients: AwsClients, secret_name: str) -> str:
    """The secret's value: the URL itself, or JSON with a ``url`` / ``webhook_url`` key."""
    try:
        value = clients.client("secretsmanager").get_secret_value(SecretId=secret_name)["SecretString"]
    except (ClientError, BotoCoreError, KeyError) as exc:
        raise ChannelError(f"the Slack webhook secret could not be read ({type(exc).__name__})") from None
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise ChannelError("the Slack webhook secret is not valid JSON") from None
        text = str(data.get("url") or data.get("webhook_url") or "").strip()
    if not text:
        raise ChannelError("the Slack webhook secret holds no URL")
    return text


#: SQS's message size limit; an event larger than this (EventBridge allows 256 KiB) is cut, and says so.
MAX_KEPT_BYTES = 256 * 1024 - 2048


def _kept_body(event: Any) -> str:
    try:
        body = json.dumps(event, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        body = repr(event)
    raw = body.encode("utf-8")
    if len(raw) > MAX_KEPT_BYTES:
        body = raw[:MAX_KEPT_BYTES].decode("utf-8", "ignore") + "\n[cut: the input was larger than one SQS message]"
    return body


def keep_unprocessed(
    queue_url: str | None, region: str, event: Any, *, kind: str, errors: Sequence[dict[str, str]]
) -> bool:
    """Put an input the monitor could not process (the raw event, verbatim) on the unprocessed-events
    queue, with why in its message attributes. False when no queue is configured.

    Raises ``RuntimeError`` when the queue refuses it: the caller lets the invocation fail, so
    Lambda's retries and its on-failure destination keep the event instead.
    """
    if not queue_url:
        return False
    reason = "; ".join(f"{e.get('at', '?')}: {e.get('error', '?')}" for e in errors)[:1000] or "unknown"
    detail_type = event.get("detail-type") if isinstance(event, dict) else None
    attributes = {
        "kind": {"DataType": "String", "StringValue": kind},
        "reason": {"DataType": "String", "StringValue": reason},
    }
    if isinstance(detail_type, str) and detail_type:
        attributes["detail_type"] = {"DataType": "String", "StringValue": detail_type[:256]}
    try:
        AwsClients(region).client("sqs").send_message(
            QueueUrl=queue_url, MessageBody=_kept_body(event), MessageAttributes=attributes
        )
    except (ClientError, BotoCoreError) as exc:
        raise RuntimeError(f"the unprocessed-events queue refused the {kind} ({type(exc).__name__})") from None
    return True


class AwsChannels:
    """Slack through an incoming webhook (URL in Secrets Manager), email through an SNS topic.

    A channel without configuration is skipped. The webhook URL is read once per instance.
    """

    def __init__(
        self,
        clients: AwsClients,
        *,
        secret_name: str | None,
        topic_arn: str | None,
        slack_attempts: int = 3,
        slack_timeout: float = 10.0,
    ) -> None:
        self._clients = clients
        self._secret_name = secret_name
        self._topic_arn = topic_arn
        self._attempts = slack_attempts
        self._timeout = slack_timeout
        self._url: str | None = None

    def slack(self, payload: dict[str, Any]) -> None:
        if not self._secret_name:
            return
        if self._url is None:
            self._url = webhook_url(self._clients, self._secret_name)
        try:
            post_to_webhook(self._url, payload, timeout=self._timeout, attempts=self._attempts)
        except DeliveryError as exc:
            # DeliveryError's text is already free of the URL (notify.slack redacts it).
            raise ChannelError(f"slack: {exc}") from None

    def email(self, subject: str, body: str) -> None:
        if not self._topic_arn:
            return
        try:
            self._clients.client("sns").publish(TopicArn=self._topic_arn, Subject=subject, Message=body)
        except (ClientError, BotoCoreError) as exc:
            raise ChannelError(f"sns: {type(exc).__name__}") from None


class DeliveryLedger:
    """Which channel already carried which stream record, kept in the idempotency table.

    One item per (channel, record): ``id = sent#<channel>#<sequence number>`` with the table's TTL
    attribute two days out (a stream record lives one). Read once per batch (BatchGetItem), written after
    each successful send (BatchWriteItem). The ledger only ever saves a duplicate: when it cannot be
    read or written the message is sent again, never dropped.
    """

    TTL = timedelta(days=2)
    _GET_CHUNK = 100
    _PUT_CHUNK = 25
    _ROUNDS = 3

    def __init__(self, clients: AwsClients, table_name: str, channels: Sequence[str] = ("sns", "slack")) -> None:
        self._ddb = clients.client("dynamodb")
        self._table = table_name
        self._channels = tuple(channels)
        self._known: set[str] = set()
        self.errors: list[str] = []

    @staticmethod
    def _id(channel: str, record_id: str) -> str:
        return f"sent#{channel}#{record_id}"

    def load(self, record_ids: Sequence[str]) -> None:
        ids = [self._id(ch, rid) for rid in dict.fromkeys(record_ids) if rid for ch in self._channels]
        for start in range(0, len(ids), self._GET_CHUNK):
            keys = [{"id": {"S": i}} for i in ids[start : start + self._GET_CHUNK]]
            for attempt in range(self._ROUNDS):
                try:
                    response = self._ddb.batch_get_item(
                        RequestItems={self._table: {"Keys": keys, "ProjectionExpression": "id"}}
                    )
                except (ClientError, BotoCoreError) as exc:
                    self.errors.append(f"read: {type(exc).__name__}")
                    break
                for item in response.get("Responses", {}).get(self._table, []):
                    self._known.add(item["id"]["S"])
                keys = (response.get("UnprocessedKeys") or {}).get(self._table, {}).get("Keys") or []
                if not keys:
                    break
                time.sleep(0.05 * 2**attempt)

    def sent(self, channel: str, record_ids: Sequence[str]) -> bool:
        return bool(record_ids) and all(self._id(channel, rid) in self._known for rid in record_ids)

    def mark(self, channel: str, record_ids: Sequence[str]) -> None:
        expires = int((datetime.now(UTC) + self.TTL).timestamp())
        fresh = [self._id(channel, rid) for rid in dict.fromkeys(record_ids) if rid]
        self._known.update(fresh)
        for start in range(0, len(fresh), self._PUT_CHUNK):
            requests = [
                {"PutRequest": {"Item": {"id": {"S": i}, "expiration": {"N": str(expires)}}}}
                for i in fresh[start : start + self._PUT_CHUNK]
            ]
            for attempt in range(self._ROUNDS):
                try:
                    response = self._ddb.batch_write_item(RequestItems={self._table: requests})
                except (ClientError, BotoCoreError) as exc:
                    self.errors.append(f"write: {type(exc).__name__}")
                    break
                requests = (response.get("UnprocessedItems") or {}).get(self._table) or []
                if not requests:
                    break
                time.sleep(0.05 * 2**attempt)
