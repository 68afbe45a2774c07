"""Amazon Q Developer (chat applications) custom notifications: every rendering is valid against the schema
written from AWS's documentation, names what the Slack header names, carries a mutating command's blast
radius, keeps hostile cluster text inert and stays within its limits."""

from __future__ import annotations

import copy
import json
import pathlib
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from hyperpod_debugger.domain.commands import NODE_ACTION_NOTE, mutating, read_only
from hyperpod_debugger.domain.model import Priority, SuggestedCommand
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.lifecycle.incidents import (
    Explained,
    Incident,
    IncidentState,
    StoredIncident,
    incident_id,
)
from hyperpod_debugger.notify import chatbot as cb
from hyperpod_debugger.notify.alerts import SHARED_ADVICE, slack
from hyperpod_debugger.notify.chatbot import chatbot
from hyperpod_debugger.notify.messages import MUTATING_HEADING, READ_ONLY_HEADING
from hyperpod_debugger.notify.policy import Batch, Item
from hyperpod_debugger.remediation.ladder import NodeFacts, Target, _drain, _replace

SCHEMA = json.loads(
    (pathlib.Path(__file__).parents[2] / "references" / "chatbot-custom-notification.schema.json").read_text()
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

ARN = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
CLUSTER = "demo"
REGION = "us-east-1"
BASE = "https://github.com/example/hyperpod-runbook/blob/main"
NODE = "i-0123456789abcdef0"
OPENED = "2026-12-03T03:00:00Z"
RESOLVED_AT = "2026-12-03T04:30:00Z"

TARGET = Target(ARN, CLUSTER, REGION, "Slurm", None)
SLURM_NODE = ClusterNode(
    instance_id=NODE,
    group="gpu-workers",
    instance_type="ml.p5.48xlarge",
    status="Running",
    message="",
    launch_time=None,
    hostname="ip-10-1-2-3.ec2.internal",
)


def _built(command: SuggestedCommand | None) -> SuggestedCommand:
    assert command is not None and command.mutates
    return command


DRAIN = _built(_drain(TARGET, NodeFacts(SLURM_NODE, None, False), NODE, "Xid 79"))
REPLACE = _built(_replace(TARGET, [NODE]))

HOSTILE = (
    "pwn `code` ``` <!channel> <@U024BE7LH> @here [x](https://evil.example/p) \x1b[31mred\x1b[0m "
    "\u202eevil\u202c zero\u200bwidth <https://evil.example|click> &amp; "
)


# --------------------------------------------------------------------------- incidents as the store keeps them


def stored(incident: Incident, *, state: IncidentState = IncidentState.OPEN, **overrides: Any) -> StoredIncident:
    base: dict[str, Any] = dict(
        incident=incident,
        state=state,
        incident_id=incident_id(incident.cluster_arn, incident.key, OPENED),
        opened_at=OPENED,
        updated_at=OPENED,
        resolved_at=RESOLVED_AT if state is IncidentState.RESOLVED else None,
        peak_priority=incident.priority,
        paged=True,
        trigger="the scheduled sweep",
        pending={f"{OPENED}#OPENED": "OPENED"},
    )
    base.update(overrides)
    return StoredIncident(**base)


def node_incident(node: str = NODE, **overrides: Any) -> Incident:
    base: dict[str, Any] = dict(
        key=f"NODE#{node}",
        kind="node",
        cluster_arn=ARN,
        cluster_name=CLUSTER,
        priority=Priority.P0,
        verdict="replace",
        title=f"GPU fell off the bus (Xid 79) on {node} after a reboot",
        check="probe.gpu.xid",
        section="G.1",
        instance_id=node,
        instance_group="gpu-workers",
        instance_type="ml.p5.48xlarge",
        likely_cause="The GPU stopped answering on PCIe and the fault survived a reboot.",
        next_step="Drain the node, then replace it.",
        next_command=DRAIN.model_dump(mode="json"),
        then_command=REPLACE.model_dump(mode="json"),
        occupancy="job 4242 (train-llm, user alice) on 8 GPUs",
        checks=("probe.gpu.xid",),
        evidence=("NVRM: Xid (PCI:0000:53:00): 79, pid=1234, GPU has fallen off the bus.", "nvidia-smi: No devices"),
    )
    base.update(overrides)
    return Incident(**base)


SG_READ = read_only(
    ["aws", "ec2", "describe-security-groups", "--group-ids", "sg-0abc", "--region", REGION],
    "Read the EFA security group's rules",
)
SG_FIX = mutating(
    [
        "aws",
        "ec2",
        "authorize-security-group-ingress",
        "--group-id",
        "sg-0abc",
        "--protocol",
        "-1",
        "--source-group",
        "sg-0abc",
        "--region",
        REGION,
    ],
    "Allow all traffic from the EFA security group to itself",
    blast_radius="Every instance in sg-0abc accepts all traffic from members of sg-0abc.",
    changes_configuration=True,
    preconditions=["The group is the one the cluster's EFA interfaces use."],
    resource="sg-0abc",
)
CAUSE_NODES = ("i-0aaa00000000000a1", "i-0aaa00000000000a2", "i-0aaa00000000000a3")


def cause_incident(**overrides: Any) -> Incident:
    base: dict[str, Any] = dict(
        key="CAUSE#fp-efa-sg",
        kind="cause",
        cluster_arn=ARN,
        cluster_name=CLUSTER,
        priority=Priority.P1,
        verdict="cause",
        title="The EFA security group sg-0abc does not allow all traffic to itself",
        check="cluster.efa_security_group",
        section="A",
        next_step="Fix the security group through its template; the nodes recover without a reboot.",
        next_command=SG_READ.model_dump(mode="json"),
        then_command=SG_FIX.model_dump(mode="json"),
        checks=("cluster.efa_security_group", "probe.efa.loopback"),
        evidence=("sg-0abc inbound: tcp 443 from 10.0.0.0/16",),
        explains=tuple(Explained("probe.efa.loopback", "EFA loopback test failed", n) for n in CAUSE_NODES),
        nodes=CAUSE_NODES,
    )
    base.update(overrides)
    return Incident(**base)


COVERAGE_NODES = tuple(f"i-0ccc{n:013d}" for n in range(12))


def coverage_incident(**overrides: Any) -> Incident:
    base: dict[str, Any] = dict(
        key="COVERAGE",
        kind="coverage",
        cluster_arn=ARN,
        cluster_name=CLUSTER,
        priority=Priority.P1,
        verdict="unknown",
        title="12 node(s) could not be fully checked: the SSM agent of <node> is not online",
        check="coverage",
        section="K",
        nodes=COVERAGE_NODES,
        reasons=(("the SSM agent of <node> is not online", 10), ("the probe timed out on <node>", 2)),
        next_step="Restore what the monitor could not read (access, the SSM agent, a timeout).",
        next_command=read_only(
            ["aws", "ssm", "describe-instance-information", "--region", REGION], "List the SSM agents"
        ).model_dump(mode="json"),
        evidence=("SSM agent offline",),
    )
    base.update(overrides)
    return Incident(**base)


def batch(*items: Item, kind: str = "incident", **overrides: Any) -> Batch:
    base: dict[str, Any] = dict(
        channel="chatbot",
        kind=kind,
        cluster_arn=ARN,
        cluster_name=CLUSTER,
        region=REGION,
        items=items,
        entries=tuple(f"{it.incident.key}@{k}" for it in items for k in it.incident.pending),
    )
    base.update(overrides)
    return Batch(**base)


def replace_batch() -> Batch:
    return batch(Item("opened", stored(node_incident())))


def group_of_50() -> Batch:
    items = []
    for n in range(50):
        node = f"i-0bbb{n:013d}"
        facts = NodeFacts(replace(SLURM_NODE, instance_id=node, hostname=f"ip-10-1-3-{n}.ec2.internal"), None, False)
        drain = _built(_drain(TARGET, facts, node, "Xid 79"))
        verdict = "replace" if n % 2 else "investigate"
        inc = node_incident(
            node,
            verdict=verdict,
            priority=Priority.P0 if n % 2 else Priority.P1,
            next_command=drain.model_dump(mode="json"),
            then_command=_replace(TARGET, [node]).model_dump(mode="json"),
        )
        items.append(Item("opened", stored(inc)))
    return batch(*items, kind="group")


def hostile_batch() -> Batch:
    inc = node_incident(
        title=(HOSTILE + "lorem ipsum dolor sit amet ") * 40,  # over 5,000 characters
        likely_cause=HOSTILE,
        occupancy=HOSTILE,
        evidence=tuple(HOSTILE + f"line {n}" for n in range(30)),
    )
    assert len(inc.title) > 5000
    return batch(Item("opened", stored(inc)))


def all_batches() -> dict[str, Batch]:
    resolved = stored(node_incident(), state=IncidentState.RESOLVED, pending={f"{RESOLVED_AT}#RESOLVED": "RESOLVED"})
    escalated = stored(
        node_incident(verdict="reboot", priority=Priority.P1, then_command=None, next_command=DRAIN.model_dump()),
        reason="HyperPod has been repairing the node for 75 min",
        pending={"2026-12-03T04:15:00Z#ESCALATED": "ESCALATED"},
    )
    hostile_cause = cause_incident(
        explains=tuple(Explained("probe.efa.loopback", HOSTILE, f"{HOSTILE}{n}") for n in range(12)),
    )
    hostile_cov = coverage_incident(reasons=((HOSTILE, 3),), nodes=(HOSTILE,) * 40)
    return {
        "replace": replace_batch(),
        "cause": batch(Item("opened", stored(cause_incident()))),
        "coverage": batch(Item("opened", stored(coverage_incident()))),
        "resolved": batch(Item("resolved", resolved)),
        "escalated": batch(Item("escalated", escalated)),
        "group50": group_of_50(),
        "baseline": batch(
            Item("opened", stored(node_incident())),
            Item("opened", stored(cause_incident())),
            Item("opened", stored(coverage_incident())),
            kind="baseline",
            below_minimum=1,
        ),
        "daily": batch(
            Item("opened", stored(node_incident())),
            Item("opened", stored(coverage_incident(priority=Priority.P2))),
            kind="daily",
            below_minimum=1,
            entries=("daily#2026-12-03",),
        ),
        "mixed": batch(Item("opened", stored(cause_incident())), Item("resolved", resolved), kind="group"),
        "hostile": hostile_batch(),
        "hostile-cause": batch(Item("opened", stored(hostile_cause))),
        "hostile-coverage": batch(Item("opened", stored(hostile_cov))),
        "hostile-group": batch(*hostile_batch().items, *group_of_50().items[:5], kind="group"),
    }


RENDERED = [
    pytest.param(name, base, id=f"{name}-{'url' if base else 'packaged'}")
    for name in all_batches()
    for base in (BASE, None)
]


def render(name: str, base: str | None) -> dict[str, Any]:
    return chatbot(all_batches()[name], runbook_base_url=base)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def outside_code(text: str) -> str:
    """The text with code blocks and inline code spans removed (what a client renders as markdown)."""
    text = re.sub(r"^```\n.*?\n```$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


# --------------------------------------------------------------------------- the schema is a real check


def test_the_schema_is_a_valid_draft_2020_12_schema_that_names_the_documentation() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "docs.aws.amazon.com/chatbot/latest/adminguide/custom-notifs.html" in SCHEMA["$comment"]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda m: m.pop("version"),
        lambda m: m.update(version="2.0"),
        lambda m: m.update(source="aws.sagemaker"),
        lambda m: m["content"].pop("description"),
        lambda m: m["content"].update(textType="markdown"),
        lambda m: m["content"].update(nextSteps="run it"),
        lambda m: m["metadata"].update(additionalContext={"n": 3}),
        lambda m: m.update(detail={"x": 1}),
    ],
    ids=["no-version", "version", "source", "no-description", "textType", "nextSteps", "context", "extra"],
)
def test_the_schema_rejects_what_the_documentation_does_not_allow(breakage: Any) -> None:
    message = copy.deepcopy(chatbot(replace_batch(), runbook_base_url=BASE))
    assert VALIDATOR.is_valid(message)
    breakage(message)
    assert not VALIDATOR.is_valid(message)


