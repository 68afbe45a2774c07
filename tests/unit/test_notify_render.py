"""Incident messages as rendered for Slack and email (:mod:`hyperpod_debugger.notify.alerts`) and the words
every channel shares (:mod:`hyperpod_debugger.notify.messages`): every rendering within Slack's and SNS's
limits, the header's emoji by priority, commands headed by whether they mutate, evidence verbatim and escaped
and trimmed visibly, text from the cluster kept inert, runbook links on the configured base URL and never a
credential, email subjects on one line.

What ``test_alert_policy`` already asserts of these messages (the replace incident's reading order, the
subject's whole clauses, the 40-node group's count line and shared check, the short hostile title) is not
asserted again here.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from functools import cache
from typing import Any

import pytest

from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.sections import SECTIONS, WHAT_TO_DO, what_to_do
from hyperpod_debugger.lifecycle.incidents import StoredIncident, desired_incidents, plan_incidents
from hyperpod_debugger.notify import alerts
from hyperpod_debugger.notify.chatbot import chatbot
from hyperpod_debugger.notify.messages import (
    MAX_EMAIL_BYTES,
    MUTATING_HEADING,
    READ_ONLY_HEADING,
    READ_ONLY_NOTE,
    escape,
    safe_base_url,
)
from hyperpod_debugger.notify.policy import AlertPolicy, Batch, ChannelPolicy, daily
from tests.unit.test_alert_policy import (
    ARN,
    CHANNELS,
    NAME,
    NOW,
    _compose,
    _f,
    _laddered,
    _node,
    _stored,
    _xid,
    assert_block_kit,
)

BASE = "https://github.com/example/hyperpod-runbook/blob/main"
RUNBOOK = "references/node-diagnostics-detail.md"
G1_URL = f"{BASE}/{RUNBOOK}#g1-nvidia-gpus"
#: every channel hears P2 too, so a watch incident is rendered like any other
EVERY = AlertPolicy({channel: ChannelPolicy(Priority.P2) for channel in CHANNELS})
HOSTILE = "Xid 79 <!channel> <@U024BE7LH> <https://evil.example|click> ``` *bold* & more"
EVIDENCE = ["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus <gpu0> & more", "second line"]

LOOK = read_only(["dmesg", "-T"], "Read the kernel log")
SG_READ = read_only(
    ["aws", "ec2", "describe-security-groups", "--group-ids", "sg-0abc"], "Read the EFA security group's rules"
)
SG_FIX = mutating(
    ["aws", "ec2", "authorize-security-group-ingress", "--group-id", "sg-0abc", "--protocol", "-1"],
    "Allow all traffic from the EFA security group to itself",
    blast_radius="Every instance in sg-0abc accepts all traffic from members of sg-0abc.",
    changes_configuration=True,
    preconditions=["The group is the one the cluster's EFA interfaces use."],
)


# --------------------------------------------------------------------------- incidents and their batches


def _pairs(findings: list[Finding]) -> list[tuple[str, Finding]]:
    return [(f"fp{i:03d}", f) for i, f in enumerate(_laddered(findings))]


def _slack_batch(pending: list[StoredIncident]) -> Batch:
    return next(b for b in _compose(pending, EVERY) if b.channel == "slack")


def _one(findings: list[Finding]) -> Batch:
    batch = _slack_batch(_stored(findings))
    assert batch.kind == "incident" and len(batch.items) == 1
    return batch


def _with(batch: Batch, **fields: Any) -> Batch:
    """``batch`` with its one incident's fields replaced (what the store could hold that a finding cannot
    make, such as more evidence lines than an incident keeps)."""
    [item] = batch.items
    s = item.incident
    return replace(batch, items=(replace(item, incident=replace(s, incident=replace(s.incident, **fields))),))


def _investigate(node: str = _node(2), **kw: Any) -> Finding:
    base: dict[str, Any] = dict(node=node, priority=Priority.P1, tag=Tag.WARN, section="N", suggested_commands=[LOOK])
    base.update(kw)
    return _f("probe.dmesg", base.pop("message", "Hung task reported in the kernel log"), **base)


def _watch() -> Finding:
    return _f(
        "probe.disk",
        "Root volume 85% full",
        node=_node(3),
        priority=Priority.P2,
        tag=Tag.WARN,
        section="I.2",
        suggested_commands=[LOOK],
    )


def _unknown(node: str = _node(4), message: str = "Could not reach the SSM agent") -> Finding:
    return _f("probe.gpu", message, node=node, priority=Priority.P1, tag=Tag.UNKNOWN, section="K")


def _cause() -> Finding:
    return _f(
        "network.efa_sg",
        "Security group sg-0abc lacks its self rule",
        priority=Priority.P0,
        section="A",
        suggested_commands=[SG_READ, SG_FIX],
        next_step="Fix the security group through its template; the nodes recover without a reboot.",
        evidence=["sg-0abc inbound: tcp 443 from 10.0.0.0/16"],
    )


def _resolved() -> Batch:
    [opened] = _stored([_xid(_node(1))])
    told = replace(opened, pending={})  # its opening reached people
    later = NOW + timedelta(hours=1, minutes=30)
    [change] = plan_incidents({told.key: told}, {}, later, cluster_arn=ARN).changes
    return _slack_batch([change.item])


def _escalated() -> Batch:
    [first] = _stored([_investigate(_node(5))])
    told = replace(first, pending={})
    desired = desired_incidents(ARN, _pairs([_xid(_node(5))]))
    [change] = plan_incidents({told.key: told}, desired, NOW + timedelta(hours=1), cluster_arn=ARN).changes
    return _slack_batch([change.item])


def _reopened() -> Batch:
    [opened] = _stored([_xid(_node(6))])
    told = replace(opened, pending={})
    [gone] = plan_incidents({told.key: told}, {}, NOW + timedelta(hours=1), cluster_arn=ARN).changes
    heard = replace(gone.item, pending={})  # its resolution reached people too
    desired = desired_incidents(ARN, _pairs([_xid(_node(6))]))
    [again] = plan_incidents({told.key: heard}, desired, NOW + timedelta(hours=2), cluster_arn=ARN).changes
    return _slack_batch([again.item])


def _group(n: int, title: str = "Xid 79 (GPU has fallen off the bus) on GPU 0") -> Batch:
    findings = [
        _f(
            "probe.xid",
            title,
            node=_node(i),
            priority=Priority.P0,
            node_action="replace",
            evidence=[title],
        )
        for i in range(n)
    ]
    batch = _slack_batch(_stored(findings))
    assert batch.kind == "group" and len(batch.items) == n
    return batch


def _mixed_group() -> Batch:
    batch = _slack_batch(_stored([_cause(), _xid(_node(1)), _investigate(), _watch(), _unknown()]))
    assert batch.kind == "group"
    return batch


def _baseline() -> Batch:
    config = [
        _f("network.efa_sg", "Security group sg-1 lacks its self rule", priority=Priority.P0, section="A"),
        _f("vpc.dns", "enableDnsHostnames is disabled on vpc-1", section="B.2"),
        _f("vpc.subnet_ips", "Subnet s-1 has only 11 free IPs", priority=Priority.P2, tag=Tag.WARN, section="B.1"),
    ]
    # the default policy: the P2 is below the channel's minimum, listed once in the baseline
    return next(b for b in _compose(_stored(config, baseline=True)) if b.channel == "slack")


def _daily() -> Batch:
    incidents = _stored([_xid(_node(1)), _watch(), _unknown()])
    batches = daily(
        incidents, AlertPolicy(), CHANNELS, cluster_arn=ARN, cluster_name=NAME, region="us-west-2", day="2026-12-03"
    )
    return next(b for b in batches if b.channel == "slack")


def _huge() -> Batch:
    """Every free-text field far past every limit, and 5,000 evidence lines with Slack's three characters."""
    lines = tuple(f"line {n:05d} <tag> & payload" for n in range(5000))
    batch = _one(
        [
            _f(
                "probe.xid",
                "Xid 79 " + "x" * 40_000,
                node=_node(8),
                priority=Priority.P0,
                node_action="replace",
                next_step="y" * 4000,
                root_cause="z" * 4000,
            )
        ]
    )
    return _with(batch, evidence=lines, occupancy="<" * 5000, likely_cause="&" * 5000, next_step="y" * 40_000)


