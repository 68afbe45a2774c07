"""Every setting of the stack as one model, read once from the CDK context and checked at synth.

A setting is a context key: ``-c key=value`` on the CDK command line, or the ``"context"`` object of
``cdk.json`` or ``cdk.context.json``. The keys are the aliases below (named in ``infra/constants.py``, with
their defaults); README.md's settings table documents each one (``tests/infrastructure/test_settings.py``
keeps the two equal).

    settings = StackSettings.from_context(stack.node)   # raises SettingsError, one line per problem

A value that is wrong stops the synth with a line naming the key, the value and what the key takes; a key
that is no setting (a typo: ``alertEmail``) stops it naming the closest setting. CDK's own keys pass
untouched: any key with a ``:`` or starting with ``@`` (feature flags, ``aws:cdk:…``, the lookups cached in
``cdk.context.json``), the two the CLI keeps there itself (:data:`CDK_CLI_KEYS`), and the tests' internal
``layerAssetPath``.

An empty value (``-c key=``) counts as not set: the default applies. Lists take a list (``cdk.json``), a
JSON list or comma-separated text.
"""

from __future__ import annotations

import difflib
import json
import math
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from constructs import Node
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from hyperpod_debugger.domain import eventbridge
from hyperpod_debugger.lifecycle.budget import SweepSettings
from infra import constants as c
from infra.constructs.hma_subscription import MAX_FILTER_PATTERN, ClusterLogGroup, cluster_log_groups
from infra.constructs.kubernetes_access import validate_eks_clusters
from infra.constructs.notifications import AlertSettings, validate_event_bus
from infra.constructs.session_documents import MODES

#: Keys the CDK CLI itself writes into cdk.context.json (`cdk acknowledge`, `cdk cli-telemetry`) and passes on.
CDK_CLI_KEYS = frozenset({"acknowledged-issue-numbers", "cli-telemetry"})
#: Keys the stack reads that are not settings: where the Lambda layer was built (the tests point it elsewhere).
INTERNAL_KEYS = frozenset({c.CTX_LAYER_DIR})


def is_cdk_key(key: str) -> bool:
    """True for a context key of CDK's own, never one of the stack's settings."""
    return ":" in key or key.startswith("@") or key in CDK_CLI_KEYS


class SettingsError(ValueError):
    """Settings the stack cannot be built with: one line per problem, each naming its key."""


# --------------------------------------------------------------------------------------------- parsing


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _key(info: ValidationInfo) -> str:
    """The context key of the field being validated."""
    assert info.field_name is not None  # pydantic always sets it for a field validator
    return StackSettings.model_fields[info.field_name].alias or info.field_name


def _number(value: Any, key: str) -> float:
    """A number given as a number or as text (what ``-c`` passes); booleans are not numbers."""
    if not isinstance(value, bool):
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            pass
        else:
            if math.isfinite(number):
                return number
    raise ValueError(f"{key} must be a number, got {value!r}")


def _text(value: Any, key: str) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value).strip()
    raise ValueError(f"{key} must be text, got {value!r}")