@pytest.mark.parametrize(("name", "base"), RENDERED)
def test_every_rendering_is_valid_against_the_documented_format(name: str, base: str | None) -> None:
    message = render(name, base)
    errors = sorted(VALIDATOR.iter_errors(message), key=str)
    assert not errors, errors
    assert message["content"]["textType"] == "client-markdown"
    assert message["metadata"]["eventType"] == cb.EVENT_TYPE


# --------------------------------------------------------------------------- limits

#: A next step is a line or two in a chat client (AWS states no limit; the renderer builds none near it).
STEP_CHARS = 600
#: Far under SNS's 262,144-byte message: the description's cap keeps a message small.
MESSAGE_BYTES = 200_000


@pytest.mark.parametrize(("name", "base"), RENDERED)
def test_every_limit_holds(name: str, base: str | None) -> None:
    message = render(name, base)
    content, metadata = message["content"], message["metadata"]
    assert 0 < len(content["title"]) <= cb.MAX_TITLE
    assert 0 < len(content["description"]) <= cb.MAX_DESCRIPTION
    assert len(content.get("nextSteps", [])) <= cb.MAX_STEPS
    assert all(0 < len(s) <= STEP_CHARS for s in content.get("nextSteps", []))
    assert 0 < len(content["keywords"]) <= cb.MAX_KEYWORDS
    assert all(0 < len(k) <= cb.MAX_KEYWORD for k in content["keywords"])
    assert 0 < len(metadata["summary"]) <= cb.MAX_SUMMARY
    assert 0 < len(metadata["threadId"]) <= cb.MAX_THREAD_ID
    assert 0 < len(metadata["relatedResources"]) <= cb.MAX_RESOURCES
    assert all(len(v) <= cb.MAX_CONTEXT_VALUE for v in metadata["additionalContext"].values())
    assert len(json.dumps(message, ensure_ascii=False).encode()) <= MESSAGE_BYTES
    for text in strings(message):
        assert "\n" not in text or text is content["description"] or text in content.get("nextSteps", [])


