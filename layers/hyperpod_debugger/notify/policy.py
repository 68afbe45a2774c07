"""The alert policy: which incident transitions each channel hears of, and how they are put into messages.

Pure. The rules (stack settings, per channel, ``references/decisions.md`` 2026-12-03):

* a channel hears of an incident whose priority reaches its minimum (default P1); what is below it (P2, a
  watch) waits for the daily summary, never a page;
* a resolution is told on a channel that was told of the incident (its peak priority reached the minimum);
  an incident that opened and cleared between two messages (a flap) is told nowhere;
* UNKNOWN is one coverage incident per cluster, never one per node (the incidents already say so);
* a node HyperPod is repairing is not paged (the incident is *held*) until the repair fails or overruns;
* what the cluster's first triage opened is told as one baseline summary, not as N new alerts.

Each flush of a cluster's alert group makes at most **one message per channel** (:func:`compose`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hyperpod_debugger.domain.model import Priority
from hyperpod_debugger.lifecycle.incidents import IncidentState, IncidentTransition, StoredIncident

ALERT_CHANNELS = ("sns", "slack", "chatbot")
DEFAULT_MIN_PRIORITY = Priority.P1
_RANK = {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}

Told = Literal["opened", "escalated", "resolved"]
MessageKind = Literal["incident", "group", "baseline", "daily"]


def reaches(priority: Priority | None, minimum: Priority) -> bool:
    """``priority`` is at least as urgent as ``minimum`` (no priority reaches nothing)."""
    return priority is not None and _RANK[priority] <= _RANK[minimum]


@dataclass(frozen=True)
class ChannelPolicy:
    min_priority: Priority = DEFAULT_MIN_PRIORITY
    #: a daily summary of what is open (what is below the minimum included) on this channel
    daily_summary: bool = True


@dataclass(frozen=True)
class AlertPolicy:
    channels: Mapping[str, ChannelPolicy] = field(default_factory=dict)

    def of(self, channel: str) -> ChannelPolicy:
        return self.channels.get(channel, ChannelPolicy())

    @classmethod
    def from_settings(cls, minimums: Mapping[str, str], *, daily: Iterable[str] = ALERT_CHANNELS) -> AlertPolicy:
        """``{"slack": "P0", …}`` (a channel left out takes the default); raises ``ValueError`` for a priority
        that is not P0, P1 or P2."""
        out: dict[str, ChannelPolicy] = {}
        wanted = set(daily)
        for channel in ALERT_CHANNELS:
            text = (minimums.get(channel) or DEFAULT_MIN_PRIORITY.value).strip().upper()
            try:
                minimum = Priority(text)
            except ValueError:
                raise ValueError(f"the minimum priority for {channel} must be P0, P1 or P2, got {text!r}") from None
            out[channel] = ChannelPolicy(minimum, daily_summary=channel in wanted)
        return cls(out)


@dataclass(frozen=True)
class Item:
    """One incident as one message tells it."""

    told: Told
    incident: StoredIncident


@dataclass(frozen=True)
class Batch:
    """What one message on one channel says: the incidents told, and what it leaves for later."""

    channel: str
    kind: MessageKind
    cluster_arn: str
    cluster_name: str
    region: str
    items: tuple[Item, ...]
    #: below the channel's minimum: left to the daily summary
    below_minimum: int = 0
    #: opened and cleared before anyone was told
    flapped: int = 0
    #: the pending entries this message covers (its stable id)
    entries: tuple[str, ...] = ()


def _kinds(stored: StoredIncident) -> set[str]:
    return set(stored.pending.values())


def flapped(stored: StoredIncident) -> bool:
    """Opened and cleared between two messages: resolved, with its earliest untold transition an opening (a
    resolution told-of openings still wait for comes first, and is told)."""
    if stored.state is not IncidentState.RESOLVED or not stored.pending:
        return False
    return stored.pending[min(stored.pending)] == IncidentTransition.OPENED


def select(stored: StoredIncident, policy: ChannelPolicy) -> Told | None:
    """What one channel is told of one incident's pending transitions, or None."""
    kinds = _kinds(stored)
    if not kinds:
        return None
    if stored.state is IncidentState.RESOLVED:
        if flapped(stored):
            return None  # opened and cleared between two messages: told nowhere
        return "resolved" if reaches(stored.peak_priority, policy.min_priority) and stored.paged else None
    if stored.held or not reaches(stored.peak_priority, policy.min_priority):
        return None
    if IncidentTransition.OPENED in kinds:
        return "opened"
    if IncidentTransition.ESCALATED in kinds:
        return "escalated"
    return None


