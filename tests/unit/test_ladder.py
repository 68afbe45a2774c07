"""The suggestion engine: one test per ladder rule."""

from __future__ import annotations

import shlex
from datetime import timedelta

import pytest

from hyperpod_debugger.checks.base import finding
from hyperpod_debugger.domain.commands import IAC_WARNING, mutating, read_only
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ClusterEvent, EventWindow, LogEvent, Observed
from hyperpod_debugger.remediation.ladder import refine
from tests import builders as b

IID = "i-0123456789abcdef0"


def _node_finding(obs, action, tag=Tag.FAIL, instance_id=IID, check="nodes.status"):
    return finding(
        obs,
        check,
        tag,
        f"Node {instance_id} is unhealthy",
        priority=Priority.P1,
        section="F",
        instance_id=instance_id,
        instance_group="workers",
        node_action=action,
        suggested_commands=[read_only(["aws", "sagemaker", "describe-cluster-node", "--node-id", instance_id], "look")],
    )


def _steps(f):
    return [c.step for c in f.suggested_commands]


def _slurm_obs(**kw):
    nodes = [b.node(IID, group_name=kw.pop("group", "workers"), status=kw.pop("status", "Failure"))]
    nodes = [
        type(nodes[0])(
            n.instance_id,
            n.group,
            n.instance_type,
            n.status,
            n.message,
            n.launch_time,
            hostname="ip-10-1-2-3.us-west-2.compute.internal",
        )
        for n in nodes
    ]
    return b.observation(
        cluster=b.cluster(orchestrator="Slurm", orchestrator_raw=None, eks_cluster_arn=None, node_recovery="None"),
        nodes=Observed.ok(nodes),
        **kw,
    )


def test_reboot_comes_after_investigation_and_drains_first_with_the_slurm_node_name():
    obs = _slurm_obs()
    [f] = refine([_node_finding(obs, "reboot")], obs, b.context())
    # the finding's own read-only command, then a look at what runs on the node, the drain, the reboot
    assert _steps(f) == ["investigate", "investigate", "drain", "reboot"]
    look, drain, reboot = f.suggested_commands[1:]
    assert shlex.split(look.command) == ["squeue", "-w", "ip-10-1-2-3"] and not look.mutates
    assert "nodename=ip-10-1-2-3" in shlex.split(drain.command)
    assert shlex.split(reboot.command)[-2:] == ["--node-ids", IID]
    assert reboot.iac_warning and reboot.preconditions and reboot.blast_radius


def test_replace_always_says_it_destroys_the_volumes_and_comes_last():
    obs = b.observation(nodes=Observed.ok([b.node(IID, status="Running")]))
    [f] = refine([_node_finding(obs, "replace")], obs, b.context())
    assert _steps(f)[0] == "investigate" and _steps(f)[-1] == "replace"
    assert "root and secondary volumes" in f.suggested_commands[-1].blast_radius


def test_unknown_evidence_never_leads_to_reboot_or_replace():
    obs = b.observation()
    unknown = finding(
        obs,
        "logs.hma",
        Tag.UNKNOWN,
        "Could not read",
        priority=Priority.P1,
        section="K",
        instance_id=IID,
        node_action="replace",
    )
    [f] = refine([unknown], obs, b.context())
    assert f.node_action == "investigate" and not any(c.mutates for c in f.suggested_commands)
    assert "Do not reboot or replace" in f.next_step


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"nodes": Observed.ok([b.node(IID, status="ShuttingDown")])}, "ShuttingDown"),
        (
            {
                "events": Observed.ok(
                    EventWindow(
                        b.NOW - timedelta(hours=1),
                        b.NOW,
                        (
                            ClusterEvent(
                                "e1",
                                b.NOW - timedelta(minutes=10),
                                "Info",
                                "Instance",
                                f"Instance {IID} is starting as part of instance replacement.",
                                "workers",
                                IID,
                            ),
                        ),
                    )
                )
            },
            "instance replacement",
        ),
        (
            {
                "logs": b.logs(
                    hma_events=Observed.ok(
                        [
                            LogEvent(
                                f"SagemakerHealthMonitoringAgent/workers/{IID}",
                                b.NOW - timedelta(minutes=5),
                                '{"msg":"NPD caught event: %v","details":{"reason":"XidHardwareFailure","message":'
                                '"Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: '
                                '\\"NVRM: Xid (PCI:0000:b9:00): 79, pid=<unknown>\\""},'
                                '"HealthMonitoringAgentDetectionEvent":"HealthEvent"}',
                            )
                        ]
                    )
                )
            },
            "NvidiaErrorReboot",
        ),
    ],
)
def test_recovery_already_in_progress_gets_no_duplicate_action(overrides, reason):
    obs = b.observation(**overrides)
    [f] = refine([_node_finding(obs, "replace")], obs, b.context())
    assert not any(c.mutates for c in f.suggested_commands)
    assert "already acting" in f.next_step and reason in f.next_step and "20–30 minutes" in f.next_step


