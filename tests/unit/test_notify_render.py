"""Notification renderings: every transition, verbatim and escaped evidence, limits, no mutating advice in
cluster-level alerts, no secrets, runbook links on the configured base URL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.notify import (
    Notice,
    breaker,
    breaker_email,
    digest,
    digest_email,
    email_text,
    slack_message,
)
from hyperpod_debugger.notify.messages import duration, escape, safe_base_url
from hyperpod_sim.slack_sink import block_kit_problems

BASE = "https://github.com/example/hyperpod-runbook/blob/main"
WEBHOOK = "https://hooks.slack.com/services/T0SECRET/B0SECRET/xoxbSECRETSECRETSECRET"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
T1 = T0 + timedelta(hours=3, minutes=12)
NODE = "i-0123456789abcdef0"

READ = SuggestedCommand(
    command="aws sagemaker describe-cluster-node --cluster-name demo --node-id i-0123456789abcdef0",
    purpose="Read the node's status",
    mutates=False,
)
REBOOT = SuggestedCommand(
    command="aws sagemaker batch-reboot-cluster-nodes --cluster-name demo --node-ids i-0123456789abcdef0",
    purpose="Reboot the node",
    mutates=True,
    step="reboot",
    blast_radius="Kills every job running on the node.",
    iac_warning="No infrastructure-as-code drift: node state is not in a template.",
    preconditions=["Drain the node first", "Checkpoint running jobs"],
)
REPLACE = SuggestedCommand(
    command="aws sagemaker batch-replace-cluster-nodes --cluster-name demo --node-ids i-0123456789abcdef0",
    purpose="Replace the node",
    mutates=True,
    step="replace",
    blast_radius="Destroys the root and secondary volumes of the node.",
    iac_warning="No infrastructure-as-code drift: node state is not in a template.",
    preconditions=["Drain the node first"],
)
EVIDENCE = ["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus <gpu0> & more", "second line"]


def finding(tag: Tag = Tag.FAIL, priority: Priority | None = Priority.P0, **overrides) -> Finding:
    base = dict(
        tag=tag,
        priority=priority,
        check="probe.gpu.xid",
        section="G.1",
        message="GPU fell off the bus (Xid 79) on the node",
        cluster_name="demo",
        instance_id=NODE,
        instance_group="workers",
        evidence=EVIDENCE,
        root_cause="The GPU stopped answering on PCIe.",
        suggested_commands=[READ, REBOOT, REPLACE],
        node_action="replace",
        next_step="Drain the node, then replace it.",
    )
    base.update(overrides)
    return Finding(**base)


def notice(transition="NEW", f: Finding | None = None, **overrides) -> Notice:
    base = dict(
        transition=transition,
        finding=f or finding(),
        first_seen=T0,
        last_seen=T1,
        count=4,
        cluster_name="demo",
        region="us-west-2",
    )
    base.update(overrides)
    return Notice(**base)


def all_text(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)


def mrkdwn_texts(payload: dict) -> list[str]:
    out = []
    for b in payload["blocks"]:
        if isinstance(b.get("text"), dict):
            out.append(b["text"]["text"])
        out.extend(f["text"] for f in b.get("fields", []))
        out.extend(e["text"] for e in b.get("elements", []))
    return out


# ----------------------------------------------------------------------------- transitions


@pytest.mark.parametrize(
    ("transition", "icon", "word"),
    [("NEW", "🔴", "New"), ("ESCALATED", "🔴", "Escalated"), ("REOPENED", "🔴", "Reopened")],
)
def test_each_open_transition_renders_a_valid_block_kit_message(transition, icon, word):
    # GIVEN a P0 finding in a transition that opens it
    # WHEN it is rendered for Slack
    msg = slack_message(notice(transition), runbook_base_url=BASE)
    # THEN Slack would accept it, and its header names the transition and priority with the emoji
    assert block_kit_problems(msg) == []
    header = msg["blocks"][0]
    assert header["type"] == "header" and header["text"]["text"].startswith(f"{icon} {word} P0:")
    assert "GPU fell off the bus" in msg["text"]
    text = all_text(msg)
    assert "demo (us-west-2)" in text and NODE in text and "probe.gpu.xid" in text
    assert "Drain the node, then replace it." in text
    assert "The GPU stopped answering on PCIe." in text


@pytest.mark.parametrize(
    ("tag", "priority", "icon"),
    [
        (Tag.FAIL, Priority.P0, "🔴"),
        (Tag.WARN, Priority.P1, "🟠"),
        (Tag.WARN, Priority.P2, "🟡"),
        (Tag.UNKNOWN, Priority.P1, "⚪"),
    ],
)
def test_header_emoji_follows_priority_and_unknown(tag, priority, icon):
    cmds = [READ] if tag is Tag.UNKNOWN else [READ, REBOOT]
    msg = slack_message(notice(f=finding(tag, priority, suggested_commands=cmds)), runbook_base_url=BASE)
    assert msg["blocks"][0]["text"]["text"].startswith(icon)
    if tag is Tag.UNKNOWN:
        assert "not a verdict" in all_text(msg)


def test_resolved_is_short_and_says_how_long_it_was_open():
    msg = slack_message(notice("RESOLVED"), runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    assert len(msg["blocks"]) <= 3
    assert msg["blocks"][0]["text"]["text"].startswith("✅ Resolved:")
    text = all_text(msg)
    assert "Open for 3h 12m" in text and "GPU fell off the bus" in text
    assert "batch-reboot" not in text and "Evidence" not in text


def test_resolved_measures_to_resolved_at_when_given():
    msg = slack_message(notice("RESOLVED", resolved_at=T0 + timedelta(days=2, hours=1)), runbook_base_url=None)
    assert "Open for 2d 1h" in all_text(msg)


def test_durations():
    assert duration(timedelta(seconds=30)) == "<1m"
    assert duration(timedelta(minutes=12)) == "12m"
    assert duration(timedelta(hours=3, minutes=12)) == "3h 12m"
    assert duration(timedelta(days=2, hours=1, minutes=5)) == "2d 1h"


# ----------------------------------------------------------------------------- commands


def test_commands_are_headed_by_whether_they_mutate_with_blast_radius_preconditions_and_iac():
    msg = slack_message(notice(), runbook_base_url=BASE)
    sections = [t for t in mrkdwn_texts(msg) if "```aws" in t]
    assert len(sections) == 3
    read, reboot, replace = sections
    assert read.startswith("*Investigate (read-only)*") and "Blast radius" not in read
    for text in (reboot, replace):
        assert text.startswith("*Suggested command (run this yourself)*")
        assert "*Blast radius:*" in text and "*IaC:*" in text and "• Drain the node first" in text
    assert "root and secondary volumes" in replace
    assert "never runs these commands" in all_text(msg)


def test_many_commands_stay_within_fifty_blocks_with_a_pointer_to_the_rest():
    f = finding(tag=Tag.WARN, priority=Priority.P2, suggested_commands=[READ] * 80, node_action=None)
    msg = slack_message(notice(f=f), runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    assert len(msg["blocks"]) == 50
    assert "more suggested commands: run `hyperpod-debugger triage --cluster demo --region us-west-2`" in all_text(msg)


# ----------------------------------------------------------------------------- evidence


def test_evidence_is_verbatim_in_a_code_block_with_slack_escaping():
    msg = slack_message(notice(), runbook_base_url=BASE)
    evidence = next(t for t in mrkdwn_texts(msg) if t.startswith("*Evidence (verbatim):*"))
    assert (
        "```\nNVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus &lt;gpu0&gt; &amp; more\nsecond line\n```"
        in evidence
    )
    assert "<gpu0>" not in all_text(msg)


def test_message_and_fallback_are_escaped_too():
    f = finding(message="a <b> & c", root_cause="x <!channel> y")
    msg = slack_message(notice(f=f), runbook_base_url=BASE)
    assert "<!channel>" not in all_text(msg) and "&lt;!channel&gt;" in all_text(msg)
    assert "a &lt;b&gt; &amp; c" in msg["text"]
    assert msg["blocks"][0]["text"]["text"].endswith("a <b> & c")  # plain_text needs no escaping


def test_five_thousand_lines_of_evidence_are_trimmed_visibly_within_limits():
    lines = [f"line {n:05d} <tag> & payload" for n in range(5000)]
    f = finding(evidence=["\n".join(lines)], message="x" * 400, next_step="y" * 4000, root_cause="z" * 4000)
    msg = slack_message(notice(f=f), runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    assert all(len(t) <= 3000 for t in mrkdwn_texts(msg))
    assert len(msg["blocks"][0]["text"]["text"]) <= 150
    evidence = next(t for t in mrkdwn_texts(msg) if t.startswith("*Evidence (verbatim):*"))
    shown = evidence.count("\nline ")
    assert 10 < shown < 5000
    assert evidence.endswith(f"… {5000 - shown} more lines")
    assert "line 00000 &lt;tag&gt; &amp; payload\n" in evidence
    assert evidence.count("```") == 2
    # and the email keeps the first 200 lines, verbatim, with the same marker
    _, body = email_text(notice(f=f), runbook_base_url=BASE)
    assert "    | line 00000 <tag> & payload" in body and "… 4800 more lines" in body
    assert len(body.encode()) <= 200_000


def test_one_enormous_evidence_line_is_cut_not_dropped():
    f = finding(evidence=["&" * 10_000])
    msg = slack_message(notice(f=f), runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    evidence = next(t for t in mrkdwn_texts(msg) if t.startswith("*Evidence (verbatim):*"))
    assert "&amp;&amp;" in evidence and len(evidence) <= 3000
    assert "&am\n" not in evidence and not evidence.rstrip("`\n…").endswith("&am")


# ----------------------------------------------------------------------------- runbook links and secrets


def test_runbook_link_uses_the_base_url():
    msg = slack_message(notice(), runbook_base_url=BASE + "/")
    url = f"{BASE}/references/node-diagnostics-detail.md#g1-nvidia-gpus"
    assert f"<{url}|§ G.1 NVIDIA GPUs>" in all_text(msg)
    _, body = email_text(notice(), runbook_base_url=BASE)
    assert f"§ G.1 NVIDIA GPUs: {url}" in body


def test_without_a_base_url_the_runbook_is_the_repository_pointer():
    msg = slack_message(notice(), runbook_base_url=None)
    assert "`references/node-diagnostics-detail.md § G.1`" in all_text(msg)
    assert "<references/" not in all_text(msg)


def test_credentials_in_the_base_url_never_reach_a_rendering():
    base = "https://user:s3cr3tTOKEN@runbooks.example.com/hp?token=s3cr3tTOKEN#frag"
    assert safe_base_url(base) == "https://runbooks.example.com/hp"
    renderings = [all_text(slack_message(notice(t), runbook_base_url=base)) for t in ("NEW", "RESOLVED")] + [
        " ".join(email_text(notice(), runbook_base_url=base)),
        all_text(digest([notice()], cluster_name="demo", runbook_base_url=base)),
        " ".join(digest_email([notice()], cluster_name="demo", runbook_base_url=base)),
        all_text(breaker("probe.gpu.xid", "G.1", [NODE], cluster_name="demo", sample=finding(), runbook_base_url=base)),
    ]
    for text in renderings:
        assert "s3cr3tTOKEN" not in text and "user:" not in text
        assert "runbooks.example.com/hp/references/" in text


def test_no_rendering_contains_a_webhook_url():
    every = [
        slack_message(notice(), runbook_base_url=BASE),
        slack_message(notice("RESOLVED"), runbook_base_url=BASE),
        digest([notice()], cluster_name="demo", runbook_base_url=BASE),
        breaker("probe.gpu.xid", "G.1", [NODE], cluster_name="demo", sample=finding(), runbook_base_url=BASE),
    ]
    for payload in every:
        assert "hooks.slack.com" not in all_text(payload) and WEBHOOK not in all_text(payload)


# ----------------------------------------------------------------------------- email


def test_email_subject_fits_sns_and_body_has_the_same_content():
    f = finding(message="very long message " * 20)
    subject, body = email_text(notice(f=f), runbook_base_url=BASE)
    assert len(subject) < 100 and "\n" not in subject
    assert subject.startswith("[HyperPod P0] New: demo/i-0123456789abcdef0:")
    for part in (
        "Cluster:  demo (us-west-2)",
        "Node:     i-0123456789abcdef0 (workers)",
        "Check:    probe.gpu.xid",
        "Evidence (verbatim):",
        "    | NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus <gpu0> & more",
        "Suggested command (run this yourself): Reboot the node",
        "  blast radius: Kills every job",
        "  precondition: Checkpoint running jobs",
        "  IaC: No infrastructure-as-code drift",
        "Investigate (read-only): Read the node's status",
        "Next step: Drain the node, then replace it.",
    ):
        assert part in body


def test_email_subject_has_no_control_characters():
    f = finding(instance_id=None, instance_group=None, message="m")
    subject, _ = email_text(notice(f=f, cluster_name="a\r\nBcc: x@example.com"), runbook_base_url=None)
    assert "\r" not in subject and "\n" not in subject


def test_resolved_email_is_short():
    subject, body = email_text(notice("RESOLVED"), runbook_base_url=BASE)
    assert subject.startswith("[HyperPod] Resolved: demo/i-0123456789abcdef0")
    assert "Open for: 3h 12m" in body and "$ aws" not in body and "Evidence" not in body


# ----------------------------------------------------------------------------- digest


SWEEP_TRIGGER = {"trigger_kind": "sweep", "trigger": "the scheduled sweep"}


def many_notices(n: int, **trigger) -> list[Notice]:
    trigger = trigger or SWEEP_TRIGGER
    out = []
    sections = ["A", "B.2", "G.1", "I.2"]
    for i in range(n):
        prio = [Priority.P0, Priority.P1, Priority.P2][i % 3]
        tag = Tag.FAIL if prio is Priority.P0 else Tag.WARN
        f = finding(
            tag,
            prio,
            instance_id=f"i-{i:017x}",
            section=sections[i % 4],
            message=f"problem {i}",
            suggested_commands=[READ, REBOOT],
        )
        out.append(notice(f=f, **trigger))
    return out


def test_digest_counts_by_priority_and_section_and_lists_the_top_ten():
    notices = many_notices(37) + [notice("RESOLVED", **SWEEP_TRIGGER)]
    msg = digest(notices, cluster_name="demo", runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    text = all_text(msg)
    assert msg["blocks"][0]["text"]["text"] == "🔴 demo: 37 findings opened in one sweep, 1 resolved"
    assert "🔴 P0: 13 · 🟠 P1: 12 · 🟡 P2: 12" in text
    assert "|§ A EFA and security groups>: 10" in text and "|§ I.2 Root volume space>: 9" in text
    listed = [t for t in mrkdwn_texts(msg)[1:] if t.startswith(("🔴", "🟠", "🟡"))]
    assert len(listed) == 10 and all("P0" in t for t in listed)  # the worst first
    assert "… and 27 more · 1 resolved" in text


def test_digest_and_breaker_carry_no_mutating_command():
    notices = many_notices(15)
    ids = [f"i-{i:017x}" for i in range(200)]
    payloads = [
        all_text(digest(notices, cluster_name="demo", runbook_base_url=BASE)),
        " ".join(digest_email(notices, cluster_name="demo", runbook_base_url=BASE)),
        all_text(breaker("probe.gpu.xid", "G.1", ids, cluster_name="demo", sample=finding(), runbook_base_url=BASE)),
        " ".join(
            breaker_email("probe.gpu.xid", "G.1", ids, cluster_name="demo", sample=finding(), runbook_base_url=BASE)
        ),
    ]
    for text in payloads:
        assert "batch-reboot" not in text and "batch-replace" not in text
        assert "Suggested command (run this yourself)" not in text


def test_digest_email():
    subject, body = digest_email(many_notices(12), cluster_name="demo", runbook_base_url=BASE)
    assert len(subject) < 100 and subject.startswith("[HyperPod] demo: 12 findings opened in one sweep")
    assert "By priority: P0: 4, P1: 4, P2: 4" in body and "… and 2 more" in body
    assert "[P0 FAIL] problem 0 [i-00000000000000000 (workers)]" in body


# ----------------------------------------------------------------------------- circuit breaker


def test_breaker_is_one_cluster_level_alert_naming_a_shared_cause():
    ids = [f"i-{i:017x}" for i in range(120)] + ["i-00000000000000000"]  # a duplicate counts once
    msg = breaker("probe.gpu.xid", "G.1", ids, cluster_name="demo", sample=finding(), runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    assert msg["blocks"][0]["text"]["text"] == "🔴 120 nodes fail probe.gpu.xid at once"
    text = all_text(msg)
    assert "likely a shared cause, not 120 node faults" in text and "likely a shared cause" in msg["text"]
    assert "… and 90 more" in text
    assert "Investigate (read-only)" in text and "describe-cluster-node" in text
    assert "&lt;gpu0&gt;" in text  # the example's evidence, escaped
    subject, body = breaker_email(
        "probe.gpu.xid", "G.1", ids, cluster_name="demo", sample=finding(), runbook_base_url=BASE
    )
    assert len(subject) < 100 and "120 nodes fail probe.gpu.xid at once" in subject
    assert "likely a shared cause, not 120 node faults" in body


def test_escape():
    assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"


# ----------------------------------------------------------------------------- what made the monitor look


def test_a_digest_opened_by_an_event_says_so_and_leads_with_the_node_it_named():
    # GIVEN 12 findings one Node Health Event's triage opened, the event's own node last by urgency
    event = {"trigger_kind": "event", "trigger": "Node Health Event for i-0000000000000000b", "trigger_node": None}
    event["trigger_node"] = "i-0000000000000000b"
    notices = many_notices(12, **event)
    msg = digest(notices, cluster_name="demo", runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    # THEN the title names the event, not a sweep, and the event's node comes first
    assert (
        msg["blocks"][0]["text"]["text"]
        == "🔴 demo: 12 findings opened after the Node Health Event for i-0000000000000000b"
    )
    listed = [t for t in mrkdwn_texts(msg)[1:] if t.startswith(("🔴", "🟠", "🟡"))]
    assert "i-0000000000000000b" in listed[0]
    subject, body = digest_email(notices, cluster_name="demo", runbook_base_url=BASE)
    assert "after the Node Health Event" in subject and "in one sweep" not in subject
    assert body.split("Top 10:")[1].splitlines()[1].find("i-0000000000000000b") > 0


def test_a_digest_of_unknown_or_mixed_origin_claims_no_sweep():
    mixed = many_notices(6) + many_notices(6, trigger_kind="event", trigger="Cluster Event (Error)")
    assert digest(mixed, cluster_name="demo", runbook_base_url=BASE)["blocks"][0]["text"]["text"].endswith(
        "demo: 12 findings opened"
    )


def test_a_single_alert_names_its_trigger_and_its_sections_one_line_what_to_do():
    from hyperpod_debugger.domain.sections import WHAT_TO_DO

    n = notice(trigger_kind="event", trigger="Cluster Event (Error) for " + NODE, trigger_node=NODE)
    msg = slack_message(n, runbook_base_url=BASE)
    assert block_kit_problems(msg) == []
    texts = mrkdwn_texts(msg)
    assert "*Found by*\nCluster Event (Error) for " + NODE in texts
    assert any(f"*What to do:* {escape(WHAT_TO_DO['G.1'])}" in t for t in texts)
    _, body = email_text(n, runbook_base_url=BASE)
    assert f"Found by: Cluster Event (Error) for {NODE}" in body and f"What to do: {WHAT_TO_DO['G.1']}" in body
    resolved = slack_message(notice("RESOLVED", **SWEEP_TRIGGER), runbook_base_url=BASE)
    assert "Found fixed by the scheduled sweep." in all_text(resolved)


def test_every_runbook_section_has_a_one_line_what_to_do():
    from hyperpod_debugger.domain.sections import SECTIONS, WHAT_TO_DO, what_to_do

    assert set(WHAT_TO_DO) == set(SECTIONS)
    assert all("\n" not in line and len(line) <= 120 for line in WHAT_TO_DO.values())
    assert what_to_do("G.1.a") == WHAT_TO_DO["G.1.a"] and what_to_do(None) is None
