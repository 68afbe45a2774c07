"""CloudWatch Logs checks: the cluster log group, lifecycle script output and HMA detections.

All three read what the collector already fetched (``obs.logs``); none calls AWS. Missing
inputs raise through :meth:`Observed.get` and the runner reports them as UNKNOWN / skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain import commands as commands_
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import aws_argv, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.xid import XidInfo, XidRung, XidSeverity, decoded, lookup, parse_xid_codes, xid_verdict

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterObservation, InstanceGroup, LogEvent

CHECK_LOG_GROUP = "logs.log_group"
CHECK_LIFECYCLE = "logs.lifecycle"
CHECK_HMA = "logs.hma"

LIFECYCLE_PREFIX = "LifecycleConfig"
HMA_PREFIX = "SagemakerHealthMonitoringAgent"
HMA_MARKER = "HealthMonitoringAgentDetectionEvent"

#: Detections of the same Xid on the same node closer together than this are one incident
#: (one fault is often logged several times: per channel, per process, per agent retry).
#: A recurrence after HyperPod's reboot cannot come sooner than a reboot takes.
INCIDENT_GAP = timedelta(minutes=5)

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_INSTANCE_ID_ANYWHERE = re.compile(r"(?<![0-9A-Za-z])i-[0-9a-f]{8,17}(?![0-9A-Za-z])")


# --------------------------------------------------------------------------- shared helpers


@dataclass(frozen=True, slots=True)
class StreamName:
    """``<prefix>/<instance group>/<instance id>``, parsed without trusting the shape."""

    raw: str
    group: str | None
    instance_id: str | None

    @property
    def node(self) -> str:
        """How to name the node in a message: its instance id, else the stream itself."""
        return self.instance_id or f"log stream {self.raw!r}"


def parse_stream_name(stream: str, prefix: str) -> StreamName:
    """Group and instance id from a stream name; odd names give ``None`` parts, never an error.

    The group is everything between the prefix and the last segment, so a group name that
    itself contains ``/`` survives intact. An instance id elsewhere in an odd name is still found.
    """
    parts = stream.split("/")
    group: str | None = None
    instance_id: str | None = None
    if len(parts) >= 3 and parts[0] == prefix:
        group = "/".join(parts[1:-1]) or None
        if _INSTANCE_ID.fullmatch(parts[-1]):
            instance_id = parts[-1]
    if instance_id is None:
        match = _INSTANCE_ID_ANYWHERE.search(stream)
        instance_id = match.group(0) if match else None
    return StreamName(stream, group, instance_id)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _stamp(moment: datetime) -> str:
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_window(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"


# --------------------------------------------------------------------------- logs.log_group


def check_log_group(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    exists = obs.logs.group_exists.get()
    name = obs.logs.group_name
    if exists:
        return [finding(obs, CHECK_LOG_GROUP, Tag.PASS, f"CloudWatch log group {name} exists", section="L")]
    return [
        finding(
            obs,
            CHECK_LOG_GROUP,
            Tag.WARN,
            f"No CloudWatch log group {name}: the cluster is new or its logging is not set up, "
            "so lifecycle script output and HMA detections cannot be read",
            priority=Priority.P2,
            section="L",
            evidence=[f"expected log group: {name}"],
            root_cause="HyperPod creates the group when its nodes first write lifecycle or health agent "
            "logs; until then (or without CloudWatch delivery) there is nothing to read.",
            suggested_commands=[
                read_only(
                    aws_argv("logs", "describe-log-groups", obs.cluster.region, "--log-group-name-prefix", name),
                    "Confirm whether the cluster's log group exists.",
                )
            ],
        )
    ]


# --------------------------------------------------------------------------- logs.lifecycle

# A bash xtrace line: one "+" per nesting level, then a space. Echoed commands, not errors.
_XTRACE = re.compile(r"^\++ ")
# ...except an executed explicit non-zero exit, which is the script stopping itself.
_XTRACE_EXIT = re.compile(r"^\++ exit [1-9]\d*\s*$")

_ENDPOINT_UNREACHABLE = re.compile(
    r"connect timeout on endpoint url|read timeout on endpoint url|could not connect to the endpoint url"
    r"|ConnectTimeoutError|EndpointConnectionError|connection timed out|failed to connect to",
    re.IGNORECASE,
)
_ACCESS_DENIED = re.compile(
    r"AccessDenied|Access Denied|403 Forbidden|An error occurred \(403\)|is not authorized to perform",
    re.IGNORECASE,
)
# bash quotes a stray carriage return as $'\r' (or inside a token: $'{\r')
_CRLF_LITERAL = re.compile(r"\$'[^'\n]*\\r'|with CRLF line terminators")
_CARET_M = re.compile(r"\^M")
_CR_SYMPTOM = re.compile(r"command not found|bad interpreter|No such file or directory|syntax error", re.IGNORECASE)
_PARAMS_FILE = re.compile(r"provisioning_parameters\.json", re.IGNORECASE)
_ERROR_WORDS = re.compile(
    r"error|not found|no such file|invalid|fail|mismatch|missing|unable|cannot|could not|exception",
    re.IGNORECASE,
)
_GROUP_NOT_FOUND = re.compile(
    r"instance[ _-]?group\S*\b.*\b(?:not found|does not exist|doesn't exist|is missing|unknown|not defined"
    r"|no match|mismatch)"
    r"|\b(?:no|unknown|invalid|missing|unrecognized) instance[ _-]?group",
    re.IGNORECASE,
)
_KEY_ERROR = re.compile(r"KeyError:\s*['\"]?([^'\"\s]+)")
_GENERIC_FAILURE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b(?:ERROR|FATAL|CRITICAL)\b"
    r"|^\s*(?:fatal )?(?:error|fatal|E)\s*:"
    r"|\b[A-Za-z]*(?:Error|Exception):"
    r"|\bcommand not found\b"
    r"|non-zero exit status"
    r"|\bexit(?:ed)?\s+(?:with\s+)?(?:code|status)\s*[:=]?\s*[1-9]"
    r"|\breturned non-zero\b"
    r"|\b[Ff]ailed\b"
    r"|\bcannot (?:stat|access|open|create)\b"
    r"|\bPermission denied\b"
    r"|No such file or directory"
    r"|\bcurl: \(\d+\)"
    r"|\b[Cc]ould not\b"
    r"|\btimed out\b"
    r"|\bdoes not exist\b"
)
_BENIGN_FAILED = re.compile(r"\b0 (?:failed|errors?)\b", re.IGNORECASE)


def _is_s3_timeout(line: str, groups: frozenset[str]) -> bool:
    return bool(_ENDPOINT_UNREACHABLE.search(line)) and "s3" in line.lower()


def _is_access_denied(line: str, groups: frozenset[str]) -> bool:
    return bool(_ACCESS_DENIED.search(line))


def _is_crlf(line: str, groups: frozenset[str]) -> bool:
    if _CRLF_LITERAL.search(line):
        return True
    # A carriage return inside the line (not just ending it) or a ^M, next to a shell complaint.
    has_cr = "\r" in line.rstrip("\r") or bool(_CARET_M.search(line))
    return has_cr and bool(_CR_SYMPTOM.search(line))


def _is_parameter_mismatch(line: str, groups: frozenset[str]) -> bool:
    if _PARAMS_FILE.search(line) and _ERROR_WORDS.search(line):
        return True
    if _GROUP_NOT_FOUND.search(line):
        return True
    key = _KEY_ERROR.search(line)
    return key is not None and (key.group(1) in groups or "group" in key.group(1).lower())


def _is_generic_failure(line: str, groups: frozenset[str]) -> bool:
    if _XTRACE_EXIT.match(line) or _ENDPOINT_UNREACHABLE.search(line):
        return True
    return bool(_GENERIC_FAILURE.search(line)) and not _BENIGN_FAILED.search(line)


@dataclass(frozen=True, slots=True)
class LifecycleCause:
    key: str
    summary: str
    root_cause: str
    matches: Callable[[str, frozenset[str]], bool]


#: Tried in this order; the first cause with a matching line names the failure. Specific
#: causes come before the generic one because their lines usually also look like errors
#: (an S3 timeout also prints "fatal error:"), and a network timeout comes before access
#: denied because a node that cannot reach S3 never gets as far as an authorisation answer.
LIFECYCLE_CAUSES: tuple[LifecycleCause, ...] = (
    LifecycleCause(
        "s3_timeout",
        "the script could not reach Amazon S3 (connection timed out or endpoint unreachable)",
        "The node's subnet has no working path to Amazon S3: no S3 gateway endpoint on its route table, "
        "and no NAT gateway or internet route. The lifecycle scripts are downloaded from S3, so "
        "provisioning stops before they run.",
        _is_s3_timeout,
    ),
    LifecycleCause(
        "access_denied",
        "an AWS call was denied (S3 or IAM AccessDenied)",
        "The instance group's execution role (or a bucket or resource policy) does not allow a call the "
        "script makes. Most often that is reading the lifecycle script bucket, which needs s3:GetObject "
        "on the scripts and s3:ListBucket on the bucket.",
        _is_access_denied,
    ),
    LifecycleCause(
        "crlf",
        "the script has Windows (CRLF) line endings",
        "The script was saved with CRLF line endings, so bash sees a trailing carriage return on "
        "every command. Convert the scripts to LF (for example with dos2unix) and upload them again.",
        _is_crlf,
    ),
    LifecycleCause(
        "parameter_mismatch",
        "instance group names do not match provisioning_parameters.json",
        "The instance group names the script expects (from provisioning_parameters.json) differ from "
        "the instance groups the cluster was created with; names must match exactly.",
        _is_parameter_mismatch,
    ),
    LifecycleCause(
        "script_error",
        "a command in the script failed",
        "A command in the lifecycle script failed and the script ended with a non-zero status "
        "(with 'set -e' the first failing command stops it). The matching lines show which command.",
        _is_generic_failure,
    ),
)


def _lines(events: Iterable[LogEvent]) -> list[str]:
    lines: list[str] = []
    for event in events:
        # split on "\n" only: a bare "\r" inside a line is evidence of CRLF scripts, not a break.
        for line in event.message.split("\n"):
            if line.strip():
                lines.append(line)
    return lines


def classify_lifecycle(
    lines: list[str], groups: frozenset[str] = frozenset()
) -> tuple[LifecycleCause, list[str]] | None:
    """The cause of a failed lifecycle run and the lines that show it, or None when no line is an error."""
    candidates = [line for line in lines if not _XTRACE.match(line) or _XTRACE_EXIT.match(line)]
    for cause in LIFECYCLE_CAUSES:
        matched = [line for line in candidates if cause.matches(line, groups)]
        if matched:
            return cause, matched
    return None


def _s3_location(source: str | None) -> tuple[str, str] | None:
    if not source or not source.startswith("s3://"):
        return None
    bucket, _, prefix = source[len("s3://") :].partition("/")
    return (bucket, prefix) if bucket else None


def _lifecycle_commands(obs: ClusterObservation, stream: StreamName, cause: LifecycleCause) -> list[SuggestedCommand]:
    """Read the stream, then what tests the cause named: the nodes' path to S3, the execution role's right to
    read the scripts, the cluster's instance group names."""
    region = obs.cluster.region
    commands = [commands_.tail_log_stream(region, obs.logs.group_name, stream.raw)]
    group = obs.cluster.group(stream.group) if stream.group else None
    if cause.key == "s3_timeout":
        commands += _s3_path_commands(obs, group)
    elif cause.key == "access_denied" and group and group.execution_role:
        commands += _script_access_commands(obs, group, group.execution_role)
    elif cause.key == "parameter_mismatch":
        commands.append(
            read_only(
                commands_.sagemaker_argv(
                    obs.cluster, "describe-cluster", "--query", "InstanceGroups[].InstanceGroupName"
                ),
                "List the cluster's instance group names to compare with provisioning_parameters.json.",
            )
        )
    return commands


