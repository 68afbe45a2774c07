"""Regression tests through the whole probe registry, one per misreading of the probe this project replaced:
a folder that is not a mount point judged for usage, a panic in the previous boot missed, containerd judged on
Slurm, the SSM shell's environment read as the job's, a missing time tool called unhealthy, the clock offset not
judged as a number, oom_score_adj lines and old OOM kills counted as kills now."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.registry import evaluate

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _doc(**items: str | ProbeItem) -> ProbeDocument:
    return ProbeDocument(
        hostname="ip-10-1-2-3",
        collected_at=NOW,
        uptime_s=6 * 3600.0,
        items={
            k: v if isinstance(v, ProbeItem) else ProbeItem(command=k, exit_code=0, stdout=v) for k, v in items.items()
        },
    )


def _run(doc: ProbeDocument, **ctx):
    findings, coverage = evaluate(
        doc, ProbeContext(instance_type=ctx.pop("instance_type", "ml.p5.48xlarge"), now=NOW, **ctx)
    )
    return findings, {c.check: c for c in coverage}


def _problems(findings, check):
    return [f for f in findings if f.check == check and f.tag in (Tag.FAIL, Tag.WARN)]


def test_a_folder_that_is_not_a_mount_point_gets_no_usage_verdict():
    # GIVEN /opt/sagemaker exists only as a folder on a 95 %-full root: df -P reports the root for it
    df = (
        "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
        "/dev/nvme0n1p1     104857600  99614720   5242880      95% /\n"
    )
    findmnt = json.dumps({"filesystems": [{"target": "/", "source": "/dev/nvme0n1p1", "fstype": "xfs"}]})
    findings, _ = _run(_doc(df=df, findmnt=findmnt))
    # THEN the root is judged, and no finding claims /opt/sagemaker is full
    assert _problems(findings, "probe.root_volume")
    assert not any("/opt/sagemaker" in f.message for f in _problems(findings, "probe.data_volumes"))


def test_a_panic_in_the_previous_boot_is_found():
    # GIVEN this boot's log is clean and the panic that caused the reboot is in the previous boot
    previous = (
        "2026-11-30T05:30:00.000000+00:00 ip-10-1-2-3 kernel: Kernel panic - not syncing: "
        "Fatal exception in interrupt\n"
    )
    findings, _ = _run(_doc(kernel_log="", kernel_log_previous_boot=previous))
    [panic] = _problems(findings, "probe.kernel_faults")
    assert panic.section == "N" and panic.tag is Tag.FAIL


def test_containerd_is_not_judged_on_slurm():
    findings, _ = _run(
        _doc(systemctl_is_active="amazon-ssm-agent active\ncontainerd inactive\nslurmd active\nmunge active\n"),
        orchestrator="Slurm",
    )
    assert not any(f.section == "M" for f in findings if f.is_problem)


def test_no_check_reads_the_ssm_shell_environment():
    # The probe runs in an SSM shell, not in the job: its environment says nothing about the job's.
    from hyperpod_debugger.probe.registry import PROBE_CHECKS

    findings, coverage = _run(_doc(environment="FI_EFA_USE_HUGE_PAGE=1\n"))
    assert not any("FI_EFA_USE_HUGE_PAGE" in f.message for f in findings)
    assert all("env" not in c.id for c in PROBE_CHECKS)


def test_no_time_tool_is_skipped_not_unhealthy():
    missing = ProbeItem(command="chronyc tracking", exit_code=127, stdout="", stderr="chronyc: command not found")
    gone = ProbeItem(command="timedatectl show", exit_code=127, stdout="", stderr="timedatectl: command not found")
    findings, coverage = _run(_doc(chronyc_tracking=missing, timedatectl=gone))
    assert coverage["probe.clock"].status == "skipped"
    assert not _problems(findings, "probe.clock")


def test_the_clock_offset_is_judged_numerically():
    chrony = (
        "Reference ID    : A9FEA97B (169.254.169.123)\nStratum         : 4\n"
        "System time     : 2.500000000 seconds slow of NTP time\nLeap status     : Normal\n"
    )
    findings, _ = _run(_doc(chronyc_tracking=chrony))
    [f] = _problems(findings, "probe.clock")
    assert f.section == "I.5" and f.tag is Tag.FAIL


def test_oom_score_adj_lines_are_not_oom_kills():
    benign = (
        "2026-11-30T11:00:00.000000+00:00 ip-10-1-2-3 kernel: [  pid  ]   uid  tgid total_vm      rss "
        "pgtables_bytes swapents oom_score_adj name\n"
    )
    findings, _ = _run(_doc(kernel_log=benign))
    assert not _problems(findings, "probe.oom")


def test_an_old_oom_outside_the_window_is_history():
    old = (
        "2026-11-28T11:00:00.000000+00:00 ip-10-1-2-3 kernel: Out of memory: Killed process 4242 (python3) "
        "total-vm:123456kB\n"
    )
    findings, _ = _run(_doc(kernel_log=old), window=timedelta(hours=24))
    assert not _problems(findings, "probe.oom")
