"""Clock synchronisation (§ I.5): chrony's numeric offset and leap status, ``timedatectl`` as the fallback.

A missing tool is never "unhealthy": with neither ``chronyc`` nor ``timedatectl`` on the node the
check is skipped with that reason, and a timeout makes it UNKNOWN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.parse.sysparse import (
    TRUNCATED_NOTE,
    ChronyTracking,
    Parsed,
    TimeDate,
    parse_chronyc_tracking,
    parse_timedatectl,
    raise_timed_out,
)

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

CHECK = "probe.clock"
#: |offset| at or above these many seconds
OFFSET_FAIL_S = 1.0
OFFSET_WARN_S = 0.1

ON_NODE = "on the node (SSM session, § K)"
_EVIDENCE_KEYS = ("reference id", "stratum", "system time", "leap status")

ROOT_CAUSE_UNSYNCED = (
    "chrony has no usable time source: the Amazon Time Sync Service (169.254.169.123) is missing from the "
    "chrony configuration or UDP 123 to it is blocked. An unsynchronised clock drifts; AWS request signing "
    "(SigV4), TLS and munge credentials start failing once it is off by minutes."
)


def _commands() -> list[SuggestedCommand]:
    return [
        read_only(["chronyc", "sources", "-v"], f"See which time sources chrony can reach {ON_NODE}"),
        read_only(["chronyc", "tracking"], f"Re-read the offset and leap status {ON_NODE}"),
        read_only(["timedatectl", "status"], f"See systemd's view of clock synchronisation {ON_NODE}"),
    ]


def _truncated(found: ProbeItem | None, evidence: list[str]) -> list[str]:
    if found is not None and found.truncated:
        evidence.append(f"{found.command or 'output'}: {TRUNCATED_NOTE}")
    return evidence


def check_clock(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    chrony = Parsed(doc, "chronyc_tracking", "clock offset (chronyc tracking)", parse_chronyc_tracking)
    timedate = Parsed(doc, "timedatectl", "clock synchronisation (timedatectl)", parse_timedatectl)
    tracking: ChronyTracking | None = chrony.value
    if tracking is not None and tracking.readable:
        return _judge_chrony(ctx, tracking, chrony.item)
    td: TimeDate | None = timedate.value
    chrony_down = tracking is not None and tracking.daemon_unreachable
    chrony_note = (
        "chronyc: 506 Cannot talk to daemon (chronyd is not running)"
        if chrony_down
        else f"chronyc tracking: {chrony.reason or 'output unreadable'}"
    )
    if td is not None and td.synchronized is not None:
        return [_judge_timedatectl(ctx, td, timedate.item, chrony_note)]
    if chrony_down:
        return [
            finding(
                ctx,
                CHECK,
                Tag.WARN,
                "chronyd is not running (chronyc cannot reach it) and timedatectl does not confirm synchronisation",
                priority=Priority.P1,
                section="I.5",
                evidence=_truncated(chrony.item, [chrony_note]),
                root_cause="The time daemon is stopped or disabled, so nothing keeps the clock in step.",
                suggested_commands=[
                    read_only(["systemctl", "status", "chrony", "chronyd", "--no-pager"], f"See chrony {ON_NODE}"),
                    *_commands(),
                ],
            )
        ]
    if chrony.value is None and timedate.value is None:
        raise_timed_out(chrony, timedate)
    reasons = [
        chrony.reason or "chronyc tracking output unreadable",
        timedate.reason or "timedatectl output shows no synchronisation state",
    ]
    raise NotApplicable(
        f"clock synchronisation cannot be judged: neither chronyc nor timedatectl answered ({'; '.join(reasons)})"
    )


def _judge_chrony(ctx: ProbeContext, t: ChronyTracking, found: ProbeItem | None) -> list[Finding]:
    """chrony's verdict: not synchronised (FAIL); else its source and offset problems; else a PASS."""
    evidence = _truncated(found, [t.lines[k] for k in _EVIDENCE_KEYS if k in t.lines])
    unsynced = _not_synchronised(t)
    if unsynced is not None:
        return [
            finding(
                ctx,
                CHECK,
                Tag.FAIL,
                unsynced,
                priority=Priority.P1,
                section="I.5",
                evidence=evidence,
                root_cause=ROOT_CAUSE_UNSYNCED,
                suggested_commands=_commands(),
                node_action="investigate",
            )
        ]
    out: list[Finding] = []
    if t.no_source:
        out.append(
            finding(
                ctx,
                CHECK,
                Tag.WARN,
                "chrony has no reference source (Reference ID 00000000 / stratum 0)",
                priority=Priority.P1,
                section="I.5",
                evidence=evidence,
                root_cause=ROOT_CAUSE_UNSYNCED,
                suggested_commands=_commands(),
            )
        )
    offset = t.offset_s
    if offset is not None and abs(offset) >= OFFSET_WARN_S:
        out.append(_offset_finding(ctx, offset, evidence))
    if out:
        return out
    source = f" to {t.ref_name}" if t.ref_name else ""
    shown = f"offset {offset * 1000:+.3f} ms" if offset is not None else "offset not shown"
    return [
        finding(
            ctx,
            CHECK,
            Tag.PASS,
            f"Clock synchronised by chrony{source}, {shown}",
            section="I.5",
            evidence=evidence,
        )
    ]


