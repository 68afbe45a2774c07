"""Fleet health at a glance: the CloudWatch dashboard, and the alarms that watch the watcher.

The dashboard reads the metrics the functions emit (``functions.shared.metric_names``) with SEARCH
expressions, so every cluster and instance group appears without being named at deploy time, and the
current problem nodes from the sweep's log lines. Alarms cannot use SEARCH: they watch the account-wide
series (dimension ``service`` alone; Maximum is the worst cluster) and AWS's own metrics:

* no sweep completed in two intervals (Step Functions' ExecutionsSucceeded; no data is breaching);
* a node not probed within 1.5 × the probe period (OldestProbeAgeSeconds);
* the UNKNOWN share above a threshold (context ``unknownShareAlarmPercent``);
* a cluster the sweep could not read in two sweeps running;
* events of the stack's rules that EventBridge could neither deliver nor keep (AWS/Events; those it kept
  in the unprocessed-events queue raise that queue's alarm, in ``Detection``);
* finding events EventBridge keeps refusing land in the outbox alarms (``Notifications``), like Slack's;
* every function's errors and throttles (AWS/Lambda by FunctionName): one alarm each per function, except
  the errors of the functions whose own construct already alarms on them (:data:`FAILURES` says what an
  error of each means; a function without a line there stops the synth).

The other alarms of the stack (queues, handler errors, rejected events) are in the dashboard's alarm widget.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from functions.shared import metric_names as names
from infra.constants import METRICS_NAMESPACE, MONITOR_METRICS_SERVICE
from infra.constructs.notifications import alarm

#: The longest alarm period CloudWatch takes, and the longest time an alarm may look back over (for
#: periods of an hour or more; shorter periods may look back one day).
MAX_ALARM_PERIOD = cdk.Duration.days(1)
MAX_EVALUATION_RANGE_S = 7 * 86400
SHORT_EVALUATION_RANGE_S = 86400


#: What an error of each function means, and what becomes of its input (the Errors alarm's description), by
#: the function's construct id. The functions whose construct alarms on their errors itself (the event
#: handler, the event window, the log subscription) need no line.
FAILURES: dict[str, str] = {
    "SweepCluster": (
        "The sweep's cluster step failed (Step Functions tried it again, then marked the cluster failed for "
        "this sweep): that cluster's nodes were not checked in this sweep"
    ),
    "ProbeBatch": (
        "A probe batch of the sweep failed: its nodes were not probed; they stay due and lead the next sweep's rotation"
    ),
    "StreamNotifier": (
        "The stream notifier failed: Lambda retries the batch (split in two), then keeps its place in the "
        "notifier DLQ; incidents are told late, or not at all for the records that reach the DLQ"
    ),
    "AlertGroups": (
        "The alert-group function failed: a cluster's group is tried again from its queue and after ten receives "
        "waits, untold, in the alert-group DLQ; a failed daily summary is retried by Lambda, then skipped"
    ),
    "Courier": (
        "The courier failed as a whole (a channel refusing one message is retried per message, not this): the "
        "outbox keeps the batch and hands it over again; alerts are late"
    ),
}
#: Alarm periods of the functions' errors and throttles.
FUNCTION_ALARM_PERIOD = cdk.Duration.minutes(5)


def function_metric(function: lambda_.IFunction, name: str) -> cloudwatch.Metric:
    """``name`` (Errors, Throttles) of one function, summed over five minutes (AWS/Lambda, FunctionName)."""
    return function.metric(name, period=FUNCTION_ALARM_PERIOD, statistic="Sum")


def account_metric(name: str, *, statistic: str = "Maximum", period: cdk.Duration) -> cloudwatch.Metric:
    """The account-wide series of ``name`` (dimension ``service`` alone)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": MONITOR_METRICS_SERVICE},
        statistic=statistic,
        period=period,
    )