@pytest.mark.parametrize(("name", "base"), RENDERED)
def test_no_code_fence_or_span_is_left_open(name: str, base: str | None) -> None:
    message = render(name, base)
    description = message["content"]["description"]
    lines = description.split("\n")
    assert sum(1 for line in lines if line == "```") % 2 == 0
    # outside the fences, every line has whole inline code spans and no stray fence
    fenced = False
    for line in lines:
        if line == "```":
            fenced = not fenced
            continue
        if not fenced:
            assert "```" not in line, line
            assert line.count("`") % 2 == 0, line
        else:
            assert "`" not in line, line
    for step in message["content"].get("nextSteps", []):
        assert step.count("`") % 2 == 0 and "```" not in step


def test_a_long_title_is_cut_at_a_word_with_a_visible_ellipsis() -> None:
    words = " ".join(f"word{n:04d}" for n in range(1200))  # 10,799 characters of whole words
    message = chatbot(batch(Item("opened", stored(node_incident(title=words)))), runbook_base_url=BASE)
    why = next(line for line in message["content"]["description"].split("\n") if line.startswith("*Why:* "))
    shown = why.removeprefix("*Why:* ")
    assert shown.endswith("…") and len(shown) < len(words)
    kept = shown.removesuffix("…")
    assert words.startswith(kept) and words[len(kept)] == " "  # the cut falls between two words
    summary = message["metadata"]["summary"]
    assert summary.endswith("…") and re.search(r"word\d{4}…$", summary)


