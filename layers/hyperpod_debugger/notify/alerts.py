"""Incident messages as a person reads them at 3 a.m.: Slack Block Kit and plain-text email.

Pure. One :class:`~hyperpod_debugger.notify.policy.Batch` (what one flush tells one channel) becomes one
message. The header names the cluster, the node (or the cause) and the verdict, and shows the severity; then
why, the likely cause, the one next command (a state-changing one as "Suggested command (run this yourself)",
with its blast radius and IaC note) and the runbook section as a link; the evidence comes last. Nothing is
said twice and nothing is cut mid-word; email subjects are whole.

Limits respected (Slack Block Kit: header ≤ 150 characters, section text ≤ 3000, ≤ 50 blocks; SNS: subject
< 100 characters on one line, message ≤ 256 KB). Text from the cluster is escaped for Slack and never put in a
code fence it could close.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from hyperpod_debugger.domain.model import Priority
from hyperpod_debugger.domain.sections import RUNBOOK_PATH, SECTIONS, pointer, what_to_do
from hyperpod_debugger.domain.untrusted import slack_code, slack_text, visible
from hyperpod_debugger.notify.messages import (
    EMOJI,
    EMOJI_RESOLVED,
    EMOJI_UNKNOWN,
    MAX_BLOCKS,
    MAX_EMAIL_BYTES,
    MAX_HEADER,
    MAX_SECTION,
    MAX_SUBJECT,
    MUTATING_HEADING,
    READ_ONLY_HEADING,
    READ_ONLY_NOTE,
    escape,
    section_url,
)

if TYPE_CHECKING:
    from hyperpod_debugger.lifecycle.incidents import Incident, NodeIssue, StoredIncident
    from hyperpod_debugger.notify.policy import Batch, Item

#: Incidents a group message shows one by one (the rest are counted, with the command that lists them).
SHOWN = 10
#: Nodes of one check in one group message from which a shared cause is the likelier story.
SHARED_CAUSE_NODES = 5
NODES_LISTED = 30

VERDICT_WORDS = {
    "replace": "REPLACE",
    "reboot": "REBOOT",
    "investigate": "INVESTIGATE",
    "fix-workload": "FIX WORKLOAD",
    "watch": "WATCH",
    "hyperpod-acting": "HYPERPOD REPAIRING",
    "cause": "CLUSTER PROBLEM",
    "unknown": "COULD NOT CHECK",
}


# --------------------------------------------------------------------------- words shared by every channel


def one_line(text: str) -> str:
    """``text`` on one line, every control, bidirectional or invisible character shown as an escape."""
    return " ".join(visible(text, newlines=True).split())


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, marked with ``…`` when cut (evidence: cut anywhere)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_words(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut at a word boundary with ``…`` when it must be cut."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:·-") + "…"


def icon(incident: Incident, told: str | None = None) -> str:
    if told == "resolved":
        return EMOJI_RESOLVED
    if incident.kind == "coverage" or incident.priority is None:
        return EMOJI_UNKNOWN
    return EMOJI[incident.priority]


def verdict_word(incident: Incident) -> str:
    return VERDICT_WORDS.get(incident.verdict, incident.verdict.upper())


def subject_of(incident: Incident) -> str:
    """What the incident is about, in a few words: ``i-0abc (gpu-workers)``, or the cause's check."""
    if incident.kind == "node" and incident.instance_id:
        return incident.instance_id + (f" ({incident.instance_group})" if incident.instance_group else "")
    if incident.kind == "coverage":
        return "monitor coverage"
    return incident.check


def headline(item: Item, cluster: str) -> str:
    """One line that says it all: severity, verdict, what, cluster (used by headers and subjects)."""
    i = item.incident.incident
    prio = i.priority.value if i.priority else "UNKNOWN"
    if item.told == "resolved":
        return f"RESOLVED {subject_of(i)} · {cluster} (was {prio} {verdict_word(i)})"
    step = "ESCALATED to " if item.told == "escalated" else ""
    return f"{prio} {step}{verdict_word(i)} {subject_of(i)} · {cluster}"