def _s3_path_commands(obs: ClusterObservation, group: InstanceGroup | None) -> list[SuggestedCommand]:
    """The region's S3 endpoints and the routes of the nodes' subnets."""
    region = obs.cluster.region
    commands = [
        read_only(
            aws_argv(
                "ec2",
                "describe-vpc-endpoints",
                region,
                "--filters",
                f"Name=service-name,Values=com.amazonaws.{region}.s3",
            ),
            "List the S3 VPC endpoints in the region; the cluster's VPC needs a gateway endpoint "
            "associated with the nodes' route tables (or a NAT route).",
        )
    ]
    # the group's own subnets when known: its override, else the cluster VpcConfig
    if group and group.override_vpc:
        subnets = list(group.override_vpc.subnet_ids)
    elif group and obs.cluster.vpc:
        subnets = list(obs.cluster.vpc.subnet_ids)
    else:
        subnets = obs.cluster.subnet_ids()
    if subnets:
        commands.append(
            read_only(
                aws_argv(
                    "ec2",
                    "describe-route-tables",
                    region,
                    "--filters",
                    f"Name=association.subnet-id,Values={','.join(subnets)}",
                ),
                "Show the routes of the nodes' subnets (look for an S3 prefix-list or 0.0.0.0/0 route).",
            )
        )
    return commands


