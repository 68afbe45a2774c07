"""Slurm checks (§ H): controller, node states, stuck jobs."""

from __future__ import annotations

import shlex

import pytest

from hyperpod_debugger.checks.slurm import CHECKS, check_controller, check_jobs, check_nodes
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Observed, Unobservable
from hyperpod_debugger.domain.orchestrators import SlurmController, SlurmObservation
from hyperpod_debugger.slurm.parse import parse_query_output
from hyperpod_sim.slurm_outputs import controller_reply
from tests import builders as b

NAMES = ["ip-10-1-57-141", "ip-10-1-69-138", "ip-10-1-73-87", "ip-10-1-80-2", "ip-10-1-80-3"]
IIDS = {name: f"i-0{index:016x}" for index, name in enumerate(NAMES, start=1)}
CTL = "i-0aaaaaaaaaaaaaaa0"


def slurm_obs(
    outputs: dict[str, str] | None = None,
    *,
    faults: set[str] | None = None,
    confirmed_by: str = "scontrol ping",
    group: str = "controller-machine",
    node_instances: dict[str, str] | None = None,
):
    if outputs is None:
        outputs = parse_query_output(controller_reply(NAMES, faults or set()))
    s = SlurmObservation(
        controller=SlurmController(CTL, group, confirmed_by),
        outputs=outputs,
        node_instances=IIDS if node_instances is None else node_instances,
    )
    return b.observation(
        cluster=b.cluster(orchestrator="Slurm", orchestrator_raw={"Slurm": {}}, eks_cluster_arn=None),
        slurm=Observed.ok(s),
    )


def problems(findings):
    return [f for f in findings if f.is_problem]


def by_node(findings):
    return {f.message.split()[2]: f for f in findings if f.check == "slurm.nodes" and f.is_problem}


# --------------------------------------------------------------------------- applicability


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_not_applicable_on_eks(check):
    with pytest.raises(NotApplicable):
        check.run(b.observation(), b.context())


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_unobservable_controller_query_propagates(check):
    obs = slurm_obs()
    obs.slurm = Observed.failed(ApiFailure("ssm:StartSession", "denied", "not authorized"))
    with pytest.raises(Unobservable):
        check.run(obs, b.context())


def test_check_ids_and_sections():
    assert [(c.id, c.section) for c in CHECKS] == [
        ("slurm.controller", "H"),
        ("slurm.nodes", "H"),
        ("slurm.jobs", "H"),
    ]


# --------------------------------------------------------------------------- slurm.controller


def test_controller_healthy_names_controller_and_how_confirmed():
    [f] = check_controller(slurm_obs(), b.context())
    assert f.tag is Tag.PASS
    assert CTL in f.message and "scontrol ping" in f.message and "ip-10-1-0-10" in f.message
    assert "systemctl is-active munge: active" in f.evidence


def test_controller_down_is_p0_with_daemon_cause():
    [f] = check_controller(slurm_obs(faults={"slurmctld_down"}), b.context())
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "H")
    assert "DOWN" in f.message and "slurmctld is failed" in f.message
    assert "systemctl is-active slurmctld: failed" in f.evidence
    assert not any(c.mutates for c in f.suggested_commands)
    assert any(c.command.startswith("aws ssm start-session") for c in f.suggested_commands)


def test_munge_down_on_controller_is_p0():
    [f] = check_controller(slurm_obs(faults={"munge_down"}), b.context())
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0)
    assert "munge is inactive" in f.message and "authenticate" in (f.root_cause or "")


def test_munge_inactive_while_ping_up_is_still_p0():
    outputs = parse_query_output(controller_reply(NAMES, set()))
    outputs["services"] = "slurmctld active\nmunge inactive"
    [f] = check_controller(slurm_obs(outputs), b.context())
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0)
    assert "munge is inactive" in f.message


def test_slurmctld_inactive_while_ping_up_points_at_wrong_node():
    outputs = parse_query_output(controller_reply(NAMES, set()))
    outputs["services"] = "slurmctld inactive\nmunge active"
    [f] = check_controller(slurm_obs(outputs), b.context())
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P1)
    assert "not the controller host" in f.message


def test_controller_group_that_does_not_answer_is_not_healthy():
    # The node was picked only because its group is called "controller"; ping gave no answer.
    outputs = {"ping": "bash: line 1: scontrol: command not found", "services": "slurmctld \nmunge "}
    obs = slurm_obs(outputs, confirmed_by="group name", group="controller-machine")
    findings = check_controller(obs, b.context())
    assert not any(f.tag is Tag.PASS for f in findings)
    [f] = findings
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0)
    assert "not confirmed" in f.message and "group name" in f.message
    # and nothing downstream trusts its silence as "all nodes fine" or "no stuck jobs"
    assert not any(f.tag is Tag.PASS for f in check_nodes(obs, b.context()))
    assert not any(f.tag is Tag.PASS for f in check_jobs(obs, b.context()))