def runbook_link(section: str | None, base_url: str | None) -> tuple[str, str | None]:
    """(label, URL or None). Without a base URL the label says where the section lives in the package and
    the command that prints it (a link needs a host, and the monitor publishes nothing by itself)."""
    if not section:
        return ("no runbook section", None)
    label = f"§ {section} {SECTIONS.get(section, '')}".rstrip()
    url = section_url(section, base_url)
    return (label, url)


def runbook_hint(section: str) -> str:
    return f"{pointer(section)} (hyperpod-debugger runbook {shlex.quote(section)})"


def commands(incident: Incident) -> list[dict[str, Any]]:
    """The one next command, and the rung's own command after it (after a drain)."""
    return [c for c in (incident.next_command, incident.then_command) if c and c.get("command")]


def when(text: str | None) -> str:
    if not text:
        return "-"
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def triage_hint(cluster: str, region: str) -> str:
    return f"hyperpod-debugger triage --cluster {shlex.quote(cluster)} --region {shlex.quote(region)}"


def list_hint(cluster: str, region: str) -> str:
    return f"hyperpod-debugger findings list --cluster {shlex.quote(cluster)} --region {shlex.quote(region)}"


def opened_line(s: StoredIncident) -> str:
    line = f"Opened {when(s.opened_at)}"
    if s.occurrences > 1:
        line += f" · opened {s.occurrences} times on this {'node' if s.incident.kind == 'node' else 'cluster'}"
    if s.trigger:
        line += f" · found by {s.trigger}"
    return line


def _counts(items: Sequence[Item]) -> str:
    words = Counter(verdict_word(it.incident.incident) for it in items if it.told != "resolved")
    return " · ".join(f"{w} {n}" for w, n in words.most_common())


def shared_check(items: Sequence[Item]) -> tuple[str, int] | None:
    """A check failing on many nodes of this message at once: likely a shared cause."""
    checks = Counter(
        c
        for it in items
        if it.told != "resolved" and it.incident.incident.kind == "node"
        for c in it.incident.incident.checks[:1]
    )
    if not checks:
        return None
    check, n = checks.most_common(1)[0]
    return (check, n) if n >= SHARED_CAUSE_NODES else None


#: A node incident's other problems a message lists one by one (the rest are counted).
ISSUES_LISTED = 6
_RUNG = {"reboot": "a reboot", "replace": "a replacement"}
_CLEARS_TOO = {
    "reboot": "A reboot clears too",
    "replace": "A replacement clears too",
    "fix-workload": "Fixing the workload clears too",
}


def issue_text(issue: NodeIssue, limit: int = 200) -> str:
    """One problem of a node, as every channel words it: priority, message (one line), runbook section."""
    prio = f"{issue.priority.value} " if issue.priority else ""
    section = f" (§ {issue.section})" if issue.section else ""
    return f"{prio}{issue.tag} {clip_words(issue.message, limit)}{section}"


def node_issues(i: Incident) -> list[tuple[str, tuple[NodeIssue, ...]]]:
    """A node incident's problems beyond the one its verdict stands on, as (heading, problems): its worst
    problem when that is another, the problems the rung does not fix (each needs its own step), then those
    the rung clears too. Nothing the node has is left unsaid; the headings say which step fixes what."""
    if i.kind != "node":
        return []
    rung = _RUNG.get(i.verdict)
    out: list[tuple[str, tuple[NodeIssue, ...]]] = []
    if i.worst is not None:
        unfixed = rung is not None and not i.worst.fixed_by_rung
        out.append((f"Worst problem ({rung} does not fix it)" if unfixed else "Worst problem", (i.worst,)))
    listed = [o for o in i.others if o != i.worst]
    open_ = tuple(o for o in listed if not o.fixed_by_rung)
    cleared = tuple(o for o in listed if o.fixed_by_rung)
    if open_:
        out.append((f"{rung[0].upper()}{rung[1:]} does not fix" if rung else "Also on this node", open_))
    if cleared:
        out.append((_CLEARS_TOO.get(i.verdict, "Cleared with it"), cleared))
    return out