def search(name: str, *, statistic: str, period: cdk.Duration, dimensions: Sequence[str], scale: str = "") -> str:
    """A SEARCH over one dimension set of ``name`` (every cluster, or every instance group, as its own line)."""
    schema = ",".join([METRICS_NAMESPACE, *dimensions, "service"])
    return f"SEARCH('{{{schema}}} MetricName=\"{name}\"', '{statistic}', {int(period.to_seconds())}){scale}"


def per_cluster(name: str, *, statistic: str, period: cdk.Duration, scale: str = "") -> cloudwatch.MathExpression:
    """Each cluster's line of ``name``."""
    return _searched(search(name, statistic=statistic, period=period, dimensions=[names.CLUSTER], scale=scale), period)


def per_group(name: str, *, statistic: str, period: cdk.Duration) -> cloudwatch.MathExpression:
    """Each instance group's line of ``name``."""
    dimensions = [names.CLUSTER, names.INSTANCE_GROUP]
    return _searched(search(name, statistic=statistic, period=period, dimensions=dimensions), period)


def _searched(expression: str, period: cdk.Duration) -> cloudwatch.MathExpression:
    # no label: SEARCH names each line after its dimension values
    return cloudwatch.MathExpression(expression=expression, label="", period=period, using_metrics={})


def lost_events(rule: events.IRule) -> cloudwatch.MathExpression:
    """Events of ``rule`` neither delivered nor kept: EventBridge counts a failed delivery that reached the
    dead-letter queue in DeadLetterInvocations, one that did not in FailedInvocations (no DLQ) or in
    InvocationsFailedToBeSentToDlq; it sends each only when it is not zero, hence FILL."""

    def metric(name: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/Events",
            metric_name=name,
            dimensions_map={"RuleName": rule.rule_name},
            statistic="Sum",
            period=cdk.Duration.minutes(5),
        )

    return cloudwatch.MathExpression(
        expression="FILL(failed, 0) + FILL(unkept, 0)",
        label="events lost",
        period=cdk.Duration.minutes(5),
        using_metrics={"failed": metric("FailedInvocations"), "unkept": metric("InvocationsFailedToBeSentToDlq")},
    )


def alarm_period(duration: cdk.Duration) -> cdk.Duration:
    """``duration`` as an alarm period: whole minutes, at least one, at most a day."""
    seconds = min(int(duration.to_seconds()), int(MAX_ALARM_PERIOD.to_seconds()))
    return cdk.Duration.seconds(max(60, seconds - seconds % 60))


