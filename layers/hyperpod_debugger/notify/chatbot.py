"""Incident messages for Amazon Q Developer in chat applications (formerly AWS Chatbot): custom notifications.

Pure. One :class:`~hyperpod_debugger.notify.policy.Batch` becomes one *custom notification*, the JSON object
the courier publishes (``json.dumps``) as the SNS message of a topic that an Amazon Q Developer channel
configuration subscribes to; Amazon Q Developer then posts it to Slack, Microsoft Teams or Amazon Chime, so a
team gets the incidents without a webhook secret. The format is AWS's ("Custom notifications using Amazon Q
Developer in chat applications"); ``references/chatbot-custom-notification.schema.json`` is the independent
check written from that page.

The words are those of the Slack and email channels (:mod:`hyperpod_debugger.notify.alerts`): the title is the
headline (severity, verdict, node or cause, cluster); the description says why, the likely cause, what
HyperPod itself is doing, the one next command (a state-changing one under "Suggested command (run this
yourself)" with its blast radius and IaC note) and the runbook section. ``nextSteps`` (the short list a chat
client shows under the message) holds only what the description does not say, so a single incident has none:
its command is in the description once, beside the blast radius to read before running it. A group, baseline
or daily message lists at most :data:`SHOWN` incidents, then how many more and the command that lists them.

``content.textType`` is ``client-markdown``: the text is rendered in the markdown of the platform it lands
on. Text that comes from the cluster (finding titles, evidence, log lines, job names) is data, so it is made
inert before it is placed: control and formatting characters (ANSI escape sequences, bidirectional overrides,
zero-width characters) are shown as escapes (``\\x1b``, ``\\u202e``), never interpreted; ``&``, ``<`` and
``>`` are escaped (no Slack ``<url|label>`` link, no ``<!channel>`` or ``<@user>`` mention, no HTML); ``@``
becomes a full-width ``＠`` (no name mention); ``](`` is broken (no markdown link) and ``://`` is defanged (no
autolink); backticks become ``'`` so it can neither open nor close a code span. Commands, which are ours,
keep their characters (they must stay copyable) except backticks and the three escaped ones.

AWS's page states no length limit for these fields (in the part we could read), so the limits here are ours
and conservative: the description within Slack's 3,000-character section text, the title within the
150 characters the Slack header of the same incident uses, a few short next steps and keywords. Everything
cut is cut at a word with a visible ``…``; nothing cut leaves a code fence open.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from hyperpod_debugger.domain.model import Priority
from hyperpod_debugger.domain.sections import what_to_do
from hyperpod_debugger.notify.alerts import (
    ISSUES_LISTED,
    NODES_LISTED,
    SHARED_ADVICE,
    SHOWN,
    clip_words,
    commands,
    group_title,
    headline,
    icon,
    issue_text,
    issues_line,
    list_hint,
    node_issues,
    one_line,
    opened_line,
    runbook_hint,
    runbook_link,
    shared_check,
    subject_of,
    triage_hint,
    verdict_word,
    when,
    worst_icon,
)
from hyperpod_debugger.notify.messages import (
    EMOJI_RESOLVED,
    MUTATING_HEADING,
    READ_ONLY_HEADING,
    READ_ONLY_NOTE,
)

if TYPE_CHECKING:
    from hyperpod_debugger.lifecycle.incidents import Incident, StoredIncident
    from hyperpod_debugger.notify.policy import Batch, Item

#: ``metadata.eventType`` of every message: stable, so a channel's custom actions or filters can match it.
EVENT_TYPE = "HyperPodIncident"
#: Our limits (AWS states none that we could read): see the module docstring.
MAX_TITLE = 150
MAX_DESCRIPTION = 3000
MAX_STEPS = 5
MAX_KEYWORDS = 5
MAX_KEYWORD = 50
MAX_SUMMARY = 200
MAX_RESOURCES = 10
MAX_THREAD_ID = 128
MAX_CONTEXT_VALUE = 256
#: A runbook URL longer than this is replaced by the packaged pointer (it would crowd out a next step).
MAX_URL = 400

_FENCE = "```"
#: the last block of every incident's description
_READ_ONLY_BLOCK = (0, f"_{READ_ONLY_NOTE}_")
_PRIORITY_ORDER = (Priority.P0, Priority.P1, Priority.P2)


# --------------------------------------------------------------------------- making text inert


def _clean(text: str) -> str:
    """One line in which escape sequences, control characters and invisible formatting characters are shown
    as escapes (``\\x1b``, ``\\u202e``): visible to the reader, interpreted by no client."""
    return one_line(text)


def _inert(text: str) -> str:
    """Clean text that client-markdown cannot turn into a link, a mention, HTML or a code span."""
    text = text.replace("`", "'")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("@", "＠")
    text = text.replace("](", "] (")
    return text.replace("://", "[:]//")


def _fit(render: Callable[[str], str], text: str, limit: int) -> str:
    """``render(clip_words(text, n))`` for the largest ``n`` whose result fits in ``limit`` characters."""
    n = limit
    while True:
        out = render(clip_words(text, n))
        if len(out) <= limit or n <= 1:
            return out[:limit]
        n -= max(len(out) - limit, 1)


def _prose(text: str | None, limit: int) -> str:
    """Text (from the cluster, or ours around it) as inert markdown of at most ``limit`` characters."""
    return _fit(_inert, _clean(text or ""), limit)


def _code_text(text: str) -> str:
    return text.replace("`", "'").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str | None, limit: int) -> str:
    """A command's text for a code span or block: copyable, unable to close it, at most ``limit`` characters."""
    return _fit(_code_text, _clean(text or ""), limit)