def test_a_description_over_every_budget_still_fits_and_keeps_what_matters() -> None:
    huge = "x" * 50
    command = {**REPLACE.model_dump(mode="json"), "command": " ".join([huge] * 200)}
    inc = node_incident(
        title=" ".join([huge] * 200),
        likely_cause=" ".join([huge] * 200),
        hyperpod=" ".join([huge] * 200),
        next_step=" ".join([huge] * 200),
        next_command={**command, "blast_radius": " ".join([huge] * 200)},
        then_command=command,
        occupancy=" ".join([huge] * 200),
        evidence=tuple(" ".join([huge] * 200) for _ in range(50)),
    )
    message = chatbot(batch(Item("escalated", stored(inc, reason=" ".join([huge] * 200)))), runbook_base_url=BASE)
    description = message["content"]["description"]
    assert len(description) <= cb.MAX_DESCRIPTION
    assert description.startswith("*Why:* ")
    assert MUTATING_HEADING in description and "*Blast radius:* " in description
    assert VALIDATOR.is_valid(message)


# --------------------------------------------------------------------------- what it says


def test_the_title_names_the_cluster_the_node_and_the_verdict_as_slack_does() -> None:
    b = replace_batch()
    message = chatbot(b, runbook_base_url=BASE)
    title = message["content"]["title"]
    assert CLUSTER in title and NODE in title and "REPLACE" in title and "P0" in title
    assert title == slack(b, runbook_base_url=BASE)["blocks"][0]["text"]["text"]
    assert message["content"]["keywords"] == ["P0", "REPLACE", CLUSTER]


