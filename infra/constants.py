"""Names, defaults and context keys shared by the stack, its constructs and the infrastructure tests."""

from __future__ import annotations

import pathlib
from typing import Final

from hyperpod_debugger.store.findings import HISTORY_TTL

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYER_DIR = REPO_ROOT / "build" / "layer"

STACK_NAME = "HyperPodNodeDebugger"
SERVICE_NAME = "hyperpod-debugger"
METRICS_NAMESPACE = "HyperPodDebugger"
#: The ``service`` dimension Powertools puts on the functions' metrics (functions.shared.observability.SERVICE).
MONITOR_METRICS_SERVICE = "hyperpod-monitor"

# Lambda handlers, referenced by string only (the code lives in functions/, built separately).
EVENT_HANDLER = "functions.monitor.handlers.events.handler"
SWEEP_HANDLER = "functions.monitor.handlers.sweep.handler"
PROBE_BATCH_HANDLER = "functions.monitor.handlers.probes.handler"
STREAM_NOTIFIER_HANDLER = "functions.monitor.handlers.stream.handler"
COURIER_HANDLER = "functions.monitor.handlers.outbox.handler"
LOG_SUBSCRIPTION_HANDLER = "functions.monitor.handlers.hma.handler"
ALERT_GROUPS_HANDLER = "functions.monitor.handlers.alerts.handler"
EVENT_WINDOW_HANDLER = "functions.monitor.handlers.windows.handler"

# EventBridge: HyperPod's source, detail-types and the rule patterns live in hyperpod_debugger.domain.eventbridge.

# Context keys (cdk.json / -c key=value) and their defaults; infra/settings.py reads and checks them all.
CTX_SCHEDULE = "sweepSchedule"
CTX_START_SESSION_RATE = "startSessionRate"
CTX_CLUSTER_CONCURRENCY = "sweepClusterConcurrency"
CTX_PROBE_PERIOD_HOURS = "probePeriodHours"
CTX_EKS_CLUSTERS = "eksClusters"
CTX_CLUSTER_ALLOWLIST = "clusterAllowlist"
CTX_ALERT_EMAILS = "alertEmails"
CTX_SLACK_SECRET_NAME = "slackSecretName"
CTX_LAYER_DIR = "layerAssetPath"
CTX_LOG_RETENTION_DAYS = "logRetentionDays"
CTX_FINDINGS_TTL_DAYS = "findingsTtlDays"
CTX_RUNBOOK_BASE_URL = "runbookBaseUrl"
CTX_CLUSTER_LOG_GROUPS = "clusterLogGroups"
CTX_HMA_FILTER_PATTERN = "hmaFilterPattern"
#: "pinned" (default): sessions only through the stack's own documents; "aws": AWS-StartNonInteractiveCommand.
CTX_SESSION_DOCUMENTS = "sessionDocuments"
#: Seconds one cluster's events are gathered into one triage (functions.monitor.logic.windows).
CTX_EVENT_WINDOW_SECONDS = "eventWindowSeconds"
#: The EventBridge bus finding events go on: "default", a bus name or a bus ARN; "none" puts no events.
CTX_FINDINGS_EVENT_BUS = "findingsEventBus"
#: The UNKNOWN share (percent of a cluster's nodes) above which the watcher alarm goes off.
CTX_UNKNOWN_SHARE_ALARM_PERCENT = "unknownShareAlarmPercent"

# The alert policy (infra/constructs/notifications.py AlertSettings; hyperpod_debugger.notify.policy).
#: The least urgent priority paged on every channel (P0, P1 or P2), and per channel, overriding it.
CTX_ALERT_MIN_PRIORITY = "alertMinPriority"
CTX_SLACK_MIN_PRIORITY = "slackMinPriority"
CTX_EMAIL_MIN_PRIORITY = "emailMinPriority"
CTX_CHAT_MIN_PRIORITY = "chatMinPriority"
#: Seconds before a quiet cluster's first message, and at least between two messages of one cluster.
CTX_ALERT_GROUP_WAIT_SECONDS = "alertGroupWaitSeconds"
CTX_ALERT_GROUP_INTERVAL_SECONDS = "alertGroupIntervalSeconds"
#: The hour (UTC) of the daily summary, and the channels that get it (comma-separated of email, slack, chat).
CTX_DAILY_SUMMARY_HOUR_UTC = "dailySummaryHourUtc"
CTX_DAILY_SUMMARY_CHANNELS = "dailySummaryChannels"
#: "true": create the SNS topic an Amazon Q Developer (chat applications) channel configuration subscribes to.
CTX_CHAT_NOTIFICATIONS = "chatNotifications"
#: Minutes HyperPod may repair a node before its incident is paged anyway.
CTX_REPAIR_GRACE_MINUTES = "repairGraceMinutes"
DEFAULT_ALERT_MIN_PRIORITY = "P1"
DEFAULT_ALERT_GROUP_WAIT_SECONDS = 10
DEFAULT_ALERT_GROUP_INTERVAL_SECONDS = 300
DEFAULT_DAILY_SUMMARY_HOUR_UTC = 9
DEFAULT_DAILY_SUMMARY_CHANNELS = "email,slack,chat"
DEFAULT_REPAIR_GRACE_MINUTES = 60

DEFAULT_SCHEDULE = "rate(15 minutes)"
DEFAULT_START_SESSION_RATE = 3
DEFAULT_CLUSTER_CONCURRENCY = 3
DEFAULT_PROBE_PERIOD_HOURS = 24
DEFAULT_EVENT_WINDOW_SECONDS = 100
DEFAULT_FINDINGS_EVENT_BUS = "default"
#: the finding events' source (hyperpod_debugger.notify.finding_event.SOURCE)
FINDING_EVENT_SOURCE = "hyperpod-node-debugger"