def _plain(text: str | None, limit: int) -> str:
    """An identifier or value (metadata): clean, inert like prose (a client may show it), never cut mid-word
    without a mark, at most ``limit`` characters."""
    return _prose(text, limit)


# --------------------------------------------------------------------------- pieces


def _runbook(section: str | None, base_url: str | None) -> str:
    label, url = runbook_link(section, base_url)
    link = _code_text(quote(url, safe=":/#%?=&~+-._")) if url else ""
    if link and len(link) <= MAX_URL:
        return f"{_prose(label, 120)}: {link}"
    if not section:
        return _prose(label, 120)
    return f"{_prose(label, 120)}: `{_code(runbook_hint(section), 200)}`"


def _command_block(command: dict[str, Any], said: set[str]) -> str:
    """The command under its heading; a mutating one with its blast radius and its IaC note (a note the
    message already gave, as a drain's and a replacement's identical one, is not given again)."""
    heading = MUTATING_HEADING if command.get("mutates") else READ_ONLY_HEADING
    lines = [
        f"*{heading}:* {_prose(str(command.get('purpose') or ''), 200)}",
        _FENCE,
        _code(str(command.get("command") or ""), 800),
        _FENCE,
    ]
    if command.get("mutates"):
        lines.append(f"*Blast radius:* {_prose(str(command.get('blast_radius') or ''), 400)}")
        note = _prose(str(command.get("iac_warning") or ""), 300)
        if note and note not in said:
            lines.append(f"*IaC:* {note}")
            said.add(note)
    return "\n".join(lines)


def _evidence(lines: Sequence[str], budget: int) -> str | None:
    """The evidence as a code block within ``budget`` characters, with how many lines did not fit."""
    head, foot = f"*Evidence:*\n{_FENCE}\n", f"\n{_FENCE}"
    if not lines or budget < len(head) + len(foot) + 40:
        return None
    room = budget - len(head) - len(foot) - len("\n… 9999 more lines")
    shown: list[str] = []
    for raw in lines:
        line = _prose(raw, 300)
        if sum(len(s) + 1 for s in shown) + len(line) > room:
            if not shown:
                shown.append(_prose(raw, max(room, 1)))
            break
        shown.append(line)
    text = head + "\n".join(shown) + foot
    hidden = len(lines) - len(shown)
    if hidden > 0:
        text += f"\n… {hidden} more line{'s' if hidden != 1 else ''}"
    return text


def _cut_lines(text: str, limit: int) -> str:
    """Whole lines of ``text`` within ``limit`` characters, ending with ``…``, no code fence left open."""
    out: list[str] = []
    used = 0
    fenced = False
    for line in text.split("\n"):
        closing = len(_FENCE) + 1 if (fenced != (line == _FENCE)) else 0
        if used + len(line) + 1 + closing + 2 > limit:
            break
        out.append(line)
        used += len(line) + 1
        if line == _FENCE:
            fenced = not fenced
    if fenced:
        out.append(_FENCE)
    return "\n".join(out) + "\n…"


