"""Neuron evaluators (probe/neuron.py): neuron-ls in JSON and table form, device/core counts, runtime errors (§ G.2)."""

from __future__ import annotations

import json
import pathlib
from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.neuron import (
    CHECK_DEVICES,
    CHECK_RUNTIME,
    CHECKS,
    check_neuron_devices,
    check_neuron_runtime,
    classify_neuron_line,
    parse_neuron_ls,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "neuron"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
IID = "i-0aaaabbbbccccdddd"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(*, uptime: float = 4 * 3600.0, **items: str | ProbeItem) -> ProbeDocument:
    built = {
        key: value if isinstance(value, ProbeItem) else ProbeItem(command=f"probe {key}", exit_code=0, stdout=value)
        for key, value in items.items()
    }
    return ProbeDocument(hostname="ip-10-4-7-9", collected_at=NOW, uptime_s=uptime, items=built)


def ctx(instance_type: str = "ml.trn1.32xlarge", now: datetime = NOW) -> ProbeContext:
    return ProbeContext(instance_type=instance_type, now=now, instance_id=IID)


def only(findings):
    assert len(findings) == 1, [f.message for f in findings]
    return findings[0]


def test_module_exports_both_neuron_checks_in_section_g2():
    # GIVEN the module
    # WHEN its CHECKS are read
    # THEN both checks are there, in section G.2
    assert [(c.id, c.section) for c in CHECKS] == [(CHECK_DEVICES, "G.2"), (CHECK_RUNTIME, "G.2")]


# --------------------------------------------------------------------------- neuron-ls parsing


def test_table_of_a_single_device_is_read_by_its_columns():
    # GIVEN the newer 7-column table (no "neuron_device" token anywhere in it)
    text = fixture("neuron-ls-trn1-2xl-single.txt")
    assert "neuron_device" not in text
    parsed = parse_neuron_ls(text)
    assert (parsed.form, parsed.device_count, parsed.core_count, parsed.complete) == ("table", 1, 2, True)


def test_table_read_stops_before_the_topology_drawing():
    # GIVEN the trn1.32xlarge table followed by the topology drawing
    # WHEN neuron-ls output is parsed
    # THEN 16 devices and 32 cores, nothing from the drawing
    parsed = parse_neuron_ls(fixture("neuron-ls-trn1-32xl-topology.txt"))
    assert (parsed.device_count, parsed.core_count) == (16, 32)
    assert [d.index for d in parsed.devices] == list(range(16))


def test_trn2_table_with_core_ids_column_counts_cores_not_core_ids():
    # GIVEN the trn2n table with NEURON CORE IDS and logical-neuroncore-config: 2
    # WHEN neuron-ls output is parsed
    # THEN cores come from NEURON CORES (64) and the LNC is read
    parsed = parse_neuron_ls(fixture("neuron-ls-trn2n-48xl-16dev.txt"))
    assert (parsed.device_count, parsed.core_count, parsed.logical_nc_config) == (16, 64, 2)


def test_wide_table_with_processes_still_counts_devices():
    # GIVEN the --wide table with PID and COMMAND columns
    # WHEN neuron-ls output is parsed
    # THEN 16 devices and 64 cores
    parsed = parse_neuron_ls(fixture("neuron-ls-wide-trn2n-with-processes.txt"))
    assert (parsed.device_count, parsed.core_count) == (16, 64)


def test_table_continuation_rows_do_not_add_devices():
    # GIVEN a --wide table where device 0 runs two processes (second row has an empty device cell)
    text = (
        "+--------+--------+--------+--------+\n| NEURON | NEURON |  PID   | COMMAND|\n| DEVICE | CORES  |        |        |\n"
        "+--------+--------+--------+--------+\n| 0      | 2      | 101    | a      |\n|        |        | 102    | b      |\n"
        "| 1      | 2      | 103    | c      |\n+--------+--------+--------+--------+\n"
    )
    parsed = parse_neuron_ls(text)
    assert (parsed.device_count, parsed.core_count) == (2, 4)


def test_full_json_output_is_read_completely():
    # GIVEN a full --json-output of a trn1.32xlarge
    # WHEN neuron-ls output is parsed
    # THEN 16 devices, 32 cores, complete
    parsed = parse_neuron_ls(fixture("rec-neuron-ls-json-trn1-32xl-16dev.json"))
    assert (parsed.form, parsed.device_count, parsed.core_count, parsed.complete) == ("json", 16, 32, True)


def test_elided_json_example_is_read_as_partial():
    # GIVEN AWS's published `neuron-ls -j` example with devices 1-14 elided by a bare "..."
    parsed = parse_neuron_ls(fixture("neuron-ls-j-trn2n-elided.json"))
    assert [d.index for d in parsed.devices] == [0, 15]
    assert parsed.core_count == 8 and not parsed.complete


def test_cut_json_is_read_from_its_device_objects_as_partial():
    # GIVEN JSON cut in the middle
    # WHEN neuron-ls output is parsed
    # THEN the devices seen so far are kept and the result is partial
    text = fixture("rec-neuron-ls-json-trn1-32xl-16dev.json")[:1500]
    parsed = parse_neuron_ls(text)
    assert parsed.form == "json" and not parsed.complete and parsed.device_count >= 1


def test_json_wrapped_in_an_object_is_accepted():
    # GIVEN the device list inside a wrapper object
    # WHEN neuron-ls output is parsed
    # THEN the devices are found
    wrapped = json.dumps({"neuron_devices": [{"neuron_device": 0, "nc_count": 2}, {"neuron_device": 1, "nc_count": 2}]})
    assert parse_neuron_ls(wrapped).device_count == 2


def test_empty_json_list_and_header_only_table_mean_zero_devices():
    # GIVEN an empty JSON list and a table with its header only
    # WHEN neuron-ls output is parsed
    # THEN both mean zero devices, not unreadable output
    assert parse_neuron_ls("[]").device_count == 0
    header = "\n".join(fixture("neuron-ls-trn1-2xl-single.txt").splitlines()[:6]) + "\n"
    parsed = parse_neuron_ls(header)
    assert parsed is not None and parsed.device_count == 0


def test_no_devices_message_means_zero_devices():
    # GIVEN a 'No neuron devices found' message
    # WHEN neuron-ls output is parsed
    # THEN it means zero devices
    parsed = parse_neuron_ls("No neuron devices found\n")
    assert parsed is not None and parsed.device_count == 0


def test_unrecognised_output_is_none():
    # GIVEN empty output and a crash message
    # WHEN neuron-ls output is parsed
    # THEN neither is read as a device list
    assert parse_neuron_ls("") is None
    assert parse_neuron_ls("Segmentation fault (core dumped)\n") is None


def test_truncated_table_is_partial():
    # GIVEN a table cut by the probe's size limit after 6 rows
    # WHEN neuron-ls output is parsed
    # THEN 6 devices, partial
    text = "\n".join(fixture("neuron-ls-trn1-32xl-topology.txt").splitlines()[:12]) + "\n" + TRUNCATION_MARKER + "\n"
    parsed = parse_neuron_ls(text)
    assert parsed.device_count == 6 and not parsed.complete


# --------------------------------------------------------------------------- probe.neuron_devices


def test_expected_devices_and_cores_pass():
    # GIVEN 16 devices and 32 cores on a trn1.32xlarge
    # WHEN probe.neuron_devices runs
    # THEN PASS without a priority
    result = only(check_neuron_devices(doc(neuron_ls=fixture("rec-neuron-ls-json-trn1-32xl-16dev.json")), ctx()))
    assert result.tag is Tag.PASS and result.priority is None
    assert result.message.startswith("16 Neuron device(s), 32 NeuronCores visible")


def test_trn1_2xlarge_single_device_table_passes():
    # GIVEN the single-device table on a trn1.2xlarge
    # WHEN probe.neuron_devices runs
    # THEN PASS
    d = doc(neuron_ls=fixture("neuron-ls-trn1-2xl-single.txt"))
    assert only(check_neuron_devices(d, ctx("ml.trn1.2xlarge"))).tag is Tag.PASS


def test_trn2_sixteen_devices_pass_without_a_core_expectation():
    # GIVEN 16 devices on a trn2.48xlarge (no core expectation in the catalogue)
    # WHEN probe.neuron_devices runs
    # THEN PASS, mentioning the logical NeuronCore config
    d = doc(neuron_ls=fixture("neuron-ls-trn2n-48xl-16dev.txt"))
    result = only(check_neuron_devices(d, ctx("ml.trn2.48xlarge")))
    assert result.tag is Tag.PASS and "logical NeuronCore config 2" in result.message


def test_single_device_on_a_trn2_48xlarge_is_p0_reboot():
    # GIVEN the one-device table the Neuron docs mislabelled as trn2.48xlarge
    d = doc(neuron_ls=fixture("neuron-ls-trn1-2xl-single.txt"))
    result = only(check_neuron_devices(d, ctx("ml.trn2.48xlarge")))
    assert (result.tag, result.priority, result.section, result.node_action) == (Tag.FAIL, Priority.P0, "G.2", "reboot")
    assert "expected 16 devices" in result.message
    assert result.evidence == ["| 0      | 2      | 0-1      | 32 GB  | 0000:00:1e.0 | 0-7      | -1   |"]


def test_missing_device_in_json_is_p0_reboot():
    # GIVEN JSON with device 9 missing on a trn1.32xlarge
    # WHEN probe.neuron_devices runs
    # THEN FAIL P0 reboot with 15 devices / 30 cores
    d = doc(neuron_ls=fixture("rec-neuron-ls-json-trn1-32xl-device9-missing.json"))
    result = only(check_neuron_devices(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "reboot")
    assert result.message.startswith("Only 15 Neuron device(s), 30 NeuronCores visible")


def test_missing_devices_in_the_table_are_p0_reboot():
    # GIVEN a table with devices 6 and 11 missing
    # WHEN probe.neuron_devices runs
    # THEN FAIL with the 14 table rows as evidence
    d = doc(neuron_ls=fixture("rec-neuron-ls-table-trn1-32xl-14dev.txt"))
    result = only(check_neuron_devices(d, ctx()))
    assert result.tag is Tag.FAIL and "Only 14 Neuron device(s)" in result.message
    assert len(result.evidence) == 14


def test_missing_neuroncore_with_all_devices_present_is_p0_reboot():
    # GIVEN 16 devices with one reporting a single core
    # WHEN probe.neuron_devices runs
    # THEN FAIL: 31 of 32 cores
    d = doc(neuron_ls=fixture("rec-neuron-ls-json-trn1-32xl-core-missing.json"))
    result = only(check_neuron_devices(d, ctx()))
    assert result.tag is Tag.FAIL and "31 NeuronCores" in result.message and "32 cores" in result.message


def test_zero_devices_says_the_driver_may_not_be_loaded():
    # GIVEN an empty device list on a Neuron type
    # WHEN probe.neuron_devices runs
    # THEN FAIL, pointing at the driver
    result = only(check_neuron_devices(doc(neuron_ls="[]"), ctx()))
    assert result.tag is Tag.FAIL and "driver may not be loaded" in result.message


def test_elided_output_with_fewer_devices_is_unknown_not_a_failure():
    # GIVEN AWS's elided JSON example on a trn2.48xlarge
    # WHEN probe.neuron_devices runs
    # THEN UNKNOWN P1: the count cannot be confirmed
    d = doc(neuron_ls=fixture("neuron-ls-j-trn2n-elided.json"))
    result = only(check_neuron_devices(d, ctx("ml.trn2.48xlarge")))
    assert (result.tag, result.priority) == (Tag.UNKNOWN, Priority.P1)
    assert "partial" in result.message


def test_missing_neuron_ls_on_a_neuron_type_is_p0_and_never_suggests_modprobe():
    # GIVEN neuron-ls not installed (exit 127) on a trn1.32xlarge
    # WHEN probe.neuron_devices runs
    # THEN FAIL P0 investigate, quoting the shell, with no modprobe advice
    d = doc(neuron_ls=ProbeItem("neuron-ls --json-output", 127, "", "bash: neuron-ls: command not found"))
    result = only(check_neuron_devices(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "investigate")
    assert result.evidence == ["bash: neuron-ls: command not found"]
    assert not any("modprobe" in c.command for c in result.suggested_commands)
    assert "do not load kernel modules by hand" in (result.root_cause or "")


def test_missing_neuron_ls_on_an_unknown_type_is_skipped():
    # GIVEN neuron-ls not installed on a type the catalogue does not know
    # WHEN probe.neuron_devices runs
    # THEN it is skipped
    d = doc(neuron_ls=ProbeItem("neuron-ls", 127, "", "neuron-ls: command not found"))
    with pytest.raises(NotApplicable):
        check_neuron_devices(d, ctx("ml.x9.weird"))


@pytest.mark.parametrize("instance_type", ["ml.p5.48xlarge", "ml.c5.xlarge", "ml.g5.xlarge"])
def test_non_neuron_types_are_skipped(instance_type):
    # GIVEN a GPU or CPU instance type
    # WHEN probe.neuron_devices runs
    # THEN it is skipped
    with pytest.raises(NotApplicable):
        check_neuron_devices(doc(neuron_ls="[]"), ctx(instance_type))


def test_unknown_type_gets_the_counts_as_info_without_judgement():
    # GIVEN a table on a type the catalogue does not know
    # WHEN probe.neuron_devices runs
    # THEN INFO 'no expectation', no verdict
    d = doc(neuron_ls=fixture("neuron-ls-trn2n-48xl-16dev.txt"))
    result = only(check_neuron_devices(d, ctx("ml.trn3.64xlarge")))
    assert result.tag is Tag.INFO and "no expectation for ml.trn3.64xlarge" in result.message


def test_unrecognised_output_is_unknown():
    # GIVEN neuron-ls printing something that is neither JSON nor a table
    # WHEN probe.neuron_devices runs
    # THEN UNKNOWN P1
    d = doc(neuron_ls=ProbeItem("neuron-ls", 1, "Segmentation fault\n"))
    result = only(check_neuron_devices(d, ctx()))
    assert (result.tag, result.priority) == (Tag.UNKNOWN, Priority.P1)


def test_absent_item_skips_and_timeout_is_unknown():
    # GIVEN no neuron_ls item, then one that timed out
    # WHEN probe.neuron_devices runs
    # THEN skipped, then Unobservable
    with pytest.raises(NotApplicable):
        check_neuron_devices(doc(), ctx())
    with pytest.raises(Unobservable):
        check_neuron_devices(doc(neuron_ls=ProbeItem("neuron-ls", 124, "")), ctx())


# --------------------------------------------------------------------------- probe.neuron_runtime


def runtime(text: str, instance_type: str = "ml.trn1.32xlarge", uptime: float = 4 * 3600.0):
    return check_neuron_runtime(doc(kernel_log=text, uptime=uptime), ctx(instance_type))


def test_sram_uncorrectable_error_means_replace():
    # GIVEN the driver's NEURON_HW_ERR line (undated, this boot 4 h old)
    result = only(runtime(fixture("dmesg-neuron-hw-err-sram-uncorrectable.txt")))
    assert (result.tag, result.priority, result.section, result.node_action) == (
        Tag.FAIL,
        Priority.P0,
        "G.2",
        "replace",
    )
    assert result.evidence[0].startswith("NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR")
    assert any("time unknown" in e for e in result.evidence)


def test_hbm_uncorrectable_and_repairable_errors_get_their_own_actions():
    # GIVEN an HBM uncorrectable NEURON_HW_ERR line and a repairable-HBM runtime status
    # WHEN probe.neuron_runtime runs
    # THEN replace for the first, reboot for the second
    findings = runtime(fixture("rec-journal-neuron-hw-err-hbm-and-repairable.txt"))
    actions = {f.message.split(" in this boot")[0]: (f.tag, f.priority, f.node_action) for f in findings}
    assert actions == {
        "Neuron hardware uncorrectable error": (Tag.FAIL, Priority.P0, "replace"),
        "Neuron HBM repairable uncorrectable error": (Tag.WARN, Priority.P1, "reboot"),
    }


def test_nrt_unrecoverable_error_means_replace():
    # GIVEN an NRT_UNRECOVERABLE_ERROR status
    # WHEN probe.neuron_runtime runs
    # THEN replace
    line = "2026-11-30T09:00:00.000000+00:00 ip-10-4-7-9 python3[1]: ERROR NRT:nrt_execute status NRT_UNRECOVERABLE_ERROR\n"
    assert only(runtime(line)).node_action == "replace"


def test_dge_queue_overflow_is_configuration_not_hardware():
    # GIVEN NRT_EXEC_SW_NQ_OVERFLOW with an "execution timeout" line (fixture, dated 2025-10-01)
    d = doc(kernel_log=fixture("nrt-dge-nq-overflow-exec-timeout.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2025, 10, 2, 0, 0, tzinfo=UTC))))
    assert (result.tag, result.priority, result.node_action) == (Tag.WARN, Priority.P2, "fix-workload")
    assert "NEURON_RT_ENABLE_DGE_NOTIFICATIONS=0" in (result.root_cause or "")


def test_neuroncore_held_by_another_process_is_the_workloads_problem():
    # GIVEN 'NeuronCore(s) not available' (fixture)
    # WHEN probe.neuron_runtime runs
    # THEN fix-workload, with neuron-ls --wide to find the holder
    d = doc(kernel_log=fixture("nrt-neuroncore-not-available.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2021, 8, 28, 0, 0, tzinfo=UTC))))
    assert (result.tag, result.node_action) == (Tag.WARN, "fix-workload")
    assert any("neuron-ls --wide" in c.command for c in result.suggested_commands)


def test_model_needing_more_cores_is_the_workloads_problem():
    # GIVEN 'Could not find VNC id' / 'Failed to load NN' (fixture)
    # WHEN probe.neuron_runtime runs
    # THEN fix-workload
    result = only(runtime(fixture("nrt-syslog-vnc-not-found.txt")))
    assert (
        result.message.startswith("Model needs more NeuronCores than available")
        and result.node_action == "fix-workload"
    )


def test_driver_missing_or_too_old_is_p1_and_never_suggests_modprobe():
    # GIVEN the runtime unable to use the Neuron driver (fixture)
    # WHEN probe.neuron_runtime runs
    # THEN FAIL P1 investigate without modprobe advice
    d = doc(kernel_log=fixture("nrt-init-driver-missing-or-too-old.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2021, 8, 12, 0, 0, tzinfo=UTC))))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P1, "investigate")
    assert not any("modprobe" in c.command for c in result.suggested_commands)


def test_device_that_cannot_be_opened_is_investigated_without_generic_noise():
    # GIVEN 'Could not open the nd0' and its follow-on nrt_init errors (fixture)
    # WHEN probe.neuron_runtime runs
    # THEN one finding for the device, none for the generic follow-on lines
    d = doc(kernel_log=fixture("nrt-init-could-not-open-nd0.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2021, 11, 12, 0, 0, tzinfo=UTC))))
    assert result.message.startswith("Neuron runtime could not open a device")
    assert (result.tag, result.priority, result.node_action) == (Tag.WARN, Priority.P1, "investigate")


def test_core_left_running_by_an_interrupted_job_needs_a_reboot():
    # GIVEN 'Timestamp program stop timeout' (fixture)
    # WHEN probe.neuron_runtime runs
    # THEN WARN reboot
    d = doc(kernel_log=fixture("nrt-init-tsync-timeout-error5.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2022, 8, 31, 6, 0, tzinfo=UTC))))
    assert (result.tag, result.node_action) == (Tag.WARN, "reboot")


def test_unmatched_runtime_errors_alone_are_reported_generically():
    # GIVEN a runtime ERROR line matching no known pattern
    # WHEN probe.neuron_runtime runs
    # THEN a generic P1 warning
    line = "2026-11-30T09:00:00.000000+00:00 h python3[1]: ERROR   NRT:nrt_load   Something new went wrong\n"
    result = only(runtime(line))
    assert result.message.startswith("Neuron runtime errors") and result.priority is Priority.P1


def test_runtime_errors_older_than_the_window_pass():
    # GIVEN the DGE overflow lines four days old
    # WHEN probe.neuron_runtime runs
    # THEN PASS
    d = doc(kernel_log=fixture("nrt-dge-nq-overflow-exec-timeout.txt"))
    result = only(check_neuron_runtime(d, ctx(now=datetime(2025, 10, 5, 0, 0, tzinfo=UTC))))
    assert result.tag is Tag.PASS


def test_clean_log_on_a_neuron_type_passes():
    # GIVEN a kernel log with no Neuron error
    # WHEN probe.neuron_runtime runs
    # THEN PASS
    assert only(runtime("2026-11-30T09:00:00+0000 h kernel: efa 0000:10:1c.0: Setup irq\n")).tag is Tag.PASS


def test_runtime_check_skips_non_neuron_types_and_unknown_types_without_neuron_lines():
    # GIVEN a GPU type, and an unknown type with and without Neuron lines
    # WHEN probe.neuron_runtime runs
    # THEN skipped, skipped, then judged
    with pytest.raises(NotApplicable):
        runtime(fixture("dmesg-neuron-hw-err-sram-uncorrectable.txt"), "ml.p5.48xlarge")
    with pytest.raises(NotApplicable):
        runtime("2026-11-30T09:00:00+0000 h kernel: efa up\n", "ml.x9.weird")
    assert only(runtime(fixture("dmesg-neuron-hw-err-sram-uncorrectable.txt"), "ml.x9.weird")).tag is Tag.FAIL


def test_hardware_error_before_the_reboot_is_still_reported():
    # GIVEN the HBM error lines in the previous boot, inside the window
    # WHEN probe.neuron_runtime runs
    # THEN every finding says it happened before the last reboot
    d = doc(
        kernel_log="",
        kernel_log_previous_boot=fixture("rec-journal-neuron-hw-err-hbm-and-repairable.txt")
        .replace("T08:", "T05:")
        .replace("T09:", "T05:"),
    )
    findings = check_neuron_runtime(d, ctx())
    assert all("before the last reboot" in f.message for f in findings)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("NEURON_HW_ERR=NC_UNCORRECTABLE_ERROR nd-id=1 nc-id=3 action=TERMINATE_INSTANCE", "hw_uncorrectable"),
        ("NEURON_HW_ERR=DMA_ERROR nd-id=1", "hw_other"),
        ("NEURON_HW_ERR=DMA_ERROR nd-id=1 action=TERMINATE_INSTANCE", "hw_uncorrectable"),
        ("ERROR NRT:nrt_execute Failure: NRT_EXEC_HW_ERR_NC_UE", "hw_uncorrectable"),
        ("ERROR NRT:nrt_execute Failure: NRT_EXEC_HW_ERR_DMA_ABORT", "hw_other"),
        ("ERROR NRT:nrt_execute Failure: NRT_EXEC_HW_ERR_COLLECTIVES", "hw_other"),
        ("efa 0000:10:1c.0: Setup irq", None),
        ("NVRM: Xid (PCI:0000:19:00): 48", None),
    ],
)
def test_neuron_lines_are_classified(text, kind):
    # GIVEN one line
    # WHEN it is classified
    # THEN it gets the expected kind
    assert classify_neuron_line(text) == kind


def test_findings_carry_the_node_identity_and_runbook_link():
    # GIVEN the HBM error lines
    # WHEN probe.neuron_runtime runs
    # THEN each finding names the instance and links § G.2
    for f in runtime(fixture("rec-journal-neuron-hw-err-hbm-and-repairable.txt")):
        assert f.instance_id == IID and f.runbook and "g2-trainium-and-inferentia" in f.runbook


def test_window_is_taken_from_the_context():
    # GIVEN an HBM error 68 min ago and a repairable error 46 min ago
    # WHEN probe.neuron_runtime runs with a 1 h window
    # THEN only the repairable error counts
    d = doc(kernel_log=fixture("rec-journal-neuron-hw-err-hbm-and-repairable.txt"))
    narrow = ProbeContext("ml.trn1.32xlarge", NOW, window=timedelta(hours=1))
    findings = check_neuron_runtime(d, narrow)
    assert [f.message.split(" in this boot")[0] for f in findings] == ["Neuron HBM repairable uncorrectable error"]
