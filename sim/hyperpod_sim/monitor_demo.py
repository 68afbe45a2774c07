"""The monitor's path in the demo, through the real Lambda handlers of ``functions/monitor``.

A HyperPod node-health event goes to ``event_handler`` (a triage scoped to its node, written to the
findings table on moto, with the incidents it opens); the table's stream records go to ``stream_notifier``
ten per invocation, as the stack's event source mapping hands them over: it queues each finding's event in the
outbox (SQS FIFO) and arms the cluster's alert group, which ``alert_groups`` flushes a few seconds later into one
message per channel; ``courier`` reads the Slack webhook URL from Secrets Manager, posts to a local HTTP sink,
publishes the email to SNS (read back through a subscribed SQS queue) and puts each finding event on the default
EventBridge bus (a local rule routes them to a queue).
The demo prints what Slack, the email and one finding event show, replays the same event to show the idempotency,
publishes two Cluster Events on the simulated EventBridge where the stack's own rule patterns decide
which reaches the handler, lets the operator fix one problem, and replays the scheduled sweep
(``sweep_cluster``, then ``probe_batch`` per batch where the handlers have it, as the Step Functions
Map does) to show the RESOLVED message and the fleet-health metrics the sweep emitted.

The handlers live in the repository (``functions/``), not in the installed package: without a
checkout (or without the ``lambda`` extra) this part is skipped with one line, and the rest of the
demo runs as before. The handlers take the current time; where the demo waits for an alert group, it moves the
handlers' clock and the queues' clock forward together instead of sleeping.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain import eventbridge
from hyperpod_debugger.notify import finding_event
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_sim.lambda_harness import Email, MonitorHarness, SqsClock, map_items, monitor_harness
from hyperpod_sim.scenarios import REGION, Demo

#: The demo probes at the fake service's pace, not at the 3/s a real account allows.
DEMO_PROBE = ProbeOptions(rate=20.0, timeout=30.0)
#: The check the operator fixes between the event and the sweep (enableDnsHostnames, § B.2).
FIXED_CHECK = "vpc.dns"
EVENT_ID = "5d1c9e0a-3b7f-4c62-8e15-a9d04f7b2c38"
#: How the demo lets time pass while an alert group waits (seconds per step), and the groups' interval (the
#: stack's default ``alertGroupIntervalSeconds``): a cluster's next message is due that long after its last.
STEP_S = 5.0
GROUP_INTERVAL_S = 300.0
#: The functions' settings for the demo: probes at the fake Session Manager's pace.
DEMO_ENV: dict[str, str | None] = {
    "PROBE_ENABLED": "true",
    "PROBE_TIMEOUT_S": f"{DEMO_PROBE.timeout:g}",
    "START_SESSION_RATE": f"{DEMO_PROBE.rate:g}",
    "SLACK_TIMEOUT_S": "5",
    # Everything else (the alert groups' timing, the alert policy, the channels) is the stack's default,
    # so the messages shown are the ones a deployment sends.
}
SKIPPED = (
    "MONITOR: skipped. This part runs the monitor's Lambda handlers (functions/ in the repository, with "
    "the `lambda` extra): run `make demo` from a checkout of the repository to see it.\n"
)


def node_health_event(demo: Demo, instance_id: str, now: datetime) -> dict[str, Any]:
    """An EventBridge event as HyperPod's health agent emits it for an unhealthy node."""
    cluster = demo.eks
    return {
        "version": "0",
        "id": EVENT_ID,
        "detail-type": "SageMaker HyperPod Cluster Node Health Event",
        "source": "aws.sagemaker",
        "account": cluster.arn.split(":")[4],
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [cluster.arn],
        "detail": {
            "ClusterName": cluster.name,
            "ClusterArn": cluster.arn,
            "InstanceId": instance_id,
            "HealthSummary": {
                "HealthStatus": "Unhealthy",
                "HealthStatusReason": "HMA detected fault type NvidiaErrorTerminate on the node",
                "RepairAction": "None",
            },
        },
    }


def _shown(mrkdwn: str) -> str:
    """Slack's three escapes turned back into the characters it displays."""
    return mrkdwn.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def slack_preview(message: dict[str, Any]) -> list[str]:
    """What Slack shows for a Block Kit message, as indented text (its escapes displayed as characters)."""
    lines: list[str] = []
    for block in message.get("blocks", []):
        kind = block.get("type")
        if kind == "header":
            lines.append(block["text"]["text"])
        elif kind == "section":
            texts = [block["text"]["text"]] if "text" in block else [f["text"] for f in block.get("fields", [])]
            for text in texts:
                lines.extend(_shown(text).splitlines())
        elif kind == "context":
            lines.append(_shown("  ".join(e.get("text", "") for e in block.get("elements", []))))
        elif kind == "divider":
            lines.append("─" * 40)
    return [f"  │ {line}" for line in lines]


