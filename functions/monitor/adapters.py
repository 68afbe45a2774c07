"""The monitor's adapters: Secrets Manager (the Slack webhook URL), Slack, SNS, and the idempotency store.

Every boto3 client comes from :class:`hyperpod_debugger.aws.clients.AwsClients`, built lazily (never
at import). The webhook URL is a secret: it is never logged, and errors name only a hash of it.
"""

from __future__ import annotations

import json
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