def _rebooted_with_more(node: str = _node(6)) -> list[Finding]:
    """A node whose rung is a reboot (an Xid HyperPod's agent saw) with worse problems no reboot fixes (a
    full root volume, a stopped slurmd) and one it does (a pending row remap applies at the GPU reset)."""
    return [
        _f(
            "logs.hma", "HMA detected Xid 79 (GPU has fallen off the bus)", node=node, node_action="reboot", section="G"
        ),
        _f("probe.disk", "Root volume / is 93% full (7.0 GiB free)", node=node, priority=Priority.P0, section="I.2"),
        _f("probe.services", "slurmd is not running (failed)", node=node, priority=Priority.P0, section="H"),
        _f(
            "probe.gpu_row_remap",
            "Row remapping pending on GPU 2",
            node=node,
            tag=Tag.WARN,
            node_action="reboot",
            section="G.1.a",
        ),
    ]


def _hostile() -> Batch:
    return _with(
        _one(
            [
                _f(
                    "probe.xid",
                    HOSTILE,
                    node=_node(3),
                    priority=Priority.P0,
                    node_action="replace",
                    evidence=["``` " + HOSTILE + " x" * 3000, HOSTILE],  # the first is one enormous line
                )
            ]
        ),
        occupancy="job " + HOSTILE,
    )