def stall_periods(interval: cdk.Duration) -> tuple[cdk.Duration, int]:
    """The period and the number of periods with no completed sweep that mean two intervals passed without
    one (every period of the run empty; CloudWatch's look-back limit caps very long intervals)."""
    period = alarm_period(interval)
    seconds = int(period.to_seconds())
    wanted = -(-2 * int(interval.to_seconds()) // seconds)
    limit = MAX_EVALUATION_RANGE_S if seconds >= 3600 else SHORT_EVALUATION_RANGE_S
    return period, max(2, min(wanted, limit // seconds))


class Observability(Construct):
    """Exposes `dashboard` and `alarms` (name → Alarm, the watcher's own)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        state_machine: sfn.IStateMachine,
        interval: cdk.Duration,
        probe_period: cdk.Duration,
        rules: Sequence[events.Rule],
        sweep_log_group: logs.ILogGroup,
        unknown_share_percent: float,
        other_alarms: Sequence[cloudwatch.IAlarm] = (),
        functions: Mapping[str, lambda_.IFunction] | None = None,
        errors_alarmed: Collection[lambda_.IFunction] = (),
    ) -> None:
        """``functions``: every function of the stack by its construct id (each gets a Throttles alarm and, unless
        it is in ``errors_alarmed``, an Errors alarm)."""
        super().__init__(scope, construct_id)
        if not 0 < unknown_share_percent < 100:
            raise ValueError(f"unknownShareAlarmPercent must be above 0 and below 100, got {unknown_share_percent}")
        self.interval = interval
        self.unknown_share_percent = unknown_share_percent
        self.topic = topic
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        period, stalled = stall_periods(interval)
        self._alarm(
            "sweep_stalled",
            "SweepStalled",
            state_machine.metric_succeeded(period=period, statistic="Sum"),
            "No sweep completed in two sweep intervals: the monitor may have stopped looking (a disabled "
            "schedule, a failing state machine); until one completes, no alert does not mean a healthy fleet",
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cloudwatch.TreatMissingData.BREACHING,
            periods=stalled,
        )
        self._alarm(
            "probe_coverage",
            "NodeNotProbed",
            account_metric(names.OLDEST_PROBE_AGE, period=alarm_period(interval)),
            f"A Running node has gone {_hours(1.5 * probe_period.to_seconds())} (1.5 x the probe period) without "
            "an evaluated probe: the rotation cannot keep up (raise startSessionRate or probePeriodHours) or that "
            "node's probes keep failing; what is not probed is not known to be healthy",
            threshold=1.5 * probe_period.to_seconds(),
        )
        self._alarm(
            "unknown_share",
            "UnknownShareHigh",
            account_metric(names.UNKNOWN_SHARE, period=alarm_period(interval)),
            f"More than {unknown_share_percent:g} % of a cluster's nodes are UNKNOWN: the monitor cannot read them "
            "(access denied, timed out, unreachable). That is not a verdict on the nodes; see the sweep's log",
            threshold=unknown_share_percent,
        )
        self._alarm(
            "clusters_unreadable",
            "ClusterSweepsFailing",
            account_metric(names.CLUSTERS_FAILED, statistic="Sum", period=alarm_period(interval)),
            "The sweep could not read a cluster in two sweeps running (throttled, denied, or the cluster is gone); "
            "its nodes are not being checked",
            periods=2,
        )
        for rule in rules:
            self._alarm(
                "lost_" + _snake(rule.node.id),
                f"{rule.node.id}EventsLost",
                lost_events(rule),
                f"EventBridge could neither deliver an event of rule {rule.node.id} to its target nor keep it in "
                "the unprocessed-events queue: that event is lost (a delivery that failed and was kept raises the "
                "unprocessed-events alarm instead)",
            )
        self._function_alarms(functions or {}, errors_alarmed)
        self.dashboard = self._build_dashboard(state_machine, sweep_log_group, other_alarms)

    def _function_alarms(self, functions: Mapping[str, lambda_.IFunction], errors_alarmed: Collection) -> None:
        """Each function's errors (unless its construct alarms on them) and throttles; no data is no error."""
        undescribed = sorted(n for n, f in functions.items() if f not in errors_alarmed and n not in FAILURES)
        if undescribed:
            raise ValueError(f"say what an error of {', '.join(undescribed)} means: add a line to FAILURES")
        for name, function in functions.items():
            if function not in errors_alarmed:
                self.alarms[_snake(name) + "_errors"] = alarm(
                    self, f"{name}Errors", function_metric(function, "Errors"), FAILURES[name], self.topic
                )
            self.alarms[_snake(name) + "_throttles"] = alarm(
                self,
                f"{name}Throttles",
                function_metric(function, "Throttles"),
                f"Lambda refused to run {name}: the account's concurrent executions in this Region were used up "
                "(a burst here or another workload). What invoked it tries again, so its work is late, and lost "
                "once those tries run out",
                self.topic,
            )

    def _alarm(
        self,
        key: str,
        construct_id: str,
        metric: cloudwatch.IMetric,
        description: str,
        *,
        threshold: float = 0,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
        periods: int = 1,
    ) -> None:
        created = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=comparison,
            treat_missing_data=missing,
        )
        # the watcher's alarms say when they clear too: the operator learns the monitor looks again
        created.add_alarm_action(cw_actions.SnsAction(self.topic))
        created.add_ok_action(cw_actions.SnsAction(self.topic))
        self.alarms[key] = created

    def _build_dashboard(
        self,
        state_machine: sfn.IStateMachine,
        sweep_log_group: logs.ILogGroup,
        other_alarms: Sequence[cloudwatch.IAlarm],
    ) -> cloudwatch.Dashboard:
        period = alarm_period(self.interval)
        dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{cdk.Aws.STACK_NAME}-FleetHealth-{cdk.Aws.REGION}",
            default_interval=cdk.Duration.days(7),
            period_override=cloudwatch.PeriodOverride.INHERIT,
        )
        dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=(
                    "## HyperPod fleet health\n"
                    "**Healthy share**: nodes with no open finding that are Running and were probed within the "
                    "probe period. **UNKNOWN**: nodes the monitor could not read (denied, timed out, "
                    "unreachable), never a verdict on them. Each line is one cluster (or instance group). "
                    "Every finding names its runbook section in `references/node-diagnostics-detail.md`; "
                    "`hyperpod-debugger findings` lists them."
                ),
                width=24,
                height=3,
            )
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Healthy share per cluster (%)",
                left=[per_cluster(names.HEALTHY_SHARE, statistic="Minimum", period=period)],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100, show_units=False),
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="UNKNOWN share per cluster (%)",
                left=[per_cluster(names.UNKNOWN_SHARE, statistic="Maximum", period=period)],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100, show_units=False),
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=self.unknown_share_percent, label="alarm threshold")
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Failing nodes per instance group",
                left=[per_group(names.VERDICT_METRICS["FAIL"], statistic="Maximum", period=period)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Open P0 findings per cluster",
                left=[per_cluster(names.OPEN_FINDINGS["P0"], statistic="Maximum", period=period)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Open P1 findings per cluster",
                left=[per_cluster(names.OPEN_FINDINGS["P1"], statistic="Maximum", period=period)],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Oldest probe age per cluster (hours)",
                left=[per_cluster(names.OLDEST_PROBE_AGE, statistic="Maximum", period=period, scale=" / 3600")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="StartSession calls (left) and throttles (right)",
                left=[account_metric(names.START_SESSION_CALLS, statistic="Sum", period=period)],
                right=[account_metric(names.START_SESSION_THROTTLES, statistic="Sum", period=period)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Sweep duration (s, left) and each cluster's step (s, right)",
                left=[
                    cloudwatch.MathExpression(
                        expression="m1 / 1000",
                        label="sweep",
                        period=period,
                        using_metrics={"m1": state_machine.metric_time(period=period, statistic="Maximum")},
                    )
                ],
                right=[per_cluster(names.CLUSTER_STEP_SECONDS, statistic="Maximum", period=period)],
                width=8,
            ),
        )
        resolve = account_metric(names.TIME_TO_RESOLVE, statistic="p50", period=cdk.Duration.hours(1))
        resolve_p90 = account_metric(names.TIME_TO_RESOLVE, statistic="p90", period=cdk.Duration.hours(1))
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Time from first seen to resolved (hours)",
                left=[
                    cloudwatch.MathExpression(
                        expression="p50 / 3600",
                        label="p50",
                        period=cdk.Duration.hours(1),
                        using_metrics={"p50": resolve},
                    ),
                    cloudwatch.MathExpression(
                        expression="p90 / 3600",
                        label="p90",
                        period=cdk.Duration.hours(1),
                        using_metrics={"p90": resolve_p90},
                    ),
                ],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(
                title="Alarms: the watcher's own, then delivery and processing",
                alarms=[*self.alarms.values(), *other_alarms],
                width=12,
                height=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.LogQueryWidget(
                title=(
                    "Problem nodes the sweeps named in the time range, latest first (a last_seen older than the "
                    "latest sweep: the sweeps stopped naming that node)"
                ),
                log_group_names=[sweep_log_group.log_group_name],
                query_lines=[
                    f"filter message = '{names.PROBLEM_NODE_LOG}'",
                    "stats latest(verdict) as verdict, latest(checks) as checks, latest(instance_group) as group, "
                    "max(@timestamp) as last_seen by cluster, instance_id",
                    "sort last_seen desc",
                    f"limit {names.PROBLEM_NODES_LOGGED}",
                ],
                width=24,
                height=8,
            )
        )
        return dashboard


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"
