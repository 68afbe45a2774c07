"""One verdict per node: one rung of investigate → reboot → replace, whatever its findings say one by one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.checks.base import finding
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.remediation.ladder import refine, verdicts
from hyperpod_debugger.remediation.verdict import node_verdicts, state_of
from tests import builders as b
from tests.unit.test_ladder import IID, _node_finding, _slurm_obs

OTHER = "i-0fedcba9876543210"


def only_verdict(findings, obs=None):
    obs = obs or b.observation()
    refined = refine(findings, obs, b.context())
    (mine,) = [v for v in verdicts(refined, obs, b.context()) if v.instance_id == IID]
    return mine, [f for f in refined if f.instance_id == IID]


def node_steps(findings):
    return {c.step for f in findings for c in f.suggested_commands if c.step in ("reboot", "replace")}


def test_a_replace_supersedes_a_reboot_and_the_node_gets_one_rung():
    obs = b.observation()
    verdict, mine = only_verdict(
        [_node_finding(obs, "reboot", check="nodes.status"), _node_finding(obs, "replace", check="logs.hma")], obs
    )
    assert verdict.verdict == "replace" and verdict.checks[0] == "logs.hma"
    assert node_steps(mine) == {"replace"}  # no reboot command left anywhere for this node
    superseded = next(f for f in mine if f.check == "nodes.status")
    assert "superseded" in (superseded.next_step or "") and superseded.node_action == "investigate"
    assert "batch-replace-cluster-nodes" in (verdict.then_command or "")
    assert verdict.next_command and "cordon" in verdict.next_command  # the drain comes first


def test_an_unknown_never_hides_a_fail():
    obs = b.observation()
    verdict, _ = only_verdict(
        [_node_finding(obs, None, tag=Tag.UNKNOWN, check="probe.session"), _node_finding(obs, "reboot")], obs
    )
    assert verdict.verdict == "reboot"


def test_what_could_not_be_read_is_unknown_and_gets_no_node_action():
    obs = b.observation()
    verdict, mine = only_verdict([_node_finding(obs, "reboot", tag=Tag.UNKNOWN)], obs)
    assert verdict.verdict == "unknown" and node_steps(mine) == set()


def test_hyperpod_acting_is_shown_and_nothing_is_started_beside_it():
    obs = b.observation()
    refined = refine([_node_finding(obs, "replace")], obs, b.context(), acting={IID: "Node Health Event: Replace"})
    (verdict,) = [v for v in verdicts(refined, obs, b.context(), acting={IID: "Node Health Event: Replace"})]
    assert verdict.verdict == "hyperpod-acting" and verdict.hyperpod == "Node Health Event: Replace"
    assert verdict.next_command is None and node_steps(refined) == set()


@pytest.mark.parametrize(
    ("tag", "priority", "action", "state"),
    [
        (Tag.WARN, Priority.P2, "fix-workload", "fix-workload"),
        (Tag.WARN, Priority.P2, None, "watch"),
        (Tag.WARN, Priority.P1, "investigate", "investigate"),
        (Tag.FAIL, Priority.P2, None, "investigate"),
        (Tag.PASS, None, None, "healthy"),
    ],
)
def test_each_finding_alone_names_a_state(tag, priority, action, state):
    obs = b.observation()
    f = finding(obs, "probe.xid", tag, "x", priority=priority, section="G.1", instance_id=IID, node_action=action)
    assert state_of(f) == state


def test_nodes_are_ordered_most_urgent_first_and_a_pass_alone_is_healthy():
    obs = b.observation()
    ok = finding(obs, "probe.xid", Tag.PASS, "No NVIDIA Xid", section="G.1", instance_id=OTHER)
    got = node_verdicts([ok, _node_finding(obs, "reboot")])
    assert [(v.instance_id, v.verdict) for v in got] == [(IID, "reboot"), (OTHER, "healthy")]
    assert got[1].next_step is None and got[1].next_command is None


def test_a_slurm_node_about_to_be_drained_is_not_also_offered_a_resume():
    obs = _slurm_obs()
    resume = mutating(
        ["scontrol", "update", "nodename=ip-10-1-2-3", "state=resume"],
        "Return the node to service",
        blast_radius="Only ip-10-1-2-3.",
        changes_configuration=False,
        preconditions=["The cause of the drain is fixed."],
    )
    drained = finding(
        obs,
        "slurm.nodes",
        Tag.WARN,
        "Slurm node is drained",
        priority=Priority.P2,
        section="H",
        instance_id=IID,
        suggested_commands=[read_only(["sinfo", "-R"], "why"), resume],
    )
    refined = refine([drained, _node_finding(obs, "reboot")], obs, b.context())
    commands = " ".join(c.command for f in refined if f.instance_id == IID for c in f.suggested_commands)
    assert "state=drain" in commands and "state=resume" not in commands


# --------------------------------------------------------------------------- a verdict hides no problem


def _on_node(obs, check, tag, message, priority, section, action=None, caused_by=None):
    return finding(
        obs,
        check,
        tag,
        message,
        priority=priority,
        section=section,
        instance_id=IID,
        node_action=action,
        caused_by=caused_by,
    )


def _slurm_node_like_the_demo(obs):
    """The simulated Slurm cluster's node: a reboot for the Xid the health agent saw, and two P0s a reboot
    does not fix (a full root volume, a failed slurmd) with the node-down finding slurmd explains."""
    slurmd = _on_node(obs, "probe.services", Tag.FAIL, "slurmd is not running (failed)", Priority.P0, "H")
    return [
        _on_node(obs, "logs.hma", Tag.WARN, "HMA detected Xid 79", Priority.P1, "G", "reboot"),
        _on_node(
            obs,
            "slurm.nodes",
            Tag.FAIL,
            "Slurm node is down",
            Priority.P1,
            "H",
            "investigate",
            caused_by="slurmd is not running (failed) (§ H)",
        ),
        _on_node(obs, "probe.gpu_row_remap", Tag.WARN, "row remapping pending", Priority.P1, "G.1.a", "reboot"),
        _on_node(obs, "probe.root_volume", Tag.FAIL, "Root volume / is 93% full", Priority.P0, "I.2", "investigate"),
        slurmd,
    ]


def test_a_reboot_verdict_names_the_worst_finding_and_what_a_reboot_does_not_fix():
    obs = b.observation()
    (verdict,) = node_verdicts(_slurm_node_like_the_demo(obs))
    # the rung is unchanged: a reboot for the Xid
    assert verdict.verdict == "reboot" and verdict.why == "HMA detected Xid 79" and verdict.priority == Priority.P1
    # the worst finding is named: a P0, FAIL before WARN
    assert verdict.worst is not None and verdict.worst.priority == Priority.P0
    assert verdict.worst.message == "Root volume / is 93% full" and not verdict.worst.fixed_by_rung
    # every other problem is listed, most urgent first, and whether the reboot clears it
    assert [(p.message, p.fixed_by_rung) for p in verdict.other_problems] == [
        ("Root volume / is 93% full", False),  # a reboot frees no disk
        ("slurmd is not running (failed)", False),  # nor fixes a service that failed to start
        ("Slurm node is down", False),  # explained by slurmd: it stays down with it
        ("row remapping pending", True),  # the reset a reboot brings applies the remap (§ G.1.a)
    ]


def test_a_replacement_clears_every_node_fault_but_the_workloads():
    obs = b.observation()
    findings = [
        _on_node(obs, "logs.hma", Tag.FAIL, "Xid 79 recurred", Priority.P0, "F", "replace"),
        _on_node(obs, "probe.root_volume", Tag.FAIL, "Root volume / is 93% full", Priority.P0, "I.2", "investigate"),
        _on_node(obs, "probe.oom", Tag.WARN, "OOM kill in the job", Priority.P2, "I.3", "fix-workload"),
    ]
    (verdict,) = node_verdicts(findings)
    assert verdict.verdict == "replace" and verdict.worst is None  # the deciding finding is as urgent as any
    assert {p.message: p.fixed_by_rung for p in verdict.other_problems} == {
        "Root volume / is 93% full": True,
        "OOM kill in the job": False,
    }


def test_a_node_with_one_problem_lists_nothing_else():
    obs = b.observation()
    (verdict,) = node_verdicts([_node_finding(obs, "reboot")])
    assert verdict.worst is None and verdict.other_problems == []


def test_hyperpod_acting_lists_the_nodes_findings_as_open():
    obs = b.observation()
    (verdict,) = node_verdicts([_node_finding(obs, "reboot")], recovering={IID: "Node Health Event: Reboot"})
    assert verdict.verdict == "hyperpod-acting" and verdict.worst is None
    assert [(p.check, p.fixed_by_rung) for p in verdict.other_problems] == [("nodes.status", False)]


def test_the_short_report_shows_every_problem_it_counts():
    from hyperpod_debugger.domain.model import ClusterRef, Coverage
    from hyperpod_debugger.report.text import render_text
    from hyperpod_debugger.run_report import build_report

    obs = b.observation()
    findings = _slurm_node_like_the_demo(obs)
    report = build_report(None, datetime.now(UTC), ClusterRef(name="c", region="us-west-2"), findings, Coverage())
    short = render_text(report, verbose=False)
    table = short.split("== Cluster-level problems ==", 1)[0]
    # the two P0s the reboot does not fix are on screen, under the verdict, said to need their own step
    assert "    worst: [FAIL] P0 Root volume / is 93% full (§ I.2); a reboot does not fix it" in table
    assert "    a reboot does not fix these either:\n      [FAIL] P0 slurmd is not running (failed) (§ H)" in table
    assert "    a reboot clears too:\n      [WARN] P1 row remapping pending (§ G.1.a)" in table
    # the summary counts what is shown: 2 P0 and 3 P1, each on screen
    assert "\nP0 2 · P1 3 · P2 0 · passed 0;" in short
    for f in findings:
        assert f.message in table