def _hostile_coverage() -> Batch:
    return _one([_unknown(_node(i), message=HOSTILE) for i in range(3)])


def _hostile_group() -> Batch:
    return _group(40, title=HOSTILE + " " + "lorem ipsum " * 150)


@cache
def batches() -> dict[str, Batch]:
    return {
        "replace": _one([_xid(_node(1))]),
        "investigate": _one([_investigate()]),
        "reboot-with-more": _one(_rebooted_with_more()),
        "watch": _one([_watch()]),
        "coverage": _one([_unknown()]),
        "cause": _one([_cause()]),
        "resolved": _resolved(),
        "escalated": _escalated(),
        "reopened": _reopened(),
        "mixed-group": _mixed_group(),
        "baseline": _baseline(),
        "daily": _daily(),
        "huge": _huge(),
        "hostile": _hostile(),
        "hostile-coverage": _hostile_coverage(),
        "hostile-group": _hostile_group(),
    }


RENDERED = [
    pytest.param(name, base, id=f"{name}-{'url' if base else 'packaged'}")
    for name in batches()
    for base in (BASE, None)
]


def mrkdwn(payload: dict[str, Any]) -> list[str]:
    """Every mrkdwn text of a Slack payload: section texts and context elements."""
    out = []
    for block in payload["blocks"]:
        if block["type"] == "section":
            out.append(block["text"]["text"])
        out.extend(e["text"] for e in block.get("elements", []))
    return out


def header(payload: dict[str, Any]) -> str:
    first = payload["blocks"][0]
    assert first["type"] == "header"
    return first["text"]["text"]


def evidence_of(payload: dict[str, Any]) -> str:
    return next(t for t in mrkdwn(payload) if t.startswith("*Evidence (verbatim):*"))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# --------------------------------------------------------------------------- limits, for every rendering


@pytest.mark.parametrize(("name", "base"), RENDERED)
def test_every_slack_payload_is_valid_block_kit_within_slacks_limits(name: str, base: str | None) -> None:
    payload = alerts.slack(batches()[name], runbook_base_url=base)
    assert_block_kit(payload)  # slack_sdk's own models, at most 50 blocks, a fallback text
    assert payload["text"].strip()
    assert len(header(payload)) <= 150 and payload["blocks"][0]["text"]["type"] == "plain_text"
    for block in payload["blocks"][1:]:
        assert block["type"] in ("section", "divider", "context"), block
        if block["type"] == "section":
            assert 0 < len(block["text"]["text"]) <= 3000
        if block["type"] == "context":
            assert 1 <= len(block["elements"]) <= 10
    assert payload["blocks"][-1]["type"] == "context" and READ_ONLY_NOTE in mrkdwn(payload)[-1]


@pytest.mark.parametrize(("name", "base"), RENDERED)
def test_every_email_fits_sns(name: str, base: str | None) -> None:
    subject, body = alerts.email(batches()[name], runbook_base_url=base)
    assert 0 < len(subject) < 100 and not _CONTROL.search(subject), subject
    assert subject.startswith("[HyperPod ") and subject == alerts.subject(batches()[name])
    assert body.strip() and len(body.encode("utf-8")) <= MAX_EMAIL_BYTES


def test_an_email_over_the_size_limit_is_trimmed_visibly() -> None:
    # GIVEN an incident whose title alone is past SNS's message limit, and 5,000 evidence lines
    batch = _with(batches()["huge"], title="Xid 79 " + "word " * 60_000)
    # WHEN it is rendered for email
    subject, body = alerts.email(batch, runbook_base_url=BASE)
    # THEN the body fits, and says it was trimmed
    assert len(body.encode("utf-8")) <= MAX_EMAIL_BYTES
    assert body.endswith("… message trimmed to fit the email size limit\n")
    assert body.startswith(f"P0 REPLACE {_node(8)} (gpu) · {NAME}\n\nWhy: Xid 79 word")
    assert subject == f"[HyperPod P0] {NAME}: REPLACE {_node(8)} (gpu)"


# --------------------------------------------------------------------------- the header


@pytest.mark.parametrize(
    ("name", "emoji", "words"),
    [
        ("replace", "🔴", f"P0 REPLACE {_node(1)} (gpu) · {NAME}"),
        ("investigate", "🟠", f"P1 INVESTIGATE {_node(2)} (gpu) · {NAME}"),
        ("watch", "🟡", f"P2 WATCH {_node(3)} (gpu) · {NAME}"),
        ("coverage", "⚪", f"P1 COULD NOT CHECK monitor coverage · {NAME}"),
        ("resolved", "✅", f"RESOLVED {_node(1)} (gpu) · {NAME} (was P0 REPLACE)"),
        ("escalated", "🔴", f"P0 ESCALATED to REPLACE {_node(5)} (gpu) · {NAME}"),
        ("cause", "🔴", f"P0 CLUSTER PROBLEM network.efa_sg · {NAME}"),
        ("mixed-group", "🔴", f"{NAME}: 3 nodes need action, 1 cluster problem, a coverage gap"),
        ("baseline", "🔴", f"{NAME}: monitoring started, 3 open problems"),
        ("daily", "🔴", f"{NAME}: daily summary, 3 open"),
    ],
)
def test_the_header_emoji_follows_priority(name: str, emoji: str, words: str) -> None:
    assert header(alerts.slack(batches()[name], runbook_base_url=BASE)) == f"{emoji} {words}"