def _script_access_commands(obs: ClusterObservation, group: InstanceGroup, role: str) -> list[SuggestedCommand]:
    """Whether the execution role may read the lifecycle script object and list its bucket (when the
    scripts live in S3)."""
    location = _s3_location(group.lifecycle_source)
    if not location:
        return []
    bucket, prefix = location
    partition = obs.cluster.arn.split(":")[1] if obs.cluster.arn.count(":") >= 2 else "aws"
    script = prefix
    if group.lifecycle_on_create:
        script = f"{prefix.rstrip('/')}/{group.lifecycle_on_create}"

    def simulate(action: str, resource: str, description: str) -> SuggestedCommand:
        argv = aws_argv(
            "iam",
            "simulate-principal-policy",
            obs.cluster.region,
            "--policy-source-arn",
            role,
            "--action-names",
            action,
            "--resource-arns",
            resource,
        )
        return read_only(argv, description)

    return [
        simulate(
            "s3:GetObject",
            f"arn:{partition}:s3:::{bucket}/{script.lstrip('/')}",
            "Check whether the execution role may read the lifecycle script object.",
        ),
        simulate(
            "s3:ListBucket",
            f"arn:{partition}:s3:::{bucket}",
            "Check whether the execution role may list the lifecycle script bucket.",
        ),
    ]