def unfixed_count(i: Incident) -> tuple[int, int]:
    """(other problems of a node incident, how many of them its rung does not fix)."""
    listed = {*i.others, *([i.worst] if i.worst else [])}
    return len(listed), sum(1 for o in listed if not o.fixed_by_rung)


def issues_line(i: Incident) -> str:
    """A group message's one line for a node's other problems: how many, how many the rung leaves."""
    total, unfixed = unfixed_count(i)
    if not total:
        return ""
    rung = _RUNG.get(i.verdict)
    text = f"{total} more problem{'s' if total != 1 else ''} on this node"
    if rung and unfixed:
        text += f", {unfixed} that {rung} does not fix"
    elif rung:
        text += f", which {rung} clears too"
    first = i.worst or (i.others[0] if i.others else None)
    if first is not None:
        text += f" ({'worst' if i.worst else 'the most urgent'}: {issue_text(first, 120)})"
    return text


SHARED_ADVICE = (
    "Many nodes failing one check together usually share a cause (a security group, a lifecycle script, an "
    "AMI or driver rollout, an AWS event): look for it before acting node by node."
)


def group_title(batch: Batch) -> str:
    opened = [it for it in batch.items if it.told != "resolved"]
    resolved = len(batch.items) - len(opened)
    if batch.kind == "baseline":
        n = len(opened)
        title = f"{batch.cluster_name}: monitoring started, {n} open problem{'s' if n != 1 else ''}"
    elif batch.kind == "daily":
        title = f"{batch.cluster_name}: daily summary, {len(opened)} open"
    else:
        kinds = [it.incident.incident.kind for it in opened]
        nodes, causes, gaps = kinds.count("node"), kinds.count("cause"), kinds.count("coverage")
        parts = []
        if nodes:
            parts.append(f"{nodes} node{'s' if nodes != 1 else ''} need{'s' if nodes == 1 else ''} action")
        if causes:
            parts.append(f"{causes} cluster problem{'s' if causes != 1 else ''}")
        if gaps:
            parts.append("a coverage gap")  # one coverage incident per cluster
        if resolved:
            parts.append(f"{resolved} resolved")
        title = f"{batch.cluster_name}: " + ", ".join(parts)
    return title


def worst_icon(items: Sequence[Item]) -> str:
    live = [it.incident.incident for it in items if it.told != "resolved"]
    if not live:
        return EMOJI_RESOLVED
    ranked = sorted(live, key=lambda i: {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}.get(i.priority, 3))  # type: ignore[arg-type]
    return icon(ranked[0])


# --------------------------------------------------------------------------- Slack


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": clip_words(text, MAX_HEADER), "emoji": True}}


def _mrkdwn(text: str) -> dict[str, Any]:
    """A section of ``mrkdwn`` that Slack shows verbatim: it links and mentions nothing by itself (outside
    text in it is quoted by :func:`_esc`; our own links are explicit)."""
    if len(text) > MAX_SECTION:
        text = text[: MAX_SECTION - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text, "verbatim": True}}


def _context(*texts: str) -> dict[str, Any]:
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": t[:2000], "verbatim": True} for t in texts if t][:10],
    }


_DIVIDER: dict[str, Any] = {"type": "divider"}


def _esc(text: str, limit: int) -> str:
    """Text from the cluster for mrkdwn: one line, cut at a word, quoted (:func:`untrusted.slack_text`: its
    three escapes, no backtick that could open or close code, no URL Slack would link)."""
    return slack_text(clip_words(text, limit))


def _link_mrkdwn(section: str | None, base_url: str | None) -> str:
    label, url = runbook_link(section, base_url)
    if url:
        return f"<{escape(quote(url, safe=':/#%?=&~+-._'))}|{escape(label)}>"
    if not section:
        return label
    return f"{escape(label)}: `{escape(runbook_hint(section))}`"


