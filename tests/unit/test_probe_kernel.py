"""Kernel-log evaluators: windowed Xid (§ G.1, probe/kernel.py), kernel faults (§ N, probe/kernel_faults.py),
OOM kills (§ I.3, probe/oom.py)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.domain.sections import is_section
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.kernel import CHECK_XID, CHECKS, check_xid
from hyperpod_debugger.probe.kernel_faults import CHECK_FAULTS, check_kernel_faults
from hyperpod_debugger.probe.oom import CHECK_OOM, check_oom, oom_kills
from hyperpod_debugger.probe.parse.klog import parse_log

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "kernel"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
FOUR_HOURS = 4 * 3600.0  # this boot began 2026-11-30T06:00Z
IID = "i-0123456789abcdef0"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def item(stdout: str, exit_code: int = 0, *, truncated: bool = False, stderr: str = "") -> ProbeItem:
    return ProbeItem(command="journalctl -k", exit_code=exit_code, stdout=stdout, stderr=stderr, truncated=truncated)


def doc(
    *, collected: datetime | None = NOW, uptime: float | None = FOUR_HOURS, **items: str | ProbeItem
) -> ProbeDocument:
    built = {key: value if isinstance(value, ProbeItem) else item(value) for key, value in items.items()}
    return ProbeDocument(hostname="ip-10-1-2-3", collected_at=collected, uptime_s=uptime, items=built)


def ctx(now: datetime = NOW, window: timedelta = timedelta(hours=24), instance_type: str = "ml.p5.48xlarge"):
    return ProbeContext(instance_type=instance_type, now=now, window=window, instance_id=IID)


def at(when: datetime) -> ProbeContext:
    return ctx(now=when)


def by_code(findings: list[Finding], code: int) -> Finding:
    (found,) = [f for f in findings if f.message.startswith(f"Xid {code} ")]
    return found


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [f.message for f in findings]
    return findings[0]


def journal(when: datetime, text: str) -> str:
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}+00:00 ip-10-1-2-3 kernel: {text}\n"


# --------------------------------------------------------------------------- the module's contract


def test_module_exports_the_three_kernel_log_checks_with_real_sections():
    # GIVEN / WHEN the exported checks
    # THEN ids, sections and callables are as the registry expects
    assert [c.id for c in CHECKS] == [CHECK_XID, CHECK_FAULTS, CHECK_OOM]
    assert [c.section for c in CHECKS] == ["G.1", "N", "I.3"]
    assert all(is_section(c.section) and callable(c.run) for c in CHECKS)


@pytest.mark.parametrize("check", [check_xid, check_kernel_faults, check_oom])
def test_checks_skip_when_the_kernel_log_item_is_absent(check):
    # GIVEN a document without a kernel_log item
    # WHEN each kernel-log check runs
    # THEN it is skipped (NotApplicable), never FAIL
    with pytest.raises(NotApplicable):
        check(doc(), ctx())


@pytest.mark.parametrize("check", [check_xid, check_kernel_faults, check_oom])
def test_checks_skip_when_no_log_tool_is_installed(check):
    # GIVEN a kernel_log item whose tool was not found (exit 127)
    # WHEN each kernel-log check runs
    # THEN it is skipped with that reason
    d = doc(kernel_log=item("", 127, stderr="journalctl: command not found"))
    with pytest.raises(NotApplicable):
        check(d, ctx())


@pytest.mark.parametrize("check", [check_xid, check_kernel_faults, check_oom])
def test_checks_are_unknown_when_the_log_command_timed_out(check):
    # GIVEN a kernel_log item stopped by the probe's timeout (exit 124)
    # WHEN each kernel-log check runs
    # THEN it reports that it could not look (Unobservable)
    with pytest.raises(Unobservable):
        check(doc(kernel_log=item("", 124)), ctx())


@pytest.mark.parametrize("check", [check_xid, check_kernel_faults, check_oom])
def test_healthy_journal_with_benign_keyword_lines_passes(check):
    # GIVEN a healthy p5 boot whose log still carries NMI/mce/oom_score_adj/NVRM words
    d = doc(kernel_log=fixture("rec-journal-short-iso-precise-healthy-p5.txt"))
    # WHEN each kernel-log check runs
    result = only(check(d, ctx()))
    # THEN it passes, without a priority
    assert result.tag is Tag.PASS and result.priority is None
    assert result.instance_id == IID


# --------------------------------------------------------------------------- probe.xid


def test_dbe_and_row_remap_xids_are_faults_to_reboot_and_the_contained_one_needs_no_node_action():
    # GIVEN the xid48/63/94 capture, evaluated the same afternoon
    d = doc(kernel_log=fixture("xid48-63-94-dbe-rowremap-iso.txt"), uptime=86400.0)
    findings = check_xid(d, at(datetime(2024, 11, 15, 18, 0, tzinfo=UTC)))
    # THEN one finding per code on GPU 0000:19:00. NVIDIA's Xid catalogue (analyzing-xid-catalog.html, read
    # 2026-12-04): 48 (DBE) asks for a GPU reset (FAIL P1, reboot); 63 (row marked for remapping) is
    # IGNORE / IGNORE: a WARN with no node action of its own (the 48 beside it carries the reboot); 94 is
    # contained (only the touching process was stopped, the remap happens at the next reset): WARN
    assert sorted(int(f.message.split()[1]) for f in findings) == [48, 63, 94]
    for f in findings:
        assert f.section == "G.1" and "0000:19:00" in f.message
    xid48 = by_code(findings, 48)
    assert (xid48.tag, xid48.priority, xid48.node_action) == (Tag.FAIL, Priority.P1, "reboot")
    xid63 = by_code(findings, 63)
    assert (xid63.tag, xid63.priority, xid63.node_action) == (Tag.WARN, Priority.P2, "investigate")
    assert "Xid 64" in xid63.message
    xid94 = by_code(findings, 94)
    assert (xid94.tag, xid94.node_action) == (Tag.WARN, "investigate") and "contained" in xid94.message
    assert "9 lines" in xid94.message and "2024-11-15T12:02:03Z" in xid94.message
    # AND the evidence is the driver's own lines, and the ECC/remap commands are offered read-only
    assert xid94.evidence[0].startswith("2024-11-15T12:02:03,506595+00:00 NVRM: Xid (PCI:0000:19:00): 94,")
    commands = " ".join(c.command for c in by_code(findings, 48).suggested_commands)
    assert "nvidia-smi -q -d ECC" in commands and "remapped_rows.pending" in commands
    assert not any(c.mutates for f in findings for c in f.suggested_commands)


def test_xid_lines_older_than_the_window_are_history_not_alerts():
    # GIVEN the same capture, looked at three days later
    d = doc(kernel_log=fixture("xid48-63-94-dbe-rowremap-iso.txt"), uptime=5 * 86400.0)
    result = only(check_xid(d, at(datetime(2024, 11, 18, 18, 0, tzinfo=UTC))))
    # THEN no Xid is reported
    assert result.tag is Tag.PASS and "last 24 h" in result.message


def test_a_wider_window_still_reaches_the_old_xids():
    # GIVEN the xid48 capture three days old and a 7-day window
    # WHEN probe.xid runs
    # THEN the old Xids count again (the window comes from the context)
    d = doc(kernel_log=fixture("xid48-63-94-dbe-rowremap-iso.txt"), uptime=5 * 86400.0)
    context = ProbeContext("ml.p5.48xlarge", datetime(2024, 11, 18, 18, 0, tzinfo=UTC), window=timedelta(days=7))
    assert Tag.FAIL in {f.tag for f in check_xid(d, context)}


def test_application_xids_are_the_workloads_fault():
    # GIVEN Xid 13 + 43 from a PyTorch job (fixture xid13-43, dmesg --decode iso)
    d = doc(kernel_log=fixture("xid13-43-sm-exception-decode-iso.txt"), uptime=3600.0)
    findings = check_xid(d, at(datetime(2025, 1, 21, 5, 0, tzinfo=UTC)))
    # THEN both are WARN P2 fix-workload, never reboot or replace
    assert {int(f.message.split()[1]) for f in findings} == {13, 43}
    for f in findings:
        assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, "fix-workload")
        assert "not the node" in f.message


def test_xid_79_off_the_bus_is_p0_and_nvswitch_sxid_lines_are_not_gpu_xids():
    # GIVEN raw dmesg with Xid 79 and NVSwitch SXid 20034 lines, the node up ~1 h after them
    d = doc(kernel_log=fixture("xid79-sxid20034-fallen-off-bus-nvswitch.txt"), uptime=6781741.548768 + 3600)
    # THEN exactly one Xid code: 79, FAIL P0 reboot (first occurrence)
    result = only(check_xid(d, ctx()))
    assert result.message.startswith("Xid 79 (GPU has fallen off the bus) on 0000:91:00")
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "reboot")


def test_hardware_xid_in_both_boots_survived_a_reboot_and_means_replace():
    # GIVEN Xid 79 before the last reboot (previous boot, 05:58Z) and again in this boot (09:30Z)
    before = journal(
        datetime(2026, 11, 30, 5, 58, tzinfo=UTC),
        "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    )
    now = journal(
        datetime(2026, 11, 30, 9, 30, tzinfo=UTC),
        "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    )
    result = only(check_xid(doc(kernel_log=now, kernel_log_previous_boot=before), ctx()))
    # THEN replace, P0, and the evidence shows both occurrences
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "replace")
    assert "survived a reboot" in result.message and "2026-11-30T05:58:00Z" in result.message
    assert before.strip() in result.evidence and now.strip() in result.evidence


def test_recurrence_looks_back_a_week_into_the_previous_boot():
    # GIVEN Xid 48 four days ago in the previous boot and again today
    # WHEN probe.xid runs
    # THEN it is a recurrence after a reboot: replace
    before = journal(datetime(2026, 11, 26, 12, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE")
    now = journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=2, DBE")
    assert only(check_xid(doc(kernel_log=now, kernel_log_previous_boot=before), ctx())).node_action == "replace"


def test_same_hardware_xid_before_a_reboot_long_ago_is_not_a_recurrence():
    # GIVEN Xid 48 a month ago in the previous boot and again today
    # WHEN probe.xid runs
    # THEN only today's occurrence counts: reboot, not replace
    before = journal(datetime(2026, 11, 1, 12, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE")
    now = journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=2, DBE")
    assert only(check_xid(doc(kernel_log=now, kernel_log_previous_boot=before), ctx())).node_action == "reboot"


def test_application_xid_in_both_boots_is_still_the_workloads_fault():
    # GIVEN Xid 13 in the previous boot and in this boot
    # WHEN probe.xid runs
    # THEN it stays the workload's fault; the recurrence rule is for hardware codes
    line = "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception"
    d = doc(
        kernel_log=journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), line),
        kernel_log_previous_boot=journal(datetime(2026, 11, 30, 5, 0, tzinfo=UTC), line),
    )
    assert only(check_xid(d, ctx())).node_action == "fix-workload"


def test_gsp_timeout_xid_119_is_a_driver_fault_to_reboot():
    # GIVEN repeated Xid 119 (dmesg -T) on GPU 0000:9b:00
    d = doc(kernel_log=fixture("xid119-gsp-timeout-h100-dmesgT.txt"), uptime=10 * 3600.0)
    result = only(check_xid(d, at(datetime(2025, 2, 23, 20, 0, tzinfo=UTC))))
    # THEN FAIL P1 reboot with the count and the first/last times: the GPU's firmware stopped answering,
    # so the GPU is unusable until a reset (a node action is never a mere WARN)
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P1, "reboot")
    assert "5 lines" in result.message
    assert "2025-02-23T16:24:18Z … 2025-02-23T16:30:13Z" in result.message


def test_context_switch_timeout_is_investigated_and_the_app_fault_beside_it_is_the_workloads():
    # GIVEN Xid 13 then Xid 109 on one GPU (dmesg --ctime)
    d = doc(kernel_log=fixture("xid13-109-ctx-switch-timeout-dmesg-ctime.txt"), uptime=3600.0)
    findings = check_xid(d, at(datetime(2024, 8, 30, 12, 0, tzinfo=UTC)))
    assert (by_code(findings, 109).tag, by_code(findings, 109).priority) == (Tag.WARN, Priority.P1)
    assert by_code(findings, 109).node_action == "investigate"
    assert by_code(findings, 13).node_action == "fix-workload"
    # AND the higher priority comes first
    assert findings[0].priority is Priority.P1


def test_page_fault_xid_31_a_day_later_in_the_same_log_is_judged_in_its_own_window():
    # GIVEN the xid31/109 capture (dmesg --ctime) evaluated the same day
    # WHEN probe.xid runs
    # THEN Xid 31 is the workload's, Xid 109 is investigated
    d = doc(kernel_log=fixture("xid31-109-mmu-fault-pt-main-thread.txt"), uptime=3 * 86400.0)
    findings = check_xid(d, at(datetime(2024, 8, 31, 12, 0, tzinfo=UTC)))
    assert by_code(findings, 31).node_action == "fix-workload"
    assert by_code(findings, 109).node_action == "investigate"


def test_nvlink5_fatal_link_events_and_the_drivers_reset_request_are_reported():
    # GIVEN GB200 Xid 149 (fatal NETIR link events) and Xid 154 "GPU Reset Required", raw dmesg
    d = doc(kernel_log=fixture("xid149-154-gb200-nvlink5-recovery-action.txt"), uptime=171200.0)
    findings = check_xid(d, ctx(instance_type="ml.p6e-gb200.36xlarge"))
    xid149, xid154 = by_code(findings, 149), by_code(findings, 154)
    assert (xid149.tag, xid149.priority, xid149.node_action) == (Tag.FAIL, Priority.P1, "reboot")
    assert "0009:01:00" in xid149.message and "0008:01:00" in xid149.message
    assert (xid154.tag, xid154.node_action) == (Tag.WARN, "reboot")
    assert "GPU Reset Required" in xid154.message


def test_injected_hma_xid_74_syslog_line_is_placed_by_its_uptime():
    # GIVEN the AWS sample's injected "host kernel: [ 378.703529] NVRM: Xid … 74" line, node up 1 h
    d = doc(kernel_log=fixture("hyperpod-hma-inject-xid74-nvlink-syslog.txt"), uptime=3600.0)
    result = only(check_xid(d, ctx()))
    assert result.message.startswith("Xid 74 (NVLink error) on 0000:b9:00")
    assert (result.tag, result.node_action) == (Tag.FAIL, "reboot")


def test_undated_xid_lines_of_an_old_boot_still_count_with_the_caveat_never_a_pass():
    # GIVEN an undated Xid 79 line (cat-mode journal) on a node up for 3 days
    # WHEN probe.xid runs
    # THEN it is this boot's, time unknown: the GPU fell off the bus in this boot and has not been reset
    # since, so it is a FAIL (never a PASS), and the evidence says it may be older than the window
    d = doc(kernel_log="NVRM: Xid (PCI:0000:91:00): 79, GPU has fallen off the bus.\n", uptime=3 * 86400.0)
    result = only(check_xid(d, ctx()))
    assert result.tag is Tag.FAIL and "this boot, time unknown" in result.message
    assert any("possibly older than the 24 h window" in e for e in result.evidence)


def test_undated_xid_lines_without_any_boot_time_count_as_this_boot():
    # GIVEN raw dmesg lines stamped only with seconds since boot and no uptime (a pasted dmesg)
    d = doc(kernel_log="[  416.096724] NVRM: Xid (PCI:0000:91:00): 62, pid=2, name=python, 0000a89a\n", uptime=None)
    result = only(check_xid(d, ctx()))
    assert result.tag is Tag.FAIL and result.message.startswith("Xid 62")
    assert any("boot time is unknown" in e for e in result.evidence)


def test_undated_xid_lines_of_a_recent_boot_count_and_say_their_time_is_unknown():
    # GIVEN an undated Xid 79 line on a node booted 4 h ago
    # WHEN probe.xid runs
    # THEN it counts, and the message and evidence say its time is unknown
    d = doc(kernel_log="NVRM: Xid (PCI:0000:91:00): 79, GPU has fallen off the bus.\n")
    result = only(check_xid(d, ctx()))
    assert result.tag is Tag.FAIL and "time unknown" in result.message
    assert any("counted because this boot began at 2026-11-30T06:00:00Z" in e for e in result.evidence)


def test_hardware_xid_only_before_the_reboot_is_an_info_beside_the_pass():
    # GIVEN Xid 48 two hours before the reboot and a clean boot since
    before = journal(datetime(2026, 11, 30, 4, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE")
    findings = check_xid(doc(kernel_log="", kernel_log_previous_boot=before), ctx())
    assert [f.tag for f in findings] == [Tag.PASS, Tag.INFO]
    assert "before the last reboot" in findings[1].message and findings[1].priority is None


def test_truncated_kernel_log_is_named_in_the_evidence():
    # GIVEN an Xid line in an item cut at its size limit
    # WHEN probe.xid runs
    # THEN the evidence says the output was truncated
    text = journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), "NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE")
    result = only(check_xid(doc(kernel_log=item(text, truncated=True)), ctx()))
    assert any("output truncated" in e for e in result.evidence)


def test_many_xid_lines_are_trimmed_in_the_evidence():
    # GIVEN 30 Xid 94 lines
    # WHEN probe.xid runs
    # THEN all are counted but the evidence keeps 10 and says how many more
    text = "".join(
        journal(
            datetime(2026, 11, 30, 9, 0, tzinfo=UTC) + timedelta(seconds=i),
            f"NVRM: Xid (PCI:0000:19:00): 94, Ch {i:08x}",
        )
        for i in range(30)
    )
    result = only(check_xid(doc(kernel_log=text), ctx()))
    assert "30 lines" in result.message
    assert "… and 20 more" in result.evidence


def test_peermem_noise_is_not_an_xid():
    # GIVEN only nvidia-peermem 'invalid context' noise (dmesg --decode iso)
    # WHEN probe.xid runs
    # THEN it passes
    d = doc(kernel_log=fixture("dmesg-decode-iso-nvidia-peermem-invalid-context.txt"), uptime=3600.0)
    assert only(check_xid(d, at(datetime(2025, 2, 10, 17, 0, tzinfo=UTC)))).tag is Tag.PASS


# --------------------------------------------------------------------------- probe.kernel_faults


def test_panic_before_the_reboot_is_p0_and_names_the_module_in_its_trace():
    # GIVEN the pstore panic (crash_test module) as the previous boot's log, this boot 4 h old
    d = doc(kernel_log="", kernel_log_previous_boot=fixture("panic-pstore-crash-test-module.txt"))
    result = only(check_kernel_faults(d, ctx()))
    assert (result.tag, result.priority, result.section, result.node_action) == (
        Tag.FAIL,
        Priority.P0,
        "N",
        "investigate",
    )
    assert "previous boot ended in it" in result.message and "crash_test" in result.message
    assert (
        result.evidence[0] == "<0>[ 3098.275469] Kernel panic - not syncing: Test panic triggered by crash_test module"
    )
    assert "<4>[ 3098.275505]  crash_write.cold+0x1d/0x1d [crash_test]" in result.evidence
    assert any("journalctl -k -b -1" in c.command for c in result.suggested_commands)


def test_panic_of_a_boot_that_ended_days_ago_is_not_reported():
    # GIVEN the pstore panic as previous boot, this boot 5 days old
    # WHEN probe.kernel_faults runs
    # THEN the panic is history: PASS
    d = doc(kernel_log="", kernel_log_previous_boot=fixture("panic-pstore-crash-test-module.txt"), uptime=5 * 86400.0)
    assert only(check_kernel_faults(d, ctx())).tag is Tag.PASS


def test_sysrq_forced_crash_is_reported_as_deliberate_not_as_a_node_fault():
    # GIVEN the previous boot's crash forced through SysRq (fixture)
    # WHEN probe.kernel_faults runs
    # THEN it is a P2 warning naming SysRq, not a node fault
    d = doc(kernel_log="", kernel_log_previous_boot=fixture("panic-pstore-sysrq-null-deref.txt"))
    result = only(check_kernel_faults(d, ctx()))
    assert (result.tag, result.priority) == (Tag.WARN, Priority.P2)
    assert "SysRq" in result.message


def test_oops_without_a_sysrq_trigger_is_a_p1_fault():
    # GIVEN a kernel BUG line in this boot
    # WHEN probe.kernel_faults runs
    # THEN it is FAIL P1, investigate
    text = journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), "BUG: unable to handle page fault for address: ffffb1c2")
    result = only(check_kernel_faults(doc(kernel_log=text), ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P1, "investigate")


def test_machine_check_panic_of_the_previous_boot_gives_two_p0_findings():
    # GIVEN the previous boot ended with an uncorrected MCE and "Fatal machine check" panic
    d = doc(kernel_log="", kernel_log_previous_boot=fixture("rec-journal-prev-boot-mce-panic.txt"))
    findings = check_kernel_faults(d, ctx())
    labels = {f.message.split(" before")[0]: f for f in findings}
    assert set(labels) == {"Kernel panic", "Uncorrected machine-check / hardware error"}
    mce = labels["Uncorrected machine-check / hardware error"]
    # runbook § N: "mce: [Hardware Error]" (CPU or memory hardware) → drain and replace
    assert (mce.tag, mce.priority, mce.node_action) == (Tag.FAIL, Priority.P0, "replace")
    assert "5 lines" in mce.message


def test_machine_check_in_both_boots_means_replace():
    # GIVEN the previous boot's machine-check panic and the same MCE again in this boot
    # WHEN probe.kernel_faults runs
    # THEN the MCE finding says both boots and asks for replacement
    again = journal(
        datetime(2026, 11, 30, 9, 10, tzinfo=UTC),
        "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 16: bea0000000000108",
    )
    d = doc(kernel_log=again, kernel_log_previous_boot=fixture("rec-journal-prev-boot-mce-panic.txt"))
    mce = next(f for f in check_kernel_faults(d, ctx()) if "machine-check" in f.message)
    assert (mce.tag, mce.priority, mce.node_action) == (Tag.FAIL, Priority.P0, "replace")
    assert "both boots" in mce.message


def test_machine_check_events_logged_alone_are_a_warning_of_unknown_kind():
    # GIVEN only 'Machine check events logged' lines (the kernel's notice that records were queued)
    # WHEN probe.kernel_faults runs
    # THEN a P1 warning that says the line does not state corrected or uncorrected: not labelled corrected
    d = doc(kernel_log=fixture("rec-journal-mce-corrected.txt"))
    result = only(check_kernel_faults(d, ctx()))
    assert result.message.startswith("Machine-check events logged (the line does not say whether")
    assert "Corrected" not in result.message
    assert (result.tag, result.priority, result.node_action) == (Tag.WARN, Priority.P1, "investigate")


def test_ghes_record_severity_decides_corrected_or_not():
    # GIVEN two GHES records, one 'event severity: corrected', one 'fatal'
    # WHEN probe.kernel_faults runs
    # THEN each record's lines go to the matching finding
    lines = [
        "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",
        "{1}[Hardware Error]: event severity: corrected",
        "{2}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",
        "{2}[Hardware Error]: event severity: fatal",
    ]
    text = "".join(journal(datetime(2026, 11, 30, 9, 0, i, tzinfo=UTC), line) for i, line in enumerate(lines))
    findings = {f.message.split(" in this boot")[0]: f for f in check_kernel_faults(doc(kernel_log=text), ctx())}
    assert "2 lines" in findings["Corrected machine-check errors"].message
    assert "2 lines" in findings["Uncorrected machine-check / hardware error"].message


def test_unknown_nmi_and_hard_lockup_are_p0():
    # GIVEN an unknown-reason NMI and a hard lockup (dmesg iso)
    # WHEN probe.kernel_faults runs
    # THEN both are FAIL P0
    findings = check_kernel_faults(doc(kernel_log=fixture("rec-dmesg-iso-nmi-hard-lockup.txt")), ctx())
    assert {f.message.split(" in this boot")[0] for f in findings} == {
        "Hardware NMI",
        "Hard lockup (a CPU stopped taking interrupts)",
    }
    assert all((f.tag, f.priority) == (Tag.FAIL, Priority.P0) for f in findings)


def test_soft_lockup_in_the_nvidia_driver_and_hung_task_are_warnings():
    # GIVEN short-precise journal output (no year) with a soft lockup traced through [nvidia]
    d = doc(kernel_log=fixture("rec-journal-short-precise-soft-lockup-hung-task.txt"))
    findings = {f.message.split(" in this boot")[0]: f for f in check_kernel_faults(d, ctx())}
    soft = findings["Soft lockup (a CPU stuck in the kernel)"]
    hung = findings["Hung task (process blocked in the kernel)"]
    assert all((f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "investigate") for f in (soft, hung))
    assert "nvidia" in soft.message and "NVIDIA driver" in (soft.root_cause or "")
    assert "2026-11-30T07:01:12Z" in soft.message
    # AND the hung-task hint line is not counted as a second hung task
    assert "1 line" in hung.message


def test_gpu_off_the_bus_without_an_xid_is_an_nvidia_driver_finding():
    # GIVEN NVRM 'fallen off the bus' and 'RmInitAdapter failed' lines without Xid lines
    # WHEN probe.xid runs
    # THEN both are NVIDIA-driver findings in section G.1 asking for a reboot
    findings = check_xid(doc(kernel_log=fixture("rec-journal-nvrm-off-bus-init-failed.txt")), ctx())
    # (the NVIDIA driver's faults are probe.xid's, Xid line or not; probe.kernel_faults leaves them alone)
    assert (
        only(check_kernel_faults(doc(kernel_log=fixture("rec-journal-nvrm-off-bus-init-failed.txt")), ctx())).tag
        is Tag.PASS
    )
    off = next(f for f in findings if "fell off" in f.message)
    init = next(f for f in findings if "initialise" in f.message)
    assert (off.tag, off.priority, off.section, off.node_action) == (Tag.FAIL, Priority.P0, "G.1", "reboot")
    assert (init.tag, init.priority, init.section, init.node_action) == (Tag.FAIL, Priority.P1, "G.1", "reboot")


def test_gpu_off_the_bus_in_both_boots_means_replace():
    # GIVEN a GPU off the bus before the reboot and again after it
    # WHEN probe.xid runs
    # THEN the node should be replaced
    line = "NVRM: GPU 0000:53:00.0: GPU has fallen off the bus."
    d = doc(
        kernel_log=journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), line),
        kernel_log_previous_boot=journal(datetime(2026, 11, 30, 5, 50, tzinfo=UTC), line),
    )
    result = only(check_xid(d, ctx()))
    assert (result.tag, result.node_action) == (Tag.FAIL, "replace") and "0000:53:00" in result.message


def test_off_the_bus_line_beside_its_xid_79_is_left_to_the_xid_check():
    # GIVEN the Xid 79 capture, whose NVRM 'fallen off the bus' line repeats the Xid
    # WHEN probe.kernel_faults runs
    # THEN it is not reported twice: probe.xid owns it
    d = doc(kernel_log=fixture("xid79-sxid20034-fallen-off-bus-nvswitch.txt"), uptime=6781741.548768 + 3600)
    assert only(check_kernel_faults(d, ctx())).tag is Tag.PASS


def test_storage_io_errors_are_a_fault_never_a_pass():
    # GIVEN NVMe write errors and XFS log errors (the capture's source: a failing local NVMe in a RAID)
    # WHEN probe.kernel_faults runs
    # THEN they are a FAIL of their own, not a panic or lockup, and not a PASS
    d = doc(kernel_log=fixture("dmesg-nvme-blk-io-error-xfs-log-eio.txt"), uptime=470911.9 + 60)
    result = only(check_kernel_faults(d, ctx()))
    assert (result.tag, result.section) == (Tag.FAIL, "N") and result.message.startswith("Disk I/O errors")
    assert "5 lines" in result.message


def test_pass_says_when_the_previous_boot_was_not_available():
    # GIVEN a clean log with and without the previous boot's item
    # WHEN probe.kernel_faults runs
    # THEN the PASS says which boots were read
    result = only(check_kernel_faults(doc(kernel_log=""), ctx()))
    assert "previous boot's log not available" in result.message
    with_prev = only(check_kernel_faults(doc(kernel_log="", kernel_log_previous_boot=""), ctx()))
    assert "this boot and the previous one" in with_prev.message


# --------------------------------------------------------------------------- probe.oom


def test_memcg_kill_in_a_pod_is_the_workloads_problem():
    # GIVEN a CONSTRAINT_MEMCG kill of a pod's python3
    # WHEN probe.oom runs
    # THEN one kill inside a limit: WARN P2 fix-workload naming the victim and its cgroup
    d = doc(kernel_log=fixture("rec-journal-short-iso-precise-oom-memcg-kubepods.txt"))
    result = only(check_oom(d, ctx()))
    assert (result.tag, result.priority, result.section, result.node_action) == (
        Tag.WARN,
        Priority.P2,
        "I.3",
        "fix-workload",
    )
    assert result.message.startswith("1 OOM kill inside container/job memory limits")
    assert "python3 (pid 48213, /kubepods.slice/" in result.message
    # AND the summary line and the kill line are the evidence (the oom_reaper line is not a second kill)
    assert any("oom-kill:constraint=CONSTRAINT_MEMCG" in e for e in result.evidence)
    assert any("Memory cgroup out of memory: Killed process 48213" in e for e in result.evidence)


def test_global_oom_is_a_node_problem_even_when_the_victim_was_a_job():
    # GIVEN a CONSTRAINT_NONE global OOM whose victim ran in a Slurm job cgroup
    # WHEN probe.oom runs
    # THEN the node ran out of memory: FAIL P1 investigate
    d = doc(kernel_log=fixture("rec-journal-short-iso-precise-oom-system-wide.txt"))
    result = only(check_oom(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P1, "investigate")
    assert result.message.startswith("The node ran out of memory: 1 system-wide OOM kill")
    assert "/slurm/uid_1000/job_4711" in result.message


def test_legacy_kernel_reports_split_into_one_system_and_one_job_kill():
    # GIVEN an old kernel's two-line kill reports (no oom-kill: summary)
    d = doc(kernel_log=fixture("rec-dmesg-iso-oom-legacy-kernel.txt"))
    findings = check_oom(d, ctx())
    system, workload = findings
    assert (system.tag, system.node_action) == (Tag.FAIL, "investigate") and "dataloader (pid 3377)" in system.message
    assert (workload.tag, workload.node_action) == (Tag.WARN, "fix-workload")
    assert "python (pid 4410, /slurm/uid_0/job_42/step_0)" in workload.message


def test_oom_kill_lines_are_grouped_into_one_kill_each():
    # GIVEN the legacy two- and three-line kill reports
    # WHEN they are grouped
    # THEN each kill is one entry with all its lines and the right class
    kills = oom_kills(parse_log(fixture("rec-dmesg-iso-oom-legacy-kernel.txt")).lines)
    assert [(k.pid, k.task, k.workload, len(k.lines)) for k in kills] == [
        ("3377", "dataloader", False, 2),
        ("4410", "python", True, 3),
    ]


def test_two_reports_whose_killed_lines_were_lost_count_two_kills():
    # GIVEN the system-wide report's "invoked" and "oom-kill:" lines, then a second report's "oom-kill:" line,
    # and neither "Killed process" line (both lost, or cut by the tail cap)
    first_invoked, first_summary = fixture("rec-journal-short-iso-precise-oom-system-wide.txt").splitlines()[:2]
    second_summary = first_summary.replace("09:02:10.554398", "09:05:41.120004").replace("pid=91822", "pid=91907")
    # WHEN the kill reports are read
    kills = oom_kills(parse_log("\n".join([first_invoked, first_summary, second_summary]) + "\n").lines)
    # THEN there are two kills, one per summary, each with its own pid: the first is not listed twice
    assert [k.pid for k in kills] == ["91822", "91907"]


def test_oom_score_adj_values_alone_are_not_kills():
    # GIVEN lines that mention oom_score_adj / oom-killer settings but report no kill
    lines = [
        "[  49870]     0 49870   182511     9044   176128        0          -999 kubelet",
        "systemd-journald[612]: oom_score_adj set to -250",
    ]
    text = "".join(journal(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), line) for line in lines)
    assert only(check_oom(doc(kernel_log=text), ctx())).tag is Tag.PASS


def test_oom_kills_older_than_the_window_are_not_reported():
    # GIVEN a global OOM two days before the evaluation
    # WHEN probe.oom runs
    # THEN it is history: PASS
    d = doc(kernel_log=fixture("rec-journal-short-iso-precise-oom-system-wide.txt"), uptime=3 * 86400.0)
    assert only(check_oom(d, at(NOW + timedelta(days=2)))).tag is Tag.PASS


def test_oom_before_the_reboot_is_reported_with_where_it_happened():
    # GIVEN a global OOM in the previous boot, inside the window
    # WHEN probe.oom runs
    # THEN it is reported and says it happened before the last reboot
    text = fixture("rec-journal-short-iso-precise-oom-system-wide.txt").replace("2026-11-30T09:", "2026-11-30T05:")
    result = only(check_oom(doc(kernel_log="", kernel_log_previous_boot=text), ctx()))
    assert "(before the last reboot)" in result.message


def test_findings_are_valid_and_carry_the_node_identity():
    # GIVEN the legacy OOM reports
    # WHEN probe.oom runs
    # THEN every finding names the instance and links runbook § I.3
    d = doc(kernel_log=fixture("rec-dmesg-iso-oom-legacy-kernel.txt"))
    for f in check_oom(d, ctx()):
        assert f.instance_id == IID and f.runbook and f.runbook.endswith("#i3-out-of-memory-kills")
