"""Each function's environment variables as a validated model, read once through a cached getter.

Nothing outside the handlers reads ``os.environ``; tests set variables with ``monkeypatch.setenv``
and call :func:`clear_env_cache`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from hyperpod_debugger.aws.ssm_documents import SessionDocuments
from hyperpod_debugger.domain.eventbridge import Allowlist
from hyperpod_debugger.lifecycle import budget

if TYPE_CHECKING:
    from hyperpod_debugger.notify.policy import AlertPolicy


class _Env(BaseModel):
    # Built on first use: a function validates only its own settings, never the other functions'.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    AWS_REGION: str = Field(min_length=1)


class Runbook(BaseModel):
    model_config = ConfigDict(defer_build=True)

    #: Where the runbook sections live (links in Slack and email); none: section ids only.
    RUNBOOK_BASE_URL: str | None = None


class ClusterAllowlist(BaseModel):
    model_config = ConfigDict(defer_build=True)

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
    model_config = ConfigDict(defer_build=True)

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


class IncidentTiming(BaseModel):
    model_config = ConfigDict(defer_build=True)

    #: Seconds HyperPod may repair a node before its incident is paged anyway.
    REPAIR_GRACE_S: PositiveInt = 3600

    @property
    def repair_grace(self) -> timedelta:
        return timedelta(seconds=self.REPAIR_GRACE_S)


def _store_history_days() -> int:
    # Imported here: only the functions that write findings read this setting (and they import the store).
    from hyperpod_debugger.store.findings import HISTORY_TTL

    return HISTORY_TTL.days


class FindingsHistory(BaseModel):
    model_config = ConfigDict(defer_build=True)

    #: Days a resolved finding, a resolved incident and their history records stay in the findings table
    #: before DynamoDB's TTL removes them (the stack's ``findingsTtlDays``; unset: the store's own 90 days,
    #: ``hyperpod_debugger.store.findings.HISTORY_TTL``).
    FINDINGS_TTL_DAYS: int = Field(default_factory=_store_history_days, ge=1, le=3650)

    @property
    def history_ttl(self) -> timedelta:
        return timedelta(days=self.FINDINGS_TTL_DAYS)


class MonitorEnv(_Env, Runbook, ClusterAllowlist, Sessions, IncidentTiming, FindingsHistory):
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
    #: Seconds after an urgent event (a fault HyperPod reports on a node, an Error Cluster Event) on a quiet
    #: cluster before its window runs: the leading edge (``logic.windows``), so the first alert comes in
    #: seconds; the events that arrive with it join it.
    EVENT_WINDOW_LEAD_S: int = Field(default=2, ge=0, le=60)
    #: Nodes one window probes, and the StartSession calls per second it uses (the sweep's headroom).
    EVENT_WINDOW_PROBE_MAX_NODES: PositiveInt = 15
    EVENT_WINDOW_PROBE_RATE: float = Field(default=0.5, gt=0, le=3)
    #: Where inputs that cannot be processed are kept (the raw event and the reason); none: logged only.
    UNPROCESSED_QUEUE_URL: str | None = None


class _Channels(BaseModel):
    model_config = ConfigDict(defer_build=True)

    #: A channel whose setting is empty is not used.
    SLACK_SECRET_NAME: str | None = None
    ALERT_TOPIC_ARN: str | None = None
    #: The EventBridge bus the findings' events go to (name or ARN; none: no events).
    EVENT_BUS_NAME: str | None = None
    #: Where the notifier and the courier remember what they queued and sent (none: a retry may repeat).
    IDEMPOTENCY_TABLE: str | None = None

    #: The SNS topic an Amazon Q Developer (chat applications) channel configuration subscribes to (none: no
    #: such channel); messages are its custom-notification JSON.
    CHATBOT_TOPIC_ARN: str | None = None

    @property
    def channels(self) -> tuple[str, ...]:
        configured = (
            ("sns", self.ALERT_TOPIC_ARN),
            ("slack", self.SLACK_SECRET_NAME),
            ("chatbot", self.CHATBOT_TOPIC_ARN),
            ("events", self.EVENT_BUS_NAME),
        )
        return tuple(c for c, on in configured if on)


class AlertGroupTiming(BaseModel):
    model_config = ConfigDict(defer_build=True)

    #: Seconds before the first message of a quiet cluster's alert group, and at least between two.
    ALERT_GROUP_WAIT_S: int = Field(default=10, ge=0, le=300)
    ALERT_GROUP_INTERVAL_S: int = Field(default=300, ge=10, le=900)


class NotifierEnv(_Env, Runbook, _Channels, AlertGroupTiming):
    """The DynamoDB-stream notifier: finding events into the outbox; incidents' transitions arm their
    cluster's alert group."""

    #: The outbox (SQS FIFO) the courier delivers from.
    OUTBOX_QUEUE_URL: str = Field(min_length=1)
    #: Where stream records that cannot be read are kept (the stream's own dead-letter queue).
    UNPROCESSED_QUEUE_URL: str | None = None
    #: The findings table (the alert groups live there) and the alert-group queue (delayed flush messages).
    FINDINGS_TABLE: str = Field(min_length=1)
    ALERT_GROUP_QUEUE_URL: str = Field(min_length=1)