def test_an_incident_without_a_priority_is_white_and_says_unknown() -> None:
    batch = _with(batches()["investigate"], priority=None)
    assert header(alerts.slack(batch, runbook_base_url=None)).startswith("⚪ UNKNOWN INVESTIGATE ")
    assert alerts.subject(batch).startswith("[HyperPod UNKNOWN] ")


def test_a_group_takes_its_worst_emoji_and_a_group_of_resolutions_is_green() -> None:
    [p1, p2] = _stored([_investigate(), _watch()])
    assert header(alerts.slack(_slack_batch([p1, p2]), runbook_base_url=None)).startswith("🟠 ")
    resolved = []
    for s in _stored([_xid(_node(1)), _investigate()]):
        told = replace(s, pending={})
        resolved.append(plan_incidents({s.key: told}, {}, NOW + timedelta(hours=1), cluster_arn=ARN).changes[0].item)
    batch = _slack_batch(resolved)
    assert batch.kind == "group" and {it.told for it in batch.items} == {"resolved"}
    assert header(alerts.slack(batch, runbook_base_url=None)) == f"✅ {NAME}: 2 resolved"
    assert alerts.subject(batch) == f"[HyperPod RESOLVED] {NAME}: 2 resolved"


def test_the_coverage_incident_judges_nothing_and_shows_no_evidence() -> None:
    payload = alerts.slack(batches()["coverage"], runbook_base_url=None)
    text = "\n".join(mrkdwn(payload))
    assert "*Why:* 1 node could not be probed: Could not reach the SSM agent" in text
    assert "nothing is judged on what could not be read" in text and f"*Nodes:* {_node(4)}" in text
    assert "Evidence" not in text and MUTATING_HEADING not in text


# --------------------------------------------------------------------------- the transitions


def test_a_resolution_is_short_says_when_it_was_open_and_asks_nothing() -> None:
    batch = batches()["resolved"]
    payload = alerts.slack(batch, runbook_base_url=BASE)
    assert len(payload["blocks"]) <= 3
    text = "\n".join(mrkdwn(payload))
    assert "*No longer seen:* Xid 79 (GPU has fallen off the bus) on GPU 0" in text
    assert "Open from 2026-12-03 03:00 UTC to 2026-12-03 04:30 UTC." in text
    assert "```" not in text and "Evidence" not in text and "batch-replace" not in text
    subject, body = alerts.email(batch, runbook_base_url=BASE)
    assert subject.startswith(f"[HyperPod RESOLVED] {NAME}: {_node(1)} (gpu): Xid 79")
    assert "Open from 2026-12-03 03:00 UTC to 2026-12-03 04:30 UTC." in body
    assert "$ " not in body and "Evidence" not in body and f"Runbook: § G.1 NVIDIA GPUs: {G1_URL}" in body


def test_an_escalation_says_why_it_escalated() -> None:
    batch = batches()["escalated"]
    assert [it.told for it in batch.items] == ["escalated"]
    text = "\n".join(mrkdwn(alerts.slack(batch, runbook_base_url=None)))
    assert "*Escalated:* now REPLACE" in text
    _, body = alerts.email(batch, runbook_base_url=None)
    assert "\nEscalated: now REPLACE\n" in body


def test_a_reopened_incident_says_how_often_it_opened() -> None:
    batch = batches()["reopened"]
    assert [it.told for it in batch.items] == ["opened"]
    payload = alerts.slack(batch, runbook_base_url=None)
    assert "opened 2 times on this node" in payload["blocks"][-1]["elements"][0]["text"]
    assert "opened 2 times on this node" in alerts.email(batch, runbook_base_url=None)[1]


def test_a_single_alert_names_its_trigger_and_its_sections_one_line_what_to_do() -> None:
    [item] = batches()["replace"].items
    found = f"Cluster Event (Error) for {_node(1)}"
    batch = replace(batches()["replace"], items=(replace(item, incident=replace(item.incident, trigger=found)),))
    payload = alerts.slack(batch, runbook_base_url=BASE)
    texts = mrkdwn(payload)
    assert f"found by {found}" in payload["blocks"][-1]["elements"][0]["text"]
    assert any(f"*What to do:* {escape(WHAT_TO_DO['G.1'])}" in t for t in texts)
    _, body = alerts.email(batch, runbook_base_url=BASE)
    assert f"found by {found}" in body and f"\nWhat to do: {WHAT_TO_DO['G.1']}\n" in body