def _command_mrkdwn(command: dict[str, Any]) -> str:
    heading = MUTATING_HEADING if command.get("mutates") else READ_ONLY_HEADING
    text = escape(str(command.get("command") or "")).replace("`", "\u02cb")
    lines = [f"*{heading}:* {_esc(str(command.get('purpose') or ''), 200)}", f"```{text[:1500]}```"]
    if command.get("mutates"):
        lines.append(f"*Blast radius:* {_esc(str(command.get('blast_radius') or ''), 400)}")
        if command.get("iac_warning"):
            lines.append(f"*IaC:* {_esc(str(command['iac_warning']), 300)}")
    return "\n".join(lines)


def _cut_escaped(text: str, limit: int) -> str:
    """``text`` escaped for a code block it cannot close, in at most ``limit`` characters: when cut, marked
    with ``…`` and never inside one of Slack's escapes (``&amp;`` is not left as ``&am``)."""
    out = slack_code(text)
    if len(out) <= limit:
        return out
    cut = out[: limit - 1]
    amp = cut.rfind("&")
    if amp >= 0 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _evidence_block(lines: Sequence[str], budget: int = 2400) -> str | None:
    if not lines:
        return None
    shown, used = [], 0
    for raw in lines:
        line = slack_code(one_line(raw))
        if used + len(line) + 1 > budget:
            break
        shown.append(line)
        used += len(line) + 1
    text = "*Evidence (verbatim):*\n```\n" + "\n".join(shown or [_cut_escaped(one_line(lines[0]), budget)]) + "\n```"
    hidden = len(lines) - max(len(shown), 1)
    if hidden > 0:
        text += f"\n… {hidden} more line{'s' if hidden != 1 else ''}"
    return text


def _incident_slack(batch: Batch, item: Item, base_url: str | None) -> dict[str, Any]:
    s = item.incident
    i = s.incident
    title = headline(item, batch.cluster_name)
    mark = icon(i, item.told)
    blocks: list[dict[str, Any]] = [_header(f"{mark} {title}")]
    if item.told == "resolved":
        text = (
            f"*No longer seen:* {_esc(i.title, 1200)}\n"
            f"Open from {when(s.opened_at)} to {when(s.resolved_at)}. Runbook: {_link_mrkdwn(i.section, base_url)}"
        )
        blocks.append(_mrkdwn(text))
        blocks.append(_context(f"Incident `{s.incident_id}` · {READ_ONLY_NOTE}"))
        return {"text": slack_text(clip_words(f"{mark} {title}", 300)), "blocks": blocks}
    lines = [f"*Why:* {_esc(i.title, 1200)}"]
    if item.told == "escalated" and s.reason:
        lines.append(f"*Escalated:* {_esc(s.reason, 300)}")
    if i.likely_cause:
        lines.append(f"*Likely cause:* {_esc(i.likely_cause, 800)}")
    if i.hyperpod:
        lines.append(f"*HyperPod:* {_esc(i.hyperpod, 400)}")
    if i.kind == "cause" and i.explains:
        shown = "; ".join(
            f"{escape(e.instance_id)}: {escape(e.check)}" if e.instance_id else escape(e.check) for e in i.explains[:8]
        )
        more = f" and {len(i.explains) - 8} more" if len(i.explains) > 8 else ""
        lines.append(f"*Explains:* {shown}{more}")
    if i.kind == "coverage" and i.reasons:
        lines.append("*Why not:* " + "; ".join(f"{_esc(r, 200)} ({n})" for r, n in i.reasons[:5]))
        if i.nodes:
            more = f" and {len(i.nodes) - NODES_LISTED} more" if len(i.nodes) > NODES_LISTED else ""
            lines.append("*Nodes:* " + ", ".join(escape(n) for n in i.nodes[:NODES_LISTED]) + more)
    for heading, issues in node_issues(i):
        lines.append(f"*{escape(heading)}:*")
        lines.extend(f"• {_esc(issue_text(o), 300)}" for o in issues[:ISSUES_LISTED])
        if len(issues) > ISSUES_LISTED:
            lines.append(f"• … and {len(issues) - ISSUES_LISTED} more")
    if i.next_step:
        lines.append(f"*Next step:* {_esc(i.next_step, 600)}")
    blocks.append(_mrkdwn("\n".join(lines)))
    for command in commands(i):
        blocks.append(_mrkdwn(_command_mrkdwn(command)))
    facts = [f"*Runbook:* {_link_mrkdwn(i.section, base_url)}"]
    if i.section and (todo := what_to_do(i.section)):
        facts.append(f"*What to do:* {escape(todo)}")
    if i.instance_type:
        facts.append(f"*Instance type:* {escape(i.instance_type)}")
    if i.occupancy:
        facts.append(f"*Runs there:* {_esc(i.occupancy, 300)}")
    blocks.append(_mrkdwn("\n".join(facts)))
    evidence = _evidence_block(i.evidence) if i.kind != "coverage" else None
    if evidence:
        blocks += [_DIVIDER, _mrkdwn(evidence)]
    blocks.append(_context(f"{opened_line(s)} · incident `{s.incident_id}`", READ_ONLY_NOTE))
    return {"text": slack_text(clip_words(f"{mark} {title}: {i.title}", 300)), "blocks": blocks[:MAX_BLOCKS]}