def _assemble(blocks: Sequence[tuple[int, str]], limit: int) -> list[tuple[int, str]]:
    """``blocks`` (rank, text) in order; while the text is over ``limit`` the last of the least important
    (highest rank above 0) is left out."""
    kept = [(rank, text) for rank, text in blocks if text]
    while len("\n".join(t for _, t in kept)) > limit:
        worst = max((rank for rank, _ in kept), default=0)
        if worst == 0:
            break
        drop = max(k for k, (rank, _) in enumerate(kept) if rank == worst)
        del kept[drop]
    return kept


def _join(blocks: Sequence[tuple[int, str]], limit: int) -> str:
    text = "\n".join(t for _, t in blocks)
    return text if len(text) <= limit else _cut_lines(text, limit)


def _keywords(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        kw = _prose(word, MAX_KEYWORD)
        if kw and kw not in out:
            out.append(kw)
    return out[:MAX_KEYWORDS]


def _resources(values: Sequence[str | None]) -> list[str]:
    out: list[str] = []
    for value in values:
        v = _plain(value, 2048)
        if v and v not in out:
            out.append(v)
    return out[:MAX_RESOURCES]


def _event_id(batch: Batch) -> str:
    """Stable for one message (a retried publish carries the same id), distinct between messages."""
    parts = batch.entries or tuple(f"{it.incident.incident_id}#{it.told}" for it in batch.items)
    seed = "\x1f".join((batch.cluster_arn, batch.channel, batch.kind, *parts))
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def _prio(incident: Incident) -> str:
    return incident.priority.value if incident.priority else "UNKNOWN"


def _notification(
    batch: Batch,
    *,
    title: str,
    description: str,
    steps: Sequence[str],
    keywords: Sequence[str],
    thread_id: str,
    summary: str,
    resources: Sequence[str | None],
    context: dict[str, str],
) -> dict[str, Any]:
    content: dict[str, Any] = {"textType": "client-markdown", "title": title, "description": description}
    if steps:
        content["nextSteps"] = [s for s in steps if s][:MAX_STEPS]
    content["keywords"] = _keywords(keywords)
    metadata: dict[str, Any] = {
        "threadId": _plain(thread_id, MAX_THREAD_ID),
        "summary": summary,
        "eventType": EVENT_TYPE,
        "relatedResources": _resources([batch.cluster_arn, *resources]),
        "additionalContext": {k: _plain(v, MAX_CONTEXT_VALUE) for k, v in context.items() if v},
    }
    return {"version": "1.0", "source": "custom", "id": _event_id(batch), "content": content, "metadata": metadata}


def _context(batch: Batch) -> dict[str, str]:
    return {
        "cluster": batch.cluster_name,
        "clusterArn": batch.cluster_arn,
        "region": batch.region,
        "messageKind": batch.kind,
    }


# --------------------------------------------------------------------------- one incident


def _incident(batch: Batch, item: Item, base_url: str | None) -> dict[str, Any]:
    s = item.incident
    i = s.incident
    line = headline(item, batch.cluster_name)
    if item.told == "resolved":
        description, first_keyword, summary = _resolved_description(s, base_url), "RESOLVED", line
    else:
        description, first_keyword, summary = _open_description(item, base_url), _prio(i), f"{line}: {i.title}"
    return _notification(
        batch,
        title=_prose(f"{icon(i, item.told)} {line}", MAX_TITLE),
        description=description,
        steps=(),  # the commands and the runbook are in the description, once
        keywords=(first_keyword, verdict_word(i), batch.cluster_name),
        thread_id=s.incident_id,
        summary=_prose(summary, MAX_SUMMARY),
        resources=[i.instance_id] if i.instance_id else list(i.nodes[:MAX_RESOURCES]),
        context={
            **_context(batch),
            "incidentId": s.incident_id,
            "incidentKind": i.kind,
            "priority": _prio(i),
            "verdict": i.verdict,
            "told": item.told,
            "instanceId": i.instance_id or "",
        },
    )


def _resolved_description(s: StoredIncident, base_url: str | None) -> str:
    i = s.incident
    blocks = [
        (0, f"*No longer seen:* {_prose(i.title, 600)}"),
        (0, f"Open from {when(s.opened_at)} to {when(s.resolved_at)}."),
        (0, f"*Runbook:* {_runbook(i.section, base_url)}"),
        (1, f"_Incident {_code(s.incident_id, 64)}_"),
        _READ_ONLY_BLOCK,
    ]
    return _join(_assemble(blocks, MAX_DESCRIPTION), MAX_DESCRIPTION)


def _open_description(item: Item, base_url: str | None) -> str:
    """Why, what to do and the footer within :data:`MAX_DESCRIPTION`, the least important blocks left out
    first; then the evidence (not a coverage incident's) in the room left, just above the footer."""
    s = item.incident
    i = s.incident
    footer = [(1, f"_{_prose(opened_line(s), 200)} · incident {_code(s.incident_id, 64)}_"), _READ_ONLY_BLOCK]
    kept = _assemble([*_why_blocks(item), *_action_blocks(i, base_url), *footer], MAX_DESCRIPTION)
    used = len("\n".join(t for _, t in kept))
    evidence = _evidence(i.evidence, MAX_DESCRIPTION - used - 1) if i.kind != "coverage" else None
    if evidence:
        at = len(kept) - sum(1 for b in footer if b in kept)
        kept.insert(at, (4, evidence))
    return _join(kept, MAX_DESCRIPTION)


def _why_blocks(item: Item) -> list[tuple[int, str]]:
    """(rank, text) blocks saying why: the title, the escalation, the likely cause, what HyperPod is doing, what
    a cause explains or why a coverage incident could not look, and a node's other problems."""
    s = item.incident
    i = s.incident
    body: list[tuple[int, str]] = [(0, f"*Why:* {_prose(i.title, 500)}")]
    if item.told == "escalated" and s.reason:
        body.append((0, f"*Escalated:* {_prose(s.reason, 150)}"))
    if i.likely_cause:
        body.append((0, f"*Likely cause:* {_prose(i.likely_cause, 300)}"))
    if i.hyperpod:
        body.append((0, f"*HyperPod:* {_prose(i.hyperpod, 250)}"))
    if i.kind == "cause" and i.explains:
        shown = "; ".join(
            _prose(f"{e.instance_id}: {e.check}" if e.instance_id else e.check, 80) for e in i.explains[:8]
        )
        more = f" and {len(i.explains) - 8} more" if len(i.explains) > 8 else ""
        body.append((1, f"*Explains:* {shown}{more}"))
    if i.kind == "coverage" and i.reasons:
        body.append((1, "*Why not:* " + "; ".join(f"{_prose(r, 150)} ({n})" for r, n in i.reasons[:5])))
        if i.nodes:
            listed = ", ".join(_prose(n, 40) for n in i.nodes[:NODES_LISTED])
            more = f" and {len(i.nodes) - NODES_LISTED} more" if len(i.nodes) > NODES_LISTED else ""
            body.append((2, f"*Nodes:* {listed}{more}"))
    for heading, issues in node_issues(i):
        bullets = [f"• {_prose(issue_text(o), 200)}" for o in issues[:ISSUES_LISTED]]
        if len(issues) > ISSUES_LISTED:
            bullets.append(f"• … and {len(issues) - ISSUES_LISTED} more")
        body.append((1, f"*{heading}:*\n" + "\n".join(bullets)))
    return body


def _action_blocks(i: Incident, base_url: str | None) -> list[tuple[int, str]]:
    """(rank, text) blocks saying what to do: the next step, its commands, the runbook, and where it runs."""
    body: list[tuple[int, str]] = []
    if i.next_step:
        body.append((0, f"*Next step:* {_prose(i.next_step, 300)}"))
    said: set[str] = set()
    for rank, command in enumerate(commands(i)):
        body.append((rank, _command_block(command, said)))
    body.append((0, f"*Runbook:* {_runbook(i.section, base_url)}"))
    if i.section and (todo := what_to_do(i.section)):
        body.append((2, f"*What to do:* {_prose(todo, 300)}"))
    if i.instance_type:
        body.append((3, f"*Instance type:* {_prose(i.instance_type, 60)}"))
    if i.occupancy:
        body.append((2, f"*Runs there:* {_prose(i.occupancy, 300)}"))
    return body


# --------------------------------------------------------------------------- several incidents


def _item_text(item: Item, said: set[str]) -> str:
    """One incident of a group message: verdict, what, why; the likely cause unless an item above gave the
    same one; the first command (a mutating one with its blast radius)."""
    i = item.incident.incident
    if item.told == "resolved":
        return f"• {EMOJI_RESOLVED} *RESOLVED* {_prose(subject_of(i), 80)}: {_prose(i.title, 160)}"
    what = f"`{_code(i.instance_id, 40)}`" if i.kind == "node" and i.instance_id else _prose(subject_of(i), 80)
    if i.kind == "node" and i.instance_group:
        what += f" ({_prose(i.instance_group, 60)})"
    lines = [f"• {icon(i)} *{_prio(i)} {verdict_word(i)}* {what}: {_prose(i.title, 160)}"]
    cause = _prose(i.likely_cause, 160)
    if cause and cause not in said:
        lines.append(f"    _Likely cause:_ {cause}")
    if also := issues_line(i):
        lines.append(f"    _Also:_ {_prose(also, 240)}")
    first = commands(i)[:1]
    if first:
        command = first[0]
        heading = MUTATING_HEADING if command.get("mutates") else READ_ONLY_HEADING
        text = f"    _{heading}:_ `{_code(str(command.get('command') or ''), 240)}`"
        if command.get("mutates"):
            text += f" · _blast radius:_ {_prose(str(command.get('blast_radius') or ''), 160)}"
        lines.append(text)
    return "\n".join(lines)


def _counts(items: Sequence[Item]) -> str:
    words = Counter(verdict_word(it.incident.incident) for it in items if it.told != "resolved")
    return " · ".join(f"{w} {n}" for w, n in words.most_common())


def _worst_priority(items: Sequence[Item]) -> str:
    live = {it.incident.incident.priority for it in items if it.told != "resolved"}
    if not live:
        return "RESOLVED"
    return next((p.value for p in _PRIORITY_ORDER if p in live), "UNKNOWN")


def _group(batch: Batch, base_url: str | None) -> dict[str, Any]:
    items = list(batch.items)
    title_words = group_title(batch)
    title = _prose(f"{worst_icon(items)} {title_words}", MAX_TITLE)
    head: list[str] = []
    counts = _counts(items)
    if counts:
        head.append(f"*Verdicts:* {_prose(counts, 300)}")
    shared = shared_check(items)
    if shared:
        head.append(f"*{shared[1]} nodes fail `{_code(shared[0], 100)}`.* {_prose(SHARED_ADVICE, 300)}")
    if batch.below_minimum and batch.kind != "daily":
        head.append(f"{batch.below_minimum} lower-priority problem(s) wait for the daily summary.")
    if batch.kind == "daily" and batch.below_minimum:
        head.append(f"{batch.below_minimum} of them are below this channel's alert priority (never paged).")
    listing = f"`{_code(list_hint(batch.cluster_name, batch.region), 300)}`"
    note = f"_{READ_ONLY_NOTE}_"
    # room for the rest line at its longest, so the items shown never push it out
    reserve = len(f"… and {len(items)} more: {listing}") + len(note) + 2
    used = len("\n".join(head)) + 1
    shown = 0
    lines: list[str] = []
    said: set[str] = set()
    for item in items[:SHOWN]:
        text = _item_text(item, said)
        if used + len(text) + 1 + reserve > MAX_DESCRIPTION:
            break
        said.add(_prose(item.incident.incident.likely_cause, 160))
        lines.append(text)
        used += len(text) + 1
        shown += 1
    tail = []
    rest = len(items) - shown
    if rest > 0:
        tail.append(f"… and {rest} more: {listing}")
    tail.append(note)
    description = _join([(0, t) for t in (*head, *lines, *tail)], MAX_DESCRIPTION)

    sections = sorted({it.incident.incident.section for it in items if it.incident.incident.section})
    steps = [f"Full detail: `{_code(triage_hint(batch.cluster_name, batch.region), 300)}`"]
    steps += [f"Runbook: {_runbook(section, base_url)}" for section in sections[: MAX_STEPS - 1]]
    verdicts = [w for w, _ in Counter(verdict_word(it.incident.incident) for it in items).most_common(2)]
    nodes = [it.incident.incident.instance_id for it in items[:shown]]
    return _notification(
        batch,
        title=title,
        description=description,
        steps=steps,
        keywords=(_worst_priority(items), *verdicts, batch.cluster_name),
        thread_id=batch.cluster_arn or batch.cluster_name,
        summary=_prose(f"{title_words}: {counts}" if counts else title_words, MAX_SUMMARY),
        resources=nodes,
        context={**_context(batch), "incidents": str(len(items))},
    )


def chatbot(batch: Batch, *, runbook_base_url: str | None) -> dict[str, Any]:
    """The Amazon Q Developer custom notification of one batch (publish ``json.dumps`` of it to SNS)."""
    if batch.kind == "incident" and len(batch.items) == 1:
        return _incident(batch, batch.items[0], runbook_base_url)
    return _group(batch, runbook_base_url)