# --------------------------------------------------------------------------- commands


def test_commands_are_headed_by_whether_they_mutate_with_blast_radius_and_iac() -> None:
    # GIVEN a cluster problem whose next command reads and whose fix changes the security group
    batch = batches()["cause"]
    payload = alerts.slack(batch, runbook_base_url=None)
    commands = [t for t in mrkdwn(payload) if "```aws" in t]
    # THEN the read comes first under its read-only heading, the change under "run this yourself"
    assert len(commands) == 2
    look, fix = commands
    assert look.startswith(f"*{READ_ONLY_HEADING}:* Read the EFA security group") and "Blast radius" not in look
    assert fix.startswith(f"*{MUTATING_HEADING}:* Allow all traffic")
    assert "```aws ec2 authorize-security-group-ingress --group-id sg-0abc --protocol -1```" in fix
    assert "*Blast radius:* Every instance in sg-0abc accepts all traffic" in fix
    assert "*IaC:* " in fix and "*IaC:*" not in look
    # and the email heads them alike, with the change's preconditions
    _, body = alerts.email(batch, runbook_base_url=None)
    read_at = body.index(f"{READ_ONLY_HEADING}: Read the EFA security group's rules\n  $ aws ec2 describe")
    change_at = body.index(f"{MUTATING_HEADING}: Allow all traffic")
    assert read_at < change_at
    change = body[change_at:].split("\n\n")[0]
    assert "\n  blast radius: Every instance in sg-0abc" in change
    assert "\n  precondition: The group is the one the cluster's EFA interfaces use." in change
    assert "\n  IaC: " in change
    assert "blast radius" not in body[read_at:change_at]


def test_a_group_line_heads_a_mutating_command_and_not_a_read_only_one() -> None:
    payload = alerts.slack(batches()["mixed-group"], runbook_base_url=None)
    lines = {t.split("\n")[0].split(":")[0]: t for t in mrkdwn(payload) if t.startswith(("🔴", "🟠", "🟡", "⚪"))}
    replace_line = lines[f"🔴 *P0 REPLACE* `{_node(1)}` (gpu)"]
    assert f"_{MUTATING_HEADING}:_ `kubectl cordon" in replace_line and "_Blast radius:_" in replace_line
    assert "_IaC:_" in replace_line
    look = lines["🔴 *P0 CLUSTER PROBLEM* network.efa_sg"]
    assert "`aws ec2 describe-security-groups --group-ids sg-0abc`" in look
    assert MUTATING_HEADING not in look and "Blast radius" not in look


# --------------------------------------------------------------------------- evidence


def test_evidence_is_verbatim_in_a_code_block_with_slack_escaping() -> None:
    batch = _one([_f("probe.xid", "Xid 79", node=_node(1), priority=Priority.P0, evidence=EVIDENCE)])
    payload = alerts.slack(batch, runbook_base_url=None)
    assert evidence_of(payload) == (
        "*Evidence (verbatim):*\n```\n"
        "NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus &lt;gpu0&gt; &amp; more\nsecond line\n```"
    )
    assert "<gpu0>" not in json.dumps(payload)
    # the email has no markup to escape: the lines as they were
    _, body = alerts.email(batch, runbook_base_url=None)
    assert (
        "Evidence (verbatim):\n    | NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus <gpu0> & more\n" in body
    )
    assert "\n    | second line\n" in body


def test_five_thousand_lines_of_evidence_are_trimmed_visibly_within_limits() -> None:
    payload = alerts.slack(batches()["huge"], runbook_base_url=BASE)
    evidence = evidence_of(payload)
    assert len(evidence) <= 3000 and evidence.count("```") == 2
    shown = evidence.count("\nline ")
    assert 10 < shown < 5000
    assert evidence.endswith(f"```\n… {5000 - shown} more lines")
    assert evidence.startswith("*Evidence (verbatim):*\n```\nline 00000 &lt;tag&gt; &amp; payload\nline 00001 ")


def test_one_enormous_evidence_line_is_cut_not_dropped() -> None:
    for line in ("&" * 10_001, "x" + "&" * 10_000, "x" + "<" * 10_000):
        batch = _one([_f("probe.xid", "Xid 79", node=_node(1), priority=Priority.P0, evidence=[line])])
        evidence = evidence_of(alerts.slack(batch, runbook_base_url=None))
        inside = evidence.removeprefix("*Evidence (verbatim):*\n```\n").removesuffix("\n```")
        assert len(evidence) <= 3000 and inside != evidence
        assert escape(line[:100]) in inside  # cut, not dropped
        # visibly cut, and never inside one of Slack's escapes
        assert inside.endswith("…")
        assert re.fullmatch(r"x?(&amp;|&lt;)+…", inside), inside[-20:]
        _, body = alerts.email(batch, runbook_base_url=None)
        assert f"    | {line[:1000]}" in body