def test_a_mutating_command_carries_its_blast_radius_and_iac_note() -> None:
    message = chatbot(replace_batch(), runbook_base_url=BASE)
    description = message["content"]["description"]
    for command in (DRAIN, REPLACE):
        block = description.split(f"```\n{command.command}\n```\n", 1)
        assert len(block) == 2, command.command
        before, after = block
        assert before.rstrip("\n").rsplit("\n", 1)[-1].startswith(f"*{MUTATING_HEADING}:* ")
        radius = after.split("\n", 1)[0]
        assert radius.startswith("*Blast radius:* " + (command.blast_radius or "-").split()[0]) and len(radius) > 40
    assert "permanently destroys the root and secondary volumes" in description
    # the drain and the replacement share one IaC note: it is given once, after the first of them
    assert description.count(f"*IaC:* {NODE_ACTION_NOTE}") == 1
    assert description.index(f"*IaC:* {NODE_ACTION_NOTE}") < description.index(REPLACE.command)
    # each command once, in the description beside its blast radius: no list under it repeats them
    assert description.count(DRAIN.command) == 1 and description.count(REPLACE.command) == 1
    assert "nextSteps" not in message["content"]


def test_the_group_line_of_a_mutating_command_carries_its_blast_radius() -> None:
    description = chatbot(group_of_50(), runbook_base_url=BASE)["content"]["description"]
    lines = [line for line in description.split("\n") if f"_{MUTATING_HEADING}:_" in line]
    assert lines and all(
        re.search(r" · _blast radius:_ Only ip-10-1-3-\d+: it takes no new jobs", line) for line in lines
    )
    reads = [line for line in description.split("\n") if f"_{READ_ONLY_HEADING}:_" in line]
    assert all("blast radius" not in line for line in reads)


def test_description_says_why_the_cause_what_hyperpod_does_then_the_command_then_the_runbook() -> None:
    inc = node_incident(hyperpod="HyperPod is not repairing this node.")
    description = chatbot(batch(Item("opened", stored(inc))), runbook_base_url=BASE)["content"]["description"]
    order = ["*Why:* ", "*Likely cause:* ", "*HyperPod:* ", "*Next step:* ", f"*{MUTATING_HEADING}:* ", "*Runbook:* "]
    at = [description.index(mark) for mark in order]
    assert at == sorted(at)
    assert description.index("*Evidence:*") > at[-1]
    assert description.rstrip().endswith("it never runs these commands._")


def test_nothing_is_said_twice_in_a_description() -> None:
    assert render("resolved", BASE)["content"]["description"].count("2026-12-03 03:00 UTC") == 1
    for name in ("replace", "cause", "coverage", "resolved", "escalated", "group50", "baseline", "daily", "mixed"):
        message = render(name, BASE)
        lines = [line for line in message["content"]["description"].split("\n") if line.strip("`")]
        assert len(lines) == len(set(lines)), name
        assert message["content"]["title"] not in message["content"]["description"]


def test_the_runbook_is_a_link_with_a_base_url_and_the_packaged_pointer_without() -> None:
    with_url = chatbot(replace_batch(), runbook_base_url=BASE)["content"]
    assert f"{BASE}/references/node-diagnostics-detail.md#" in with_url["description"]
    without = chatbot(replace_batch(), runbook_base_url=None)["content"]
    assert "references/node-diagnostics-detail.md § G.1" in without["description"]
    assert "hyperpod-debugger runbook G.1" in without["description"]
    assert "https://" not in without["description"]
    assert without["description"].count("references/node-diagnostics-detail.md § G.1") == 1