# --------------------------------------------------------------------------- slurm.nodes


def test_all_nodes_fine_is_one_pass():
    findings = check_nodes(slurm_obs(), b.context())
    [f] = findings
    assert f.tag is Tag.PASS and "5 Slurm node(s)" in f.message


def test_down_after_unexpected_reboot_suggests_fixing_slurmd_then_resume():
    f = by_node(check_nodes(slurm_obs(faults={"node_down_unexpected_reboot"}), b.context()))["ip-10-1-57-141"]
    assert (f.tag, f.priority, f.section, f.instance_id) == (Tag.FAIL, Priority.P1, "H", IIDS["ip-10-1-57-141"])
    assert "down and not responding" in f.message and "Node unexpectedly rebooted" in f.message
    assert "slurmd" in (f.root_cause or "") and "fix slurmd first" in (f.root_cause or "")
    assert f.node_action == "investigate"
    show, resume = f.suggested_commands
    assert (show.command, show.mutates) == ("scontrol show node ip-10-1-57-141", False)
    assert resume.command == "scontrol update nodename=ip-10-1-57-141 state=resume"
    assert resume.mutates and resume.step == "change"
    assert any(f"--node {IIDS['ip-10-1-57-141']}" in p for p in resume.preconditions)
    assert any("root cause" in p for p in resume.preconditions)
    assert "jobs fail on it" in (resume.blast_radius or "")
    assert "No infrastructure-as-code drift" in (resume.iac_warning or "")


def test_not_responding_reason_without_instance_id_gets_no_resume():
    outputs = {"ping": "Slurmctld(primary) at c is UP", "sinfo": "ip-10-9-9-9|down*|Not responding|2024-01-01T00:00:00"}
    [f] = problems(check_nodes(slurm_obs(outputs, node_instances={}), b.context()))
    assert f.instance_id is None and "instance id unknown" in f.message
    assert "slurmd is likely down" in (f.root_cause or "") and "network" in (f.root_cause or "")
    assert not any(c.mutates for c in f.suggested_commands)


def test_drained_kill_task_failed_is_warn_about_stuck_processes_no_resume():
    f = by_node(check_nodes(slurm_obs(faults={"drained_kill_task_failed"}), b.context()))["ip-10-1-69-138"]
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P1)
    assert "drained" in f.message and "Kill task failed" in f.message
    assert "stuck" in (f.root_cause or "")
    assert any("[root@" in e for e in f.evidence)
    assert not any(c.mutates for c in f.suggested_commands)


def test_action_replace_is_recovery_in_progress_with_no_duplicate_action():
    f = by_node(check_nodes(slurm_obs(faults={"action_replace"}), b.context()))["ip-10-1-73-87"]
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P1)
    assert "Action:Replace" in f.message and "replace path is in progress" in (f.root_cause or "")
    assert f.node_action == "investigate"
    assert not any(c.mutates for c in f.suggested_commands)
    assert "Do not change the node's state" in (f.next_step or "")


def test_failing_with_action_reboot_mentions_waiting_for_jobs():
    outputs = {
        "ping": "Slurmctld(primary) at c is UP",
        "sinfo": "ip-10-1-57-141|failing|Action:Reboot|2024-01-01T00:00:00",
    }
    [f] = problems(check_nodes(slurm_obs(outputs), b.context()))
    assert f.tag is Tag.FAIL and "failing" in f.message
    assert "reboot path" in (f.root_cause or "") and "running jobs" in (f.root_cause or "")
    assert not any(c.mutates for c in f.suggested_commands)


def test_fail_with_not_responding_reason_gets_no_resume():
    outputs = {
        "ping": "Slurmctld(primary) at c is UP",
        "sinfo": "ip-10-1-57-141|fail|Not responding|2024-01-01T00:00:00",
    }
    [f] = problems(check_nodes(slurm_obs(outputs), b.context()))
    assert not any(c.mutates for c in f.suggested_commands)


def test_admin_drain_keeps_reason_verbatim_and_no_resume():
    outputs = {
        "ping": "Slurmctld(primary) at c is UP",
        "sinfo": "ip-10-1-57-141|draining|maintenance: swap NIC (ticket 42)|X",
    }
    [f] = problems(check_nodes(slurm_obs(outputs), b.context()))
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P1)
    assert "draining" in f.message and "maintenance: swap NIC (ticket 42)" in f.message
    assert not any(c.mutates for c in f.suggested_commands)


def test_powered_off_nodes_are_info_not_failures():
    sinfo = "\n".join(
        [
            "n1|idle~|none|Unknown",
            "n2|idle#|none|Unknown",
            "n3|idle%|none|Unknown",
            "n4|idle!|none|Unknown",
            "n5|idle|none|Unknown",
        ]
    )
    findings = check_nodes(slurm_obs({"ping": "Slurmctld(primary) at c is UP", "sinfo": sinfo}), b.context())
    assert not problems(findings)
    info = [f for f in findings if f.tag is Tag.INFO]
    assert len(info) == 1 and "4 Slurm node(s) powered off" in info[0].message
    assert any(f.tag is Tag.PASS for f in findings)