# --------------------------------------------------------------------------- text from the cluster is inert


@pytest.mark.parametrize("name", ["hostile", "hostile-coverage", "hostile-group"])
def test_text_from_the_cluster_cannot_open_or_close_a_code_block_mention_or_link(name: str) -> None:
    payload = alerts.slack(batches()[name], runbook_base_url=BASE)
    assert "<!channel>" not in payload["text"] and "<@U" not in payload["text"]
    for text in mrkdwn(payload):
        assert "<!channel>" not in text and "<@U" not in text and "<https://evil" not in text, text
        # the only fences are ours: a line of its own opening or closing the evidence, or one command's
        fenced = [line for line in text.split("\n") if "```" in line]
        assert all(line == "```" or re.fullmatch(r"```[^`]+```", line) for line in fenced), text
        assert text.count("```") % 2 == 0, text
    # still readable: escaped, not dropped
    assert "&lt;!channel&gt;" in "\n".join(mrkdwn(payload))


def test_a_hostile_message_is_escaped_in_the_fallback_text_and_plain_in_the_email() -> None:
    batch = batches()["hostile"]
    payload = alerts.slack(batch, runbook_base_url=None)
    # escaped and defanged: no mention, and no link (the scheme's colon is bracketed)
    assert "&lt;!channel&gt; &lt;@U024BE7LH&gt; &lt;https[:]//evil.example|click&gt;" in payload["text"]
    _, body = alerts.email(batch, runbook_base_url=None)
    assert f"\nWhy: {HOSTILE}\n" in body


# --------------------------------------------------------------------------- runbook links and secrets


def test_the_runbook_link_is_built_from_the_base_url() -> None:
    label = "§ G.1 NVIDIA GPUs"
    for base in (BASE, BASE + "/"):
        single = alerts.slack(batches()["replace"], runbook_base_url=base)
        assert f"*Runbook:* <{G1_URL}|{label}>" in "\n".join(mrkdwn(single))
        _, body = alerts.email(batches()["replace"], runbook_base_url=base)
        assert f"\nRunbook: {label}: {G1_URL}\n" in body
    group = alerts.slack(batches()["mixed-group"], runbook_base_url=BASE)
    assert f"<{G1_URL}|{label}>" in group["blocks"][-1]["elements"][1]["text"]
    assert f"<{BASE}/{RUNBOOK}#a-efa-and-security-groups|§ A EFA and security groups>" in json.dumps(
        group, ensure_ascii=False
    )


def test_without_a_base_url_the_runbook_is_the_packaged_pointer() -> None:
    pointer = f"{RUNBOOK} § G.1 (hyperpod-debugger runbook G.1)"
    single = alerts.slack(batches()["replace"], runbook_base_url=None)
    assert f"*Runbook:* § G.1 NVIDIA GPUs: `{pointer}`" in "\n".join(mrkdwn(single))
    _, body = alerts.email(batches()["replace"], runbook_base_url=None)
    assert f"\nRunbook: § G.1 NVIDIA GPUs: {pointer}\n" in body
    group = alerts.slack(batches()["mixed-group"], runbook_base_url=None)
    assert group["blocks"][-1]["elements"][1]["text"].startswith(
        f"Runbook ({RUNBOOK}): § A, § G.1, § I.2, § K, § N; `hyperpod-debugger runbook "
    )
    for payload in (single, group):
        assert "<references/" not in json.dumps(payload) and "<http" not in json.dumps(payload)


@pytest.mark.parametrize(
    ("given", "safe"),
    [
        ("https://user:s3cr3tTOKEN@runbooks.example.com/hp?token=s3cr3tTOKEN#frag", "https://runbooks.example.com/hp"),
        ("  https://runbooks.example.com:8443/hp/  ", "https://runbooks.example.com:8443/hp/"),
        ("https://runbooks.example.com", "https://runbooks.example.com"),
        ("runbooks.example.com/hp", None),
        ("", None),
        (None, None),
    ],
)
def test_safe_base_url_keeps_scheme_host_port_and_path_only(given: str | None, safe: str | None) -> None:
    assert safe_base_url(given) == safe


@pytest.mark.parametrize(
    "base",
    [
        "https://user:s3cr3tTOKEN@runbooks.example.com/hp",
        "https://runbooks.example.com/hp?token=s3cr3tTOKEN",
        "https://runbooks.example.com/hp#s3cr3tTOKEN",
        "https://user:pass@runbooks.example.com/hp/?sig=s3cr3tTOKEN&x=1#s3cr3tTOKEN",
    ],
)
def test_credentials_in_the_base_url_never_reach_a_rendering(base: str) -> None:
    for name, batch in batches().items():
        renderings = {
            "slack": json.dumps(alerts.slack(batch, runbook_base_url=base), ensure_ascii=False),
            "email": "\n".join(alerts.email(batch, runbook_base_url=base)),
            "chatbot": json.dumps(chatbot(batch, runbook_base_url=base), ensure_ascii=False),
        }
        for channel, text in renderings.items():
            where = f"{name} on {channel}"
            assert "s3cr3tTOKEN" not in text and "user:" not in text and "pass@" not in text, where
            assert "runbooks.example.com/hp/references/node-diagnostics-detail.md#" in text, where
            # and no rendering carries a webhook URL: renderers are never given one
            assert "hooks.slack.com" not in text, where


