"""The Slurm controller query and its parsers, over real published outputs and our recordings."""

from __future__ import annotations

import pathlib
import shlex

import pytest

from hyperpod_debugger.slurm.parse import (
    QUERY_KEYS,
    controller_up,
    expand_hostlist,
    parse_elapsed,
    parse_key_values,
    parse_ping,
    parse_query_output,
    parse_scontrol_nodes,
    parse_services,
    parse_sinfo,
    parse_squeue,
    parse_state,
    slurm_query_command,
)
from hyperpod_sim.slurm_outputs import controller_reply

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NAMES = ["ip-10-1-57-141", "ip-10-1-69-138", "ip-10-1-73-87", "ip-10-1-80-2", "ip-10-1-80-3"]


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


# --------------------------------------------------------------------------- the query command


def test_query_is_one_line_run_by_bash_with_one_argument():
    command = slurm_query_command()
    assert "\n" not in command
    argv = shlex.split(command)
    assert argv[:2] == ["bash", "-c"] and len(argv) == 3
    script = argv[2]
    for key in QUERY_KEYS:
        assert f"echo ==HPD:{key}==" in script
    assert script.count("timeout 10 ") >= 6


def test_query_is_read_only():
    script = shlex.split(slurm_query_command())[2]
    for word in ("update", "restart", "resume", "start ", "stop", "kill", "cancel", "rm ", ">"):
        assert word not in script.replace("2>&1", "").replace("2>/dev/null", "")
    assert "scontrol ping" in script and "scontrol show node --oneliner" in script
    assert "squeue --noheader -t COMPLETING,CONFIGURING" in script


def test_parse_query_output_splits_sections_and_drops_banner():
    out = parse_query_output("motd banner\r\n==HPD:ping==\r\nSlurmctld(primary) at h is UP\r\n==HPD:sinfo==\n\n")
    assert out == {"ping": "Slurmctld(primary) at h is UP", "sinfo": ""}


def test_recorded_reply_has_every_section():
    out = parse_query_output(controller_reply(NAMES, set()))
    assert set(out) == set(QUERY_KEYS)
    assert controller_up(out["ping"])


# --------------------------------------------------------------------------- states


@pytest.mark.parametrize(
    ("raw", "base", "flags", "label"),
    [
        ("idle", "IDLE", set(), "idle"),
        ("ALLOCATED", "ALLOCATED", set(), "allocated"),
        ("mix", "MIXED", set(), "mixed"),
        ("down*", "DOWN", {"NOT_RESPONDING"}, "down"),
        ("drained*", "IDLE", {"DRAIN", "NOT_RESPONDING"}, "drained"),
        ("drng", "ALLOCATED", {"DRAIN"}, "draining"),
        ("draining", "ALLOCATED", {"DRAIN"}, "draining"),
        ("fail", "IDLE", {"FAIL"}, "fail"),
        ("failg", "ALLOCATED", {"FAIL"}, "failing"),
        ("FAILING", "ALLOCATED", {"FAIL"}, "failing"),
        ("IDLE+DRAIN", "IDLE", {"DRAIN"}, "drained"),
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}, "draining"),
        ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", {"DRAIN", "NOT_RESPONDING"}, "down"),
        ("IDLE+FAIL", "IDLE", {"FAIL"}, "fail"),
        ("idle~", "IDLE", {"POWERED_DOWN"}, "idle"),
        ("idle#", "IDLE", {"POWERING_UP"}, "idle"),
        ("idle!", "IDLE", {"POWER_DOWN"}, "idle"),
        ("idle%", "IDLE", {"POWERING_DOWN"}, "idle"),
        ("drained$", "IDLE", {"DRAIN", "MAINTENANCE"}, "drained"),
        ("idle@", "IDLE", {"REBOOT_REQUESTED"}, "idle"),
        ("mix^", "MIXED", {"REBOOT_ISSUED"}, "mixed"),
        ("mix-", "MIXED", {"PLANNED"}, "mixed"),
        ("allocated+", "ALLOCATED", {"COMPLETING"}, "allocated"),
        ("IDLE+CLOUD+POWERED_DOWN", "IDLE", {"CLOUD", "POWERED_DOWN"}, "idle"),
        ("REBOOT_REQUESTED", "IDLE", {"REBOOT_REQUESTED"}, "idle"),
        ("completing", "COMPLETING", set(), "completing"),
    ],
)
def test_parse_state(raw, base, flags, label):
    state = parse_state(raw)
    assert (state.base, set(state.flags), state.label, state.raw) == (base, flags, label, raw)


def test_power_saving_states_are_marked():
    assert parse_state("idle~").power_saving and parse_state("idle%").power_saving
    assert not parse_state("drained$").power_saving


def test_expand_hostlist():
    assert expand_hostlist("ip-10-1-57-[141,143-144],node[01-02],solo") == [
        "ip-10-1-57-141",
        "ip-10-1-57-143",
        "ip-10-1-57-144",
        "node01",
        "node02",
        "solo",
    ]


# --------------------------------------------------------------------------- real sinfo outputs


