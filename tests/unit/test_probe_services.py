"""Node services: SSM agent under either unit name; containerd/kubelet only on EKS; slurmd, slurmctld and
munge only on the Slurm role that needs them."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe import services
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.services import check_services

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "services"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
COMMAND = 'for u in …; do echo "$u $(systemctl is-active $u)"; done'


def fx(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8", errors="replace")


def doc(stdout: str | ProbeItem | None) -> ProbeDocument:
    items = {}
    if stdout is not None:
        items["systemctl_is_active"] = stdout if isinstance(stdout, ProbeItem) else ProbeItem(COMMAND, 0, stdout)
    return ProbeDocument(hostname="ip-10-1-2-3", collected_at=NOW, uptime_s=86400.0, items=items)


def ctx(orchestrator=None, role="compute") -> ProbeContext:
    return ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, orchestrator=orchestrator, role=role)


def problems(findings):
    return [f for f in findings if f.is_problem]


# --------------------------------------------------------------------------- healthy per orchestrator and role


@pytest.mark.parametrize(
    ("name", "orchestrator", "role"),
    [
        ("rec-is-active-eks-healthy.txt", "EKS", "compute"),
        ("rec-is-active-slurm-compute-healthy.txt", "Slurm", "compute"),
        ("rec-is-active-slurm-controller-healthy.txt", "Slurm", "controller"),
    ],
)
def test_given_the_services_a_role_needs_are_active_when_checked_then_one_pass(name, orchestrator, role):
    # GIVEN a node whose needed units are active and the others inactive
    findings = check_services(doc(fx(name)), ctx(orchestrator, role))
    # WHEN judged  THEN one PASS (units it does not need being inactive is fine)
    assert [f.tag for f in findings] == [Tag.PASS]


def test_given_a_slurm_node_without_containerd_when_checked_then_containerd_is_not_judged():
    # GIVEN a Slurm compute node: containerd and kubelet inactive (Slurm runs neither)
    findings = check_services(doc(fx("rec-is-active-slurm-compute-healthy.txt")), ctx("Slurm"))
    # WHEN judged  THEN no finding about containerd
    assert not problems(findings) and not any("containerd" in f.message for f in findings)


# --------------------------------------------------------------------------- EKS


def test_given_eks_with_containerd_inactive_when_checked_then_fail_p0_in_m():
    text = fx("rec-is-active-eks-healthy.txt").replace("containerd active", "containerd inactive")
    (f,) = problems(check_services(doc(text), ctx("EKS")))
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "M", "investigate")
    assert f.message.startswith("containerd is not running (inactive) on this EKS node")
    assert f.evidence == ["containerd inactive"]
    assert all(not c.mutates for c in f.suggested_commands)


def test_given_eks_with_kubelet_not_installed_when_checked_then_fail_p0_not_installed():
    text = fx("rec-is-active-eks-healthy.txt").replace("kubelet active", "kubelet unknown")
    (f,) = problems(check_services(doc(text), ctx("EKS")))
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "M") and "kubelet is not installed" in f.message


def test_given_eks_kubelet_activating_and_no_ssm_agent_when_checked_then_warn_p2_and_warn_p1_k():
    # GIVEN kubelet `activating` and both SSM unit names inactive
    findings = problems(check_services(doc(fx("rec-is-active-eks-kubelet-activating-no-ssm.txt")), ctx("EKS")))
    by_section = {f.section: f for f in findings}
    # WHEN judged  THEN the SSM agent is WARN P1 § K "as reported", kubelet WARN P2 § M
    assert (by_section["K"].tag, by_section["K"].priority) == (Tag.WARN, Priority.P1)
    assert "as reported" in by_section["K"].message
    assert (by_section["M"].tag, by_section["M"].priority) == (Tag.WARN, Priority.P2)
    assert by_section["M"].message.startswith("kubelet is activating")


def test_given_the_real_kubelet_auto_restart_status_when_on_eks_then_crash_loop_is_a_fail():
    # GIVEN the real `systemctl status kubelet`: activating (auto-restart), exit 255
    findings = check_services(doc(fx("kubelet-eks-activating-auto-restart-exit255.txt")), ctx("EKS"))
    # WHEN judged  THEN FAIL P0 § M (a crash loop, not a start-up), evidence the Active line
    (f,) = problems(findings)
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "M")
    assert "(activating (auto-restart))" in f.message
    assert f.evidence[-1].startswith("Active: activating (auto-restart)")


def test_given_an_unknown_orchestrator_when_containerd_is_down_then_it_is_not_judged():
    text = fx("rec-is-active-eks-healthy.txt").replace("containerd active", "containerd failed")
    (f,) = check_services(doc(text), ctx(None))
    assert f.tag is Tag.PASS and any("orchestrator unknown" in e for e in f.evidence)


# --------------------------------------------------------------------------- Slurm


def test_given_slurm_compute_with_slurmd_failed_when_checked_then_fail_p0_in_h():
    (f,) = problems(check_services(doc(fx("rec-is-active-slurm-compute-slurmd-failed.txt")), ctx("Slurm")))
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "H", "investigate")
    assert f.message.startswith("slurmd is not running (failed) on this Slurm compute node")


def test_given_slurm_compute_with_munge_inactive_when_checked_then_fail_p0_in_h():
    text = fx("rec-is-active-slurm-compute-healthy.txt").replace("munge active", "munge inactive")
    (f,) = problems(check_services(doc(text), ctx("Slurm", "compute")))
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "H") and f.message.startswith("munge")


def test_given_slurm_controller_with_slurmctld_down_when_checked_then_fail_p0_but_slurmd_is_not_needed():
    # GIVEN a controller whose slurmctld is inactive and slurmd inactive
    text = fx("rec-is-active-slurm-controller-healthy.txt").replace("slurmctld active", "slurmctld inactive")
    (f,) = problems(check_services(doc(text), ctx("Slurm", "controller")))
    # WHEN judged  THEN only slurmctld fails
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "H") and f.message.startswith("slurmctld")


def test_given_slurm_controller_without_munge_installed_when_checked_then_fail_p0():
    text = fx("rec-is-active-slurm-controller-healthy.txt").replace("munge active", "munge not-found")
    (f,) = problems(check_services(doc(text), ctx("Slurm", "controller")))
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0) and "munge is not installed" in f.message


def test_given_a_slurm_compute_node_with_slurmctld_inactive_when_checked_then_that_is_normal():
    (f,) = check_services(doc(fx("rec-is-active-slurm-compute-healthy.txt")), ctx("Slurm", "compute"))
    assert f.tag is Tag.PASS


def test_given_the_real_slurmd_status_inactive_when_on_slurm_compute_then_fail_p0():
    # GIVEN the real `systemctl status slurmd` (inactive, ConditionPathExists not met)
    findings = check_services(doc(fx("slurmd-inactive-condition-slurm-conf-missing.txt")), ctx("Slurm"))
    # WHEN judged  THEN slurmd FAIL P0; munge is absent from the output and is not judged
    (f,) = problems(findings)
    assert f.message.startswith("slurmd is not running (inactive (dead))")


def test_given_reloading_slurmd_when_checked_then_warn_p2():
    text = fx("rec-is-active-slurm-compute-healthy.txt").replace("slurmd active", "slurmd reloading")
    (f,) = problems(check_services(doc(text), ctx("Slurm")))
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P2, "H")


# --------------------------------------------------------------------------- SSM agent


def test_given_only_the_snap_ssm_unit_active_when_checked_then_the_agent_counts_as_running():
    text = fx("rec-is-active-eks-healthy.txt").replace("amazon-ssm-agent active", "amazon-ssm-agent inactive", 1)
    text = text.replace(
        "snap.amazon-ssm-agent.amazon-ssm-agent inactive", "snap.amazon-ssm-agent.amazon-ssm-agent active"
    )
    (f,) = check_services(doc(text), ctx("EKS"))
    assert f.tag is Tag.PASS


def test_given_the_real_not_found_ssm_unit_alone_when_checked_then_no_conclusion_about_the_agent():
    # GIVEN the real `amazon-ssm-agent.service not-found` block, the snap unit not reported
    # WHEN judged  THEN no WARN: both names are needed before concluding the agent is missing,
    # and with nothing else to judge the check is skipped with that reason
    with pytest.raises(NotApplicable, match="both unit names"):
        check_services(doc(fx("amazon-ssm-agent-unit-not-found.txt")), ctx())


def test_given_both_ssm_units_not_found_when_checked_then_warn_p1_k():
    text = "amazon-ssm-agent not-found\nsnap.amazon-ssm-agent.amazon-ssm-agent unknown\n"
    (f,) = check_services(doc(text), ctx())
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "K")
    assert f.node_action is None


def test_given_the_real_active_ssm_status_with_mojibake_when_checked_then_pass():
    (f,) = check_services(doc(fx("amazon-ssm-agent-active-running-ko-mojibake-date.txt")), ctx())
    assert f.tag is Tag.PASS


# --------------------------------------------------------------------------- item handling


def test_given_is_active_exit_3_with_not_found_stderr_when_checked_then_the_output_is_still_judged():
    # GIVEN the item exited 3 (a unit inactive) and stderr mentions a unit "not found"
    item = ProbeItem(COMMAND, 3, fx("rec-is-active-slurm-compute-slurmd-failed.txt"), "Unit slurmd.service not found.")
    # WHEN judged  THEN the output is read (not taken for a missing systemctl)
    (f,) = problems(check_services(doc(item), ctx("Slurm")))
    assert f.message.startswith("slurmd")


def test_given_bare_states_when_checked_on_eks_then_they_are_mapped_and_judged():
    (f,) = problems(check_services(doc(fx("rec-is-active-bare-states.txt")), ctx("EKS")))
    assert f.message.startswith("kubelet is not running (failed)")


def test_given_no_item_garbage_or_timeout_when_checked_then_skip_or_unknown():
    with pytest.raises(NotApplicable):
        check_services(doc(None), ctx("EKS"))
    with pytest.raises(NotApplicable, match="no readable"):
        check_services(doc("\x00\x01garbage\n"), ctx("EKS"))
    with pytest.raises(NotApplicable, match="not installed"):
        check_services(doc(ProbeItem(COMMAND, 127, "", "systemctl: command not found")), ctx("EKS"))
    with pytest.raises(Unobservable):
        check_services(doc(ProbeItem(COMMAND, 124, "")), ctx("EKS"))


def test_given_a_truncated_item_when_a_unit_fails_then_evidence_says_output_truncated():
    text = "amazon-ssm-agent active\nsnap.amazon-ssm-agent.amazon-ssm-agent inactive\ncontainerd failed\n[hyperpod-debugger: output truncated]\n"
    (f,) = problems(check_services(doc(ProbeItem(COMMAND, 0, text, truncated=True)), ctx("EKS")))
    assert f.message.startswith("containerd") and any("output truncated" in e for e in f.evidence)


def test_the_module_exports_the_services_check():
    assert [c.id for c in services.CHECKS] == ["probe.services"]