def _item_line(item: Item) -> str:
    i = item.incident.incident
    if item.told == "resolved":
        return f"{EMOJI_RESOLVED} *RESOLVED* {escape(subject_of(i))}: {_esc(i.title, 160)}"
    prio = i.priority.value if i.priority else "UNKNOWN"
    head = f"{icon(i)} *{prio} {verdict_word(i)}* "
    head += f"`{escape(i.instance_id)}`" if i.kind == "node" and i.instance_id else escape(subject_of(i))
    if i.kind == "node" and i.instance_group:
        head += f" ({escape(i.instance_group)})"
    text = f"{head}: {_esc(i.title, 200)}"
    if i.likely_cause:
        text += f"\n_Likely cause:_ {_esc(i.likely_cause, 200)}"
    if also := issues_line(i):
        text += f"\n_Also:_ {_esc(also, 300)}"
    first = commands(i)[:1]
    if first:
        command = first[0]
        shown = escape(clip_words(str(command["command"]), 300)).replace("`", "'")
        if command.get("mutates"):
            text += f"\n_{MUTATING_HEADING}:_ `{shown}`"
            text += f"\n_Blast radius:_ {_esc(str(command.get('blast_radius') or ''), 160)}"
            if command.get("iac_warning"):
                text += f" _IaC:_ {_esc(str(command['iac_warning']), 120)}"
        else:
            text += f"\n_{READ_ONLY_HEADING}:_ `{shown}`"
    return text


def _sections_mrkdwn(items: Sequence[Item], base_url: str | None) -> str:
    """The runbook sections of a group message, as links, or (without a base URL) as ids and one command."""
    sections = sorted({it.incident.incident.section for it in items if it.incident.incident.section})
    if not sections:
        return ""
    if section_url(sections[0], base_url):
        return "Runbook: " + " · ".join(_link_mrkdwn(s, base_url) for s in sections[:12])
    ids = ", ".join(f"§ {s}" for s in sections[:12])
    return f"Runbook ({escape(RUNBOOK_PATH)}): {ids}; `{escape('hyperpod-debugger runbook <section>')}` prints one"


def _group_slack(batch: Batch, base_url: str | None) -> dict[str, Any]:
    items = list(batch.items)
    title = group_title(batch)
    mark = worst_icon(items)
    blocks: list[dict[str, Any]] = [_header(f"{mark} {title}")]
    summary = []
    counts = _counts(items)
    if counts:
        summary.append(f"*Verdicts:* {counts}")
    shared = shared_check(items)
    if shared:
        summary.append(f"*{shared[1]} nodes fail `{escape(shared[0])}`.* {escape(SHARED_ADVICE)}")
    if batch.below_minimum and batch.kind == "baseline":
        summary.append(
            f"{batch.below_minimum} of them are below this channel's alert priority: listed here once, "
            "then only in the daily summary."
        )
    elif batch.below_minimum and batch.kind == "group":
        summary.append(f"{batch.below_minimum} lower-priority problem(s) wait for the daily summary.")
    if batch.kind == "daily" and batch.below_minimum:
        summary.append(f"{batch.below_minimum} of them are below this channel's alert priority (never paged).")
    if summary:
        blocks.append(_mrkdwn("\n".join(summary)))
    blocks.append(_DIVIDER)
    for item in items[:SHOWN]:
        blocks.append(_mrkdwn(_item_line(item)))
    rest = len(items) - SHOWN
    tail = [
        f"… and {rest} more." if rest > 0 else "",
        f"All of them: `{escape(list_hint(batch.cluster_name, batch.region))}`",
    ]
    blocks.append(_context(" ".join(t for t in tail if t), _sections_mrkdwn(items, base_url), READ_ONLY_NOTE))
    return {"text": slack_text(clip_words(f"{mark} {title}", 300)), "blocks": blocks[:MAX_BLOCKS]}