def test_sinfo_padded_O_format_with_dollar_suffix():
    fields = ("name", "gres", "gres_used", "cpus_total", "cpus", "state", "partition")
    nodes = {n.name: n for n in parse_sinfo(fixture("sinfo-N-O-width256-meta-gcm-drained-dollar"), fields)}
    assert len(nodes) == 10
    drained = nodes["node2654"]
    assert drained.state.drained and "MAINTENANCE" in drained.state.flags
    assert drained.extra["cpus"] == "0/0/256/256"
    assert {n.state.label for name, n in nodes.items() if name != "node2654"} <= {"idle", "allocated", "mixed"}


def test_squeue_default_table_running_on_failing_node():
    [job] = parse_squeue(fixture("hyperpod-squeue-running-on-failing-node"))
    assert (job.job_id, job.state, job.elapsed_s, job.nodes) == (
        "9",
        "RUNNING",
        19 * 60 + 26,
        "ip-10-1-57-141,ip-10-1-69-138",
    )


# --------------------------------------------------------------------------- our sections


def test_sinfo_section_from_recording():
    out = parse_query_output(
        controller_reply(NAMES, {"node_down_unexpected_reboot", "drained_kill_task_failed", "action_replace"})
    )
    nodes = {n.name: n for n in parse_sinfo(out["sinfo"])}
    assert nodes["ip-10-1-57-141"].state.down and nodes["ip-10-1-57-141"].state.not_responding
    assert nodes["ip-10-1-57-141"].reason.startswith("Node unexpectedly rebooted")
    assert nodes["ip-10-1-69-138"].reason == "Kill task failed" and nodes["ip-10-1-69-138"].state.drained
    assert nodes["ip-10-1-73-87"].reason == "Action:Replace" and nodes["ip-10-1-73-87"].state.fail
    assert nodes["ip-10-1-80-3"].reason is None and nodes["ip-10-1-80-3"].timestamp is None


def test_sinfo_skips_error_lines_and_keeps_pipes_in_reason():
    rows = parse_sinfo(
        "slurm_load_partitions: Unable to contact slurm controller (connect failure)\nn1|drained|a|b|2024-01-01T00:00:00"
    )
    [row] = rows
    assert (row.name, row.reason, row.timestamp) == ("n1", "a|b", "2024-01-01T00:00:00")


def test_scontrol_oneliner_reason_with_spaces_and_owner():
    out = parse_query_output(controller_reply(NAMES, {"drained_kill_task_failed", "node_down_unexpected_reboot"}))
    nodes = {n.name: n for n in parse_scontrol_nodes(out["nodes"])}
    assert len(nodes) == len(NAMES)
    drained = nodes["ip-10-1-69-138"]
    assert (drained.reason, drained.reason_user) == ("Kill task failed", "root")
    assert drained.state.drained
    assert nodes["ip-10-1-57-141"].reason.startswith("Node unexpectedly rebooted boot_time=")
    assert nodes["ip-10-1-57-141"].fields["OS"].startswith("Linux 5.15.0-1063-aws #69~20.04.1-Ubuntu SMP")
    assert nodes["ip-10-1-80-3"].reason is None


def test_key_values():
    assert parse_key_values("NodeName=n1 State=IDLE+DRAIN Reason=Not responding [slurm@2024-01-01T00:00:00]") == {
        "NodeName": "n1",
        "State": "IDLE+DRAIN",
        "Reason": "Not responding [slurm@2024-01-01T00:00:00]",
    }


def test_squeue_section_and_elapsed():
    out = parse_query_output(controller_reply(NAMES, {"completing_jobs"}))
    jobs = {j.job_id: j for j in parse_squeue(out["squeue"])}
    assert jobs["4127"].state == "COMPLETING" and jobs["4127"].elapsed_s == 25 * 60 + 13
    assert jobs["4133"].state == "CONFIGURING" and jobs["4133"].elapsed_s == 42
    assert parse_elapsed("1-02:03:04") == 93784
    assert parse_elapsed("2:03:04") == 7384
    assert parse_elapsed("INVALID") is None


def test_ping_and_services():
    pings = parse_ping("Slurmctld(primary) at ip-10-1-0-10 is DOWN\nSlurmctld(backup) at ip-10-1-0-11 is UP")
    assert [(p.role, p.host, p.status) for p in pings] == [
        ("primary", "ip-10-1-0-10", "DOWN"),
        ("backup", "ip-10-1-0-11", "UP"),
    ]
    assert controller_up("Slurmctld(primary) at ip-10-1-0-10 is UP")
    assert not controller_up("Slurmctld(primary) at ip-10-1-0-10 is DOWN")
    assert not controller_up("bash: scontrol: command not found")
    assert parse_services("slurmctld active\nmunge inactive\nfoo") == {
        "slurmctld": "active",
        "munge": "inactive",
        "foo": "unknown",
    }


@pytest.mark.parametrize("fault", ["munge_down", "slurmctld_down"])
def test_recorded_controller_outages(fault):
    out = parse_query_output(controller_reply(NAMES, {fault}))
    assert not controller_up(out["ping"])
    assert (
        parse_sinfo(out["sinfo"]) == []
        and parse_scontrol_nodes(out["nodes"]) == []
        and parse_squeue(out["squeue"]) == []
    )
    services = parse_services(out["services"])
    assert services["munge" if fault == "munge_down" else "slurmctld"] != "active"


def test_unknown_fault_is_rejected():
    with pytest.raises(ValueError, match="unknown Slurm faults"):
        controller_reply(NAMES, {"nope"})