def test_every_fault_gets_its_own_finding_and_the_rest_pass_silently():
    obs = slurm_obs(faults={"node_down_unexpected_reboot", "drained_kill_task_failed", "action_replace"})
    findings = check_nodes(obs, b.context())
    assert set(by_node(findings)) == {"ip-10-1-57-141", "ip-10-1-69-138", "ip-10-1-73-87"}
    assert not any(f.tag is Tag.PASS for f in findings)


def test_scope_node_keeps_only_its_slurm_node():
    obs = slurm_obs(faults={"node_down_unexpected_reboot", "drained_kill_task_failed"})
    findings = check_nodes(obs, b.context(scope_node=IIDS["ip-10-1-69-138"]))
    assert set(by_node(findings)) == {"ip-10-1-69-138"}


def test_real_failg_fixture_as_sinfo_section():
    # hyperpod-sinfo-failg-action-replace: ip-10-1-57-141 failg, ip-10-1-69-138 alloc
    outputs = {
        "ping": "Slurmctld(primary) at c is UP",
        "sinfo": "ip-10-1-57-141|failing|Action:Replace|2024-03-08T00:15:18\nip-10-1-69-138|allocated|none|Unknown",
    }
    [f] = problems(check_nodes(slurm_obs(outputs), b.context()))
    assert f.instance_id == IIDS["ip-10-1-57-141"] and "failing" in f.message


def test_nodes_unknown_when_controller_silent():
    [f] = check_nodes(slurm_obs(faults={"slurmctld_down"}), b.context())
    assert (f.tag, f.priority, f.section) == (Tag.UNKNOWN, Priority.P1, "H")
    assert any("Unable to contact slurm controller" in e for e in f.evidence)


def test_hostile_node_names_stay_inert_in_commands():
    hostile = "ip-1;rm -rf /$(id)"
    outputs = {"ping": "Slurmctld(primary) at c is UP", "sinfo": f"{hostile}|down*|Node unexpectedly rebooted|X"}
    # names with spaces are not Slurm node names: the row is skipped, and no command carries it
    findings = check_nodes(slurm_obs(outputs, node_instances={hostile: "i-0123456789abcdef0"}), b.context())
    assert not any(c for f in findings for c in f.suggested_commands)
    hostile = "ip-1;rm-rf-/$(id)`x`'q"
    outputs["sinfo"] = f"{hostile}|down*|Node unexpectedly rebooted|X"
    [f] = problems(check_nodes(slurm_obs(outputs, node_instances={hostile: "i-0123456789abcdef0"}), b.context()))
    show, resume = f.suggested_commands
    assert shlex.split(show.command) == ["scontrol", "show", "node", hostile]
    assert shlex.split(resume.command) == ["scontrol", "update", f"nodename={hostile}", "state=resume"]


# --------------------------------------------------------------------------- slurm.jobs


def test_no_stuck_jobs_passes():
    [f] = check_jobs(slurm_obs(), b.context())
    assert f.tag is Tag.PASS


def test_completing_over_ten_minutes_is_warn_listing_jobs():
    [f] = check_jobs(slurm_obs(faults={"completing_jobs"}), b.context())
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "H")
    assert "1 Slurm job(s)" in f.message
    assert f.evidence == ["job 4127 COMPLETING for 25:13 on ip-10-1-80-2"]  # the 42 s CONFIGURING job is not stuck
    assert "stale state" in (f.root_cause or "")
    assert [c.command for c in f.suggested_commands] == ["scontrol show job 4127"]
    assert not any(c.mutates or "restart" in c.command for c in f.suggested_commands)


def test_short_completing_jobs_pass_with_a_note():
    outputs = {
        "ping": "Slurmctld(primary) at c is UP",
        "squeue": "7|COMPLETING|9:59|n1|n1\n8|CONFIGURING|10:00|n2|None",
    }
    [f] = check_jobs(slurm_obs(outputs), b.context())
    assert f.tag is Tag.PASS and "2 finishing or starting" in f.message


def test_configuring_long_is_stuck_too():
    outputs = {"ping": "Slurmctld(primary) at c is UP", "squeue": "8|CONFIGURING|1-00:00:01|n2|None"}
    [f] = check_jobs(slurm_obs(outputs), b.context())
    assert f.tag is Tag.WARN and "CONFIGURING for 1-00:00:01" in f.evidence[0]


def test_jobs_unknown_when_controller_down():
    [f] = check_jobs(slurm_obs(faults={"munge_down"}), b.context())
    assert f.tag is Tag.UNKNOWN and f.priority is Priority.P2