def test_a_runbook_base_url_with_credentials_or_odd_characters_stays_harmless() -> None:
    base = "https://user:s3cret@runbooks.example/a b<c>|d"
    message = chatbot(replace_batch(), runbook_base_url=base)
    text = json.dumps(message)
    assert "s3cret" not in text and "user:" not in text
    assert "<c>" not in text and "|d" not in text


def test_the_cause_incident_lists_what_it_explains_and_the_nodes_are_related_resources() -> None:
    message = render("cause", BASE)
    description = message["content"]["description"]
    assert (
        "CLUSTER PROBLEM" in message["content"]["title"] and "cluster.efa_security_group" in message["content"]["title"]
    )
    explains = next(line for line in description.split("\n") if line.startswith("*Explains:* "))
    assert all(f"{n}: probe.efa.loopback" in explains for n in CAUSE_NODES)
    assert message["metadata"]["relatedResources"] == [ARN, *CAUSE_NODES]
    assert "*IaC:* If this resource is managed as code" in description  # the security group fix drifts


def test_the_coverage_incident_says_why_not_and_shows_no_evidence_or_verdict_command() -> None:
    message = render("coverage", BASE)
    description = message["content"]["description"]
    assert "COULD NOT CHECK" in message["content"]["title"] and "monitor coverage" in message["content"]["title"]
    assert "*Why not:* the SSM agent of &lt;node&gt; is not online (10); the probe timed out on &lt;node&gt; (2)" in (
        description
    )
    assert "*Evidence:*" not in description and MUTATING_HEADING not in description
    assert all(n in description for n in COVERAGE_NODES)


def test_a_resolution_threads_under_its_incident_and_asks_nothing() -> None:
    opened = chatbot(replace_batch(), runbook_base_url=BASE)
    resolved = render("resolved", BASE)
    assert resolved["metadata"]["threadId"] == opened["metadata"]["threadId"]
    assert resolved["metadata"]["threadId"] == incident_id(ARN, f"NODE#{NODE}", OPENED)
    assert resolved["content"]["title"].startswith("✅ RESOLVED " + NODE)
    assert "(was P0 REPLACE)" in resolved["content"]["title"]
    assert "nextSteps" not in resolved["content"]
    assert "Open from 2026-12-03 03:00 UTC to 2026-12-03 04:30 UTC." in resolved["content"]["description"]
    assert resolved["content"]["keywords"][0] == "RESOLVED"
    assert resolved["id"] != opened["id"]


def test_an_escalation_says_why() -> None:
    message = render("escalated", BASE)
    assert "ESCALATED to REBOOT" in message["content"]["title"]
    assert "*Escalated:* HyperPod has been repairing the node for 75 min" in message["content"]["description"]


def test_a_group_of_50_lists_what_fits_up_to_ten_then_counts_the_rest_with_the_command_that_lists_them() -> None:
    message = render("group50", BASE)
    content = message["content"]
    description = content["description"]
    items = [line for line in description.split("\n") if line.startswith("• ")]
    # as many as fit whole (each with its command and blast radius), never more than SHOWN
    assert 6 <= len(items) <= cb.SHOWN
    assert [line.split("`")[1] for line in items] == [f"i-0bbb{n:013d}" for n in range(len(items))]
    listing = f"hyperpod-debugger findings list --cluster {CLUSTER} --region {REGION}"
    assert f"… and {50 - len(items)} more: `{listing}`" in description
    assert description.count("_Likely cause:_") == 1  # the same likely cause is said once
    assert f"*50 nodes fail `probe.gpu.xid`.* {SHARED_ADVICE}" in description
    assert "*Verdicts:* INVESTIGATE 25 · REPLACE 25" in description
    assert content["title"] == f"🔴 {CLUSTER}: 50 nodes need action"
    assert message["metadata"]["threadId"] == ARN
    assert content["nextSteps"][0] == f"Full detail: `hyperpod-debugger triage --cluster {CLUSTER} --region {REGION}`"
    assert message["metadata"]["relatedResources"] == [ARN, *(f"i-0bbb{n:013d}" for n in range(len(items)))]


