"""Names, defaults and context keys shared by the stack, its constructs and the infrastructure tests."""

from __future__ import annotations

import pathlib

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
EVENT_WINDOW_HANDLER = "functions.monitor.handlers.windows.handler"

# EventBridge: HyperPod's source, detail-types and the rule patterns live in hyperpod_debugger.domain.eventbridge.

# Context keys (cdk.json / -c key=value) and their defaults.
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

DEFAULT_SCHEDULE = "rate(15 minutes)"
DEFAULT_START_SESSION_RATE = 3
DEFAULT_CLUSTER_CONCURRENCY = 3
DEFAULT_PROBE_PERIOD_HOURS = 24
DEFAULT_EVENT_WINDOW_SECONDS = 100
DEFAULT_FINDINGS_EVENT_BUS = "default"
FINDINGS_EVENT_BUS_OFF = "none"
DEFAULT_UNKNOWN_SHARE_ALARM_PERCENT = 20
DEFAULT_SLACK_SECRET_NAME = "hyperpod-debugger/slack-webhook"
DEFAULT_LOG_RETENTION_DAYS = 30
DEFAULT_FINDINGS_TTL_DAYS = 90
#: The marker every HMA detection record carries (see hyperpod_debugger.checks.logs.HMA_MARKER).
DEFAULT_HMA_FILTER_PATTERN = "HealthMonitoringAgentDetectionEvent"

# Findings table schema.
TABLE_PK = "pk"
TABLE_SK = "sk"
GSI_BY_NODE = "by_node"
GSI_BY_NODE_PK = "node_pk"
GSI_BY_NODE_SK = "last_seen"
TTL_ATTRIBUTE = "expires_at"
IDEMPOTENCY_PK = "id"
IDEMPOTENCY_TTL = "expiration"

# Stream notifier event source.
STREAM_BATCH_SIZE = 10
STREAM_RETRY_ATTEMPTS = 3
# The outbox (SQS FIFO) and its courier: the visibility timeout is six times the courier's timeout
# (AWS's advice for an SQS event source); 200 receives with the courier's backoff (1, 2, 4, 8, then
# every 15 minutes) are about 48 hours of retries before a message moves to the dead-letter queue.
COURIER_TIMEOUT_S = 60
OUTBOX_VISIBILITY_S = 6 * COURIER_TIMEOUT_S
OUTBOX_MAX_RECEIVES = 200
OUTBOX_RETENTION_DAYS = 4
OUTBOX_BATCH_SIZE = 10
#: An alert older than this still waiting in the outbox raises an alarm (a channel is down).
OUTBOX_MAX_AGE_S = 3600
EVENT_TARGET_RETRY_ATTEMPTS = 4

# Stable logical ids of the outputs tests and operators read.
OUTPUT_FINDINGS_TABLE = "FindingsTableName"
OUTPUT_TOPIC = "AlertTopicArn"
OUTPUT_STATE_MACHINE = "SweepStateMachineArn"
