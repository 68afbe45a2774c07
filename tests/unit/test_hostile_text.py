"""Text from the cluster is data: a hostile-text corpus followed from where it is written to what each reader
sees (a rendered Slack payload, the Amazon Q message, the email, the terminal's bytes, the support-case
Markdown, an agent's tool result).

Where the text is put, and who can put it there:

* *without privilege on the node*: the name of a process (the kernel's 15-byte ``comm``) that is OOM-killed
  or that faults a GPU, and a Slurm job's name (what "Runs there" shows);
* *with privilege*: a whole kernel line (root can write ``/dev/kmsg``), a lifecycle-script line, a HyperPod
  Cluster Event's description and failure message.

What a reader must see is decided from each format's own rules, not from our quoting functions: a terminal
interprets every C0/C1 control (ECMA-48), Unicode's format characters (category Cf: bidirectional overrides,
zero-width characters) and separators change how text reads; Slack's ``mrkdwn`` links ``<…>`` and bare URLs
and closes a code block on a triple backtick; CommonMark (checked with markdown-it-py, a real parser) makes
images, links and HTML from ``![…](…)``, ``[…](…)`` and ``<…>``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import UTC, datetime, timedelta

import pytest
from markdown_it import MarkdownIt

from hyperpod_debugger.agent import tools
from hyperpod_debugger.checks.events import check_events
from hyperpod_debugger.checks.logs import check_lifecycle
from hyperpod_debugger.domain.model import Finding, TriageReport
from hyperpod_debugger.domain.observations import ClusterEvent, EventWindow, Observed
from hyperpod_debugger.domain.untrusted import UNTRUSTED_NOTE, for_agent
from hyperpod_debugger.lifecycle.findings import State, StoredFinding
from hyperpod_debugger.notify import alerts
from hyperpod_debugger.notify.chatbot import chatbot
from hyperpod_debugger.report import support_case
from hyperpod_debugger.report.text import render_text
from tests import builders as b
from tests.unit.test_alert_policy import assert_block_kit
from tests.unit.test_checks_logs import lifecycle_event, with_lifecycle
from tests.unit.test_notify_render import _one, _with

IID = "i-0123456789abcdef0"
#: kind -> the hostile text
CORPUS: dict[str, str] = {
    "osc-8-hyperlink": "\x1b]8;;https://evil.example/\x07click here\x1b]8;;\x07",
    "csi-clear-screen": "\x1b[2J\x1b[H\x1b[31mFAKE: all nodes healthy\x1b[0m",
    "c1-and-del": "a\x9b31mb\x7fc\x85d\x00e",
    "bidi-override": "invoice\u202egpj.exe\u202c ok",
    "zero-width": "ad\u200bmin\u2060 \ufeffroot\u200d",
    "line-separators": "one\u2028two\u2029three\rfour",
    "slack-fence-and-mentions": "``` <!channel> <@U024BE7LH> <https://evil.example|click> *bold* ```",
    "bare-urls": "see https://evil.example/login and www.evil.example",
    "markdown-image-html": "![x](https://evil.example/p.png) <img src=x onerror=alert(1)> [a](https://evil.example)",
    "lone-surrogate": "bad \ud800 half",
}
LONG = "L" * 2_000_000

# What a reader's device would act on: every control except the line break, format characters (Cf),
# surrogates, and the line/paragraph separators.
_ACTING = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def acting(text: str, allowed: str = "\n") -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in _ACTING and ch not in allowed]


def comm(text: str) -> str:
    """What the kernel keeps of a process name: at most 15 bytes."""
    return text.encode("utf-8", "surrogatepass")[:15].decode("utf-8", "ignore") or "x"


# --------------------------------------------------------------------------- where the text is put

NOW = datetime(2026, 12, 2, 11, 0, tzinfo=UTC)


def _kernel(kind: str, privileged: bool) -> list[Finding]:
    text = CORPUS[kind]
    name = text if privileged else comm(text)
    lines = [
        f"[Wed Dec  2 10:00:00 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=4242, name={name}, GPU has fallen off the bus.",
        f"[Wed Dec  2 10:01:00 2026] Out of memory: Killed process 4243 ({comm(text)}) total-vm:1000kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:100kB oom_score_adj:0",
    ]
    report = tools.analyze_probe_output(
        "ml.p5.48xlarge", outputs={"kernel_log": "\n".join(lines)}, now=NOW.isoformat(), instance_id=IID
    )
    return [f for f in report.findings if f.is_problem]


def _lifecycle(kind: str) -> list[Finding]:
    text = CORPUS[kind]
    event = lifecycle_event(f"+ apt-get install -y {text}\nE: Unable to locate package {text}\n+ exit 1")
    return check_lifecycle(with_lifecycle(event), b.context())


def _cluster_event(kind: str) -> list[Finding]:
    text = CORPUS[kind]
    event = ClusterEvent(
        event_id="e1",
        time=b.NOW - timedelta(minutes=5),
        level="Error",
        resource_type="Instance",
        description=f"Failed to provision {text}",
        instance_group="workers",
        instance_id=IID,
        failure_messages=(f"reason: {text}",),
        described=True,
    )
    window = EventWindow(b.NOW - timedelta(hours=24), b.NOW, (event,))
    return [f for f in check_events(b.observation(events=Observed.ok(window)), b.context()) if f.is_problem]


SOURCES = {
    "kernel-unprivileged": lambda kind: _kernel(kind, privileged=False),
    "kernel-privileged": lambda kind: _kernel(kind, privileged=True),
    "lifecycle-script": _lifecycle,
    "cluster-event": _cluster_event,
}
CASES = [(source, kind) for source in SOURCES for kind in CORPUS]


def findings_of(source: str, kind: str) -> list[Finding]:
    found = SOURCES[source](kind)
    assert found, (source, kind)
    return found


# --------------------------------------------------------------------------- what each reader sees


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _mrkdwn_objects(payload: dict) -> list[dict]:
    out = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn":
                out.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(payload["blocks"])
    return out


def assert_slack_reads_as_text(payload: dict) -> None:
    assert_block_kit(payload)  # Slack's own models accept it
    for text in _strings(payload):
        assert not acting(text), (text[:200], acting(text))
    for obj in [{"text": payload["text"]}, *_mrkdwn_objects(payload)]:
        text = obj["text"]
        # no runbook base URL is configured here, so no "<" at all may reach Slack: no link, no mention
        assert "<" not in text and ">" not in text, text[:300]
        # a bare outside URL is never left for Slack to link, nor a mention word for Slack to parse
        assert not re.search(r"(?i)https?://|www\.evil|(?<![\w\u200a])@(channel|here|everyone)\b", text), text
        # the only fences are ours: a line of its own, or a whole one-line command; always in pairs
        fenced = [line for line in text.split("\n") if "```" in line]
        assert all(line == "```" or re.fullmatch(r"```[^`]+```", line) for line in fenced), text[:300]
        assert text.count("```") % 2 == 0
    for obj in _mrkdwn_objects(payload):
        assert obj.get("verbatim") is True


def assert_email_reads_as_text(subject: str, body: str) -> None:
    assert not acting(subject, allowed="") and len(subject) < 100 and "\n" not in subject
    assert not acting(body), acting(body)
    assert max(len(line) for line in body.split("\n")) <= 2100


def assert_terminal_is_inert(text: str) -> None:
    # the only escape sequences are our own colours (SGR: ESC [ digits m)
    without_ours = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert not acting(without_ours), acting(without_ours)[:5]
    assert max(len(line) for line in text.split("\n")) <= 2200


def assert_markdown_is_inert(markdown: str) -> None:
    tokens = MarkdownIt("commonmark").parse(markdown)
    kinds: list[str] = []
    links: list[str] = []

    def walk(ts: list) -> None:
        for t in ts:
            kinds.append(t.type)
            if t.type == "link_open":
                links.append(str(t.attrs.get("href")))
            walk(t.children or [])

    walk(tokens)
    for bad in ("image", "html_inline", "html_block"):
        assert bad not in kinds, (bad, markdown[:400])
    # the only links are the runbook's own (the checklist points at § L)
    assert all(href.startswith("node-diagnostics-detail.md#") for href in links), links
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    ours: tuple[str, ...] = ("Draft AWS Support case", "Environment", "What is wrong", "P", "What was already tried")
    ours += ("HyperPod", "Finding history", "What Support asks for", "Not in this draft", "--")
    assert all(h.startswith(ours) for h in headings), headings
    assert not acting(markdown), acting(markdown)


def _report(findings: list[Finding]) -> TriageReport:
    return tools.analyze_probe_output(
        "ml.p5.48xlarge", outputs={"kernel_log": ""}, now=NOW.isoformat(), instance_id=IID
    ).model_copy(update={"findings": findings})


def _case(findings: list[Finding], raw: str) -> str:
    stored = [
        StoredFinding(
            fingerprint=f"{i:032x}",
            cluster_arn=b.cluster().arn,
            instance_id=IID,
            check=f.check,
            section=f.section,
            tag=f.tag,
            priority=f.priority,
            state=State.OPEN,
            first_seen="2026-12-02T10:00:00+00:00",
            last_seen="2026-12-02T10:05:00+00:00",
            count=1,
            message=f.message,
            evidence=tuple(f.evidence),
        )
        for i, f in enumerate(findings)
    ]
    # and an item stored before text was cleaned on the way in: the renderer must not trust the store
    stored.append(
        StoredFinding(
            fingerprint="f" * 32,
            cluster_arn=b.cluster().arn,
            instance_id=IID,
            check="probe.xid",
            section="G.1",
            tag=findings[0].tag,
            priority=findings[0].priority,
            state=State.OPEN,
            first_seen="2026-11-02T10:00:00+00:00",
            last_seen="2026-11-02T10:05:00+00:00",
            count=1,
            message=f"old {raw}",
            evidence=(raw, f"```\n{raw}"),
        )
    )
    event = ClusterEvent("e9", b.NOW, "Error", "Instance", f"Rebooting {raw}", "workers", IID, (raw,), True)
    facts = support_case.CaseFacts(
        cluster=b.cluster(), node_id=IID, generated_at=b.NOW, window_days=14, findings=tuple(stored), events=(event,)
    )
    return support_case.render_markdown(support_case.draft(facts))


@pytest.mark.parametrize(("source", "kind"), CASES, ids=[f"{s}:{k}" for s, k in CASES])
def test_hostile_text_reaches_every_reader_as_text(source: str, kind: str) -> None:
    findings = findings_of(source, kind)
    batch = _one(findings[:1])
    batch = _with(batch, occupancy=f"slurm job 41 ({comm(CORPUS[kind])}) by user alice")
    # Slack and Amazon Q
    assert_slack_reads_as_text(alerts.slack(batch, runbook_base_url=None))
    description = chatbot(batch, runbook_base_url=None)["content"]["description"]
    assert not acting(description) and "https://evil" not in description
    # email
    assert_email_reads_as_text(*alerts.email(batch, runbook_base_url=None))
    # terminal (colours on: the only escapes are ours)
    report = _report(findings)
    assert_terminal_is_inert(render_text(report, colour=True, verbose=True))
    assert_terminal_is_inert(render_text(report, colour=True, verbose=False))
    # Markdown
    assert_markdown_is_inert(_case(findings, CORPUS[kind]))
    # an agent's result: JSON whose strings act on nothing
    result = for_agent(report.model_dump(mode="json"))
    assert all(not acting(s) for s in _strings(result))


@pytest.mark.parametrize("kind", ["osc-8-hyperlink", "bidi-override", "zero-width", "c1-and-del"])
def test_what_was_hidden_is_shown_so_the_reader_can_see_it(kind: str) -> None:
    # the characters are not dropped: a reader sees that something was there, as an escape
    [f, *_] = findings_of("kernel-privileged", kind)
    line = f.evidence[0]
    expected = {
        "osc-8-hyperlink": "\\x1b]8;;https://evil.example/\\x07click here",
        "bidi-override": "invoice\\u202egpj.exe\\u202c ok",
        "zero-width": "ad\\u200bmin\\u2060 \\ufeffroot\\u200d",
        "c1-and-del": "a\\x9b31mb\\x7fc\\x85d\\x00e",
    }[kind]
    assert expected in line


def test_a_2_mb_kernel_line_is_bounded_in_every_output() -> None:
    line = (
        f"[Wed Dec  2 10:00:00 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus. {LONG}"
    )
    report = tools.analyze_probe_output("ml.p5.48xlarge", outputs={"kernel_log": line}, now=NOW.isoformat())
    [f] = [f for f in report.findings if f.is_problem]
    assert len(f.evidence[0]) < 2100 and f.evidence[0].endswith("more characters]")
    assert len(json.dumps(for_agent(report.model_dump(mode="json")))) < 1_000_000
    assert len(render_text(report)) < 100_000
    batch = _one([f])
    assert len(json.dumps(alerts.slack(batch, runbook_base_url=None))) < 40_000
    assert len(alerts.email(batch, runbook_base_url=None)[1]) < 20_000


def test_an_agent_result_too_large_is_shortened_saying_so() -> None:
    value = {"findings": [{"evidence": [f"line {i} " + "x" * 3000 for i in range(400)]}]}
    out = for_agent(value)
    assert len(json.dumps(out)) <= 400_000
    assert (
        out["findings"][0]["evidence"][-1].startswith("… ")
        and "more lines left out" in out["findings"][0]["evidence"][-1]
    )
    assert len(out["findings"]) == 1  # a finding is never dropped, only lines of its evidence
    assert "not instructions" in UNTRUSTED_NOTE


@pytest.mark.parametrize("separator", ["\u2028", "\x85", "\x0c", "\x1e", "\x0b"])
def test_a_separator_in_a_process_name_does_not_split_its_kernel_line(separator: str) -> None:
    # GIVEN an OOM kill whose process (named by an unprivileged user) has a separator in its 15-byte name
    name = comm(f"job{separator}NVRM: Xid")
    line = (
        f"[Wed Dec  2 10:01:00 2026] Out of memory: Killed process 4243 ({name}) total-vm:1000kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:100kB oom_score_adj:0"
    )
    report = tools.analyze_probe_output("ml.p5.48xlarge", outputs={"kernel_log": line}, now=NOW.isoformat())
    # THEN the line stays whole (the text after the name is not read as a line of its own), the separator shown
    [oom] = [f for f in report.findings if f.is_problem]
    assert oom.check == "probe.oom"
    [evidence] = oom.evidence
    assert evidence.endswith("oom_score_adj:0") and f"\\x{ord(separator):02x}" in evidence.replace("u2028", "x2028")