class AlertsEnv(_Env, Runbook, _Channels, AlertGroupTiming):
    """The alert-group function: flushes a cluster's pending incident transitions, and the daily summary."""

    FINDINGS_TABLE: str = Field(min_length=1)
    OUTBOX_QUEUE_URL: str = Field(min_length=1)
    ALERT_GROUP_QUEUE_URL: str = Field(min_length=1)
    UNPROCESSED_QUEUE_URL: str | None = None
    #: The alert policy: the least urgent priority each channel is paged for (P0, P1 or P2); what is below
    #: waits for the daily summary.
    SLACK_MIN_PRIORITY: str = "P1"
    EMAIL_MIN_PRIORITY: str = "P1"
    CHATBOT_MIN_PRIORITY: str = "P1"
    #: Channels that get the daily summary (comma-separated of sns, slack, chatbot; empty: none).
    DAILY_SUMMARY_CHANNELS: str = "sns,slack,chatbot"

    @field_validator("SLACK_MIN_PRIORITY", "EMAIL_MIN_PRIORITY", "CHATBOT_MIN_PRIORITY")
    @classmethod
    def _a_priority(cls, value: str) -> str:
        if value.strip().upper() not in ("P0", "P1", "P2"):
            raise ValueError(f"must be P0, P1 or P2, got {value!r}")
        return value.strip().upper()

    @property
    def policy(self) -> AlertPolicy:
        # Imported here: only the alert-group function tells people, and every function imports this module.
        from hyperpod_debugger.notify.policy import AlertPolicy

        minimums = {
            "slack": self.SLACK_MIN_PRIORITY,
            "sns": self.EMAIL_MIN_PRIORITY,
            "chatbot": self.CHATBOT_MIN_PRIORITY,
        }
        daily = [c.strip() for c in self.DAILY_SUMMARY_CHANNELS.split(",") if c.strip()]
        return AlertPolicy.from_settings(minimums, daily=daily)


class CourierEnv(_Env, _Channels):
    """The courier: delivers the outbox's messages to Slack, SNS and EventBridge, one attempt each time,
    each Slack webhook at its pace."""

    OUTBOX_QUEUE_URL: str = Field(min_length=1)
    #: Messages that can never be delivered as they are (refused payloads) go here at once.
    OUTBOX_DLQ_URL: str = Field(min_length=1)
    SLACK_TIMEOUT_S: float = Field(default=5.0, gt=0, le=30)
    #: Seconds before a failed message is retried: doubling from the base up to the cap.
    RETRY_BASE_S: PositiveInt = 60
    RETRY_CAP_S: PositiveInt = 900
    #: Slack's pace for an incoming webhook, kept by every courier together: one message per
    #: ``SLACK_PACE_S`` seconds, ``SLACK_BURST`` at once after a quiet spell (Slack: about one a second,
    #: short bursts allowed).
    SLACK_PACE_S: float = Field(default=1.0, gt=0, le=60)
    SLACK_BURST: PositiveInt = Field(default=3, le=20)


def _environ(model: type[BaseModel]) -> dict[str, str]:
    # Empty values count as unset, so a stack can pass "" for an optional channel.
    return {k: v for k, v in os.environ.items() if k in model.model_fields and v != ""}


class SweepEnv(_Env, ClusterAllowlist, Sessions, IncidentTiming, FindingsHistory):
    """The per-cluster sweep the Step Functions Map invokes."""

    FINDINGS_TABLE: str = Field(min_length=1)
    PROBE_ENABLED: bool = True
    #: StartSession calls per second the sweep may use in all, shared at run time among the clusters it
    #: covers: the account's rate (about 3) less the share reserved for people's own sessions
    #: (``startSessionReservePercent``) and the event windows' part (``hyperpod_debugger.lifecycle.budget``).
    START_SESSION_RATE: float = Field(default=round(budget.usable_rate(budget.ACCOUNT_RATE), 3), gt=0)
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
def alerts_env() -> AlertsEnv:
    return AlertsEnv.model_validate(_environ(AlertsEnv))


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
    alerts_env.cache_clear()
    courier_env.cache_clear()
