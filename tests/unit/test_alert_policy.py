"""The alert policy and the incident messages (issue 27 items 3 and 5), pure.

Each rule of the policy has a test that would fail if the rule went; the messages are checked as Slack's own
Block Kit models (slack_sdk) and SNS's subject rules read them, and for what a person needs at 3 a.m.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from slack_sdk.models.blocks import Block

from hyperpod_debugger.domain.checking import make_finding
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.lifecycle.incidents import (
    IncidentState,
    StoredIncident,
    desired_incidents,
    plan_incidents,
)
from hyperpod_debugger.notify import alerts
from hyperpod_debugger.notify.policy import AlertPolicy, ChannelPolicy, compose, daily, select
from hyperpod_debugger.remediation import ladder

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123"
NAME = "train-prod"
NOW = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
CHANNELS = ("sns", "slack", "chatbot")


def _node(i: int) -> str:
    return f"i-0{i:016x}"


def _f(check: str, message: str, *, node: str | None = None, priority=Priority.P1, tag=Tag.FAIL, **kw) -> Finding:
    ident = {"cluster_arn": ARN, "cluster_name": NAME, "instance_id": node, "instance_group": "gpu" if node else None}
    return make_finding(ident, check, tag, message, priority=priority, section=kw.pop("section", "G.1"), **kw)


def _laddered(findings: list[Finding]) -> list[Finding]:
    nodes = {
        f.instance_id: ClusterNode(f.instance_id, "gpu", "ml.p5.48xlarge", "Running", "", NOW)
        for f in findings
        if f.instance_id
    }
    return ladder.apply(findings, ladder.Target(ARN, NAME, "us-west-2", "EKS", None), nodes)


def _xid(node: str) -> Finding:
    return _f(
        "probe.xid",
        "Xid 79 (GPU has fallen off the bus) on GPU 0",
        node=node,
        priority=Priority.P0,
        node_action="replace",
        evidence=["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."],
    )


def _stored(findings: list[Finding], *, baseline: bool = False, at: datetime = NOW) -> list[StoredIncident]:
    pairs = [(f"fp{i:03d}", f) for i, f in enumerate(_laddered(findings))]
    plan = plan_incidents({}, desired_incidents(ARN, pairs), at, cluster_arn=ARN, baseline=baseline)
    return [c.item for c in plan.changes]


def _compose(pending: list[StoredIncident], policy: AlertPolicy | None = None):
    return compose(pending, policy or AlertPolicy(), CHANNELS, cluster_arn=ARN, cluster_name=NAME, region="us-west-2")


def assert_block_kit(payload: dict) -> None:
    assert payload.get("text")
    assert len(payload["blocks"]) <= 50
    for block in payload["blocks"]:
        parsed = Block.parse(block)
        assert parsed is not None, block
        parsed.validate_json()


# --------------------------------------------------------------------------- the policy


def test_one_message_per_channel_however_many_incidents_one_flush_tells():
    pending = _stored([_xid(_node(i)) for i in range(50)])
    batches = _compose(pending)
    assert sorted(b.channel for b in batches) == sorted(CHANNELS)
    assert all(b.kind == "group" and len(b.items) == 50 for b in batches)


def test_p2_is_not_paged_on_a_p1_channel_and_a_p0_only_channel_hears_only_p0():
    pending = _stored(
        [
            _xid(_node(1)),
            _f("vpc.subnet_ips", "Subnet s-1 has only 11 free IPs", priority=Priority.P2, tag=Tag.WARN, section="B.1"),
        ]
    )
    policy = AlertPolicy({"slack": ChannelPolicy(Priority.P0), "sns": ChannelPolicy(Priority.P1)})
    by = {b.channel: b for b in _compose(pending, policy)}
    assert [i.incident.incident.verdict for i in by["slack"].items] == ["replace"]
    assert by["sns"].below_minimum == 1 and len(by["sns"].items) == 1
    only_p2 = [s for s in pending if s.incident.priority is Priority.P2]
    assert _compose(only_p2, policy) == []


def test_a_resolution_is_told_where_the_opening_was_and_a_flap_nowhere():
    [opened] = _stored([_xid(_node(1))])
    told = replace(opened, pending={})
    resolved = plan_incidents({told.key: told}, {}, NOW + timedelta(hours=1), cluster_arn=ARN).changes[0].item
    assert select(resolved, ChannelPolicy(Priority.P1)) == "resolved"
    assert select(resolved, ChannelPolicy(Priority.P0)) == "resolved"
    # opened and cleared before any message: told nowhere
    flap = plan_incidents({opened.key: opened}, {}, NOW + timedelta(seconds=5), cluster_arn=ARN).changes[0].item
    assert set(flap.pending.values()) == {"OPENED", "RESOLVED"}
    assert all(select(flap, ChannelPolicy(p)) is None for p in Priority)
    [batch, *_] = _compose([flap]) or [None]
    assert batch is None


def test_a_told_incident_that_resolves_reopens_and_resolves_between_two_messages_is_told_resolved():
    [opened] = _stored([_xid(_node(1))])
    told = replace(opened, pending={})  # its opening reached people
    desired = desired_incidents(ARN, [(f"fp{i:03d}", f) for i, f in enumerate(_laddered([_xid(_node(1))]))])
    at = NOW + timedelta(minutes=10)
    resolved = plan_incidents({told.key: told}, {}, at, cluster_arn=ARN).changes[0].item
    again = plan_incidents({told.key: resolved}, desired, at + timedelta(minutes=1), cluster_arn=ARN).changes[0].item
    # reopened: the untold resolution is kept ahead of the new opening, and the channel hears it open again
    assert sorted(again.pending.values()) == ["OPENED", "RESOLVED"]
    assert select(again, ChannelPolicy(Priority.P1)) == "opened"
    last = plan_incidents({told.key: again}, {}, at + timedelta(minutes=2), cluster_arn=ARN).changes[0].item
    # resolved again before the next message: not a flap (people heard it open), so it is told resolved
    assert select(last, ChannelPolicy(Priority.P1)) == "resolved"
    [batch, *_] = _compose([last])
    assert [it.told for it in batch.items] == ["resolved"] and batch.flapped == 0


def test_a_p2_incident_resolving_is_not_paged_where_it_never_was():
    [opened] = _stored(
        [_f("vpc.subnet_ips", "Subnet s-1 has only 11 free IPs", priority=Priority.P2, tag=Tag.WARN, section="B.1")]
    )
    told = replace(opened, pending={})
    resolved = plan_incidents({told.key: told}, {}, NOW + timedelta(hours=1), cluster_arn=ARN).changes[0].item
    assert select(resolved, ChannelPolicy(Priority.P1)) is None
    assert select(resolved, ChannelPolicy(Priority.P2)) == "resolved"


def test_a_held_repair_is_not_paged():
    pairs = [("fp", _xid(_node(1)))]
    desired = desired_incidents(ARN, pairs, recovering={_node(1): "node status PendingReplacement"})
    [held] = [c.item for c in plan_incidents({}, desired, NOW, cluster_arn=ARN).changes]
    assert _compose([held]) == []


def test_the_first_triage_is_one_baseline_message_listing_every_problem_p2_included():
    config = [
        _f("network.efa_sg", "Security group sg-1 lacks its self rule", priority=Priority.P0, section="A"),
        _f("vpc.dns", "enableDnsHostnames is disabled on vpc-1", section="B.2"),
        _f("vpc.subnet_ips", "Subnet s-1 has only 11 free IPs", priority=Priority.P2, tag=Tag.WARN, section="B.1"),
    ]
    batches = _compose(_stored(config, baseline=True))
    assert {b.kind for b in batches} == {"baseline"} and len(batches) == len(CHANNELS)
    slack = next(b for b in batches if b.channel == "slack")
    assert len(slack.items) == 3 and slack.below_minimum == 1
    assert alerts.group_title(slack) == f"{NAME}: monitoring started, 3 open problems"


def test_the_daily_summary_lists_what_is_open_and_says_what_was_never_paged():
    incidents = _stored(
        [
            _xid(_node(1)),
            _f("vpc.subnet_ips", "Subnet s-1 has only 11 free IPs", priority=Priority.P2, tag=Tag.WARN, section="B.1"),
        ]
    )
    batches = daily(
        incidents, AlertPolicy(), CHANNELS, cluster_arn=ARN, cluster_name=NAME, region="us-west-2", day="2026-12-03"
    )
    assert {b.kind for b in batches} == {"daily"} and all(len(b.items) == 2 and b.below_minimum == 1 for b in batches)
    closed = [replace(s, state=IncidentState.RESOLVED) for s in incidents]
    assert daily(closed, AlertPolicy(), CHANNELS, cluster_arn=ARN, cluster_name=NAME, region="us-west-2", day="d") == []


def test_a_policy_setting_that_is_not_a_priority_is_refused_by_name():
    with pytest.raises(ValueError, match="slack must be P0, P1 or P2"):
        AlertPolicy.from_settings({"slack": "P3"})


# --------------------------------------------------------------------------- the messages


def _single(findings: list[Finding], channel: str = "slack"):
    batches = _compose(_stored(findings))
    return next(b for b in batches if b.channel == channel)


def test_a_replace_incident_reads_whole_at_3am():
    node = _node(7)
    batch = _single([_xid(node), _f("probe.gpu_count", "7 of 8 GPUs visible", node=node, priority=Priority.P0)])
    payload = alerts.slack(batch, runbook_base_url=None)
    assert_block_kit(payload)
    header = payload["blocks"][0]["text"]["text"]
    # cluster, node, verdict and severity in the header; the why is not repeated there
    assert NAME in header and node in header and "REPLACE" in header and "P0" in header and "Xid" not in header
    text = "\n".join(b.get("text", {}).get("text", "") for b in payload["blocks"] if b["type"] == "section")
    assert "Suggested command (run this yourself)" in text and "Blast radius" in text
    assert "batch-replace-cluster-nodes" in text and "root and secondary volumes" in text
    # the drain comes before the replace, and the evidence after the action
    assert text.index("cordon") < text.index("batch-replace-cluster-nodes") < text.index("Evidence (verbatim)")
    subject, body = alerts.email(replace(batch, channel="sns"), runbook_base_url=None)
    assert len(subject) < 100 and "\n" not in subject and subject.startswith("[HyperPod P0] ")
    assert node in subject and "REPLACE" in subject
    assert "blast radius:" in body and "precondition:" in body and "IaC:" in body


def test_without_a_base_url_the_runbook_is_the_packaged_section_and_the_command_that_prints_it():
    batch = _single([_xid(_node(1))])
    text = str(alerts.slack(batch, runbook_base_url=None))
    assert "references/node-diagnostics-detail.md § G.1" in text and "hyperpod-debugger runbook G.1" in text
    linked = str(alerts.slack(batch, runbook_base_url="https://wiki.example.com/runbook/"))
    assert "<https://wiki.example.com/runbook/references/node-diagnostics-detail.md#" in linked


def test_a_long_title_is_cut_at_a_word_and_the_subject_keeps_only_whole_clauses_of_its_why():
    long = "Xid 79 (GPU has fallen off the bus) " + "while the collective waited on the peer " * 20
    batch = _single([_f("probe.xid", long, node=_node(2), priority=Priority.P0, node_action="replace")])
    header = alerts.slack(batch, runbook_base_url=None)["blocks"][0]["text"]["text"]
    assert len(header) <= 150 and not header.endswith(" …")
    subject = alerts.subject(replace(batch, channel="sns"))
    # the head is intact and the why is its first whole clause: nothing ends mid-thought
    assert subject == f"[HyperPod P0] {NAME}: REPLACE {_node(2)} (gpu): Xid 79"
    # a why with no clause that fits is left out rather than cut
    blob = "x" * 300
    batch = _single([_f("probe.xid", blob, node=_node(2), priority=Priority.P0, node_action="replace")])
    assert alerts.subject(replace(batch, channel="sns")) == f"[HyperPod P0] {NAME}: REPLACE {_node(2)} (gpu)"
    # and a short why is whole
    batch = _single([_f("probe.xid", "Xid 79 on GPU 0", node=_node(2), priority=Priority.P0, node_action="replace")])
    assert alerts.subject(replace(batch, channel="sns")).endswith(": Xid 79 on GPU 0")


def test_a_group_message_lists_ten_counts_the_rest_and_names_a_shared_check():
    batch = next(b for b in _compose(_stored([_xid(_node(i)) for i in range(40)])) if b.channel == "slack")
    payload = alerts.slack(batch, runbook_base_url=None)
    assert_block_kit(payload)
    text = str(payload)
    assert "40 nodes need action" in payload["blocks"][0]["text"]["text"]
    assert "40 nodes fail `probe.xid`" in text and "… and 30 more." in text
    assert "hyperpod-debugger findings list --cluster train-prod --region us-west-2" in text
    # each listed mutating command still says it is a suggestion, with its blast radius
    assert text.count("Suggested command (run this yourself)") == 10 and text.count("Blast radius") == 10
    subject, _ = alerts.email(replace(batch, channel="sns"), runbook_base_url=None)
    assert subject == f"[HyperPod P0] {NAME}: 40 nodes need action"


def test_text_from_the_cluster_cannot_mention_link_or_close_a_code_block():
    hostile = "Xid 79 <!channel> <https://evil.example|click> ``` then *bold*"
    batch = _single(
        [
            _f(
                "probe.xid",
                hostile,
                node=_node(3),
                priority=Priority.P0,
                node_action="replace",
                evidence=["line ``` <@U123> https://evil.example"],
            )
        ]
    )
    payload = alerts.slack(batch, runbook_base_url=None)
    assert_block_kit(payload)
    text = str(payload)
    assert "<!channel>" not in text and "<@U123>" not in text and "<https://evil" not in text
    for block in payload["blocks"]:
        body = block.get("text", {}).get("text", "")
        assert body.count("```") % 2 == 0, body
