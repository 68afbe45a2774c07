"""One verdict per node: one rung of investigate → reboot → replace, whatever its findings say one by one."""

from __future__ import annotations

import pytest

from hyperpod_debugger.checks.base import finding
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.remediation.ladder import refine, verdicts
from hyperpod_debugger.remediation.suggest import mutating, read_only
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