def test_an_old_recovery_event_does_not_block_the_ladder():
    event = ClusterEvent(
        "e1",
        b.NOW - timedelta(hours=6),
        "Info",
        "Instance",
        f"Reboot of EC2 Instance {IID} is currently in progress.",
        "workers",
        IID,
    )
    obs = b.observation(events=Observed.ok(EventWindow(b.NOW - timedelta(hours=24), b.NOW, (event,))))
    [f] = refine([_node_finding(obs, "reboot")], obs, b.context())
    assert "reboot" in _steps(f)


def test_application_faults_get_no_node_action():
    obs = b.observation()
    [f] = refine([_node_finding(obs, "fix-workload")], obs, b.context())
    assert not any(c.mutates for c in f.suggested_commands)
    assert "fix the job" in f.next_step


def test_a_slurm_controller_is_never_replaced():
    obs = _slurm_obs(group="controller-machine", status="Running")
    [f] = refine([_node_finding(obs, "replace")], obs, b.context())
    assert "replace" not in _steps(f) and "reboot" in _steps(f)
    assert f.node_action == "reboot" and "not supported on the Slurm controller" in f.next_step


def test_batches_hold_at_most_25_node_ids():
    ids = [f"i-{n:017x}" for n in range(60)]
    obs = b.observation(cluster=b.cluster(node_recovery="None"), nodes=Observed.ok([b.node(i) for i in ids]))
    refined = refine([_node_finding(obs, "reboot", instance_id=i) for i in ids], obs, b.context())
    [batch] = [f for f in refined if f.check == "ladder.batch"]
    sizes = [
        len(shlex.split(c.command)) - shlex.split(c.command).index("--node-ids") - 1 for c in batch.suggested_commands
    ]
    assert sizes == [25, 25, 10]


def test_drift_note_names_the_owning_stack():
    obs = b.observation(
        network=b.network(
            security_groups=Observed.ok({b.SG: b.self_ref_sg(tags={"aws:cloudformation:stack-name": "net-stack"})})
        )
    )
    cmd = mutating(
        ["aws", "ec2", "authorize-security-group-egress", "--group-id", b.SG],
        "open",
        blast_radius="sg",
        changes_configuration=True,
        preconditions=["p"],
        resource=b.SG,
    )
    f = finding(obs, "network.efa_sg", Tag.FAIL, "m", priority=Priority.P0, section="A", suggested_commands=[cmd])
    [out] = refine([f], obs, b.context())
    note = out.suggested_commands[0].iac_warning
    assert "CloudFormation stack 'net-stack'" in note and "change the template, then deploy" in note


def test_drift_note_asks_when_no_tags_say_who_owns_it_and_stays_generic_when_tags_are_unknown():
    obs = b.observation()
    owned_unknown = mutating(
        ["x"], "p", blast_radius="b", changes_configuration=True, preconditions=["p"], resource=b.SG
    )
    not_collected = mutating(
        ["x"], "p", blast_radius="b", changes_configuration=True, preconditions=["p"], resource="sg-0ffffffffffffffff"
    )
    f = finding(
        obs,
        "network.efa_sg",
        Tag.FAIL,
        "m",
        priority=Priority.P0,
        section="A",
        suggested_commands=[owned_unknown, not_collected],
    )
    [out] = refine([f], obs, b.context())
    first, second = out.suggested_commands
    assert first.iac_warning.startswith("No infrastructure-as-code tags found on") and "Confirm" in first.iac_warning
    assert second.iac_warning == IAC_WARNING


@pytest.mark.parametrize("name", ["g1;rm -rf /", "$(id)", "`reboot`"])
def test_hostile_names_stay_inert_in_engine_commands(name):
    # GIVEN a node whose group and Slurm host name are hostile strings
    obs = _slurm_obs()
    [n] = obs.nodes.value
    obs.nodes = Observed.ok(
        [type(n)(n.instance_id, name, n.instance_type, n.status, n.message, n.launch_time, hostname=f"{name}.internal")]
    )
    # WHEN the engine builds the drain command
    [f] = refine([_node_finding(obs, "reboot")], obs, b.context())
    # THEN the name is one inert shell word
    drain = next(c for c in f.suggested_commands if c.step == "drain")
    assert f"nodename={name}" in shlex.split(drain.command)