def slack(batch: Batch, *, runbook_base_url: str | None) -> dict[str, Any]:
    """The Slack incoming-webhook payload (``text`` fallback and ``blocks``) of one batch."""
    if batch.kind == "incident" and len(batch.items) == 1:
        return _incident_slack(batch, batch.items[0], runbook_base_url)
    return _group_slack(batch, runbook_base_url)


# --------------------------------------------------------------------------- email


def subject(batch: Batch) -> str:
    """A whole subject under SNS's 100 characters: the trailing why whole, or its first clause, or left out."""
    if batch.kind == "incident" and len(batch.items) == 1:
        item = batch.items[0]
        i = item.incident.incident
        prio = "RESOLVED" if item.told == "resolved" else (i.priority.value if i.priority else "UNKNOWN")
        verdict = "" if item.told == "resolved" else verdict_word(i) + " "
        head = f"[HyperPod {prio}] {batch.cluster_name}: {verdict}{subject_of(i)}"
        tail = i.title
    else:
        prio = next(
            (
                p.value
                for p in (Priority.P0, Priority.P1, Priority.P2)
                if any(it.told != "resolved" and it.incident.incident.priority is p for it in batch.items)
            ),
            "RESOLVED",
        )
        head = f"[HyperPod {prio}] {group_title(batch)}"
        tail = ""
    head = one_line(head)
    if len(head) > MAX_SUBJECT:
        return clip_words(head, MAX_SUBJECT)
    why = first_clause(tail, MAX_SUBJECT - len(head) - 2)
    return f"{head}: {why}" if why else head


