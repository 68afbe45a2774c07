"""Kubernetes checks of an EKS-orchestrated cluster: HyperPod node health labels, deep health
checks, the VPC CNI, kube-proxy/CoreDNS and the aws-hyperpod namespace.

Node names and label values come from real `kubectl get nodes` outputs, captures kept outside this
repository (kgn-pending-reboot-notready, kgn-pending-replacement-notready, kgn-hero-demo-*).
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hyperpod_debugger.aws.k8s import parse_node
from hyperpod_debugger.checks.k8s_networking import check_cni, check_system_pods
from hyperpod_debugger.checks.k8s_nodes import check_deep_health, check_node_health, pending_recovery
from hyperpod_debugger.checks.kubernetes import CHECKS, check_efa_device_plugin, check_hyperpod_namespace
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Observed, Unobservable
from hyperpod_debugger.domain.orchestrators import (
    ANNOTATION_FAULT_DETAILS,
    LABEL_DEEP_HEALTH,
    LABEL_FAULT_REASONS,
    LABEL_FAULT_TYPES,
    LABEL_HEALTH,
    K8sContainerStatus,
    K8sDaemonSet,
    K8sEvent,
    K8sNode,
    K8sPod,
    KubernetesObservation,
)
from tests import builders as b

# From kgn-pending-reboot-notready / kgn-pending-replacement-notready (same node, two moments).
FAULTY = "hyperpod-i-0220224e40218ce3a"
FAULTY_ID = "i-0220224e40218ce3a"
HEALTHY = "hyperpod-i-06c561302ab149bb7"
# From kgn-hero-demo-pending-reboot-3col.
HERO_FAULTY = "hyperpod-i-076a8fd1fb47273d2"
GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
DENIED = ApiFailure("eks:AccessKubernetesApi", "denied", "forbidden")


# --------------------------------------------------------------------------- builders


def knode(
    name: str = HEALTHY,
    *,
    health: str | None = "Schedulable",
    ready: str | None = "True",
    dhc: str | None = None,
    group: str | None = "workers",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    conditions: tuple[dict[str, Any], ...] = (),
    taints: tuple[dict[str, Any], ...] = (),
    hyperpod: bool = True,
) -> K8sNode:
    all_labels: dict[str, str] = {"kubernetes.io/hostname": name}
    if hyperpod:
        if health is not None:
            all_labels[LABEL_HEALTH] = health
        if dhc is not None:
            all_labels[LABEL_DEEP_HEALTH] = dhc
        if group is not None:
            all_labels[GROUP_LABEL] = group
    all_labels.update(labels or {})
    conds = list(conditions)
    if ready is not None:
        conds.insert(
            0, {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"}
        )
    return K8sNode(name, all_labels, annotations or {}, taints, tuple(conds))


def container(
    name: str,
    *,
    state: str = "running",
    reason: str | None = None,
    ready: bool = True,
    restarts: int = 0,
    last: str | None = None,
) -> K8sContainerStatus:
    return K8sContainerStatus(name, ready, restarts, state, reason, None, last)


def pod(name: str, app: str, node: str, *containers: K8sContainerStatus, phase: str = "Running") -> K8sPod:
    return K8sPod("kube-system", name, {"k8s-app": app}, node, phase, containers or (container(app),))


def aws_node_pod(name: str, node: str, **failing: Any) -> K8sPod:
    """An aws-node pod with its two containers; `failing` makes the aws-node container fail."""
    main = container("aws-node", **failing) if failing else container("aws-node")
    return pod(name, "aws-node", node, main, container("aws-eks-nodeagent"))


def ds(desired: int = 2, ready: int = 2, unavailable: int = 0, name: str = "aws-node") -> K8sDaemonSet:
    return K8sDaemonSet("kube-system", name, desired, ready, desired - unavailable, unavailable)


HEALTHY_SYSTEM = [
    aws_node_pod("aws-node-7xk2p", HEALTHY),
    aws_node_pod("aws-node-q9m4d", FAULTY),
    pod("kube-proxy-5gq8n", "kube-proxy", HEALTHY),
    pod("coredns-6b9575c64c-8zv2l", "kube-dns", HEALTHY, container("coredns")),
]


def kobs(
    *,
    nodes: list[K8sNode] | Observed | None = None,
    pods: list[K8sPod] | Observed | None = None,
    daemonsets: list[K8sDaemonSet] | Observed | None = None,
    namespaces: list[str] | Observed | None = None,
    events: list[K8sEvent] | Observed | None = None,
    **overrides: Any,
):
    def wrap(value, default):
        value = default if value is None else value
        return value if isinstance(value, Observed) else Observed.ok(value)

    k8s = KubernetesObservation(
        endpoint="https://ABC.gr7.us-west-2.eks.amazonaws.com",
        nodes=wrap(nodes, [knode(HEALTHY), knode(FAULTY)]),
        system_pods=wrap(pods, HEALTHY_SYSTEM),
        daemonsets=wrap(daemonsets, [ds(), ds(2, 2, name="kube-proxy")]),
        namespaces=wrap(namespaces, ["default", "kube-system", "aws-hyperpod"]),
        sandbox_events=wrap(events, []),
    )
    return b.observation(kubernetes=Observed.ok(k8s), **overrides)


def problems(findings):
    return [f for f in findings if f.is_problem]


# --------------------------------------------------------------------------- applicability


@pytest.mark.parametrize("check", [c.run for c in CHECKS])
def test_every_check_is_not_applicable_on_slurm(check):
    # GIVEN a Slurm cluster  WHEN any Kubernetes check runs  THEN it does not apply
    with pytest.raises(NotApplicable):
        check(kobs(cluster=b.cluster(orchestrator="Slurm")), b.context())


@pytest.mark.parametrize("check", [c.run for c in CHECKS])
def test_every_check_lets_an_unreadable_kubernetes_api_propagate(check):
    # GIVEN the Kubernetes API could not be read  WHEN any check runs  THEN it is unknown, never passed
    obs = b.observation(kubernetes=Observed.failed(DENIED))
    with pytest.raises(Unobservable):
        check(obs, b.context())


def test_checks_are_registered_with_their_sections():
    assert {c.id: c.section for c in CHECKS} == {
        "k8s.node_health": "F",
        "k8s.deep_health": "G",
        "k8s.efa_device_plugin": "A",
        "k8s.cni": "O",
        "k8s.system_pods": "O",
        "k8s.hyperpod_namespace": "B.1",
        "k8s.efa_pod_env": "E",
    }


# --------------------------------------------------------------------------- k8s.node_health


def test_all_schedulable_and_ready_passes():
    [f] = check_node_health(kobs(), b.context())
    assert f.tag is Tag.PASS and "2 HyperPod node" in f.message


def test_pending_reboot_from_real_output_says_hyperpod_is_rebooting():
    # GIVEN kgn-pending-reboot-notready: FAULTY NotReady + UnschedulablePendingReboot
    nodes = [knode(FAULTY, health="UnschedulablePendingReboot", ready="Unknown"), knode(HEALTHY)]
    # WHEN
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    # THEN one WARN P1 F, not a second FAIL for NotReady, and HyperPod is named as the actor
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "F")
    assert f.instance_id == FAULTY_ID and f.instance_group == "workers"
    assert f.node_action == "investigate"
    assert "rebooting" in f.message and "already rebooting" in (f.next_step or "")
    assert f"label {LABEL_HEALTH}=UnschedulablePendingReboot" in f.evidence


def test_pending_replacement_from_real_output_says_hyperpod_is_replacing():
    nodes = [knode(FAULTY, health="UnschedulablePendingReplacement", ready="Unknown"), knode(HEALTHY)]
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.WARN, Priority.P1, "F", "investigate")
    assert "replacing" in f.message and "20–30 minutes" in (f.next_step or "")
    assert not any(c.mutates for c in f.suggested_commands)


def test_hero_demo_pending_reboot_node_is_the_only_problem():
    # GIVEN kgn-hero-demo-pending-reboot-3col: one NotReady g5 node PendingReboot among Schedulable ones
    nodes = [
        knode("hyperpod-i-00032a01f65f15741", group="controller-group"),
        knode(HERO_FAULTY, health="UnschedulablePendingReboot", ready="False"),
        knode("hyperpod-i-08335947b01f32169"),
        knode("hyperpod-i-0fc9b9f110fa4a55c"),
    ]
    found = problems(check_node_health(kobs(nodes=nodes), b.context()))
    assert [f.instance_id for f in found] == ["i-076a8fd1fb47273d2"]


@pytest.mark.parametrize("ready", ["False", "Unknown", None])
def test_not_ready_node_without_pending_recovery_fails(ready):
    # GIVEN a Schedulable HyperPod node whose Ready condition is not True (or missing)
    nodes = [knode(FAULTY, ready=ready), knode(HEALTHY)]
    # WHEN
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    # THEN FAIL P1 F with a read-only describe command
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "F", "investigate")
    [cmd] = f.suggested_commands
    assert not cmd.mutates and shlex.split(cmd.command) == ["kubectl", "describe", "node", FAULTY]


def test_unschedulable_during_deep_health_check_is_info():
    nodes = [knode(FAULTY, health="Unschedulable", dhc="InProgress"), knode(HEALTHY)]
    findings = check_node_health(kobs(nodes=nodes), b.context())
    [f] = [f for f in findings if f.instance_id == FAULTY_ID]
    assert (f.tag, f.priority) == (Tag.INFO, Priority.P2)
    assert "deep health checks" in f.message and "hours" in (f.root_cause or "")
    assert not problems(findings)


def test_unschedulable_without_deep_health_check_is_a_p2_warning():
    nodes = [knode(FAULTY, health="Unschedulable"), knode(HEALTHY)]
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P2, "F")
    assert "held" in f.message


def test_unrecognised_health_value_is_reported_not_passed():
    nodes = [knode(FAULTY, health="SomethingNew")]
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    assert "SomethingNew" in f.message


def test_evidence_carries_labels_taints_fault_details_and_fault_conditions():
    # GIVEN a node the health agent marked: labels, taint, fault-details JSON, a fault condition
    details = [
        {
            "timestamp": "2026-11-30T11:50:00Z",
            "type": "NvidiaErrorTerminate",
            "reason": "NvidiaXID79Error",
            "message": "GPU has fallen off the bus",
        }
    ]
    node = knode(
        FAULTY,
        health="UnschedulablePendingReplacement",
        ready="True",
        labels={LABEL_FAULT_TYPES: "NvidiaErrorTerminate", LABEL_FAULT_REASONS: "NvidiaXID79Error"},
        annotations={ANNOTATION_FAULT_DETAILS: json.dumps(details)},
        taints=({"key": LABEL_HEALTH, "value": "Unschedulable", "effect": "NoSchedule"},),
        conditions=(
            {"type": "NvidiaErrorTerminate", "status": "True", "reason": "NvidiaXID79Error", "message": "GPU lost"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "NetworkUnavailable", "status": "True", "reason": "standard type, not a fault"},
        ),
    )
    # WHEN
    [f] = problems(check_node_health(kobs(nodes=[node]), b.context()))
    text = "\n".join(f.evidence)
    # THEN
    assert f"label {LABEL_FAULT_TYPES}=NvidiaErrorTerminate" in f.evidence
    assert f"label {LABEL_FAULT_REASONS}=NvidiaXID79Error" in f.evidence
    assert f"taint {LABEL_HEALTH}=Unschedulable:NoSchedule" in f.evidence
    assert "fault-details: timestamp=2026-11-30T11:50:00Z type=NvidiaErrorTerminate reason=NvidiaXID79Error" in text
    assert "condition NvidiaErrorTerminate=True reason=NvidiaXID79Error" in text
    assert "MemoryPressure" not in text and "NetworkUnavailable" not in text
    assert "condition Ready" not in text  # Ready=True is not evidence of a fault


@pytest.mark.parametrize("raw", ["{not json", '[{"type": ', "\u0000\u0001garbage"])
def test_malformed_fault_details_is_evidence_not_a_crash(raw):
    node = knode(FAULTY, health="UnschedulablePendingReboot", annotations={ANNOTATION_FAULT_DETAILS: raw})
    [f] = problems(check_node_health(kobs(nodes=[node]), b.context()))
    assert any(line.startswith("unparseable fault-details") for line in f.evidence)


def test_fault_details_object_instead_of_list_is_still_read():
    raw = json.dumps({"type": "NetworkFaultType", "reason": "EfaLinkDown"})
    node = knode(FAULTY, health="UnschedulablePendingReboot", annotations={ANNOTATION_FAULT_DETAILS: raw})
    [f] = problems(check_node_health(kobs(nodes=[node]), b.context()))
    assert "fault-details: type=NetworkFaultType reason=EfaLinkDown" in f.evidence


def test_nodes_without_hyperpod_labels_are_not_problems():
    # GIVEN a managed-node-group node with no sagemaker.amazonaws.com/ labels, NotReady, next to
    # healthy HyperPod nodes (a `notin (Schedulable)` selector would have matched it)
    other = knode("ip-10-0-1-23.us-west-2.compute.internal", ready="False", hyperpod=False)
    # WHEN
    findings = check_node_health(kobs(nodes=[other, knode(HEALTHY), knode(FAULTY)]), b.context())
    # THEN no problem, and the PASS says one node was not assessed
    assert not problems(findings)
    [f] = findings
    assert f.tag is Tag.PASS and "1 node(s) without HyperPod labels were not assessed" in f.message


def test_ignored_nodes_are_mentioned_next_to_real_problems():
    other = knode("ip-10-0-1-23.us-west-2.compute.internal", hyperpod=False)
    findings = check_node_health(kobs(nodes=[other, knode(FAULTY, health="UnschedulablePendingReboot")]), b.context())
    assert [f.instance_id for f in problems(findings)] == [FAULTY_ID]
    assert any(f.tag is Tag.INFO and "1 node(s) without HyperPod labels" in f.message for f in findings)


def test_no_hyperpod_nodes_at_all_is_info_not_pass():
    other = knode("ip-10-0-1-23.us-west-2.compute.internal", hyperpod=False)
    [f] = check_node_health(kobs(nodes=[other]), b.context())
    assert f.tag is Tag.INFO and "No HyperPod-labelled node" in f.message


def test_scope_node_limits_node_findings():
    nodes = [knode(FAULTY, ready="False"), knode(HEALTHY, ready="False")]
    found = problems(check_node_health(kobs(nodes=nodes), b.context(scope_node="i-06c561302ab149bb7")))
    assert [f.instance_id for f in found] == ["i-06c561302ab149bb7"]


@pytest.mark.parametrize("hostile", ["hyperpod-i-0aaa;rm -rf /", "$(id)", "a b'c\"d", "`reboot`"])
def test_hostile_node_names_stay_one_shell_token(hostile):
    nodes = [knode(hostile, ready="False")]
    [f] = problems(check_node_health(kobs(nodes=nodes), b.context()))
    for cmd in f.suggested_commands:
        assert shlex.split(cmd.command)[-1] == hostile


def test_unreadable_node_list_propagates_for_node_health():
    with pytest.raises(Unobservable):
        check_node_health(kobs(nodes=Observed.failed(DENIED)), b.context())


# --------------------------------------------------------------------------- pending_recovery


def test_pending_recovery_maps_instance_to_reason():
    nodes = [
        knode(FAULTY, health="UnschedulablePendingReplacement", ready="Unknown"),
        knode(HERO_FAULTY, health="UnschedulablePendingReboot"),
        knode(HEALTHY),
        knode("hyperpod-i-0cfc430f774dd4b1a", health="Unschedulable"),
    ]
    found = pending_recovery(kobs(nodes=nodes))
    assert set(found) == {FAULTY_ID, "i-076a8fd1fb47273d2"}
    assert "UnschedulablePendingReplacement" in found[FAULTY_ID]
    assert "UnschedulablePendingReboot" in found["i-076a8fd1fb47273d2"]


def test_pending_recovery_is_empty_when_nothing_could_be_seen():
    assert pending_recovery(b.observation(kubernetes=Observed.failed(DENIED))) == {}
    assert pending_recovery(kobs(nodes=Observed.failed(DENIED))) == {}
    slurm = kobs(nodes=[knode(FAULTY, health="UnschedulablePendingReboot")], cluster=b.cluster(orchestrator="Slurm"))
    assert pending_recovery(slurm) == {}


# --------------------------------------------------------------------------- k8s.deep_health


def test_deep_health_passed_or_not_run_passes():
    nodes = [knode(FAULTY, dhc="Passed"), knode(HEALTHY)]
    [f] = check_deep_health(kobs(nodes=nodes), b.context())
    assert f.tag is Tag.PASS and "1 Passed, 1 without" in f.evidence[0]


def test_failed_deep_health_check_is_a_real_finding():
    # GIVEN deep-health-check-status=Failed (upstream only printed it; no issue, no exit code)
    nodes = [knode(FAULTY, health="Unschedulable", dhc="Failed"), knode(HEALTHY, dhc="Passed")]
    # WHEN
    findings = check_deep_health(kobs(nodes=nodes), b.context())
    # THEN a FAIL P1 G finding that counts toward the exit code
    [f] = problems(findings)
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P1, "G")
    assert f.blocks_or_degrades
    assert f.instance_id == FAULTY_ID and f.node_action == "investigate"
    assert not any(x.tag is Tag.PASS for x in findings)


def test_failed_deep_health_check_notes_recovery_already_under_way():
    nodes = [knode(FAULTY, health="UnschedulablePendingReplacement", dhc="Failed")]
    [f] = problems(check_deep_health(kobs(nodes=nodes), b.context()))
    assert "already acting" in (f.root_cause or "") and f.node_action == "investigate"


def test_deep_health_in_progress_is_info():
    nodes = [knode(FAULTY, health="Unschedulable", dhc="InProgress")]
    findings = check_deep_health(kobs(nodes=nodes), b.context())
    assert not problems(findings)
    assert any(f.tag is Tag.INFO and f.instance_id == FAULTY_ID for f in findings)


# --------------------------------------------------------------------------- k8s.cni


def test_cni_healthy_passes():
    [f] = check_cni(kobs(), b.context())
    assert f.tag is Tag.PASS and f.section == "O"


def test_cni_daemonset_missing_is_info():
    [f] = check_cni(kobs(daemonsets=[ds(name="kube-proxy")]), b.context())
    assert f.tag is Tag.INFO and "another CNI" in f.message


def test_cni_daemonset_with_no_desired_pods_warns():
    [f] = check_cni(kobs(daemonsets=[ds(0, 0)], pods=[]), b.context())
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P2)


def test_cni_unreadable_daemonsets_propagate():
    with pytest.raises(Unobservable):
        check_cni(kobs(daemonsets=Observed.failed(DENIED)), b.context())


def _crashing_cni():
    pods = [
        aws_node_pod("aws-node-7xk2p", HEALTHY),
        aws_node_pod(
            "aws-node-q9m4d", FAULTY, state="waiting", reason="CrashLoopBackOff", ready=False, restarts=14, last="Error"
        ),
    ]
    events = [
        K8sEvent(
            "default",
            "FailedCreatePodSandBox",
            'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox: plugin type="aws-cni" name="aws-cni" failed (add): add cmd: Error received from AddNetwork gRPC call: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:50051: connect: connection refused"',
            "Pod",
            "train-0",
            7,
            datetime(2026, 11, 30, 11, 55, tzinfo=UTC),
            "Warning",
        ),
        K8sEvent("default", "FailedCreatePodSandBox", "failed to mount volume", "Pod", "other", 1, None, "Warning"),
    ]
    return kobs(daemonsets=[ds(2, 1, 1)], pods=pods, events=events)


def test_aws_node_problem_is_counted_once():
    # GIVEN the DaemonSet reports 1 of 2 unavailable AND its pod is in CrashLoopBackOff AND a
    # sandbox event shows 127.0.0.1:50051 refused: three views of one problem
    findings = check_cni(_crashing_cni(), b.context())
    # THEN exactly one FAIL P0 O, carrying the pod-level and event-level views as evidence
    [f] = findings
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "O")
    text = "\n".join(f.evidence)
    assert "desired=2 ready=1" in text
    assert (
        "pod aws-node-q9m4d on hyperpod-i-0220224e40218ce3a: container aws-node, waiting/CrashLoopBackOff, restarts=14, last terminated: Error"
        in text
    )
    assert "127.0.0.1:50051" in text and "train-0" in text
    assert "failed to mount volume" not in text
    assert "aws-node-7xk2p" not in text


def test_logs_command_names_the_container():
    [f] = check_cni(_crashing_cni(), b.context())
    argvs = [shlex.split(c.command) for c in f.suggested_commands]
    logs = [a for a in argvs if "logs" in a]
    assert logs == [
        ["kubectl", "-n", "kube-system", "logs", "aws-node-q9m4d", "-c", "aws-node", "--previous", "--tail", "100"]
    ]
    assert ["kubectl", "-n", "kube-system", "describe", "pod", "aws-node-q9m4d"] in argvs
    assert not any("-l" in a for a in logs)


def test_cni_restart_is_mutating_with_blast_radius_and_comes_after_investigation():
    [f] = check_cni(_crashing_cni(), b.context())
    [restart] = [c for c in f.suggested_commands if c.mutates]
    assert shlex.split(restart.command) == ["kubectl", "-n", "kube-system", "delete", "pod", "aws-node-q9m4d"]
    assert restart.step == "change" and "keep their IPs" in (restart.blast_radius or "")
    assert restart.preconditions and "No infrastructure-as-code drift" in (restart.iac_warning or "")
    assert f.suggested_commands[-1] is restart or f.suggested_commands[-1] == restart


def test_cni_failing_node_agent_container_is_named():
    bad = pod(
        "aws-node-zz1",
        "aws-node",
        FAULTY,
        container("aws-node"),
        container("aws-eks-nodeagent", state="waiting", reason="ImagePullBackOff", ready=False),
    )
    [f] = check_cni(kobs(daemonsets=[ds(2, 1, 1)], pods=[bad]), b.context())
    assert any("container aws-eks-nodeagent, waiting/ImagePullBackOff" in line for line in f.evidence)
    assert any(
        shlex.split(c.command)[5:7] == ["-c", "aws-eks-nodeagent"] for c in f.suggested_commands if "logs" in c.command
    )


def test_cni_pods_failing_while_daemonset_counts_lag_is_still_one_fail():
    pods = [aws_node_pod("aws-node-q9m4d", FAULTY, state="waiting", reason="Error", ready=False, restarts=3)]
    [f] = check_cni(kobs(pods=pods), b.context())
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0)


def test_cni_unhealthy_daemonset_without_pod_list_still_fails_with_a_listing_command():
    findings = check_cni(kobs(daemonsets=[ds(2, 1, 1)], pods=Observed.failed(DENIED)), b.context())
    [f] = findings
    assert f.tag is Tag.FAIL
    assert "aws-node pods could not be listed" in f.evidence
    assert not any(c.mutates for c in f.suggested_commands)


def test_cni_sandbox_events_with_healthy_aws_node_are_a_separate_warning():
    obs = _crashing_cni()
    events = obs.kubernetes.value.sandbox_events
    [f] = check_cni(kobs(events=events), b.context())
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "O")
    assert any("50051" in line for line in f.evidence)


@pytest.mark.parametrize("hostile", ["aws-node-$(id)", "aws-node-x;reboot", "aws node 'q'"])
def test_hostile_pod_names_stay_one_shell_token(hostile):
    pods = [aws_node_pod(hostile, FAULTY, state="waiting", reason="CrashLoopBackOff", ready=False)]
    [f] = check_cni(kobs(daemonsets=[ds(1, 0, 1)], pods=pods), b.context())
    for cmd in f.suggested_commands:
        assert hostile in shlex.split(cmd.command)


# --------------------------------------------------------------------------- k8s.system_pods


def test_system_pods_healthy_passes():
    [f] = check_system_pods(kobs(), b.context())
    assert f.tag is Tag.PASS and "kube-proxy" in f.message and "CoreDNS" in f.message


@pytest.mark.parametrize("reason", ["CrashLoopBackOff", "Error", "ImagePullBackOff"])
def test_coredns_crash_is_p0_and_kube_proxy_is_not_blamed(reason):
    pods = [
        pod("kube-proxy-5gq8n", "kube-proxy", HEALTHY),
        pod(
            "coredns-6b9575c64c-8zv2l",
            "kube-dns",
            HEALTHY,
            container("coredns", state="waiting", reason=reason, ready=False, restarts=9),
        ),
        pod("coredns-6b9575c64c-abcde", "kube-dns", FAULTY, container("coredns")),
    ]
    [f] = problems(check_system_pods(kobs(pods=pods), b.context()))
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "O")
    assert f.message.startswith("CoreDNS is crashing (1 of 2")
    assert any(
        shlex.split(c.command)[-5:] == ["-c", "coredns", "--previous", "--tail", "100"] for c in f.suggested_commands
    )


def test_kube_proxy_and_coredns_crashing_give_one_finding_each():
    pods = [
        pod(
            "kube-proxy-a",
            "kube-proxy",
            HEALTHY,
            container("kube-proxy", state="waiting", reason="CrashLoopBackOff", ready=False),
        ),
        pod(
            "kube-proxy-b",
            "kube-proxy",
            FAULTY,
            container("kube-proxy", state="waiting", reason="CrashLoopBackOff", ready=False),
        ),
        pod("coredns-a", "kube-dns", HEALTHY, container("coredns", state="terminated", reason="Error", ready=False)),
    ]
    found = problems(check_system_pods(kobs(pods=pods), b.context()))
    assert sorted(f.message.split(" ")[0] for f in found) == ["CoreDNS", "kube-proxy"]
    [proxy] = [f for f in found if f.message.startswith("kube-proxy")]
    assert len(proxy.evidence) == 2


def test_starting_pod_is_not_a_crash():
    pods = [
        pod(
            "kube-proxy-5gq8n",
            "kube-proxy",
            HEALTHY,
            container("kube-proxy", state="waiting", reason="ContainerCreating", ready=False),
        ),
        pod("coredns-a", "kube-dns", HEALTHY, container("coredns")),
    ]
    assert not problems(check_system_pods(kobs(pods=pods), b.context()))


def test_missing_component_is_info_not_pass_for_it():
    pods = [pod("coredns-a", "kube-dns", HEALTHY, container("coredns"))]
    findings = check_system_pods(kobs(pods=pods), b.context())
    assert any(f.tag is Tag.INFO and "kube-proxy" in f.message for f in findings)
    [passed] = [f for f in findings if f.tag is Tag.PASS]
    assert "kube-proxy" not in passed.message


def test_system_pods_unreadable_propagates():
    with pytest.raises(Unobservable):
        check_system_pods(kobs(pods=Observed.failed(DENIED)), b.context())


# --------------------------------------------------------------------------- k8s.hyperpod_namespace


def test_namespace_present_passes():
    [f] = check_hyperpod_namespace(kobs(), b.context())
    assert f.tag is Tag.PASS and f.section == "B.1"


def test_namespace_missing_fails_with_a_guarded_create():
    # GIVEN a namespace list without aws-hyperpod
    [f] = check_hyperpod_namespace(kobs(namespaces=["default", "kube-system"]), b.context())
    # THEN FAIL P1 B.1: read-only confirmation first, then the mutating create
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P1, "B.1")
    confirm, create = f.suggested_commands
    assert not confirm.mutates and shlex.split(confirm.command) == ["kubectl", "get", "namespace", "aws-hyperpod"]
    assert create.mutates and shlex.split(create.command) == ["kubectl", "create", "namespace", "aws-hyperpod"]
    assert create.resource == b.eks().arn
    assert create.step == "change" and "managed as code" in (create.iac_warning or "")
    assert any("RBAC" in p for p in create.preconditions)


def test_namespace_missing_falls_back_to_the_cluster_eks_arn():
    obs = kobs(namespaces=["default"], eks=Observed.failed(ApiFailure("eks:DescribeCluster", "denied", "no")))
    [f] = check_hyperpod_namespace(obs, b.context())
    assert f.suggested_commands[1].resource == b.cluster().eks_cluster_arn


def test_namespace_list_unreadable_propagates():
    with pytest.raises(Unobservable):
        check_hyperpod_namespace(kobs(namespaces=Observed.failed(DENIED)), b.context())


# --------------------------------------------------------------------------- k8s.efa_device_plugin
# Nodes as the API returns them (tests/fixtures/k8s/nodes.json: four ml.p5.48xlarge HyperPod nodes whose
# status.allocatable carries vpc.amazonaws.com/efa "32", what the EFA device plugin advertises for the 32
# EFA interfaces of a p5.48xlarge, one ml.m5.12xlarge HyperPod node and one EKS node), through our parser.

K8S_FIXTURES = Path(__file__).parents[1] / "fixtures" / "k8s"


def fixture_nodes(*, changed: int = 0, efa: str | None = None) -> list[K8sNode]:
    raw = json.loads((K8S_FIXTURES / "nodes.json").read_text())["items"]
    efa_nodes = [i for i in raw if "vpc.amazonaws.com/efa" in i["status"].get("allocatable", {})]
    for item in efa_nodes[:changed]:
        if efa is None:
            item["status"]["allocatable"].pop("vpc.amazonaws.com/efa", None)
        else:
            item["status"]["allocatable"]["vpc.amazonaws.com/efa"] = efa
    return [parse_node(item) for item in raw]


def test_every_efa_capable_node_advertising_efa_passes():
    (result,) = check_efa_device_plugin(kobs(nodes=fixture_nodes()), b.context())
    assert result.tag is Tag.PASS and "(4)" in result.message and result.section == "A"


@pytest.mark.parametrize("efa", [None, "0"], ids=["absent", "zero"])
def test_nodes_without_the_efa_resource_fail_naming_them(efa):
    nodes = fixture_nodes(changed=2, efa=efa)
    (result,) = check_efa_device_plugin(kobs(nodes=nodes), b.context())
    assert (result.tag, result.priority, result.section) == (Tag.FAIL, Priority.P1, "A")
    assert result.message.startswith("2 of 4 EFA-capable HyperPod node(s) advertise no vpc.amazonaws.com/efa")
    assert "TCP" in result.message
    assert all(nodes[i].name in " ".join(result.evidence) for i in range(2))
    assert not any(c.mutates for c in result.suggested_commands)


def test_a_plugin_daemonset_scheduling_nothing_is_named_as_the_cause():
    plugin = ds(0, 0, name="aws-efa-k8s-device-plugin-daemonset")
    (result,) = check_efa_device_plugin(kobs(nodes=fixture_nodes(changed=4), daemonsets=[ds(), plugin]), b.context())
    assert result.tag is Tag.FAIL and "DESIRED 0" in result.message


def test_no_plugin_daemonset_at_all_is_said():
    (result,) = check_efa_device_plugin(kobs(nodes=fixture_nodes(changed=4)), b.context())
    assert "no EFA device plugin DaemonSet in kube-system" in result.message


def test_nodes_of_types_without_efa_are_not_judged():
    with pytest.raises(NotApplicable):
        check_efa_device_plugin(
            kobs(nodes=[knode(HEALTHY, labels={"node.kubernetes.io/instance-type": "ml.g5.8xlarge"})]), b.context()
        )