def _handlers() -> ModuleType | None:
    """``functions.monitor.handlers``, or None without a repository checkout or the ``lambda`` extra."""
    try:
        from functions.monitor import handlers
    except ImportError:
        return None
    return handlers


def _counts(counted: Mapping[str, int] | Counter[str]) -> str:
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counted.items()) if n) or "no change"


def _response(response: Any) -> str:
    """A handler's response in one line: status and transitions counted by kind."""
    if not isinstance(response, dict):
        return repr(response)
    parts = [f"status={response['status']}"] if "status" in response else []
    if "transitions" in response:
        parts.append(f"transitions: {_counts(response.get('transitions') or {})}")
    if "batchItemFailures" in response:
        parts.append(f"batchItemFailures: {len(response['batchItemFailures'])}")
    return ", ".join(parts) or json.dumps(response)


def _show_slack(out: list[str], payload: dict[str, Any]) -> None:
    out.append("Slack (Block Kit, as the sink received it and Slack displays it):")
    out.extend(slack_preview(payload))
    out.append("")


def _show_email(out: list[str], email: Email) -> None:
    out.append(f"Email (SNS, read back from the subscribed queue) — Subject: {email.subject}")
    out.extend(f"  │ {line}" for line in email.message.splitlines())
    out.append("")


@dataclass
class DemoClock:
    """The handlers' clock and moto's SQS clock: one simulated time (SQS's, frozen), moved forward only by
    :meth:`advance`, so what the demo prints does not depend on how fast the machine runs it (the demo never
    sleeps)."""

    sqs: SqsClock

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.sqs.now(), UTC)

    def advance(self, seconds: float) -> None:
        self.sqs.advance(seconds)


@dataclass
class Notified:
    records: int
    #: of those, the findings written (the rest: incidents, and the alert groups' own bookkeeping)
    findings: int
    responses: list[Any]
    payloads: list[dict[str, Any]]
    emails: list[Email]
    waited_s: float


def _notify(monitor: MonitorHarness, handlers: ModuleType, clock: DemoClock) -> Notified:
    """The stream's new records to the notifier as its event source hands them over (ten per invocation),
    then time passes until the alert group it armed is flushed and the courier has delivered what that
    queued: what arrived, and how long (simulated) that took."""
    before = len(monitor.sink.received)
    batches = monitor.stream.batches()
    responses = [monitor.invoke(handlers.stream_notifier, b, function_name="hyperpod-stream-notifier") for b in batches]
    records = sum(len(b["Records"]) for b in batches)
    findings = sum(
        1
        for b in batches
        for r in b["Records"]
        if str(r.get("dynamodb", {}).get("Keys", {}).get("sk", {}).get("S", "")).startswith("FINDING#")
    )
    emails: list[Email] = []
    waited = 0.0
    monitor.deliver_outbox(handlers.courier)  # the finding events go at once
    emails += monitor.emails()
    while monitor.alert_groups.depth() and waited < 2 * GROUP_INTERVAL_S:
        clock.advance(STEP_S)
        waited += STEP_S
        monitor.run_alert_groups(handlers.alert_groups)
        monitor.deliver_outbox(handlers.courier)
        emails += monitor.emails()
    return Notified(records, findings, responses, monitor.sink.received[before:], emails, waited)


def _event_urgency(event: dict[str, Any]) -> tuple[str, str]:
    finding = event.get("detail", {}).get("finding", {})
    return (str(finding.get("priority") or "P9"), str(finding.get("check") or ""))


def _triage_runs(monitor: MonitorHarness) -> int:
    return sum(1 for line in monitor.logs if line.get("message") == "triage applied")