def test_baseline_and_daily_summaries_read_as_summaries() -> None:
    baseline = render("baseline", BASE)
    assert baseline["content"]["title"].endswith(f"{CLUSTER}: monitoring started, 3 open problems")
    assert "1 lower-priority problem(s) wait for the daily summary." in baseline["content"]["description"]
    daily = render("daily", BASE)
    assert daily["content"]["title"].endswith(f"{CLUSTER}: daily summary, 2 open")
    assert "1 of them are below this channel's alert priority (never paged)." in daily["content"]["description"]
    assert daily["metadata"]["additionalContext"]["messageKind"] == "daily"
    mixed = render("mixed", BASE)["content"]["description"]
    assert "• ✅ *RESOLVED* " + NODE in mixed


def test_the_event_id_is_stable_for_one_message_and_differs_between_messages() -> None:
    # the hostile batches reuse the REPLACE incident's key and transition: the same message, as far as ids go
    ids = {name: render(name, BASE)["id"] for name in all_batches() if not name.startswith("hostile")}
    assert render("replace", None)["id"] == ids["replace"]  # a retried publish carries the same id
    assert len(set(ids.values())) == len(ids)
    b = replace_batch()
    for other in (
        replace(b, cluster_arn=ARN.replace("abcd", "wxyz")),
        replace(b, channel="slack"),
        replace(b, entries=(f"NODE#{NODE}@2026-12-04T03:00:00Z#OPENED",)),
    ):
        assert chatbot(other, runbook_base_url=BASE)["id"] != ids["replace"]


# --------------------------------------------------------------------------- hostile text stays data


@pytest.mark.parametrize(("name", "base"), [p for p in RENDERED if str(p.values[0]).startswith("hostile")])
def test_hostile_cluster_text_cannot_form_a_link_a_mention_or_control_the_terminal(name: str, base: str | None) -> None:
    message = render(name, base)
    rendered = json.dumps(message, ensure_ascii=False)
    assert "＠here" in rendered or name == "hostile-coverage"  # it was shown, made inert
    for text in strings(message):
        assert not any(unicodedata.category(ch) in ("Cc", "Cf") and ch != "\n" for ch in text), repr(text)
        assert "<!" not in text and "<@" not in text and "<http" not in text
        markdown = outside_code(text)
        assert "](" not in markdown
        assert "://evil" not in markdown and "https://evil" not in text
        assert not re.search(r"(?<![\w＠])@(here|channel|everyone|U024BE7LH)\b", text)
        assert "<" not in text.replace("&lt;", "") and ">" not in text.replace("&gt;", "")
    assert "```" not in "".join(line for line in message["content"]["description"].split("\n") if line != "```")


def test_hostile_text_is_still_readable() -> None:
    description = render("hostile", BASE)["content"]["description"]
    assert "[x] (https[:]//evil.example/p)" in description
    assert "&lt;!channel&gt;" in description and "'code'" in description and "redevil" not in description
    # escape sequences and invisible characters shown as escapes, never interpreted; the words kept
    assert "\\x1b[31mred\\x1b[0m" in description and "\x1b" not in description
    assert "\\u202eevil\\u202c zero\\u200bwidth" in description and "\u202e" not in description


def test_a_cut_that_falls_inside_a_code_block_closes_it_and_says_so() -> None:
    text = "\n".join(["*Why:* w", "```", *(f"line {n} " + "x" * 60 for n in range(100)), "```", "_note_"])
    cut = cb._cut_lines(text, 500)
    lines = cut.split("\n")
    assert len(cut) <= 500 and lines[-1] == "…" and lines[-2] == "```"
    assert sum(1 for line in lines if line == "```") == 2
    assert cb._join([(0, text)], 500) == cut and cb._join([(0, "short")], 500) == "short"


def test_the_least_important_blocks_go_first_when_a_description_is_too_long() -> None:
    blocks = [(0, "a" * 40), (3, "b" * 40), (2, "c" * 40), (3, "d" * 40), (0, "e" * 40)]
    kept = cb._assemble(blocks, 130)
    assert [t[0] for _, t in kept] == ["a", "c", "e"]
    assert cb._assemble(blocks, 10) == [(0, "a" * 40), (0, "e" * 40)]  # what matters most is never dropped