def _items(value: Any, key: str) -> list[str]:
    """A list given as a list, a JSON list, or comma-separated text (``-c key=a,b``); blank entries dropped."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise ValueError(f"{key} must be a list (a JSON list or comma-separated text), got {text!r}") from None
        else:
            value = text.split(",")
    if not isinstance(value, list | tuple):
        raise ValueError(f"{key} must be a list (a JSON list or comma-separated text), got {value!r}")
    entries = [_text(item, key) if not isinstance(item, dict | list) else None for item in value]
    if None in entries:
        raise ValueError(f"{key} takes names, not nested lists or objects, got {value!r}")
    return [e for e in entries if e]


def whole(low: int, high: int | None = None, *, why: str = "") -> BeforeValidator:
    """A whole number from ``low`` to ``high`` (none: no upper bound); ``why`` says where a bound comes from."""
    span = f"from {low} to {high}" if high is not None else f"of at least {low}"

    def parse(value: Any, info: ValidationInfo) -> int:
        key = _key(info)
        number = _number(value, key)
        if number != int(number) or number < low or (high is not None and number > high):
            raise ValueError(f"{key} must be a whole number {span}{why}, got {value!r}")
        return int(number)

    return BeforeValidator(parse)


def number(*, above: float | None = None, at_least: float | None = None, below: float | None = None) -> BeforeValidator:
    """A number within the bounds given (above: exclusive, at_least: inclusive, below: exclusive)."""
    bounds = [
        *([f"above {above:g}"] if above is not None else []),
        *([f"at least {at_least:g}"] if at_least is not None else []),
        *([f"below {below:g}"] if below is not None else []),
    ]

    def parse(value: Any, info: ValidationInfo) -> float:
        key = _key(info)
        found = _number(value, key)
        if (
            (above is not None and found <= above)
            or (at_least is not None and found < at_least)
            or (below is not None and found >= below)
        ):
            raise ValueError(f"{key} must be {' and '.join(bounds)}, got {value!r}")
        return found

    return BeforeValidator(parse)


def one_of(choices: Mapping[str, Any], said: str) -> BeforeValidator:
    """One of ``choices`` (what people write, case-insensitive → the value); ``said``: the choices in words."""

    def parse(value: Any, info: ValidationInfo) -> Any:
        written = str(value).strip().lower() if isinstance(value, str | bool | int) else None
        if written is None or written not in choices:
            raise ValueError(f"{_key(info)} must be {said}, got {value!r}")
        return choices[written]

    return BeforeValidator(parse)


def text(check: Callable[[str], bool] | None = None, takes: str = "") -> BeforeValidator:
    """Text, stripped; with ``check``, refused (saying what the key ``takes``) when the check fails."""

    def parse(value: Any, info: ValidationInfo) -> str:
        key = _key(info)
        found = _text(value, key)
        if check is not None and not check(found):
            raise ValueError(f"{key} takes {takes}, got {value!r}")
        return found

    return BeforeValidator(parse)


def items(check: Callable[[str, list[str]], list[str]] | None = None) -> BeforeValidator:
    """A list (see :func:`_items`); ``check(key, entries)`` returns the entries or raises naming the bad ones."""

    def parse(value: Any, info: ValidationInfo) -> list[str]:
        key = _key(info)
        entries = _items(value, key)
        return check(key, entries) if check is not None else entries

    return BeforeValidator(parse)


_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> int:
    """Seconds between sweeps, from a ``rate(...)`` expression (the probe rotation plans from the interval)."""
    match = _RATE.match(expression.strip())
    if not match:
        raise ValueError(
            f"{c.CTX_SCHEDULE} must be a rate expression such as 'rate(15 minutes)' (the probe rotation plans "
            f"from the interval), got {expression!r}"
        )
    count, unit = int(match.group(1)), match.group(2).rstrip("s")
    if count < 1:
        raise ValueError(f"{c.CTX_SCHEDULE} needs a positive interval, got {expression!r}")
    return count * _UNIT_S[unit]


def _schedule(value: Any, info: ValidationInfo) -> str:
    expression = _text(value, _key(info))
    rate_seconds(expression)
    return expression


def _allowlist(key: str, entries: list[str]) -> list[str]:
    try:
        eventbridge.Allowlist.parse(entries)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None
    return entries


def _eks_clusters(key: str, entries: list[str]) -> list[str]:
    return validate_eks_clusters(entries)


_EMAIL = re.compile(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+")


def _emails(key: str, entries: list[str]) -> list[str]:
    bad = [e for e in entries if not _EMAIL.fullmatch(e)]
    if bad:
        raise ValueError(f"{key} takes email addresses, got {', '.join(repr(b) for b in bad)}")
    return list(dict.fromkeys(entries))


def _accounts(key: str, entries: list[str]) -> list[str]:
    bad = [e for e in entries if not re.fullmatch(r"\d{12}", e)]
    if bad:
        raise ValueError(f"{key} takes 12-digit AWS account ids, got {', '.join(repr(b) for b in bad)}")
    return list(dict.fromkeys(entries))


#: the daily-summary channel names people write, and the channels' own names
SUMMARY_CHANNELS = {"email": "sns", "slack": "slack", "chat": "chatbot"}


def _summary_channels(key: str, entries: list[str]) -> list[str]:
    named = [e.lower() for e in entries if e.lower() != "none"]
    unknown = [e for e in named if e not in SUMMARY_CHANNELS]
    if unknown:
        raise ValueError(f"{key} names channels of {sorted(SUMMARY_CHANNELS)} (or none), got {unknown}")
    return list(dict.fromkeys(named))


#: CloudWatch Logs retentions the stack offers, in days.
LOG_RETENTION = {
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}
PRIORITIES = ("P0", "P1", "P2")
_SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")


def _event_bus(value: Any, info: ValidationInfo) -> str | None:
    bus = _text(value, _key(info))
    return None if bus.lower() == c.FINDINGS_EVENT_BUS_OFF else validate_event_bus(bus)


Priority = Annotated[str, one_of({p.lower(): p for p in PRIORITIES}, "P0, P1 or P2")]
#: a channel's own minimum; not set: alertMinPriority
ChannelPriority = Annotated[str | None, one_of({p.lower(): p for p in PRIORITIES}, "P0, P1 or P2")]
SessionMode = Annotated[Literal["pinned", "aws"], one_of({m: m for m in MODES}, "one of pinned, aws")]
DEFAULT_SUMMARY_CHANNELS = tuple(
    _summary_channels(c.CTX_DAILY_SUMMARY_CHANNELS, c.DEFAULT_DAILY_SUMMARY_CHANNELS.split(","))
)


# --------------------------------------------------------------------------------------------- the model


class StackSettings(BaseModel):
    """The stack's settings (README.md, "Deploy the monitor", lists each with its default and meaning)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- what is watched, and how often
    cluster_allowlist: Annotated[list[str], items(_allowlist)] = Field(
        default_factory=list, alias=c.CTX_CLUSTER_ALLOWLIST, description="cluster names, ids or ARNs; none: all"
    )
    sweep_schedule: Annotated[str, BeforeValidator(_schedule)] = Field(
        c.DEFAULT_SCHEDULE, alias=c.CTX_SCHEDULE, description="the sweep's rate(...) expression"
    )
    sweep_cluster_concurrency: Annotated[int, whole(1)] = Field(
        c.DEFAULT_CLUSTER_CONCURRENCY, alias=c.CTX_CLUSTER_CONCURRENCY, description="clusters swept at once"
    )
    probe_period_hours: Annotated[float, number(above=0)] = Field(
        c.DEFAULT_PROBE_PERIOD_HOURS, alias=c.CTX_PROBE_PERIOD_HOURS, description="every Running node probed within"
    )
    start_session_rate: Annotated[int, whole(1)] = Field(
        c.DEFAULT_START_SESSION_RATE, alias=c.CTX_START_SESSION_RATE, description="the account's StartSession rate"
    )
    start_session_reserve_percent: Annotated[float, number(at_least=0, below=100)] = Field(
        c.DEFAULT_START_SESSION_RESERVE_PERCENT,
        alias=c.CTX_START_SESSION_RESERVE_PERCENT,
        description="the share of startSessionRate left to people",
    )
    event_window_seconds: Annotated[int, whole(1, 900, why=" (SQS's longest delay)")] = Field(
        c.DEFAULT_EVENT_WINDOW_SECONDS, alias=c.CTX_EVENT_WINDOW_SECONDS, description="one cluster's event window"
    )
    session_documents: SessionMode = Field(
        c.DEFAULT_SESSION_DOCUMENTS, alias=c.CTX_SESSION_DOCUMENTS, description="pinned or aws documents"
    )
    cluster_log_groups: Annotated[list[str], items()] = Field(
        default_factory=list, alias=c.CTX_CLUSTER_LOG_GROUPS, description="HMA log groups to subscribe to"
    )
    hma_filter_pattern: Annotated[
        str, text(lambda p: len(p) <= MAX_FILTER_PATTERN, f"a pattern of 1 to {MAX_FILTER_PATTERN} characters")
    ] = Field(c.DEFAULT_HMA_FILTER_PATTERN, alias=c.CTX_HMA_FILTER_PATTERN, description="the subscription's filter")
    eks_clusters: Annotated[list[str], items(_eks_clusters)] = Field(
        default_factory=list, alias=c.CTX_EKS_CLUSTERS, description="EKS clusters given read-only access entries"
    )

    # --- where alerts go
    alert_emails: Annotated[list[str], items(_emails)] = Field(
        default_factory=list, alias=c.CTX_ALERT_EMAILS, description="email addresses subscribed to the alert topic"
    )
    slack_secret_name: Annotated[
        str,
        text(
            lambda n: bool(_SECRET_NAME.fullmatch(n)),
            "a Secrets Manager secret name (letters, digits and /_+=.@-, at most 512 characters)",
        ),
    ] = Field(c.DEFAULT_SLACK_SECRET_NAME, alias=c.CTX_SLACK_SECRET_NAME, description="the Slack webhook's secret")
    chat_notifications: Annotated[bool, one_of({"true": True, "false": False}, "true or false")] = Field(
        c.DEFAULT_CHAT_NOTIFICATIONS, alias=c.CTX_CHAT_NOTIFICATIONS, description="create the chat topic"
    )
    runbook_base_url: Annotated[
        str, text(lambda u: u.startswith(("https://", "http://")), "an http(s):// URL (the runbook's folder)")
    ] = Field(c.DEFAULT_RUNBOOK_BASE_URL, alias=c.CTX_RUNBOOK_BASE_URL, description="links to runbook sections")
    findings_event_bus: Annotated[str | None, BeforeValidator(_event_bus)] = Field(
        c.DEFAULT_FINDINGS_EVENT_BUS, alias=c.CTX_FINDINGS_EVENT_BUS, description="the finding events' bus, or none"
    )

    # --- the alert policy
    alert_min_priority: Priority = Field(
        c.DEFAULT_ALERT_MIN_PRIORITY, alias=c.CTX_ALERT_MIN_PRIORITY, description="least urgent priority paged"
    )
    slack_min_priority: ChannelPriority = Field(None, alias=c.CTX_SLACK_MIN_PRIORITY, description="on Slack")
    email_min_priority: ChannelPriority = Field(None, alias=c.CTX_EMAIL_MIN_PRIORITY, description="by email")
    chat_min_priority: ChannelPriority = Field(None, alias=c.CTX_CHAT_MIN_PRIORITY, description="on the chat topic")
    alert_group_wait_seconds: Annotated[int, whole(0, 300)] = Field(
        c.DEFAULT_ALERT_GROUP_WAIT_SECONDS, alias=c.CTX_ALERT_GROUP_WAIT_SECONDS, description="before a first message"
    )
    alert_group_interval_seconds: Annotated[int, whole(10, 900)] = Field(
        c.DEFAULT_ALERT_GROUP_INTERVAL_SECONDS,
        alias=c.CTX_ALERT_GROUP_INTERVAL_SECONDS,
        description="at least between two messages of a cluster",
    )
    daily_summary_hour_utc: Annotated[int, whole(0, 23)] = Field(
        c.DEFAULT_DAILY_SUMMARY_HOUR_UTC, alias=c.CTX_DAILY_SUMMARY_HOUR_UTC, description="the daily summary's hour"
    )
    daily_summary_channels: Annotated[list[str], items(_summary_channels)] = Field(
        default_factory=lambda: list(DEFAULT_SUMMARY_CHANNELS),
        alias=c.CTX_DAILY_SUMMARY_CHANNELS,
        description="channels of the daily summary",
    )
    repair_grace_minutes: Annotated[int, whole(5, 24 * 60)] = Field(
        c.DEFAULT_REPAIR_GRACE_MINUTES, alias=c.CTX_REPAIR_GRACE_MINUTES, description="HyperPod's time to repair"
    )

    # --- the watcher and the records
    unknown_share_alarm_percent: Annotated[float, number(above=0, below=100)] = Field(
        c.DEFAULT_UNKNOWN_SHARE_ALARM_PERCENT,
        alias=c.CTX_UNKNOWN_SHARE_ALARM_PERCENT,
        description="the UNKNOWN share that sets the alarm off",
    )
    log_retention_days: Annotated[
        int, one_of({str(d): d for d in LOG_RETENTION}, f"one of {', '.join(map(str, LOG_RETENTION))}")
    ] = Field(c.DEFAULT_LOG_RETENTION_DAYS, alias=c.CTX_LOG_RETENTION_DAYS, description="the functions' log retention")
    findings_ttl_days: Annotated[int, whole(c.MIN_FINDINGS_TTL_DAYS, c.MAX_FINDINGS_TTL_DAYS)] = Field(
        c.DEFAULT_FINDINGS_TTL_DAYS, alias=c.CTX_FINDINGS_TTL_DAYS, description="days resolved records are kept"
    )
    history_archive: Annotated[bool, one_of({"true": True, "false": False}, "true or false")] = Field(
        False, alias=c.CTX_HISTORY_ARCHIVE, description="archive finding events to S3 for Athena"
    )
    history_archive_accounts: Annotated[list[str], items(_accounts)] = Field(
        default_factory=list, alias=c.CTX_HISTORY_ARCHIVE_ACCOUNTS, description="accounts the archive's table lists"
    )
    history_archive_days: Annotated[int, whole(30, 3650)] = Field(
        c.DEFAULT_HISTORY_ARCHIVE_DAYS, alias=c.CTX_HISTORY_ARCHIVE_DAYS, description="days archived events are kept"
    )

    _layer_dir: pathlib.Path = PrivateAttr(default=c.LAYER_DIR)

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, values: Any) -> Any:
        if isinstance(values, Mapping):
            return {k: v for k, v in values.items() if not _blank(v)}
        return values

    @model_validator(mode="after")
    def _settings_agree(self) -> StackSettings:
        self.sweep_budget  # noqa: B018 (SweepSettings refuses a reserve that leaves the sweep nothing)
        self.log_groups  # noqa: B018 (a log group of a cluster the allowlist leaves out is refused)
        if self.history_archive and self.findings_event_bus is None:
            raise ValueError(
                f"{c.CTX_HISTORY_ARCHIVE}=true archives the finding events, but {c.CTX_FINDINGS_EVENT_BUS} is "
                f"{c.FINDINGS_EVENT_BUS_OFF}: put the events on a bus, or leave the archive off"
            )
        return self

    # --- reading -------------------------------------------------------------------------------------

    @classmethod
    def from_context(cls, node: Node) -> StackSettings:
        """The settings in ``node``'s context (the CLI's ``-c``, cdk.json, cdk.context.json, the App's own)."""
        return cls.from_mapping(node.get_all_context() or {})

    @classmethod
    def from_mapping(cls, context: Mapping[str, Any]) -> StackSettings:
        """The settings in a context mapping; raises :class:`SettingsError` naming every key in the way."""
        known = [f.alias for f in cls.model_fields.values() if f.alias]
        problems = [
            _unknown(key, known)
            for key in context
            if key not in known and key not in INTERNAL_KEYS and not is_cdk_key(key)
        ]
        settings: StackSettings | None = None
        try:
            settings = cls.model_validate({k: v for k, v in context.items() if k in known})
        except ValidationError as exc:
            problems.extend(_said(error) for error in exc.errors())
        if problems or settings is None:
            raise SettingsError("\n".join(problems))
        layer = context.get(c.CTX_LAYER_DIR)
        if not _blank(layer):
            settings._layer_dir = pathlib.Path(str(layer))
        return settings

    # --- what the constructs take --------------------------------------------------------------------

    @property
    def layer_dir(self) -> pathlib.Path:
        """Where ``make layer`` built the Lambda layer (``layerAssetPath`` moves it, for the tests)."""
        return self._layer_dir

    @property
    def sweep_interval(self) -> cdk.Duration:
        return cdk.Duration.seconds(rate_seconds(self.sweep_schedule))

    @property
    def probe_period(self) -> cdk.Duration:
        return cdk.Duration.minutes(round(self.probe_period_hours * 60))

    @property
    def log_retention(self) -> logs.RetentionDays:
        return LOG_RETENTION[self.log_retention_days]

    @property
    def sweep_budget(self) -> SweepSettings:
        """How the sweep shares the account's StartSession rate (raises naming the setting that leaves none)."""
        return SweepSettings(
            self.start_session_rate,
            self.sweep_cluster_concurrency,
            reserve_percent=self.start_session_reserve_percent,
        )

    @property
    def log_groups(self) -> list[ClusterLogGroup]:
        return cluster_log_groups(self.cluster_log_groups, self.cluster_allowlist)

    @property
    def alert_settings(self) -> AlertSettings:
        everywhere = self.alert_min_priority
        return AlertSettings(
            slack_min_priority=self.slack_min_priority or everywhere,
            email_min_priority=self.email_min_priority or everywhere,
            chat_min_priority=self.chat_min_priority or everywhere,
            group_wait_s=self.alert_group_wait_seconds,
            group_interval_s=self.alert_group_interval_seconds,
            daily_hour_utc=self.daily_summary_hour_utc,
            daily_channels=tuple(SUMMARY_CHANNELS[name] for name in self.daily_summary_channels),
            chat_topic=self.chat_notifications,
        )


def _unknown(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]}?" if close else "README.md's settings table lists every one"
    return f"{key} is not a setting of this stack ({hint})"


def _said(error: Mapping[str, Any]) -> str:
    """One validation error as a sentence naming the key (the validators above write whole sentences)."""
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ValueError | AssertionError):
        return str(cause)
    key = ".".join(str(part) for part in error.get("loc", ())) or "settings"
    return f"{key}: {error.get('msg')}, got {error.get('input')!r}"