def _order(item: Item) -> tuple[int, int, int, str]:
    i = item.incident.incident
    told = {"opened": 0, "escalated": 0, "resolved": 1}[item.told]
    prio = _RANK.get(i.priority, 3) if i.priority else 3
    kind = {"cause": 0, "node": 1, "coverage": 2}[i.kind]
    return (told, prio, kind, i.key)


def compose(
    pending: Sequence[StoredIncident],
    policy: AlertPolicy,
    channels: Sequence[str],
    *,
    cluster_arn: str,
    cluster_name: str,
    region: str,
) -> list[Batch]:
    """The messages of one flush of a cluster's alert group: at most one per channel.

    One incident told alone is an ``incident`` message; several are one ``group`` message; anything opened by
    the cluster's first triage makes the message a ``baseline`` summary (every problem found then, however
    many, in one message).
    """
    entries = tuple(sorted(f"{s.key}@{e}" for s in pending for e in s.pending))
    flaps = sum(1 for s in pending if flapped(s))
    # the first triage's findings, told once and whole (a P2 included: it is the starting point)
    first = [s for s in pending if s.baseline and s.is_open and not s.held and IncidentTransition.OPENED in _kinds(s)]
    out = []
    for channel in channels:
        if channel not in ALERT_CHANNELS:
            continue
        rule = policy.of(channel)
        items = [Item("opened", s) for s in first]
        below = 0
        for s in pending:
            if s in first:
                below += not reaches(s.peak_priority, rule.min_priority)
                continue
            told = select(s, rule)
            if told is not None:
                items.append(Item(told, s))
            elif s.is_open and not s.held and _kinds(s) and not reaches(s.peak_priority, rule.min_priority):
                below += 1
        baseline = bool(first)
        if not items:
            continue
        items.sort(key=_order)
        kind: MessageKind = "baseline" if baseline else ("incident" if len(items) == 1 else "group")
        out.append(
            Batch(
                channel=channel,
                kind=kind,
                cluster_arn=cluster_arn,
                cluster_name=cluster_name,
                region=region,
                items=tuple(items),
                below_minimum=below,
                flapped=flaps,
                entries=entries,
            )
        )
    return out


def daily(
    incidents: Iterable[StoredIncident],
    policy: AlertPolicy,
    channels: Sequence[str],
    *,
    cluster_arn: str,
    cluster_name: str,
    region: str,
    day: str,
) -> list[Batch]:
    """The daily summary of one cluster per channel that wants one: every open incident (held ones included,
    they say HyperPod is repairing), those below the channel's minimum named; nothing when nothing is open."""
    open_now = sorted((s for s in incidents if s.is_open), key=lambda s: _order(Item("opened", s)))
    if not open_now:
        return []
    out = []
    for channel in channels:
        rule = policy.of(channel)
        if channel not in ALERT_CHANNELS or not rule.daily_summary:
            continue
        below = sum(1 for s in open_now if not reaches(s.peak_priority, rule.min_priority))
        out.append(
            Batch(
                channel=channel,
                kind="daily",
                cluster_arn=cluster_arn,
                cluster_name=cluster_name,
                region=region,
                items=tuple(Item("opened", s) for s in open_now),
                below_minimum=below,
                entries=(f"daily#{day}",),
            )
        )
    return out