# --------------------------------------------------------------------------- email


def test_the_email_subject_has_no_control_characters_or_line_breaks() -> None:
    # GIVEN a finding message and a cluster name with line breaks, an escape sequence and Unicode separators
    message = "Xid 79\r\nBcc: x@example.com\x1b[31m red\u2028line\x85 next\ttab"
    single = replace(_with(batches()["replace"], title=message), cluster_name="a\r\nBcc: y@example.com")
    group = replace(batches()["mixed-group"], cluster_name="b\nBcc: z@example.com\x00")
    for batch in (single, group):
        subject, body = alerts.email(batch, runbook_base_url=None)
        # THEN the subject is one line, under SNS's 100 characters
        assert not _CONTROL.search(subject) and len(subject) < 100, subject
        assert "Bcc:" in subject  # the words kept, the breaks gone
    assert alerts.subject(single) == (f"[HyperPod P0] a Bcc: y@example.com: REPLACE {_node(1)} (gpu): Xid 79 Bcc")


def test_the_email_body_says_what_the_slack_message_says() -> None:
    for name in ("replace", "cause", "investigate"):
        batch = batches()[name]
        slack_text = "\n".join(mrkdwn(alerts.slack(batch, runbook_base_url=BASE)))
        _, body = alerts.email(batch, runbook_base_url=BASE)
        [item] = batch.items
        incident = item.incident.incident
        assert incident.next_step is not None
        said = [incident.title, incident.next_step, WHAT_TO_DO[incident.section or ""], *incident.evidence]
        for command in alerts.commands(incident):
            said += [command["purpose"], command["command"]]
            if command["mutates"]:
                said += [command["blast_radius"], command["iac_warning"]]
        assert len(said) >= 5
        for words in said:
            assert escape(words) in slack_text, (name, words)
            assert words in body, (name, words)
        runbook = alerts.section_url(incident.section or "", BASE)
        assert f"<{runbook}|" in slack_text and f": {runbook}\n" in body


# --------------------------------------------------------------------------- several incidents in one message


def test_a_group_of_forty_with_long_hostile_titles_stays_within_limits_and_lists_ten() -> None:
    batch = batches()["hostile-group"]
    payload = alerts.slack(batch, runbook_base_url=BASE)
    listed = [t for t in mrkdwn(payload) if t.startswith("🔴 *P0 REPLACE* ")]
    assert [t.split("`")[1] for t in listed] == [_node(i) for i in range(10)]
    assert all(len(t) <= 3000 for t in listed)
    assert payload["blocks"][-1]["elements"][0]["text"].startswith("… and 30 more. All of them: ")
    # the email names every one of them, with the shared check, and still fits SNS
    subject, body = alerts.email(batch, runbook_base_url=BASE)
    assert subject == f"[HyperPod P0] {NAME}: 40 nodes need action"
    assert all(f"P0 REPLACE {_node(i)} (gpu): " in body for i in range(40))
    assert "\n40 nodes fail probe.xid. Many nodes failing one check together" in body
    assert len(body.encode("utf-8")) <= MAX_EMAIL_BYTES


def test_a_group_counts_its_verdicts_and_lists_the_worst_first() -> None:
    batch = batches()["mixed-group"]
    payload = alerts.slack(batch, runbook_base_url=None)
    summary = payload["blocks"][1]["text"]["text"]
    assert summary.startswith("*Verdicts:* ")
    counts = dict(part.rsplit(" ", 1) for part in summary.removeprefix("*Verdicts:* ").split(" · "))
    assert counts == {"CLUSTER PROBLEM": "1", "REPLACE": "1", "INVESTIGATE": "1", "WATCH": "1", "COULD NOT CHECK": "1"}
    firsts = [t[0] for t in mrkdwn(payload) if t.startswith(("🔴", "🟠", "🟡", "⚪"))]
    assert firsts == ["🔴", "🔴", "🟠", "⚪", "🟡"]
    _, body = alerts.email(batch, runbook_base_url=None)
    assert "\nVerdicts: CLUSTER PROBLEM 1 · " in body
    assert "\nFull detail: hyperpod-debugger triage --cluster train-prod --region us-west-2\n" in body