def check_lifecycle(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    events = obs.logs.lifecycle_events.get()
    by_stream: dict[str, list[LogEvent]] = {}
    for event in events:
        if event.stream.startswith(f"{LIFECYCLE_PREFIX}/") or event.stream == LIFECYCLE_PREFIX:
            by_stream.setdefault(event.stream, []).append(event)
    known_groups = frozenset(g.name for g in obs.cluster.instance_groups)
    # A node that is Running finished its lifecycle script; a vague error line in its log is
    # noise more often than a fault (a retried download, a harmless "failed" in a message).
    running = {n.instance_id for n in obs.nodes.value or () if n.status == "Running"} if obs.nodes.available else set()

    findings: list[Finding] = []
    for raw in sorted(by_stream):
        stream = parse_stream_name(raw, LIFECYCLE_PREFIX)
        ordered = sorted(by_stream[raw], key=lambda e: _utc(e.timestamp))
        groups = known_groups | ({stream.group} if stream.group else set())
        result = classify_lifecycle(_lines(ordered), frozenset(groups))
        if result is None:
            continue
        cause, matched = result
        where = f" in instance group {stream.group}" if stream.group else ""
        finished = cause.key == "script_error" and stream.instance_id in running
        findings.append(
            finding(
                obs,
                CHECK_LIFECYCLE,
                Tag.WARN if finished else Tag.FAIL,
                (
                    f"Lifecycle script log of {stream.node}{where} has error lines, but the node is Running"
                    if finished
                    else f"Lifecycle script failed on {stream.node}{where}: {cause.summary}"
                ),
                priority=Priority.P2 if finished else Priority.P1,
                section="D",
                instance_id=stream.instance_id,
                instance_group=stream.group,
                evidence=trim_evidence([line.rstrip() for line in matched]),
                root_cause=cause.root_cause,
                suggested_commands=_lifecycle_commands(obs, stream, cause),
            )
        )
    if findings:
        return findings
    if by_stream:
        message = f"No lifecycle script errors in {len(by_stream)} LifecycleConfig log stream(s)"
    else:
        message = "No LifecycleConfig log lines to check (no failed or erroring lifecycle runs collected)"
    return [finding(obs, CHECK_LIFECYCLE, Tag.PASS, message, section="D")]


# --------------------------------------------------------------------------- logs.hma

_NODE_CONDITION = re.compile(r"Node condition (\S+) is now")
_RAW_ERRNUM = re.compile(r"\"?ErrNum\"?\s*:\s*\"?(\d{1,4})\b", re.IGNORECASE)
_RAW_STRING_FIELD = r"\"{key}\s*:?\s*\"\s*:\s*\"((?:[^\"\\]|\\.)*)\""
_RAW_REASON = re.compile(_RAW_STRING_FIELD.format(key="reason"))
_RAW_CONDITION = re.compile(_RAW_STRING_FIELD.format(key="condition"))
_MAX_REASON = 300


@dataclass(frozen=True, slots=True)
class HmaDetection:
    """One HMA detection record, reduced to what the check needs."""

    stream: StreamName
    timestamp: datetime
    message: str
    codes: tuple[int, ...]
    reason: str | None
    condition: str | None

    def describe(self) -> str:
        """The agent's own words for a detection without an Xid."""
        parts = [p for p in (self.condition, self.reason) if p]
        if parts:
            return " / ".join(dict.fromkeys(parts))
        return " ".join(self.message.split())[:_MAX_REASON] or "(empty)"


def _normal_key(key: object) -> str:
    return str(key).strip().rstrip(":").strip().lower()


def _normalise_keys(value: object, depth: int = 0) -> object:
    """Lower-case keys without surrounding blanks or a trailing colon (Slurm HMA writes ``"data: "``)."""
    if depth > 20:
        return None
    if isinstance(value, dict):
        return {_normal_key(k): _normalise_keys(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise_keys(v, depth + 1) for v in value]
    return value


def _load_record(text: str) -> dict | None:
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            normalised = _normalise_keys(value)
            return normalised if isinstance(normalised, dict) else None
    return None


def _as_code(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < 10000 else None
    if isinstance(value, float) and value.is_integer():
        return _as_code(int(value))
    if isinstance(value, str) and value.strip().isdigit():
        return _as_code(int(value.strip()))
    return None


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_hma_message(text: str) -> tuple[tuple[int, ...], str | None, str | None, bool]:
    """Xid codes, reason and condition of one HMA message, and whether it looks like a detection.

    Accepts one-line or pretty-printed JSON, the Slurm key quirks (``"condition: "``,
    ``"data: "``), records without ``details`` and plain text. Never raises.
    """
    codes: list[int] = []
    reason: str | None = None
    condition: str | None = None
    record = _load_record(text)
    if record is not None:
        found = record.get("details")
        details: dict[str, Any] = found if isinstance(found, dict) else {}
        detail_message = _text(details.get("message"))
        reason = _text(details.get("reason")) or _text(record.get("reason"))
        condition = _text(record.get("condition"))
        if condition is None and detail_message:
            node_condition = _NODE_CONDITION.search(detail_message)
            condition = node_condition.group(1) if node_condition else None
        data = record.get("data")
        for holder in (data if isinstance(data, dict) else {}, details, record):
            code = _as_code(holder.get("errnum"))
            if code is not None:
                codes.append(code)
        for source in (detail_message, _text(record.get("msg")), _text(record.get("message"))):
            codes.extend(parse_xid_codes(source or ""))
        if not codes:
            for source in (condition, reason, detail_message):
                if source and "xid" in source.lower():
                    codes.extend(parse_xid_codes(source, loose=True))
        looks_like_detection = bool(details) or condition is not None or bool(codes)
    else:
        codes.extend(parse_xid_codes(text))
        codes.extend(int(m.group(1)) for m in _RAW_ERRNUM.finditer(text))
        if not codes:
            codes.extend(parse_xid_codes(text, loose=True))
        raw_reason = _RAW_REASON.search(text)
        raw_condition = _RAW_CONDITION.search(text)
        reason = raw_reason.group(1) if raw_reason else None
        condition = raw_condition.group(1) if raw_condition else None
        if condition is None:
            node_condition = _NODE_CONDITION.search(text)
            condition = node_condition.group(1) if node_condition else None
        looks_like_detection = bool(codes) or reason is not None or condition is not None
    looks_like_detection = looks_like_detection or HMA_MARKER.lower() in text.lower()
    return tuple(dict.fromkeys(c for c in codes if c > 0)), reason, condition, looks_like_detection


def hma_detections(events: Iterable[LogEvent], since: datetime) -> list[HmaDetection]:
    """Every HMA detection at or after ``since`` (shared with the suggestion engine)."""
    detections: list[HmaDetection] = []
    for event in events:
        when = _utc(event.timestamp)
        if when < since or not event.message.strip():
            continue
        codes, reason, condition, is_detection = parse_hma_message(event.message)
        if not is_detection:
            continue
        stream = parse_stream_name(event.stream, HMA_PREFIX)
        detections.append(HmaDetection(stream, when, event.message, codes, reason, condition))
    return detections


def count_incidents(moments: list[datetime], gap: timedelta = INCIDENT_GAP) -> int:
    """Detections closer together than ``gap`` are one incident; a later one starts a new one."""
    incidents = 0
    previous: datetime | None = None
    for moment in sorted(moments):
        if previous is None or moment - previous > gap:
            incidents += 1
        previous = moment
    return incidents


def _hma_evidence(detections: list[HmaDetection], incidents: int) -> list[str]:
    first, last = detections[0].timestamp, detections[-1].timestamp
    streams = ", ".join(sorted({d.stream.raw for d in detections}))
    summary = (
        f"{incidents} incident(s), {len(detections)} detection record(s), first {_stamp(first)}, "
        f"last {_stamp(last)}, stream {streams}"
    )
    return trim_evidence([summary, *(f"{_stamp(d.timestamp)} {d.message.strip()}" for d in detections)])


def _hma_read_commands(
    obs: ClusterObservation, ctx: CheckContext, stream: StreamName, *, node_status: bool = True
) -> list[SuggestedCommand]:
    region = obs.cluster.region
    commands: list[SuggestedCommand] = []
    if node_status and stream.instance_id:
        commands.append(
            commands_.describe_node(
                obs.cluster,
                stream.instance_id,
                "See the node's current status (HyperPod may already be rebooting or replacing it).",
            )
        )
    since_ms = int((_utc(ctx.now) - ctx.log_window).timestamp() * 1000)
    commands.append(
        read_only(
            aws_argv(
                "logs",
                "filter-log-events",
                region,
                "--log-group-name",
                obs.logs.group_name,
                "--log-stream-names",
                stream.raw,
                "--filter-pattern",
                HMA_MARKER,
                "--start-time",
                str(since_ms),
            ),
            "List this node's HMA detection records in the window.",
        )
    )
    return commands


def _xid_finding(obs: ClusterObservation, ctx: CheckContext, info: XidInfo, detections: list[HmaDetection]) -> Finding:
    """One Xid on one node as HMA's records tell it. The Xid ladder shared with ``probe.xid``
    (:func:`xid_verdict`) decides the verdict; this log adds what only it shows: a repeat is counted in
    incidents over the log window, and a hardware fault seen once is a warning, since HyperPod's automatic
    recovery acts on the detection (where that recovery is off, the node is left to be rebooted)."""
    stream = detections[0].stream
    incidents = count_incidents([d.timestamp for d in detections])
    automatic = obs.cluster.node_recovery == "Automatic"
    detected = XidSeverity(Tag.WARN, Priority.P1, "investigate" if automatic else "reboot")
    rung, severity = xid_verdict(info, recurred=incidents >= ctx.xid_repeat_threshold, first_fault=detected)
    seen = f"{incidents} time{'' if incidents == 1 else 's'} in the last {describe_window(ctx.log_window)}"
    message, cause = _hma_xid_words(rung, info, f"{stream.node} ({seen})", automatic)
    node_action = severity.node_action
    if rung == "recurred" and not stream.instance_id:
        node_action = "investigate"  # no instance id to replace
    # The suggestion engine turns node_action into the replace command (or refuses it for a
    # Slurm controller, or while HyperPod is already acting on the node).
    return finding(
        obs,
        CHECK_HMA,
        severity.tag,
        message,
        priority=severity.priority,
        section="F" if rung == "recurred" else "G",
        root_cause=cause,
        suggested_commands=_hma_read_commands(obs, ctx, stream, node_status=rung != "workload"),
        node_action=node_action,
        instance_id=stream.instance_id,
        instance_group=stream.group,
        evidence=_hma_evidence(detections, incidents),
    )


def _hma_xid_words(rung: XidRung, info: XidInfo, where: str, automatic: bool) -> tuple[str, str]:
    """The message and the root cause of one Xid's finding, in HMA's terms; ``where`` is the node and how
    often the Xid was seen."""
    if rung == "recurred":
        return (
            f"{info.label()} recurred on {where}: the fault came back after HyperPod's automatic recovery, "
            "so replace the node rather than reboot it again",
            f"A hardware-class ({info.xid_class}) GPU fault that survives a reboot is a failing part; another "
            "reboot will not clear it.",
        )
    if rung == "fault":
        recovery = "replaces" if info.action == "replace" else "reboots"
        if automatic:
            next_step = f"HyperPod's automatic recovery normally {recovery} the node"
        else:
            next_step = "automatic recovery is not on for this cluster, so nothing acts on it by itself"
        return (
            f"HMA detected {info.label()} on {where}; {next_step}. Watch for the same Xid again on this node",
            f"A hardware-class ({info.xid_class}) GPU fault. If it comes back on the same node after recovery, "
            "the node should be replaced.",
        )
    if rung == "workload":
        return (
            f"HMA detected {info.label()} on {where}: the workload faulted on the GPU; fix the job, the node "
            "needs no action",
            "An application-class Xid: the running program caused it (invalid memory access, bad kernel, killed "
            "process). Rebooting or replacing the node does not help.",
        )
    if rung == "no-action":
        # NVIDIA's Xid catalogue lists IGNORE (or no action) as the immediate action for these codes (63: a row
        # marked for remapping; 94: a contained error; 137: NVLink privilege error; ...): no node action alone
        return (
            f"HMA detected {info.label()} on {where}; NVIDIA lists no node action for it on its own: act on the "
            "hardware Xids beside it (if any), not on this one",
            "An Xid the driver handled by itself (NVIDIA's catalogue: no immediate action); it matters only when "
            "it repeats or comes with an uncorrectable or failed-remap Xid.",
        )
    return (
        f"HMA detected {info.label()} on {where}; the cause may be the workload, the driver or the GPU, so read "
        "the full records before acting",
        "This Xid does not identify its cause on its own. If it keeps coming back on the same GPU across "
        "different jobs, run DCGM diagnostics on the drained node.",
    )


def _condition_finding(
    obs: ClusterObservation, ctx: CheckContext, reason: str, detections: list[HmaDetection]
) -> Finding:
    stream = detections[0].stream
    incidents = count_incidents([d.timestamp for d in detections])
    window = describe_window(ctx.log_window)
    return finding(
        obs,
        CHECK_HMA,
        Tag.WARN,
        f"HMA reported {reason!r} on {stream.node} "
        f"({incidents} time{'' if incidents == 1 else 's'} in the last {window})",
        priority=Priority.P1,
        section="F",
        instance_id=stream.instance_id,
        instance_group=stream.group,
        evidence=_hma_evidence(detections, incidents),
        root_cause="HyperPod's health monitoring agent flagged the node; its automatic recovery acts on "
        "the detection (reboot or replacement, depending on the fault).",
        suggested_commands=_hma_read_commands(obs, ctx, stream),
        node_action="investigate",
    )


def check_hma(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    events = obs.logs.hma_events.get()
    since = _utc(ctx.now) - ctx.log_window
    detections = sorted(hma_detections(events, since), key=lambda d: d.timestamp)

    by_xid: dict[tuple[str, int], list[HmaDetection]] = {}
    by_reason: dict[tuple[str, str], list[HmaDetection]] = {}
    for detection in detections:
        node = detection.stream.instance_id or detection.stream.raw
        if detection.codes:
            for code in detection.codes:
                by_xid.setdefault((node, code), []).append(detection)
        else:
            by_reason.setdefault((node, detection.describe()), []).append(detection)

    findings = [
        _xid_finding(obs, ctx, decoded(lookup(code), (d.message for d in found)), found)
        for (_, code), found in sorted(by_xid.items())
    ]
    findings += [_condition_finding(obs, ctx, reason, found) for (_, reason), found in sorted(by_reason.items())]
    if findings:
        return findings
    return [
        finding(
            obs,
            CHECK_HMA,
            Tag.PASS,
            f"No HMA detections in the last {describe_window(ctx.log_window)}",
            section="F",
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check(CHECK_LOG_GROUP, "L", "CloudWatch log group exists", check_log_group),
    Check(CHECK_LIFECYCLE, "D", "Lifecycle script logs show no failure", check_lifecycle),
    Check(CHECK_HMA, "F", "Health monitoring agent detections (repeat-Xid rule)", check_hma),
)