# The optional archive of finding events (S3, Parquet, Glue, Athena).
CTX_HISTORY_ARCHIVE = "historyArchive"
CTX_HISTORY_ARCHIVE_ACCOUNTS = "historyArchiveAccounts"
CTX_HISTORY_ARCHIVE_DAYS = "historyArchiveDays"
DEFAULT_HISTORY_ARCHIVE_DAYS = 730
ARCHIVE_DATABASE = "hyperpod_debugger"
ARCHIVE_TABLE = "finding_events"
FINDINGS_EVENT_BUS_OFF = "none"
DEFAULT_UNKNOWN_SHARE_ALARM_PERCENT = 20
#: The Slack webhook secret is named by the operator (`-c slackSecretName=…`); none: no Slack channel.
DEFAULT_SLACK_SECRET_NAME = ""
DEFAULT_LOG_RETENTION_DAYS = 30
#: Days a resolved finding, a resolved incident and their history records stay in the findings table before
#: DynamoDB's TTL removes them (the functions' FINDINGS_TTL_DAYS; hyperpod_debugger.store.findings.HISTORY_TTL).
DEFAULT_FINDINGS_TTL_DAYS = HISTORY_TTL.days
MIN_FINDINGS_TTL_DAYS = 1
MAX_FINDINGS_TTL_DAYS = 3650
DEFAULT_SESSION_DOCUMENTS: Final = "pinned"  # Final: typed as the literal the setting takes
DEFAULT_CHAT_NOTIFICATIONS = False
#: No runbook URL: messages name the section and `hyperpod-debugger runbook <section>` prints it.
DEFAULT_RUNBOOK_BASE_URL = ""
#: The marker every HMA detection record carries (see hyperpod_debugger.checks.logs.HMA_MARKER).
DEFAULT_HMA_FILTER_PATTERN = "HealthMonitoringAgentDetectionEvent"

# The share (percent) of startSessionRate the monitor leaves to people: an on-call engineer opening Session
# Manager sessions during an incident must not compete with it. The sweep and the event windows' probes
# (0.5/s) together use at most the rest: at the defaults 3 × 66 % = 1.98/s, the sweep 1.48/s, people 1.02/s.
# Checked at synth (hyperpod_debugger.lifecycle.budget.SweepSettings); 0 reserves nothing.
CTX_START_SESSION_RESERVE_PERCENT = "startSessionReservePercent"
DEFAULT_START_SESSION_RESERVE_PERCENT = 34

# Findings table schema.
TABLE_PK = "pk"
TABLE_SK = "sk"
GSI_BY_NODE = "by_node"
GSI_BY_NODE_PK = "node_pk"
GSI_BY_NODE_SK = "last_seen"
#: a cluster's history over a period (`findings stats`): only history items carry its partition key
GSI_BY_CLUSTER = "by_cluster"
GSI_BY_CLUSTER_PK = "cluster_pk"
GSI_BY_CLUSTER_SK = "last_seen"
TTL_ATTRIBUTE = "expires_at"
IDEMPOTENCY_PK = "id"
IDEMPOTENCY_TTL = "expiration"

# Stream notifier event source.
STREAM_BATCH_SIZE = 10
STREAM_RETRY_ATTEMPTS = 3
#: The stream's records older than this when they reach the notifier (IteratorAge, milliseconds in
#: CloudWatch) raise an alarm: a record normally arrives within seconds, so five minutes behind means the
#: notifier is stuck on a failing batch (up to three retries of a two-minute invocation) and people hear of new
#: incidents later than one alert-group interval (alertGroupIntervalSeconds, 300 s by default) would delay them.
STREAM_MAX_ITERATOR_AGE_S = 300
# The outbox (SQS FIFO) and its courier: the visibility timeout is six times the courier's timeout
# (AWS's advice for an SQS event source); 200 receives with the courier's backoff (1, 2, 4, 8, then
# every 15 minutes) are about 48 hours of retries before a message moves to the dead-letter queue.
COURIER_TIMEOUT_S = 60
#: The findings table's partition that holds every cluster's alert group (functions/monitor/alert_store.py).
ALERT_GROUP_PARTITION = "ALERTGROUP"
#: The alert-group function: one cluster's flush (a query, renders, a few queue writes) per invocation.
ALERT_GROUP_TIMEOUT_S = 60
OUTBOX_VISIBILITY_S = 6 * COURIER_TIMEOUT_S
OUTBOX_MAX_RECEIVES = 200
OUTBOX_RETENTION_DAYS = 4
OUTBOX_BATCH_SIZE = 10
#: Couriers at once (the outbox event source's ScalingConfig.MaximumConcurrency; Lambda takes 2 to 1000). Slack
#: takes about one message a second per webhook, and every courier waits for the same lane (SharedLanes): a
#: third courier would only wait and use up its messages' receives. Email (SNS) is not slowed by it.
COURIER_MAX_CONCURRENCY = 2
#: Event windows triaged at once (the window queue's MaximumConcurrency, Lambda's least): each window's probes
#: start Session Manager sessions at EVENT_WINDOW_PROBE_RATE, so at most this many times that rate in all.
WINDOW_MAX_CONCURRENCY = 2
#: An alert older than this still waiting in the outbox raises an alarm (a channel is down).
OUTBOX_MAX_AGE_S = 3600
EVENT_TARGET_RETRY_ATTEMPTS = 4

# Stable logical ids of the outputs tests and operators read.
OUTPUT_FINDINGS_TABLE = "FindingsTableName"
OUTPUT_TOPIC = "AlertTopicArn"
OUTPUT_CHAT_TOPIC = "ChatTopicArn"
OUTPUT_STATE_MACHINE = "SweepStateMachineArn"