def _not_synchronised(t: ChronyTracking) -> str | None:
    """Why chrony's clock is not synchronised, as the finding's message; None when it is."""
    if t.synchronised is False:
        no_source = " and has no reference source" if t.no_source else ""
        return f"Clock is not synchronised: chrony reports Leap status '{t.leap_status}'{no_source}"
    if t.local_clock:
        # chronyc(1), "tracking": Reference ID 127.127.1.1 (7F7F0101) means no external source, only the
        # `local` directive serving the node's own clock; its Leap status stays Normal and its offset near
        # zero because it is measured against itself. Not synchronised, whatever the offset says.
        stratum = f", stratum {t.stratum}" if t.stratum is not None else ""
        return (
            f"Clock is not synchronised: chrony follows only this node's own clock (Reference ID "
            f"{t.ref_id or t.ref_name}{stratum}, its `local` mode), so the offset it shows is measured against "
            "itself; no time source such as the Amazon Time Sync Service (169.254.169.123) is in use"
        )
    return None


def _offset_finding(ctx: ProbeContext, offset: float, evidence: list[str]) -> Finding:
    """An offset at or above :data:`OFFSET_WARN_S`: a WARN, a FAIL from :data:`OFFSET_FAIL_S`."""
    severe = abs(offset) >= OFFSET_FAIL_S
    direction = "ahead of" if offset > 0 else "behind"
    return finding(
        ctx,
        CHECK,
        Tag.FAIL if severe else Tag.WARN,
        f"System clock is {abs(offset):.3f} s {direction} NTP time "
        f"(threshold {OFFSET_FAIL_S if severe else OFFSET_WARN_S:g} s)",
        priority=Priority.P1 if severe else Priority.P2,
        section="I.5",
        evidence=evidence,
        root_cause=(
            "chrony is correcting a large offset (after a long pause, a clock step or a poor source); "
            "until it converges, timestamps, Slurm accounting and credential lifetimes on this node are off."
        ),
        suggested_commands=_commands(),
        node_action="investigate" if severe else None,
    )


def _judge_timedatectl(ctx: ProbeContext, td: TimeDate, found: ProbeItem | None, chrony_note: str) -> Finding:
    evidence = _truncated(found, [line for line in (td.sync_line, td.service_line) if line] + [chrony_note])
    if td.synchronized:
        return finding(
            ctx,
            CHECK,
            Tag.PASS,
            "System clock synchronised (timedatectl); no chrony offset to judge",
            section="I.5",
            evidence=evidence,
        )
    service = ""
    if td.ntp_service is False:
        service = "; the NTP service is off"
    elif td.ntp_service:
        service = "; the NTP service is on but has not synchronised"
    # the kernel's own "unsynchronised" state, the same signal as chrony's Leap status (§ I.5): a FAIL
    return finding(
        ctx,
        CHECK,
        Tag.FAIL,
        f"System clock is not synchronised according to timedatectl{service}",
        priority=Priority.P1,
        section="I.5",
        evidence=evidence,
        root_cause=(
            "No time daemon keeps the clock in step, or it cannot reach a source (the Amazon Time Sync "
            "Service at 169.254.169.123 over UDP 123)."
        ),
        suggested_commands=_commands(),
        node_action="investigate",
    )


CHECKS: tuple[Check, ...] = (Check(CHECK, "I.5", "Clock synchronisation", check_clock),)