def test_the_baseline_and_the_daily_summary_say_what_was_below_the_channels_minimum() -> None:
    baseline = alerts.slack(batches()["baseline"], runbook_base_url=None)
    assert (
        "1 of them are below this channel's alert priority: listed here once" in baseline["blocks"][1]["text"]["text"]
    )
    listed = [t for t in mrkdwn(baseline) if t.startswith(("🔴", "🟠", "🟡"))]
    assert len(listed) == 3 and listed[-1].startswith("🟡 *P2 ")  # the P2 is listed, once
    _, body = alerts.email(batches()["baseline"], runbook_base_url=None)
    assert "1 of them are below this channel's alert priority: listed here once" in body
    summary = alerts.slack(batches()["daily"], runbook_base_url=None)
    assert "1 of them are below this channel's alert priority (never paged)." in summary["blocks"][1]["text"]["text"]
    assert len([t for t in mrkdwn(summary) if t.startswith(("🔴", "🟠", "🟡", "⚪"))]) == 3


# --------------------------------------------------------------------------- the shared words


def test_escape() -> None:
    assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"
    assert escape("&lt;") == "&amp;lt;"  # escaping twice shows the text as it was, never a live character
    assert escape("<!channel> <@U1>") == "&lt;!channel&gt; &lt;@U1&gt;"


def test_every_runbook_section_has_a_one_line_what_to_do() -> None:
    assert set(WHAT_TO_DO) == set(SECTIONS)
    assert all("\n" not in line and len(line) <= 120 for line in WHAT_TO_DO.values())
    assert what_to_do("G.1.a") == WHAT_TO_DO["G.1.a"] and what_to_do(None) is None


# --------------------------------------------------------------------------- a node's other problems


def test_a_node_alert_names_its_worst_problem_and_sorts_the_rest_by_whether_the_reboot_fixes_them() -> None:
    batch = batches()["reboot-with-more"]
    payload = alerts.slack(batch, runbook_base_url=None)
    text = "\n".join(mrkdwn(payload))
    assert "REBOOT" in header(payload)
    assert (
        "*Worst problem (a reboot does not fix it):*\n• P0 FAIL Root volume / is 93% full (7.0 GiB free) (§ I.2)\n"
        "*A reboot does not fix:*\n• P0 FAIL slurmd is not running (failed) (§ H)\n"
        "*A reboot clears too:*\n• P1 WARN Row remapping pending on GPU 2 (§ G.1.a)"
    ) in text
    _, body = alerts.email(replace(batch, channel="sns"), runbook_base_url=None)
    assert (
        "Worst problem (a reboot does not fix it):\n  - P0 FAIL Root volume / is 93% full (7.0 GiB free) (§ I.2)\n"
        "A reboot does not fix:\n  - P0 FAIL slurmd is not running (failed) (§ H)\n"
        "A reboot clears too:\n  - P1 WARN Row remapping pending on GPU 2 (§ G.1.a)"
    ) in body
    description = chatbot(replace(batch, channel="chatbot"), runbook_base_url=None)["content"]["description"]
    assert "*Worst problem (a reboot does not fix it):*\n• P0 FAIL Root volume / is 93% full" in description
    assert "*A reboot does not fix:*\n• P0 FAIL slurmd is not running (failed) (§ H)" in description


def test_a_group_message_says_per_node_how_many_problems_the_rung_leaves_and_the_worst() -> None:
    pending = _stored(_rebooted_with_more(_node(6)) + [_xid(_node(7))])
    batch = _slack_batch(pending)
    assert len(batch.items) == 2
    [line] = [t for t in mrkdwn(alerts.slack(batch, runbook_base_url=None)) if _node(6) in t]
    assert (
        "_Also:_ 3 more problems on this node, 2 that a reboot does not fix "
        "(worst: P0 FAIL Root volume / is 93% full (7.0 GiB free) (§ I.2))"
    ) in line
    _, body = alerts.email(replace(batch, channel="sns"), runbook_base_url=None)
    assert "    also: 3 more problems on this node, 2 that a reboot does not fix (worst: P0 FAIL Root" in body
    # a node with no other problem gets no such line
    [other] = [t for t in mrkdwn(alerts.slack(batch, runbook_base_url=None)) if _node(7) in t and "REPLACE" in t]
    assert "_Also:_" not in other


def test_a_node_with_very_many_long_problems_keeps_an_incident_far_below_dynamodbs_item_limit() -> None:
    node = _node(8)
    many = [
        _f(f"probe.check{i}", f"problem {i} " + "x" * 3000, node=node, priority=Priority.P2, tag=Tag.WARN)
        for i in range(60)
    ]
    [stored_incident] = _stored([*many, _xid(node)])
    incident = stored_incident.incident
    assert len(incident.others) == 40 and all(len(o.message) <= 400 for o in incident.others)
    assert len(json.dumps([vars(o) | {"priority": str(o.priority)} for o in incident.others])) < 40_000
