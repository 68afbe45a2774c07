"""Pure renderers of finding transitions: Slack Block Kit messages and plain-text email (SNS).

Nothing here does I/O or sees a secret: the webhook URL is only known to the delivery code, and a
runbook base URL is stripped of any user-info before it is used. Every rendering respects the
published limits, trimming long content with a visible marker instead of letting Slack or SNS reject it:

* Slack: at most 50 blocks; header ``plain_text`` ≤ 150 chars; section ``mrkdwn`` ≤ 3000 chars;
  section fields ≤ 10, each ≤ 2000 chars; context elements ≤ 10.
* SNS email: subject < 100 chars, no line breaks or control characters; message ≤ 256 KB (UTF-8).

Evidence is shown verbatim (in Slack only ``&``, ``<`` and ``>`` are escaped, as Slack requires).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.sections import SECTIONS, link, pointer, what_to_do

Transition = Literal["NEW", "ESCALATED", "RESOLVED", "REOPENED"]

# Slack limits (Block Kit reference).
MAX_BLOCKS = 50
MAX_HEADER = 150
MAX_SECTION = 3000
MAX_FIELD = 2000
MAX_FIELDS = 10
MAX_CONTEXT = 2000  # per context element; kept below Slack's own cap
MAX_FALLBACK = 3000  # the top-level ``text`` (Slack truncates at 40,000; notifications show far less)
# SNS limits (Publish): subject < 100 characters, message ≤ 256 KB.
MAX_SUBJECT = 99
MAX_EMAIL_BYTES = 200_000  # headroom under 262,144 bytes
EMAIL_EVIDENCE_LINES = 200
EMAIL_LINE = 2000

TOP_N = 10
BREAKER_NODES_SHOWN = 30

EMOJI = {Priority.P0: "🔴", Priority.P1: "🟠", Priority.P2: "🟡"}
EMOJI_UNKNOWN = "⚪"
EMOJI_RESOLVED = "✅"
READ_ONLY_NOTE = "HyperPod Node Debugger is read-only: it never runs these commands."
MUTATING_HEADING = "Suggested command (run this yourself)"
READ_ONLY_HEADING = "Investigate (read-only)"

_WORD: dict[str, str] = {"NEW": "New", "ESCALATED": "Escalated", "REOPENED": "Reopened", "RESOLVED": "Resolved"}
_PRIORITY_RANK = {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}
_TAG_RANK = {Tag.FAIL: 0, Tag.WARN: 1, Tag.UNKNOWN: 2, Tag.INFO: 3, Tag.PASS: 4}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@dataclass(frozen=True)
class Notice:
    """One transition of one stored finding, as the notifier received it from the table's stream.

    ``resolved_at`` (RESOLVED only, optional) is when the check ran and passed; without it the
    time open is measured up to ``last_seen``.
    """

    transition: Transition
    finding: Finding
    first_seen: datetime
    last_seen: datetime
    count: int
    cluster_name: str
    region: str
    resolved_at: datetime | None = None
    #: what made the monitor look ("Node Health Event for i-…", "the scheduled sweep"), its kind, its node
    trigger: str | None = None
    trigger_kind: str | None = None
    trigger_node: str | None = None


# --------------------------------------------------------------------------- text helpers


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn gives meaning to (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with ``…`` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def _clip_mrkdwn(text: str, limit: int) -> str:
    """Cut escaped mrkdwn without splitting an entity and without leaving a code fence open."""
    if len(text) <= limit:
        return text
    cut = re.sub(r"&[a-z]{0,4}$", "", text[: limit - 6])
    if cut.count("```") % 2:
        cut += "\n```"
    return cut + "…"


def _one_line(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def _esc_clip(text: str, limit: int) -> str:
    return _clip_mrkdwn(escape(text), limit)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def when(moment: datetime) -> str:
    return _utc(moment).strftime("%Y-%m-%d %H:%M UTC")


def duration(span: timedelta) -> str:
    """``2d 3h``, ``3h 12m``, ``12m`` or ``<1m``."""
    minutes = max(int(span.total_seconds() // 60), 0)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {mins}m"
    return f"{mins}m" if mins else "<1m"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def safe_base_url(base_url: str | None) -> str | None:
    """The runbook base URL without user-info, query or fragment, so no credential can leak through it."""
    if not base_url:
        return None
    parts = urlsplit(base_url.strip())
    if not parts.scheme or not parts.hostname:
        return None
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) or None


def section_url(section: str, base_url: str | None) -> str | None:
    """The absolute runbook URL of a section, or None when no base URL is configured."""
    base = safe_base_url(base_url)
    return link(section, base) if base else None


def _section_label(section: str) -> str:
    return f"§ {section} {SECTIONS.get(section, '')}".rstrip()


def _section_mrkdwn(section: str | None, base_url: str | None) -> str:
    if not section:
        return "_no runbook section_"
    url = section_url(section, base_url)
    if url:
        return f"<{escape(quote(url, safe=':/#%?=&~+-._'))}|{escape(_section_label(section))}>"
    return f"`{escape(pointer(section))}`"


def _section_plain(section: str | None, base_url: str | None) -> str:
    if not section:
        return "no runbook section"
    url = section_url(section, base_url)
    return f"{_section_label(section)}: {url}" if url else f"{_section_label(section)}: {pointer(section)}"


def emoji(finding: Finding, transition: Transition | None = None) -> str:
    if transition == "RESOLVED":
        return EMOJI_RESOLVED
    if finding.tag is Tag.UNKNOWN or finding.priority is None:
        return EMOJI_UNKNOWN
    return EMOJI[finding.priority]


def _grade(finding: Finding) -> str:
    prio = finding.priority.value if finding.priority else ""
    label = f"{prio} {finding.tag.value}".strip()
    if finding.tag is Tag.UNKNOWN:
        label += " (could not look: not a verdict)"
    return label


def _node(finding: Finding) -> str:
    if not finding.instance_id:
        return "cluster-level"
    return finding.instance_id + (f" ({finding.instance_group})" if finding.instance_group else "")


def _node_mrkdwn(finding: Finding) -> str:
    if not finding.instance_id:
        return "cluster-level"
    group = f" ({escape(finding.instance_group)})" if finding.instance_group else ""
    return f"`{escape(finding.instance_id)}`{group}"


def _where(cluster: str, finding: Finding) -> str:
    return f"{cluster}/{finding.instance_id}" if finding.instance_id else cluster


def evidence_lines(finding: Finding) -> list[str]:
    return [line for item in finding.evidence for line in (item.splitlines() or [""])]


def _more_lines(n: int) -> str:
    return f"… {n} more line{'s' if n != 1 else ''}"


def _code_block(lines: Sequence[str], budget: int) -> str:
    """Lines in a code block, escaped, within ``budget`` characters, with a visible ``… N more lines``."""
    reserve = len(_more_lines(len(lines))) + 10  # fences, newlines and the marker
    room = budget - reserve
    shown: list[str] = []
    used = 0
    for raw in lines:
        line = escape(raw)
        if used + len(line) + 1 > room:
            if not shown and room > 20:  # one over-long first line: show its start
                shown.append(_clip_mrkdwn(line, room - 1))
            break
        shown.append(line)
        used += len(line) + 1
    text = "```\n" + "\n".join(shown) + "\n```"
    hidden = len(lines) - len(shown)
    if hidden:
        text += "\n" + _more_lines(hidden)
    return text


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip_mrkdwn(text, MAX_SECTION)}}


def _fields(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    fields = [{"type": "mrkdwn", "text": _clip_mrkdwn(f"*{name}*\n{value}", MAX_FIELD)} for name, value in pairs]
    return {"type": "section", "fields": fields[:MAX_FIELDS]}


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": clip(_one_line(text), MAX_HEADER), "emoji": True}}


def _context(*texts: str) -> dict[str, Any]:
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": _clip_mrkdwn(t, MAX_CONTEXT)} for t in texts[:10]],
    }


_DIVIDER: dict[str, Any] = {"type": "divider"}


def _message(fallback: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    if len(blocks) > MAX_BLOCKS:  # callers budget blocks; this is the last guard
        blocks = [*blocks[: MAX_BLOCKS - 1], _context(f"… {len(blocks) - MAX_BLOCKS + 1} more blocks left out")]
    return {"text": _clip_mrkdwn(fallback, MAX_FALLBACK), "blocks": blocks}


def _triage_hint(cluster: str, region: str | None) -> str:
    cmd = f"hyperpod-debugger triage --cluster {shlex.quote(cluster)}"
    return cmd + (f" --region {shlex.quote(region)}" if region else "")


def _command_mrkdwn(cmd: SuggestedCommand, note: str = "") -> str:
    heading = MUTATING_HEADING if cmd.mutates else READ_ONLY_HEADING
    parts = [f"*{heading}*{note}: {_esc_clip(cmd.purpose, 300)}", f"```{_esc_clip(cmd.command, 1000)}```"]
    if cmd.mutates:
        parts.append(f"*Blast radius:* {_esc_clip(cmd.blast_radius or '', 400)}")
        if cmd.preconditions:
            parts.append("*Preconditions:*")
            parts.extend(f"• {_esc_clip(p, 180)}" for p in cmd.preconditions[:5])
            if len(cmd.preconditions) > 5:
                parts.append(f"• … {len(cmd.preconditions) - 5} more")
        parts.append(f"*IaC:* {_esc_clip(cmd.iac_warning or '', 400)}")
    return "\n".join(parts)


def _command_plain(cmd: SuggestedCommand, note: str = "") -> list[str]:
    heading = MUTATING_HEADING if cmd.mutates else READ_ONLY_HEADING
    lines = [f"{heading}{note}: {cmd.purpose}", f"  $ {cmd.command}"]
    if cmd.mutates:
        lines.append(f"  blast radius: {cmd.blast_radius}")
        lines.extend(f"  precondition: {p}" for p in cmd.preconditions)
        lines.append(f"  IaC: {cmd.iac_warning}")
    return lines


def _plain_evidence(lines: Sequence[str], limit: int = EMAIL_EVIDENCE_LINES) -> list[str]:
    out = [f"    | {clip(line, EMAIL_LINE)}" for line in lines[:limit]]
    if len(lines) > limit:
        out.append(f"    {_more_lines(len(lines) - limit)}")
    return out


def _subject(text: str) -> str:
    return clip(_one_line(text), MAX_SUBJECT)


def _body(lines: Iterable[str]) -> str:
    body = "\n".join(lines).rstrip() + "\n"
    data = body.encode("utf-8")
    if len(data) <= MAX_EMAIL_BYTES:
        return body
    marker = "\n… message trimmed to fit the email size limit\n"
    return data[: MAX_EMAIL_BYTES - len(marker.encode())].decode("utf-8", "ignore") + marker


# --------------------------------------------------------------------------- one transition


def slack_message(notice: Notice, *, runbook_base_url: str | None) -> dict[str, Any]:
    """A Slack incoming-webhook payload (``text`` fallback and Block Kit ``blocks``) for one transition."""
    f = notice.finding
    icon = emoji(f, notice.transition)
    word = _WORD[notice.transition]
    where = _where(notice.cluster_name, f)
    if notice.transition == "RESOLVED":
        return _resolved_slack(notice, runbook_base_url)

    prio = f.priority.value if f.priority else f.tag.value
    fallback = f"{icon} {word} {prio} on {escape(where)}: {escape(f.message)}"
    blocks: list[dict[str, Any]] = [
        _header(f"{icon} {word} {prio}: {f.message}"),
        _fields(
            [
                ("Priority", escape(_grade(f))),
                ("Cluster", f"{escape(notice.cluster_name)} ({escape(notice.region)})"),
                ("Node", _node_mrkdwn(f)),
                ("Check", f"`{escape(f.check)}`"),
                ("Runbook", _section_mrkdwn(f.section, runbook_base_url)),
                ("Seen", f"{_times(notice.count)} since {when(notice.first_seen)}"),
                *([("Found by", escape(notice.trigger))] if notice.trigger else []),
            ]
        ),
    ]
    text = f"*{_esc_clip(f.message, 1500)}*"
    if f.root_cause:
        text += f"\n*Root cause:* {_esc_clip(f.root_cause, 1200)}"
    blocks.append(_section(text))
    lines = evidence_lines(f)
    if lines:
        heading = "*Evidence (verbatim):*\n"
        blocks.append(_section(heading + _code_block(lines, MAX_SECTION - len(heading))))
    step = f"*Read:* {_section_mrkdwn(f.section, runbook_base_url)}"
    todo = what_to_do(f.section)
    if todo:
        step += f"\n*What to do:* {escape(todo)}"
    if f.next_step:
        step += f"\n*Next step:* {_esc_clip(f.next_step, 1500)}"
    blocks.append(_section(step))

    commands = list(f.suggested_commands)
    if commands:
        blocks.append(_DIVIDER)
        room = MAX_BLOCKS - len(blocks) - 2  # the footer, and a "more commands" note
        for cmd in commands[:room]:
            blocks.append(_section(_command_mrkdwn(cmd)))
        if len(commands) > room:
            hint = escape(_triage_hint(notice.cluster_name, notice.region))
            blocks.append(_section(f"… {len(commands) - room} more suggested commands: run `{hint}`"))
    blocks.append(
        _context(
            f"First seen {when(notice.first_seen)} · last seen {when(notice.last_seen)} · {_times(notice.count)}",
            READ_ONLY_NOTE,
        )
    )
    return _message(fallback, blocks)


def _open_for(notice: Notice) -> timedelta:
    end = notice.resolved_at or notice.last_seen
    return _utc(end) - _utc(notice.first_seen)


def _resolved_slack(notice: Notice, runbook_base_url: str | None) -> dict[str, Any]:
    f = notice.finding
    where = _where(notice.cluster_name, f)
    open_for = duration(_open_for(notice))
    fallback = f"{EMOJI_RESOLVED} Resolved on {escape(where)} after {open_for}: {escape(f.message)} (no longer seen)"
    text = (
        f"*No longer seen:* {_esc_clip(f.message, 1500)}\n"
        f"Was {escape(_grade(f))} on {_node_mrkdwn(f)}, cluster {escape(notice.cluster_name)} "
        f"({escape(notice.region)}), check `{escape(f.check)}`.\n"
        f"Open for {open_for} (since {when(notice.first_seen)}), seen {_times(notice.count)}. "
        f"Runbook: {_section_mrkdwn(f.section, runbook_base_url)}"
    )
    if notice.trigger:
        text += f"\nFound fixed by {escape(notice.trigger)}."
    # the message names the fault as it was seen; "no longer seen" keeps it from reading as still broken
    header = f"{EMOJI_RESOLVED} Resolved: {clip(_one_line(f.message), MAX_HEADER - 30)} — no longer seen"
    return _message(fallback, [_header(header), _section(text)])


def email_text(notice: Notice, *, runbook_base_url: str | None) -> tuple[str, str]:
    """``(subject, body)`` for SNS email: the same content as :func:`slack_message`, in plain text."""
    f = notice.finding
    word = _WORD[notice.transition]
    where = _where(notice.cluster_name, f)
    if notice.transition == "RESOLVED":
        open_for = duration(_open_for(notice))
        subject = _subject(f"[HyperPod] Resolved: {where}: {f.message}")
        body = [
            f"RESOLVED, no longer seen: {f.message}",
            "",
            f"Was:      {_grade(f)}",
            f"Cluster:  {notice.cluster_name} ({notice.region})",
            f"Node:     {_node(f)}",
            f"Check:    {f.check}",
            f"Open for: {open_for} (first seen {when(notice.first_seen)}), seen {_times(notice.count)}",
            f"Runbook:  {_section_plain(f.section, runbook_base_url)}",
            *([f"Found fixed by {notice.trigger}."] if notice.trigger else []),
        ]
        return subject, _body(body)

    prio = f.priority.value if f.priority else f.tag.value
    subject = _subject(f"[HyperPod {prio}] {word}: {where}: {f.message}")
    body = [
        f"{notice.transition}: {_grade(f)}: {f.message}",
        "",
        f"Cluster:  {notice.cluster_name} ({notice.region})",
        f"Node:     {_node(f)}",
        f"Check:    {f.check}",
        f"Seen:     {_times(notice.count)}; first {when(notice.first_seen)}, last {when(notice.last_seen)}",
        *([f"Found by: {notice.trigger}"] if notice.trigger else []),
        f"Runbook:  {_section_plain(f.section, runbook_base_url)}",
    ]
    todo = what_to_do(f.section)
    if todo:
        body.append(f"What to do: {todo}")
    lines = evidence_lines(f)
    if lines:
        body += ["", "Evidence (verbatim):", *_plain_evidence(lines)]
    if f.root_cause:
        body += ["", f"Root cause: {f.root_cause}"]
    if f.next_step:
        body += ["", f"Next step: {f.next_step}"]
    for cmd in f.suggested_commands:
        body += ["", *_command_plain(cmd)]
    body += ["", READ_ONLY_NOTE]
    return subject, _body(body)


# --------------------------------------------------------------------------- digest


def _rank(notice: Notice) -> tuple[int, int, int, str, str]:
    f = notice.finding
    return (
        _PRIORITY_RANK.get(f.priority, 3) if f.priority else 3,
        _TAG_RANK[f.tag],
        -notice.count,
        f.check,
        f.instance_id or "",
    )


def _bucket(f: Finding) -> str:
    if f.tag is Tag.UNKNOWN or f.priority is None:
        return "UNKNOWN"
    return f.priority.value


_BUCKETS = ("P0", "P1", "P2", "UNKNOWN")
_BUCKET_EMOJI = {"P0": EMOJI[Priority.P0], "P1": EMOJI[Priority.P1], "P2": EMOJI[Priority.P2], "UNKNOWN": EMOJI_UNKNOWN}


def _trigger_of(notices: Sequence[Notice]) -> tuple[str | None, str | None, str | None]:
    """(kind, words, node) when every notice was written by the same trigger, else Nones."""
    triggers = {(n.trigger_kind, n.trigger, n.trigger_node) for n in notices}
    return triggers.pop() if len(triggers) == 1 else (None, None, None)


def _opened_by(notices: Sequence[Notice], count: int) -> str:
    """``14 findings opened after the Node Health Event for i-…`` / ``… in one sweep`` / ``… opened``."""
    kind, words, _ = _trigger_of(notices)
    noun = f"{count} finding{'s' if count != 1 else ''} opened"
    if kind == "sweep":
        return f"{noun} in one sweep"
    return f"{noun} after the {words}" if words else noun


def _digest_parts(notices: Sequence[Notice]) -> tuple[list[Notice], list[Notice], Counter[str], Counter[str]]:
    _, _, node = _trigger_of(notices)
    # the node the event named comes first, then the rest by urgency
    opened = sorted(
        (n for n in notices if n.transition != "RESOLVED"),
        key=lambda n: (node is None or n.finding.instance_id != node, *_rank(n)),
    )
    resolved = [n for n in notices if n.transition == "RESOLVED"]
    by_priority = Counter(_bucket(n.finding) for n in opened)
    by_section = Counter(n.finding.section or "-" for n in opened)
    return opened, resolved, by_priority, by_section


def digest(notices: Sequence[Notice], *, cluster_name: str, runbook_base_url: str | None) -> dict[str, Any]:
    """One Slack message for a sweep that opened many findings: counts, the top 10, ``… and N more``.

    It carries no suggested commands: each finding's commands are in its own record and in the CLI triage.
    """
    opened, resolved, by_priority, by_section = _digest_parts(notices)
    region = notices[0].region if notices else None
    worst = next((b for b in _BUCKETS if by_priority[b]), None)
    icon = _BUCKET_EMOJI[worst] if worst else EMOJI_RESOLVED
    title = f"{icon} {cluster_name}: {_opened_by(notices, len(opened))}"
    if resolved:
        title += f", {len(resolved)} resolved"
    counts = " · ".join(f"{_BUCKET_EMOJI[b]} {b}: {by_priority[b]}" for b in _BUCKETS if by_priority[b])
    section_lines = [
        f"• {_section_mrkdwn(s, runbook_base_url) if s != '-' else 'no section'}: {n}"
        + (f" — {escape(todo)}" if (todo := what_to_do(s if s != "-" else None)) else "")
        for s, n in sorted(by_section.items(), key=lambda kv: (-kv[1], kv[0]))[:15]
    ]
    if len(by_section) > 15:
        section_lines.append(f"• … and {len(by_section) - 15} more sections")
    blocks: list[dict[str, Any]] = [
        _header(title),
        _section(f"*By priority:* {counts or 'none'}\n*By runbook section:*\n" + "\n".join(section_lines)),
        _DIVIDER,
    ]
    for n in opened[:TOP_N]:
        f = n.finding
        line = (
            f"{emoji(f)} *{escape(_grade(f))}* {_esc_clip(f.message, 600)}\n"
            f"{_node_mrkdwn(f)} · `{escape(f.check)}` · {_section_mrkdwn(f.section, runbook_base_url)}"
        )
        if f.next_step:
            line += f"\n_Next step:_ {_esc_clip(f.next_step, 600)}"
        blocks.append(_section(line))
    more = len(opened) - TOP_N
    tail = [f"… and {more} more" if more > 0 else "", f"{len(resolved)} resolved" if resolved else ""]
    hint = escape(_triage_hint(cluster_name, region))
    blocks.append(
        _context(
            " · ".join(t for t in tail if t) or "All findings of this sweep are listed above.",
            f"Full detail and suggested commands: `{hint}`. {READ_ONLY_NOTE}",
        )
    )
    fallback = f"{icon} {escape(cluster_name)}: {escape(_opened_by(notices, len(opened)))} ({counts or 'none'})"
    return _message(fallback, blocks)


def digest_email(notices: Sequence[Notice], *, cluster_name: str, runbook_base_url: str | None) -> tuple[str, str]:
    """``(subject, body)`` of the digest for SNS email."""
    opened, resolved, by_priority, by_section = _digest_parts(notices)
    region = notices[0].region if notices else None
    counts = ", ".join(f"{b}: {by_priority[b]}" for b in _BUCKETS if by_priority[b]) or "none"
    subject = _subject(f"[HyperPod] {cluster_name}: {_opened_by(notices, len(opened))} ({counts})")
    body = [
        f"{_opened_by(notices, len(opened))}, cluster {cluster_name}"
        + (f" ({region})" if region else "")
        + (f"; {len(resolved)} resolved." if resolved else "."),
        "",
        f"By priority: {counts}",
        "By runbook section:",
        *(
            f"  {_section_plain(s, runbook_base_url) if s != '-' else 'no section'}: {n}"
            + (f"\n      what to do: {todo}" if (todo := what_to_do(s if s != "-" else None)) else "")
            for s, n in sorted(by_section.items(), key=lambda kv: (-kv[1], kv[0]))
        ),
        "",
        f"Top {min(TOP_N, len(opened))}:",
    ]
    for n in opened[:TOP_N]:
        f = n.finding
        body.append(f"  [{_grade(f)}] {f.message} [{_node(f)}] ({f.check}, § {f.section or '-'})")
        if f.next_step:
            body.append(f"      next step: {f.next_step}")
    if len(opened) > TOP_N:
        body.append(f"  … and {len(opened) - TOP_N} more")
    body += ["", f"Full detail and suggested commands: {_triage_hint(cluster_name, region)}", READ_ONLY_NOTE]
    return subject, _body(body)


# --------------------------------------------------------------------------- circuit breaker


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _breaker_title(n: int, check: str) -> str:
    return f"{n} nodes fail {check} at once"


def _breaker_lead(n: int) -> str:
    return f"likely a shared cause, not {n} node faults"


_BREAKER_ADVICE = (
    "Do not reboot or replace these nodes one by one. Look for what they share (security group, subnet, "
    "AMI or lifecycle script, driver or software version, a recent change or AWS event), fix that, and "
    "the nodes recover together. Per-node alerts for this check are held back while this alert is open."
)


def breaker(
    check: str,
    section: str | None,
    instance_ids: Sequence[str],
    *,
    cluster_name: str,
    sample: Finding,
    runbook_base_url: str | None,
) -> dict[str, Any]:
    """One cluster-level alert when many nodes fail the same check, instead of N node alerts.

    It offers read-only investigation only: never a reboot, replace or any other mutating command.
    """
    ids = _unique(instance_ids)
    n = len(ids)
    icon = emoji(sample)
    section = section or sample.section
    shown = ", ".join(f"`{escape(i)}`" for i in ids[:BREAKER_NODES_SHOWN])
    if n > BREAKER_NODES_SHOWN:
        shown += f", … and {n - BREAKER_NODES_SHOWN} more"
    blocks: list[dict[str, Any]] = [
        _header(f"{icon} {_breaker_title(n, check)}"),
        _section(f"*{n} nodes fail `{escape(check)}` at once: {_breaker_lead(n)}.*\n{escape(_BREAKER_ADVICE)}"),
        _fields(
            [
                ("Priority", escape(_grade(sample))),
                ("Cluster", escape(cluster_name)),
                ("Check", f"`{escape(check)}`"),
                ("Runbook", _section_mrkdwn(section, runbook_base_url)),
            ]
        ),
        _section(f"*Nodes ({n}):* {shown}"),
    ]
    example = f"*Example* ({_node_mrkdwn(sample)}): {_esc_clip(sample.message, 800)}"
    lines = evidence_lines(sample)
    if lines:
        example += "\n" + _code_block(lines, 1800)
    blocks.append(_section(example))
    read_only = [c for c in sample.suggested_commands if not c.mutates]
    if read_only:
        blocks.append(_DIVIDER)
        for cmd in read_only[: MAX_BLOCKS - len(blocks) - 1]:
            blocks.append(_section(_command_mrkdwn(cmd, " on the example node")))
    blocks.append(_context(f"Read {_section_mrkdwn(section, runbook_base_url)} first. {READ_ONLY_NOTE}"))
    fallback = f"{icon} {escape(cluster_name)}: {n} nodes fail {escape(check)} at once: {_breaker_lead(n)}"
    return _message(fallback, blocks)


def breaker_email(
    check: str,
    section: str | None,
    instance_ids: Sequence[str],
    *,
    cluster_name: str,
    sample: Finding,
    runbook_base_url: str | None,
) -> tuple[str, str]:
    """``(subject, body)`` of the circuit-breaker alert for SNS email (read-only commands only)."""
    ids = _unique(instance_ids)
    n = len(ids)
    section = section or sample.section
    prio = sample.priority.value if sample.priority else sample.tag.value
    subject = _subject(f"[HyperPod {prio}] {cluster_name}: {_breaker_title(n, check)}")
    body = [
        f"{_breaker_title(n, check)}: {_breaker_lead(n)}.",
        "",
        _BREAKER_ADVICE,
        "",
        f"Priority: {_grade(sample)}",
        f"Cluster:  {cluster_name}",
        f"Check:    {check}",
        f"Runbook:  {_section_plain(section, runbook_base_url)}",
        f"Nodes ({n}): {', '.join(ids[:500])}" + (f", … and {n - 500} more" if n > 500 else ""),
        "",
        f"Example ({_node(sample)}): {sample.message}",
    ]
    lines = evidence_lines(sample)
    if lines:
        body += _plain_evidence(lines, 40)
    for cmd in (c for c in sample.suggested_commands if not c.mutates):
        body += ["", *_command_plain(cmd, " on the example node")]
    body += ["", READ_ONLY_NOTE]
    return subject, _body(body)
