"""GPU, driver, NVLink, memory-cgroup and machine-check faults written without an Xid line, in each log
form the probe reads (raw dmesg, dmesg -T, journalctl -k short-iso), and the Xid catalogue's
no-action codes. Message bodies are the drivers' and kernel's own strings (sources beside each)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.xid import lookup
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.kernel import check_xid
from hyperpod_debugger.probe.kernel_faults import check_kernel_faults
from hyperpod_debugger.probe.oom import check_oom

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
BOOT = NOW - timedelta(hours=4)
AT = NOW - timedelta(minutes=30)


def forms(message: str) -> dict[str, str]:
    up = (AT - BOOT).total_seconds()
    return {
        "dmesg": f"[{up:12.6f}] {message}",
        "dmesg -T": f"[{AT:%a %b} {AT.day:2d} {AT:%H:%M:%S %Y}] {message}",
        "journalctl short-iso": f"{AT:%Y-%m-%dT%H:%M:%S}+0000 ip-10-1-2-3 kernel: {message}",
    }


def run_lines(check, messages: list[str], form: str = "dmesg"):
    """The problems ``check`` finds in a kernel log of ``messages``, each written in ``form``."""
    text = "".join(forms(m)[form] + "\n" for m in messages)
    doc = ProbeDocument(
        hostname="ip-10-1-2-3",
        collected_at=NOW,
        uptime_s=(NOW - BOOT).total_seconds(),
        items={"kernel_log": ProbeItem(command="dmesg", exit_code=0, stdout=text)},
    )
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, window=timedelta(hours=24), instance_id="i-0abc")
    return [f for f in check(doc, ctx) if f.tag is not Tag.PASS]


def run(check, message: str, form: str):
    return run_lines(check, [message], form)


FORMS = ("dmesg", "dmesg -T", "journalctl short-iso")

# A GPU the driver could not bring up is missing for jobs: NVIDIA's catalogue resets the GPU for an
# initialisation failure (Xid 143 GPU_INIT_ERROR: RESET_GPU), i.e. a node reboot on HyperPod; replace if it
# returns (runbook § G.1 / § F recurrence rule). Strings: open-gpu-kernel-modules kernel-open/nvidia/nv.c and
# nv-pci.c (nv_printf "NVRM: ..."), the kernel driver core ("<drv>: probe of <bdf> failed with error <n>").
INIT_FAILURES = (
    "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x56:1474)",
    "NVRM: rm_init_adapter failed, device minor number 0",
    "nvidia: probe of 0000:3b:00.0 failed with error -1",
    "NVRM: The NVIDIA probe routine failed for 1 device(s).",
    "NVRM: None of the NVIDIA devices were initialized.",
    "NVRM: No NVIDIA GPU found.",
    "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
    "NVRM: Can't find an IRQ for your NVIDIA card!",
)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("message", INIT_FAILURES)
def test_a_gpu_the_driver_could_not_initialise_is_a_reboot_not_a_pass(message: str, form: str) -> None:
    [f] = run(check_xid, message, form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "G.1", "reboot")
    assert "could not initialise" in f.message and "no Xid line" in f.message


@pytest.mark.parametrize("form", FORMS)
def test_fallen_off_the_bus_without_an_xid_is_p0(form: str) -> None:
    # NVIDIA's catalogue: Xid 79 (GPU fallen off the bus) → RESTART_BM; the driver's words without the Xid line
    [f] = run(check_xid, "NVRM: GPU at PCI:0000:3b:00: GPU-5d9b2c1a has fallen off the bus.", form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "G.1", "reboot")
    assert "0000:3b:00" in f.message


@pytest.mark.parametrize("form", FORMS)
def test_nvlink_training_failure_text_without_the_xid_prefix_is_a_reboot(form: str) -> None:
    # the driver's text for Xid 136 (open-gpu-kernel-modules: nvErrorLog_va(ALI_TRAINING_FAIL, "NVLink: Link
    # training failed for link %u(...)")); NVIDIA's catalogue: 136 ALI_TRAINING_FAIL → RESET_GPU
    message = "NVRM: NVLink: Link training failed for link 3(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"
    [f] = run(check_xid, message, form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "G.1", "reboot")
    assert f.message.startswith("NVLink links did not come up (training or discovery failed)")


@pytest.mark.parametrize("form", FORMS)
def test_an_nvlink_core_routine_that_fails_to_discover_links_is_a_reboot_without_an_xid(form: str) -> None:
    # open-gpu-kernel-modules, kernel_nvlink_gh100.c: knvlinkDiscoverPostRxDetLinks_GH100 prints this when it
    # cannot read the peer's post-RxDet link mask and returns an error: the links are not set up (as seen by
    # leptonai/gpud PR #1271 on an H100 node, with no Xid logged)
    message = "NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!"
    [f] = run(check_xid, message, form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "G.1", "reboot")
    assert "NVLink links did not come up" in f.message


def test_an_nvlink_core_line_that_reports_no_failure_is_not_a_fault() -> None:
    assert run(check_xid, "NVRM: knvlinkCoreShutdownDeviceLinks: shutting down 18 links", "dmesg") == []


def test_nvlink_training_text_inside_an_xid_136_line_is_one_finding() -> None:
    message = (
        "NVRM: Xid (PCI:0000:3b:00): 136, pid='<unknown>', name=<unknown>, NVLink: Link training failed for link 3"
    )
    [f] = run(check_xid, message, "dmesg")
    assert f.message.startswith("Xid 136 (NVLink link training failure)") and f.node_action == "reboot"


# --------------------------------------------------------------------------- memory-cgroup OOM, older kernels

# Older kernels (3.x/4.x mm/oom_kill.c, mm/memcontrol.c): "Task in <cg> killed as a result of limit of <cg>",
# "Memory cgroup out of memory: Kill process N (comm) score S or sacrifice child", "... Killed process ...".
# A cgroup OOM is the workload's limit (runbook § I.3): WARN P2, fix the workload, the node is fine.
MEMCG = (
    "Task in /kubepods/burstable/pod7f3c/4be1 killed as a result of limit of /kubepods/burstable/pod7f3c",
    "Memory cgroup out of memory: Kill process 1990 (stress) score 987 or sacrifice child",
    "Memory cgroup out of memory: Killed process 1990 (stress) total-vm:73532kB, anon-rss:32008kB, file-rss:212kB",
)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("message", MEMCG)
def test_old_kernel_memcg_oom_wording_is_the_workloads_limit(message: str, form: str) -> None:
    [f] = run(check_oom, message, form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.WARN, Priority.P2, "I.3", "fix-workload")


# --------------------------------------------------------------------------- machine checks

# Runbook § N: "mce: [Hardware Error]" → CPU or memory hardware: drain and replace (§ F lists machine-check
# errors among the faults that go to replacement). Strings: arch/x86/kernel/cpu/mce/core.c.
UNCORRECTED = (
    "mce: [Hardware Error]: CPU 0: Machine Check Exception: 4 Bank 0: b200000080060001",
    "mce: [Hardware Error]: Machine check: Processor context corrupt",
    "mce: Uncorrected hardware memory error in user-access at 3c5d9a4000",
)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("message", UNCORRECTED)
def test_an_uncorrected_machine_check_is_drain_and_replace(message: str, form: str) -> None:
    [f] = run(check_kernel_faults, message, form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "N", "replace")


@pytest.mark.parametrize("form", FORMS)
def test_machine_check_events_logged_alone_is_not_called_corrected(form: str) -> None:
    [f] = run(check_kernel_faults, "mce: [Hardware Error]: Machine check events logged", form)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.WARN, Priority.P1, "N", "investigate")
    assert "does not say whether" in f.message and "orrected machine-check errors" not in f.message


def test_events_logged_next_to_an_uncorrected_record_belong_to_it() -> None:
    up = (AT - BOOT).total_seconds()
    text = (
        f"[{up:12.6f}] mce: [Hardware Error]: Machine check events logged\n"
        f"[{up + 0.1:12.6f}] mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 16: bea0000000000108\n"
    )
    doc = ProbeDocument(
        hostname="h",
        collected_at=NOW,
        uptime_s=(NOW - BOOT).total_seconds(),
        items={"kernel_log": ProbeItem(command="dmesg", exit_code=0, stdout=text)},
    )
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, window=timedelta(hours=24), instance_id="i-0abc")
    [f] = check_kernel_faults(doc, ctx)
    assert (f.tag, f.node_action) == (Tag.FAIL, "replace") and "2 lines" in f.message


# --------------------------------------------------------------------------- the Xid catalogue's no-action codes


@pytest.mark.parametrize("form", FORMS)
def test_a_lone_xid_63_is_not_paged_as_a_reboot(form: str) -> None:
    # NVIDIA's catalogue: Xid 63 INFOROM_DRAM_RETIREMENT_EVENT → IGNORE / IGNORE
    message = (
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
    )
    [f] = run(check_xid, message, form)
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, "investigate")


@pytest.mark.parametrize("code", [137, 121, 141, 160, 161, 162, 163, 164, 165])
def test_codes_of_the_current_catalogue_are_known(code: int) -> None:
    info = lookup(code)
    assert info.xid_class != "unknown" and "catalogue" not in info.name
    assert not info.is_hardware  # NVIDIA lists IGNORE (or no action) as their immediate action


def test_an_unused_code_is_said_to_be_unused_not_unknown() -> None:
    assert "unused" in lookup(14).name and lookup(14).action == "investigate"


def test_a_fatal_machine_check_early_in_the_boot_is_live_not_a_boot_record() -> None:
    # a machine check with "Processor context corrupt" and the "Fatal machine check" panic 85 s into the boot
    # (microsoft/WSL#41659's lines) is the fault that stopped the machine, not the firmware's record of an old one
    text = (
        "[   84.977164] mce: [Hardware Error]: CPU 0: Machine Check Exception: 4 Bank 0: b200000080060001\n"
        "[   84.977174] mce: [Hardware Error]: Machine check: Processor context corrupt\n"
        "[   84.977175] Kernel panic - not syncing: Fatal machine check\n"
    )
    doc = ProbeDocument(
        hostname="h",
        collected_at=NOW,
        uptime_s=600.0,
        items={"kernel_log": ProbeItem(command="dmesg", exit_code=0, stdout=text)},
    )
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, window=timedelta(hours=24), instance_id="i-0abc")
    mce = next(f for f in check_kernel_faults(doc, ctx) if "machine-check" in f.message)
    assert (mce.tag, mce.priority, mce.node_action) == (Tag.FAIL, Priority.P0, "replace")
    assert "first minutes" not in mce.message


def test_on_a_trainium_node_the_driver_finding_no_gpu_is_not_a_fault() -> None:
    # GIVEN an image that ships the NVIDIA driver, booted on a Trainium node: the driver says it found no GPU
    from hyperpod_debugger.agent import tools

    log = "[Wed Dec  2 10:00:00 2026] NVRM: No NVIDIA GPU found.\n"
    trn = tools.analyze_probe_output("ml.trn1.32xlarge", outputs={"kernel_log": log}, now="2026-12-02T11:00:00Z")
    gpu = tools.analyze_probe_output("ml.p5.48xlarge", outputs={"kernel_log": log}, now="2026-12-02T11:00:00Z")
    # THEN it is the truth there (no GPU to bring up), while on a GPU node it is a GPU that did not come up
    assert not [f for f in trn.findings if f.check == "probe.xid" and f.is_problem]
    assert [f for f in gpu.findings if f.check == "probe.xid" and f.tag.value == "FAIL"]


# --------------------------------------------------------------------------- call traces


def test_a_call_trace_names_the_modules_of_its_frames() -> None:
    # the kernel prints "Call Trace:" then one frame per line, "func+0xoff/0xlen [module]" for module code
    [f] = run_lines(
        check_kernel_faults,
        [
            "watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python3:4242]",
            "Call Trace:",
            " <TASK>",
            " _nv012345rm+0x1c/0x30 [nvidia]",
            " os_acquire_spinlock+0x12/0x20 [nvidia]",
        ],
    )
    assert "call trace through module(s) nvidia" in f.message


def test_a_verifier_line_that_names_a_function_is_not_a_call_trace() -> None:
    # XFS prints where its metadata check failed ("Metadata CRC error detected at <func>+0xc8/0xf0 [xfs]")
    # with no Call Trace: the line says which check failed, not that the kernel crashed in xfs
    [f] = run_lines(
        check_kernel_faults,
        [
            'XFS (nvme0n1p1): metadata I/O error in "xfs_trans_read_buf_map" at daddr 0x8e8c20 len 8 error 74',
            "XFS (nvme0n1p1): Metadata CRC error detected at xfs_dir3_block_read_verify+0xc8/0xf0 [xfs], "
            "xfs_dir3_block block 0x8e8c20",
        ],
    )
    assert f.tag is Tag.FAIL and "call trace" not in f.message