def first_clause(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else its longest leading clause that does (cut
    before a parenthesis, colon, semicolon, comma or dash), else nothing: a subject never ends mid-thought."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    cuts = [m.start() for m in re.finditer(r" \(|[:;,]| [-–—] ", text) if 0 < m.start() <= limit]
    return text[: max(cuts)].rstrip() if cuts else ""


def _plain_command(command: dict[str, Any]) -> list[str]:
    heading = MUTATING_HEADING if command.get("mutates") else READ_ONLY_HEADING
    out = [f"{heading}: {one_line(str(command.get('purpose') or ''))}", f"  $ {one_line(str(command.get('command')))}"]
    if command.get("mutates"):
        out.append(f"  blast radius: {one_line(str(command.get('blast_radius') or ''))}")
        out.extend(f"  precondition: {one_line(str(p))}" for p in command.get("preconditions") or ())
        if command.get("iac_warning"):
            out.append(f"  IaC: {one_line(str(command['iac_warning']))}")
    return out


def _plain_link(section: str | None, base_url: str | None) -> str:
    label, url = runbook_link(section, base_url)
    if url:
        return f"{label}: {url}"
    return f"{label}: {runbook_hint(section)}" if section else label


def _incident_email(batch: Batch, item: Item, base_url: str | None) -> list[str]:
    s = item.incident
    i = s.incident
    out = [one_line(headline(item, batch.cluster_name)), ""]
    if item.told == "resolved":
        out += [
            f"No longer seen: {one_line(i.title)}",
            f"Open from {when(s.opened_at)} to {when(s.resolved_at)}.",
            f"Runbook: {_plain_link(i.section, base_url)}",
        ]
        return out
    out.append(f"Why: {one_line(i.title)}")
    if item.told == "escalated" and s.reason:
        out.append(f"Escalated: {one_line(s.reason)}")
    if i.likely_cause:
        out.append(f"Likely cause: {one_line(i.likely_cause)}")
    if i.hyperpod:
        out.append(f"HyperPod: {one_line(i.hyperpod)}")
    for e in i.explains[:50]:
        out.append(f"Explains: {e.instance_id + ': ' if e.instance_id else ''}{e.check}: {one_line(e.message)}")
    if i.kind == "coverage":
        out += [f"Why not: {one_line(r)} ({n})" for r, n in i.reasons]
        if i.nodes:
            out.append(f"Nodes: {', '.join(i.nodes)}")
    for heading, issues in node_issues(i):
        out.append(f"{heading}:")
        out.extend(f"  - {issue_text(o)}" for o in issues)
    if i.next_step:
        out.append(f"Next step: {one_line(i.next_step)}")
    for command in commands(i):
        out += ["", *_plain_command(command)]
    out += ["", f"Runbook: {_plain_link(i.section, base_url)}"]
    if i.section and (todo := what_to_do(i.section)):
        out.append(f"What to do: {todo}")
    if i.instance_type:
        out.append(f"Instance type: {i.instance_type}")
    if i.occupancy:
        out.append(f"Runs there: {one_line(i.occupancy)}")
    if i.evidence and i.kind != "coverage":
        out += ["", "Evidence (verbatim):", *(f"    | {_cut(one_line(line), 2000)}" for line in i.evidence)]
    out += ["", f"{opened_line(s)} · incident {s.incident_id}"]
    return out


def _group_email(batch: Batch, base_url: str | None) -> list[str]:
    items = list(batch.items)
    out = [group_title(batch), ""]
    counts = _counts(items)
    if counts:
        out.append(f"Verdicts: {counts}")
    shared = shared_check(items)
    if shared:
        out.append(f"{shared[1]} nodes fail {shared[0]}. {SHARED_ADVICE}")
    if batch.below_minimum and batch.kind == "baseline":
        out.append(
            f"{batch.below_minimum} of them are below this channel's alert priority: listed here once, then only "
            "in the daily summary."
        )
    elif batch.below_minimum:
        out.append(f"{batch.below_minimum} problem(s) below this channel's alert priority (daily summary).")
    out.append("")
    for item in items:
        i = item.incident.incident
        if item.told == "resolved":
            out.append(f"RESOLVED {subject_of(i)}: {one_line(i.title)}")
            continue
        prio = i.priority.value if i.priority else "UNKNOWN"
        out.append(f"{prio} {verdict_word(i)} {subject_of(i)}: {one_line(i.title)}")
        if i.likely_cause:
            out.append(f"    likely cause: {one_line(i.likely_cause)}")
        if also := issues_line(i):
            out.append(f"    also: {also}")
        first = commands(i)[:1]
        if first:
            out += [f"    {line}" for line in _plain_command(first[0])]
        if i.section:
            out.append(f"    runbook: {_plain_link(i.section, base_url)}")
    out += ["", f"Full detail: {triage_hint(batch.cluster_name, batch.region)}"]
    return out


def email(batch: Batch, *, runbook_base_url: str | None) -> tuple[str, str]:
    """``(subject, body)`` for SNS email."""
    if batch.kind == "incident" and len(batch.items) == 1:
        lines = _incident_email(batch, batch.items[0], runbook_base_url)
    else:
        lines = _group_email(batch, runbook_base_url)
    lines += ["", READ_ONLY_NOTE]
    return subject(batch), _body(lines)


def _body(lines: Iterable[str]) -> str:
    body = "\n".join(lines).rstrip() + "\n"
    data = body.encode("utf-8")
    if len(data) <= MAX_EMAIL_BYTES:
        return body
    marker = "\n… message trimmed to fit the email size limit\n"
    return data[: MAX_EMAIL_BYTES - len(marker.encode())].decode("utf-8", "ignore") + marker