def _sweep(monitor: MonitorHarness, handlers: ModuleType, demo: Demo, now: datetime) -> tuple[list[str], Counter[str]]:
    """The scheduled sweep of one cluster as Step Functions runs it: ``sweep_cluster``, then
    ``probe_batch`` for each batch it returns (where the handlers split the sweep that way)."""
    cluster = demo.eks
    request = {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": f"sweep-{now:%Y%m%dT%H%M%SZ}"}
    response = monitor.invoke(handlers.sweep_cluster, request)
    lines = [f"   sweep_cluster → {_response(response)}"]
    transitions: Counter[str] = Counter(response.get("transitions") or {}) if isinstance(response, dict) else Counter()
    probe_batch = getattr(handlers, "probe_batch", None)
    from functions.shared.events import PROBE_ITEM_SELECTOR  # present whenever the handlers are

    # the state machine's inner Map: each batch number becomes a reference to the plan the cluster step stored
    batches = map_items(response, "$.batches", PROBE_ITEM_SELECTOR) if isinstance(response, dict) else []
    if probe_batch is not None:
        for batch in batches:
            answer = monitor.invoke(probe_batch, batch)
            nodes = answer.get("planned", 0) if isinstance(answer, dict) else 0
            lines.append(f"   probe_batch (stored batch {batch['batch']}, {nodes} node(s)) → {_response(answer)}")
            if isinstance(answer, dict):
                transitions.update(answer.get("transitions") or {})
    return lines, transitions


# --------------------------------------------------------------------------- EventBridge, locally


#: The finding events' envelope, which a rule taking them all matches (README, "Findings as EventBridge events").
FINDING_SOURCE = finding_event.SOURCE
FINDING_DETAIL_TYPE = finding_event.DETAIL_TYPE


@dataclass
class FindingEventQueue:
    """A rule on the simulated default bus routing every finding event to a queue the demo reads."""

    clients: AwsClients
    url: str

    @classmethod
    def create(cls, clients: AwsClients) -> FindingEventQueue:
        events, sqs = clients.client("events"), clients.client("sqs")
        url = sqs.create_queue(QueueName="routed-finding-events")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        pattern = {"source": [FINDING_SOURCE], "detail-type": [FINDING_DETAIL_TYPE]}
        events.put_rule(Name="finding-events-demo", EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule="finding-events-demo", Targets=[{"Id": "demo-queue", "Arn": arn}])
        return cls(clients, url)

    def drain(self) -> list[dict[str, Any]]:
        sqs = self.clients.client("sqs")
        received = []
        while batch := sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10).get("Messages", []):
            for message in batch:
                received.append(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
        return received


def _show_finding_event(out: list[str], event: dict[str, Any]) -> None:
    """One finding event as the rule's target received it; long lists cut to their first item here."""
    shown = json.loads(json.dumps(event))
    finding = shown.get("detail", {}).get("finding", {})
    cut = []
    for holder, key in ((finding, "evidence"), (shown.get("detail", {}), "suggested_commands")):
        items = holder.get(key)
        if isinstance(items, list) and len(items) > 1:
            holder[key] = items[:1]
            cut.append(f"{key}: {len(items) - 1} more")
    out.append(
        "EventBridge event (as the rule's target received it"
        + (f"; shortened here: {', '.join(cut)}" if cut else "")
        + "):"
    )
    out.extend(f"  │ {line}" for line in json.dumps(shown, indent=2, ensure_ascii=False).splitlines())
    out.append("")


#: The sweep's numbers the demo prints (names in ``functions/shared/metric_names.py``), as table columns;
#: the durations and ages it also emits change from run to run and are left out here.
SHOWN_METRICS = (
    ("Nodes", "nodes"),
    ("NodesHealthy", "healthy"),
    ("NodesWarn", "warn"),
    ("NodesFailing", "failing"),
    ("NodesUnknown", "unknown"),
    ("NodesUnobserved", "unobserved"),
    ("NodesNotRunning", "not running"),
    ("HealthyShare", "healthy %"),
    ("UnknownShare", "UNKNOWN %"),
)
OPEN_METRICS = ("OpenFindingsP0", "OpenFindingsP1", "OpenFindingsP2")


def _metric_lines(blobs: list[dict[str, Any]], cluster: str) -> list[str]:
    """The sweep's EMF blobs for ``cluster`` as a table: the cluster's row, one per instance group, and
    the probe rotation's StartSession calls."""

    def value(blob: dict[str, Any], name: str) -> str:
        raw = blob.get(name)
        number = sum(raw) if isinstance(raw, list) else raw
        return f"{number:g}" if isinstance(number, (int, float)) else "-"

    ours = [b for b in blobs if b.get("cluster") == cluster and "Nodes" in b]
    # the cluster's row first, then its groups
    ours.sort(key=lambda b: (b.get("instance_group") is not None, str(b.get("instance_group"))))
    rows = [
        [f"group {b['instance_group']}" if "instance_group" in b else f"cluster {cluster}"]
        + [value(b, name) for name, _ in SHOWN_METRICS]
        + ["/".join(value(b, name) for name in OPEN_METRICS)]
        for b in ours
    ]
    if not rows:
        return []
    header = ["", *(label for _, label in SHOWN_METRICS), "open P0/P1/P2"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "   │ "
        + "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]
    lines.append("   │ (the cluster's open findings include its cluster-level ones, which belong to no group)")
    calls = sum(sum(b.get("StartSessionCalls") or [0]) for b in blobs if b.get("cluster") == cluster)
    throttles = sum(sum(b.get("StartSessionThrottles") or [0]) for b in blobs if b.get("cluster") == cluster)
    if calls or throttles:
        lines.append(f"   │ probe batches: StartSession calls {calls:g}, throttled {throttles:g}")
    return lines


@dataclass
class LocalRules:
    """The stack's three rules on the simulated account's EventBridge (moto), each sending what it
    matches to a queue of its own, so the demo sees which rule fired. The patterns are the very ones
    the stack deploys (``hyperpod_debugger.domain.eventbridge.rule_patterns``)."""

    clients: AwsClients
    queues: dict[str, str]

    @classmethod
    def create(cls, clients: AwsClients, patterns: Mapping[str, dict[str, Any]]) -> LocalRules:
        events, sqs = clients.client("events"), clients.client("sqs")
        queues = {}
        for index, (detail_type, pattern) in enumerate(patterns.items()):
            name = f"hyperpod-debugger-rule-{index}"
            url = sqs.create_queue(QueueName=name)["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
            events.put_targets(Rule=name, Targets=[{"Id": "event-handler", "Arn": arn}])
            queues[detail_type] = url
        return cls(clients, queues)

    def publish(self, envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """PutEvents the envelope's source, detail-type, detail and resources (the simulated bus stands in
        for SageMaker, which publishes on AWS); returns detail-type → the event each matching rule got."""
        self.clients.client("events").put_events(
            Entries=[
                {
                    "Source": envelope["source"],
                    "DetailType": envelope["detail-type"],
                    "Detail": json.dumps(envelope["detail"]),
                    "Resources": envelope.get("resources", []),
                }
            ]
        )
        sqs = self.clients.client("sqs")
        delivered = {}
        for detail_type, url in self.queues.items():
            for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                delivered[detail_type] = json.loads(message["Body"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return delivered


def cluster_event(demo: Demo, *, level: str | None, description_part: str) -> dict[str, Any]:
    """One of the EKS cluster's own events (as ListClusterEvents/DescribeClusterEvent return it), in the
    envelope HyperPod puts on EventBridge (the shape of AWS's published example: the fields nest
    under ``detail.EventDetails``, the time in epoch milliseconds)."""
    cluster = demo.eks
    sagemaker = AwsClients(REGION, max_attempts=1).client("sagemaker")
    summaries = sagemaker.list_cluster_events(ClusterName=cluster.arn, MaxResults=100)["Events"]
    summary = next(
        e
        for e in summaries
        if description_part in (e.get("Description") or "") and (level is None or e.get("EventLevel") == level)
    )
    detail = sagemaker.describe_cluster_event(ClusterName=cluster.arn, EventId=summary["EventId"])["EventDetails"]
    when = detail["EventTime"]
    details = {k: v for k, v in detail.items() if k != "EventTime"}
    details["EventTime"] = int(when.timestamp() * 1000)
    return {
        "version": "0",
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"demo/{summary['EventId']}")),
        "detail-type": eventbridge.CLUSTER_EVENT,
        "source": eventbridge.SOURCE,
        "account": cluster.arn.split(":")[4],
        "time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [cluster.arn],
        "detail": {"EventDetails": details},
    }


def _vpc_of(message: str) -> str | None:
    found = re.search(r"\bvpc-[0-9a-f]+\b", message)
    return found.group(0) if found else None


class _Lines(list[str]):
    """The walkthrough's lines, each also handed to ``write`` as it is added (the demo prints as it runs)."""

    def __init__(self, write: Callable[[str], None] | None) -> None:
        super().__init__()
        self._write = write

    def append(self, line: str) -> None:
        super().append(line)
        if self._write is not None:
            self._write(line + "\n")

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)


def monitor_walkthrough(
    clients: AwsClients, demo: Demo, now: datetime, *, write: Callable[[str], None] | None = None
) -> str:
    """The monitor's path, event to resolution, through the Lambda handlers; the text to print.
    ``write`` receives each line as soon as the step it describes has run."""
    handlers = _handlers()
    if handlers is None:
        if write is not None:
            write(SKIPPED)
        return SKIPPED
    from functions.monitor import runtime

    with monitor_harness(clients, env=DEMO_ENV) as monitor, SqsClock(frozen=True) as sqs:
        clock = DemoClock(sqs)
        with runtime.use_clock(clock.now):
            return _walkthrough(monitor, handlers, demo, now, clock, _Lines(write))


def _walkthrough(
    monitor: MonitorHarness, handlers: ModuleType, demo: Demo, now: datetime, clock: DemoClock, out: _Lines
) -> str:
    resources = monitor.resources
    out.extend(
        [
            "MONITOR: the Lambda handlers on the simulated account: EventBridge → event_handler → findings table "
            "→ stream → stream_notifier → alert group → alert_groups → outbox (SQS FIFO) → courier → Slack, email "
            "and EventBridge → resolution",
            f"   (DynamoDB {resources.findings_table!r} with its stream, idempotency table "
            f"{resources.idempotency_table!r}, Slack webhook URL in secret {resources.secret_name!r} → a local HTTP "
            f"sink, SNS topic {resources.topic_arn.rsplit(':', 1)[-1]!r} → a subscribed SQS queue)",
            "",
        ]
    )
    cluster = demo.eks
    instance_id = cluster.nodes["gpu-workers"][0]
    store = FindingStore(monitor.clients, resources.findings_table)
    finding_events = FindingEventQueue.create(monitor.clients)

    # 1. the event → event_handler
    event = node_health_event(demo, instance_id, now)
    out.append("1. EventBridge delivers a HyperPod node-health event to event_handler:")
    out.extend(f"  │ {line}" for line in json.dumps(event, indent=2).splitlines())
    first = monitor.invoke(handlers.event_handler, event)
    out.append(
        f"   event_handler → {_response(first)} (a triage scoped to {instance_id}: cluster checks and "
        "its on-node probe, written to the findings table)"
    )
    out.append("")

    # 2. the stream → stream_notifier → alert group → alert_groups → outbox → courier
    told = _notify(monitor, handlers, clock)
    out.append(
        f"2. The table's stream hands {told.records} record(s) to stream_notifier, ten per invocation as deployed "
        f"({len(told.responses)} invocation(s), "
        f"{sum(len(r.get('batchItemFailures', [])) for r in told.responses if isinstance(r, dict))} record(s) "
        "failed). It queues each finding's event and arms the cluster's alert group; "
        f"{told.waited_s:g} s later the group is flushed: the Slack sink received {len(told.payloads)} "
        f"message(s) and {len(told.emails)} email(s) arrived, one per incident group, not one per finding."
    )
    out.append(
        "   (the stack's defaults: an alert group waits 10 s after a quiet cluster's first change, then sends at "
        "most one message per channel every 5 minutes; P0 and P1 are paged, P2 waits for the daily summary)"
    )
    out.append("")
    for payload in told.payloads:
        _show_slack(out, payload)
    for email in told.emails:
        _show_email(out, email)
    put = finding_events.drain()
    if put:
        transitions = _counts(Counter(e["detail"]["transition"] for e in put))
        out.append(
            f"   The courier also put {len(put)} finding event(s) on the account's default EventBridge bus "
            f"({transitions}): the stored facts under the incident, one event each; a rule on source "
            f"{FINDING_SOURCE!r} routed them to a local queue, where any target could be (PagerDuty, a central "
            "account's bus: see the README). The most urgent:"
        )
        out.append("")
        _show_finding_event(out, min(put, key=_event_urgency))

    # 3. the same event again: idempotent on the EventBridge id
    runs = _triage_runs(monitor)
    again = monitor.invoke(handlers.event_handler, event)
    told = _notify(monitor, handlers, clock)
    ran = _triage_runs(monitor) - runs
    out.append(
        f"3. EventBridge delivers the same event again (id {event['id']}): event_handler → {_response(again)}, "
        "the first run's response from the idempotency table."
    )
    out.append(
        f"   Triages run: {ran}; findings written: {told.findings}; new Slack messages: {len(told.payloads)}; "
        f"new emails: {len(told.emails)}."
    )
    out.append("")

    # 4. a Cluster Event through the rules the stack deploys
    rules = LocalRules.create(monitor.clients, eventbridge.rule_patterns())
    failure = cluster_event(demo, level="Error", description_part="lifecycle script execution for EC2 Instance")
    info = cluster_event(demo, level="Info", description_part="has Succeeded")
    out.append(
        "4. HyperPod publishes two Cluster Events (the shape of AWS's published example); the simulated "
        "EventBridge matches them against the three rules the stack deploys (the same patterns, from "
        "hyperpod_debugger.domain.eventbridge):"
    )
    for sent in (info, failure):
        matched = rules.publish(sent)
        details = sent["detail"]["EventDetails"]
        fired = ", ".join(f"the {dt!r} rule" for dt in matched) or "no rule (an Info event needs no triage)"
        out.append(f"   {details['EventLevel']}: {details['Description'][:90]} → {fired}")
        for delivered in matched.values():
            out.extend(f"  │ {line}" for line in json.dumps(delivered, indent=2).splitlines())
            runs = _triage_runs(monitor)
            response = monitor.invoke(handlers.event_handler, delivered)
            out.append(
                f"   event_handler → {_response(response)} (triages run: {_triage_runs(monitor) - runs}; the "
                f"event names {details.get('InstanceId')})"
            )
            told = _notify(monitor, handlers, clock)
            out.append(
                f"   The stream hands over {told.records} record(s); {told.waited_s:g} s later (the cluster's alert "
                f"group waits out its interval after the last message) the courier delivered "
                f"{len(told.payloads)} Slack message(s) and {len(told.emails)} email(s)."
            )
            for payload in told.payloads:
                out.append("")
                _show_slack(out, payload)
    if out[-1]:
        out.append("")

    # 5. the operator fixes one problem themselves
    dns = next((f for f in store.open_findings(cluster.arn).values() if f.check == FIXED_CHECK), None)
    vpc_id = _vpc_of(dns.message) if dns else None
    if dns is None or vpc_id is None:
        out.append("5. (no DNS finding to fix in this run; resolution step skipped)")
        return "\n".join(out) + "\n"
    suggested = [c["command"] for c in dns.suggested_commands if c.get("mutates")]
    command = suggested[0] if suggested else f"aws ec2 modify-vpc-attribute --vpc-id {vpc_id} --enable-dns-hostnames"
    out.append(f"5. The operator runs the suggested command themselves (this tool never does): {command}")
    monitor.clients.client("ec2").modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    out.append("")

    # 6. the scheduled sweep, replayed now instead of waiting for the next one
    out.append(
        "6. The scheduled sweep (every 15 minutes; replayed now rather than waited for) runs through the handlers, "
        "as the Step Functions Map invokes them:"
    )
    emitted = len(monitor.metrics)
    lines, swept = _sweep(monitor, handlers, demo, now)
    out.extend(lines)
    out.append(f"   The sweep's transitions (whole cluster): {_counts(swept)}.")
    numbers = _metric_lines(monitor.metrics[emitted:], cluster.name)
    if numbers:
        out.append(
            "   The fleet-health numbers it emitted (CloudWatch embedded metric format, namespace "
            "HyperPodDebugger; the stack's dashboard draws them and its alarms watch them):"
        )
        out.extend(numbers)
    told = _notify(monitor, handlers, clock)
    out.append(
        f"   The stream hands {told.records} record(s) to stream_notifier; {told.waited_s:g} s later the Slack sink "
        f"received {len(told.payloads)} more message(s) and {len(told.emails)} more email(s) arrived."
    )
    out.append("")
    for payload in told.payloads:
        _show_slack(out, payload)
    for email in told.emails:
        _show_email(out, email)
    resolved = [e for e in finding_events.drain() if e["detail"]["transition"] == "RESOLVED"]
    if resolved:
        event = resolved[0]
        open_for = event["detail"].get("open_seconds")
        out.append(
            f"   Its finding event: transition RESOLVED for {event['detail']['finding']['check']} "
            f"(open_seconds {open_for:g}, the time from first seen to resolved, also the TimeToResolveSeconds "
            "metric)."
            if isinstance(open_for, (int, float))
            else f"   Its finding event: transition RESOLVED for {event['detail']['finding']['check']}."
        )
        out.append("")

    # 7. the history
    history = store.open_findings(cluster.arn, include_resolved=True)
    states = Counter(f.state.value for f in history.values())
    out.append(
        "7. Findings history for the cluster (DynamoDB): "
        + ", ".join(f"{state} ×{n}" for state, n in sorted(states.items()))
    )
    return "\n".join(out) + "\n"
