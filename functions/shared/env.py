"""Each function's environment variables as a validated model, read once through a cached getter.

Nothing outside the handlers reads ``os.environ``; tests set variables with ``monkeypatch.setenv``
and call :func:`clear_env_cache`.
"""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from hyperpod_debugger.aws.ssm_documents import SessionDocuments
from hyperpod_debugger.domain.eventbridge import Allowlist


class _Env(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    AWS_REGION: str = Field(min_length=1)


class Runbook(BaseModel):
    #: Where the runbook sections live (links in Slack and email); none: section ids only.
    RUNBOOK_BASE_URL: str | None = None


class ClusterAllowlist(BaseModel):
    #: Comma-separated cluster names, ids or ARNs; empty: every cluster of the account and Region.
    CLUSTER_ALLOWLIST: str = ""

    @field_validator("CLUSTER_ALLOWLIST")
    @classmethod
    def _entries_are_clusters(cls, value: str) -> str:
        Allowlist.from_setting(value)  # a bad entry fails the deploy's first invocation, naming it
        return value

    def allows(self, cluster_name: str, cluster_arn: str) -> bool:
        """The same rule as the stack's EventBridge patterns (``domain.eventbridge.Allowlist``)."""
        return Allowlist.from_setting(self.CLUSTER_ALLOWLIST).allows(cluster_name, cluster_arn)


class Sessions(BaseModel):
    #: The stack's pinned Session documents, ``{"probe": name, "slurm": name}``: sessions run only the
    #: commands they carry. Empty: AWS-StartNonInteractiveCommand (``-c sessionDocuments=aws``).
    SESSION_DOCUMENTS: str = ""

    @field_validator("SESSION_DOCUMENTS")
    @classmethod
    def _documents_named(cls, value: str) -> str:
        SessionDocuments.from_setting(value)
        return value

    @property
    def session_documents(self) -> SessionDocuments:
        return SessionDocuments.from_setting(self.SESSION_DOCUMENTS)


class MonitorEnv(_Env, Runbook, ClusterAllowlist, Sessions):
    """The EventBridge event handler and the HMA log-subscription handler."""

    FINDINGS_TABLE: str = Field(min_length=1)
    IDEMPOTENCY_TABLE: str = Field(min_length=1)
    #: Probe the named node through Session Manager (off: API checks only).
    PROBE_ENABLED: bool = True
    PROBE_TIMEOUT_S: float = Field(default=180.0, gt=0)
    #: How long a processed event id is remembered (EventBridge redelivers within minutes).
    IDEMPOTENCY_TTL_S: PositiveInt = 3600
    #: Nodes the log-subscription handler triages per delivery when events are not coalesced (no window
    #: queue); the rest are left to the sweep.
    LOG_MAX_NODES: PositiveInt = 10
    #: The window queue: events of one cluster within ``EVENT_WINDOW_S`` become one triage (none: each
    #: event is triaged at once, on its own).
    EVENT_WINDOW_QUEUE_URL: str | None = None
    EVENT_WINDOW_S: int = Field(default=100, ge=1, le=900)
    #: Nodes one window probes, and the StartSession calls per second it uses (the sweep's headroom).
    EVENT_WINDOW_PROBE_MAX_NODES: PositiveInt = 15
    EVENT_WINDOW_PROBE_RATE: float = Field(default=0.5, gt=0, le=3)
    #: Where inputs that cannot be processed are kept (the raw event and the reason); none: logged only.
    UNPROCESSED_QUEUE_URL: str | None = None


class _Channels(BaseModel):
    #: A channel whose setting is empty is not used.
    SLACK_SECRET_NAME: str | None = None
    ALERT_TOPIC_ARN: str | None = None
    #: The EventBridge bus the findings' events go to (name or ARN; none: no events).
    EVENT_BUS_NAME: str | None = None
    #: Where the notifier and the courier remember what they queued and sent (none: a retry may repeat).
    IDEMPOTENCY_TABLE: str | None = None

    @property
    def channels(self) -> tuple[str, ...]:
        configured = (("sns", self.ALERT_TOPIC_ARN), ("slack", self.SLACK_SECRET_NAME), ("events", self.EVENT_BUS_NAME))
        return tuple(c for c, on in configured if on)


class NotifierEnv(_Env, Runbook, _Channels):
    """The DynamoDB-stream notifier: renders each transition and queues it in the outbox."""

    #: The outbox (SQS FIFO) the courier delivers from.
    OUTBOX_QUEUE_URL: str = Field(min_length=1)
    #: Where stream records that cannot be read are kept (the stream's own dead-letter queue).
    UNPROCESSED_QUEUE_URL: str | None = None
    #: More NEW findings of one cluster than this in one batch: one digest instead.
    DIGEST_THRESHOLD: PositiveInt = 10
    #: At least this many NEW findings of one check in one cluster: one circuit-breaker alert.
    BREAKER_THRESHOLD: PositiveInt = 5


class CourierEnv(_Env, _Channels):
    """The courier: delivers the outbox's messages to Slack and SNS, one attempt each time."""

    OUTBOX_QUEUE_URL: str = Field(min_length=1)
    #: Messages that can never be delivered as they are (refused payloads) go here at once.
    OUTBOX_DLQ_URL: str = Field(min_length=1)
    SLACK_TIMEOUT_S: float = Field(default=5.0, gt=0, le=30)
    #: Seconds before a failed message is retried: doubling from the base up to the cap.
    RETRY_BASE_S: PositiveInt = 60
    RETRY_CAP_S: PositiveInt = 900


def _environ(model: type[BaseModel]) -> dict[str, str]:
    # Empty values count as unset, so a stack can pass "" for an optional channel.
    return {k: v for k, v in os.environ.items() if k in model.model_fields and v != ""}


class SweepEnv(_Env, ClusterAllowlist, Sessions):
    """The per-cluster sweep the Step Functions Map invokes."""

    FINDINGS_TABLE: str = Field(min_length=1)
    PROBE_ENABLED: bool = True
    #: StartSession calls per second the sweep may use in all, shared at run time among the clusters it
    #: covers (the account allows about 3; the stack leaves headroom for people's own sessions).
    START_SESSION_RATE: float = Field(default=2.7, gt=0)
    #: Clusters the sweep checks at once (the outer Map's MaxConcurrency): the budget is shared among them.
    SWEEP_CLUSTER_CONCURRENCY: PositiveInt = 3
    #: Optional caps below what the share allows: nodes one sweep probes in one cluster, nodes per batch.
    PROBE_MAX_NODES: PositiveInt | None = None
    PROBE_BATCH_SIZE: PositiveInt | None = None
    PROBE_TIMEOUT_S: float = Field(default=120.0, gt=0)
    #: Seconds between scheduled sweeps, and the period within which every Running node is probed.
    SWEEP_INTERVAL_S: PositiveInt = 900
    PROBE_PERIOD_S: PositiveInt = 86400


@lru_cache(maxsize=1)
def sweep_env() -> SweepEnv:
    return SweepEnv.model_validate(_environ(SweepEnv))


@lru_cache(maxsize=1)
def monitor_env() -> MonitorEnv:
    """Raises ``pydantic.ValidationError`` naming every missing or invalid variable."""
    return MonitorEnv.model_validate(_environ(MonitorEnv))


@lru_cache(maxsize=1)
def notifier_env() -> NotifierEnv:
    return NotifierEnv.model_validate(_environ(NotifierEnv))


@lru_cache(maxsize=1)
def courier_env() -> CourierEnv:
    return CourierEnv.model_validate(_environ(CourierEnv))


def clear_env_cache() -> None:
    """Forget the cached settings, and the clients built with them."""
    from functions.shared import clients

    clients.clear()
    sweep_env.cache_clear()
    monitor_env.cache_clear()
    notifier_env.cache_clear()
    courier_env.cache_clear()
