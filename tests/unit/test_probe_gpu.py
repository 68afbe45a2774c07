"""GPU evaluators (§ G.1, G.1.a, G.1.b) over probe documents built from real and recorded outputs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe import gpu
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse import dcgmi, nvsmi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "gpu"

COMMANDS = {
    "nvidia_smi_query_gpu": "nvidia-smi --query-gpu=index,pci.bus_id,name,uuid,… --format=csv",
    "nvidia_smi_q": "nvidia-smi -q",
    "nvidia_smi_remapped_rows": "nvidia-smi --query-remapped-rows=gpu_bus_id,gpu_uuid,… --format=csv",
    "nvidia_smi_nvlink_status": "nvidia-smi nvlink --status",
    "dcgmi_health": "dcgmi health -g 0 --check",
}
#: a healthy p5.48xlarge as the probe records it
HEALTHY_P5 = {
    "nvidia_smi_query_gpu": "p5-query-gpu-8-healthy.csv",
    "nvidia_smi_q": "h100-535.161.08-8gpu-healthy.txt",
    "nvidia_smi_remapped_rows": "p5-remapped-rows-healthy-numeric.csv",
    "nvidia_smi_nvlink_status": "p5-nvlink-status-18-links-healthy.txt",
    "dcgmi_health": "dcgmi-health-check-healthy.txt",
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(uptime_s: float | None = 86_400.0, **items: str | ProbeItem) -> ProbeDocument:
    """A probe document; a str value names a fixture file, or is raw stdout when it holds a newline."""
    built = {}
    for item_id, value in items.items():
        if isinstance(value, ProbeItem):
            built[item_id] = value
        else:
            stdout = value if "\n" in value or not value else fixture(value)
            built[item_id] = ProbeItem(command=COMMANDS[item_id], exit_code=0, stdout=stdout)
    return ProbeDocument(hostname="ip-10-1-2-3", collected_at=None, uptime_s=uptime_s, items=built)


def ctx(instance_type: str = "ml.p5.48xlarge") -> ProbeContext:
    return ProbeContext(
        instance_type=instance_type, now=datetime(2026, 11, 30, 10, tzinfo=UTC), instance_id="i-0123456789abcdef0"
    )


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_problem]


def only(findings: list[Finding], tag: Tag) -> Finding:
    [found] = [f for f in findings if f.tag is tag]
    return found


def swap(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


# --------------------------------------------------------------------------- the healthy node


def test_healthy_p5_passes_every_gpu_check_without_priority():
    # GIVEN a healthy p5.48xlarge document
    d = doc(**HEALTHY_P5)
    # WHEN every GPU check runs (the -q fixture's power brake aside: thermal reads the CSV first)
    results = {check.id: check.run(d, ctx()) for check in gpu.CHECKS}
    # THEN each gives one PASS with no priority and evidence
    for check_id, findings in results.items():
        [f] = findings
        assert f.tag is Tag.PASS, (check_id, f.message)
        assert f.priority is None and f.evidence and f.instance_id == "i-0123456789abcdef0"


def test_checks_are_exported_with_ids_and_sections():
    # GIVEN the module's CHECKS WHEN listed THEN the documented ids and sections
    assert [(c.id, c.section) for c in gpu.CHECKS] == [
        ("probe.gpu_count", "G.1"),
        ("probe.gpu_ecc", "G.1"),
        ("probe.gpu_row_remap", "G.1.a"),
        ("probe.gpu_thermal", "G.1"),
        ("probe.gpu_nvlink", "G.1"),
        ("probe.dcgm_health", "G.1.b"),
    ]


# --------------------------------------------------------------------------- probe.gpu_count


def test_count_all_eight_gpus_on_p5_passes_and_cites_the_rows():
    # GIVEN the healthy CSV WHEN counted THEN PASS with every GPU's bus id in evidence
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu="p5-query-gpu-8-healthy.csv"), ctx())
    assert f.tag is Tag.PASS and "8 of 8" in f.message
    assert any("00000000:CA:00.0" in line for line in f.evidence)


def test_count_lost_gpu_fails_p0_and_asks_for_a_reboot():
    # GIVEN 7 rows and the NVML "device handle" error for the 8th
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu="p5-query-gpu-7-of-8-lost.csv"), ctx())
    # THEN FAIL P0 G.1, reboot, and the lost GPU's line is evidence
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "G.1", "reboot")
    assert "7 of 8" in f.message
    assert "Unable to determine the device handle for GPU0000:B9:00.0: Unknown Error" in f.evidence
    assert not any(c.mutates for c in f.suggested_commands)


@pytest.mark.parametrize(
    "stdout",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ],
)
def test_count_driver_failure_means_zero_gpus_and_fails_p0(stdout):
    # GIVEN nvidia-smi that cannot reach the driver or finds no device
    item = ProbeItem(command=COMMANDS["nvidia_smi_query_gpu"], exit_code=9, stdout=stdout)
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu=item), ctx())
    # THEN 0 of 8 seen: FAIL P0 reboot, the tool's line as evidence
    assert (f.tag, f.priority, f.node_action) == (Tag.FAIL, Priority.P0, "reboot")
    assert "0 of 8" in f.message and stdout.strip() in f.evidence


def test_count_missing_nvidia_smi_on_a_gpu_type_fails_instead_of_skipping():
    # GIVEN nvidia-smi absent (exit 127) on a p5
    missing = ProbeItem(command="nvidia-smi", exit_code=127, stdout="", stderr="bash: nvidia-smi: command not found")
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu=missing, nvidia_smi_q=missing), ctx())
    # THEN FAIL P0: the driver or its tools are gone
    assert (f.tag, f.priority, f.node_action) == (Tag.FAIL, Priority.P0, "investigate")
    assert "not installed" in f.message


def test_count_missing_nvidia_smi_on_a_cpu_type_is_skipped():
    # GIVEN a controller on ml.c5 without nvidia-smi WHEN counted THEN skipped, never FAIL
    missing = ProbeItem(command="nvidia-smi", exit_code=127, stdout="")
    with pytest.raises(NotApplicable, match="no NVIDIA GPUs expected"):
        gpu.check_gpu_count(doc(nvidia_smi_query_gpu=missing), ctx("ml.c5.xlarge"))


def test_count_on_an_unknown_type_says_no_expectation():
    # GIVEN a type the catalogue does not know WHEN counted THEN INFO, no guess
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu="p5-query-gpu-8-healthy.csv"), ctx("ml.p3.16xlarge"))
    assert f.tag is Tag.INFO and "no expectation for ml.p3.16xlarge" in f.message


def test_count_from_q_uses_attached_gpus_even_when_the_report_is_cut():
    # GIVEN only the real truncated -q (8 attached, 1 block printed)
    [f] = gpu.check_gpu_count(doc(nvidia_smi_q="h100-535.183.01-truncated.txt"), ctx())
    # THEN 8 of 8 from "Attached GPUs", and the cut is stated in evidence
    assert f.tag is Tag.PASS and "8 of 8" in f.message
    assert "(nvidia_smi_q: output truncated)" in f.evidence


def test_count_fewer_gpus_right_after_boot_warns_instead_of_rebooting():
    # GIVEN a GPU missing 60 s after boot WHEN counted THEN WARN P1 investigate (driver may still load)
    [f] = gpu.check_gpu_count(doc(uptime_s=60.0, nvidia_smi_query_gpu="p5-query-gpu-7-of-8-lost.csv"), ctx())
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "investigate")


def test_count_timed_out_everywhere_is_unknown():
    # GIVEN both nvidia-smi items stopped by the probe's timeout WHEN counted THEN UNKNOWN (Unobservable)
    hung = ProbeItem(command="nvidia-smi", exit_code=124, stdout="")
    with pytest.raises(Unobservable):
        gpu.check_gpu_count(doc(nvidia_smi_query_gpu=hung, nvidia_smi_q=hung), ctx())


def test_count_more_gpus_than_the_type_has_is_information():
    # GIVEN 8 GPUs reported on a g5.12xlarge (4 expected) WHEN counted THEN INFO asking about the type
    [f] = gpu.check_gpu_count(doc(nvidia_smi_query_gpu="p5-query-gpu-8-healthy.csv"), ctx("ml.g5.12xlarge"))
    assert f.tag is Tag.INFO and "instance type" in f.message


def test_count_without_nvidia_items_is_skipped():
    # GIVEN a document without nvidia-smi items WHEN counted THEN skipped with the reason
    with pytest.raises(NotApplicable, match="no nvidia-smi items"):
        gpu.check_gpu_count(doc(), ctx())


# --------------------------------------------------------------------------- probe.gpu_ecc


def test_ecc_volatile_uncorrectable_fails_p0_reboot_naming_the_gpu():
    # GIVEN GPU 3 with 2 uncorrectable volatile errors
    findings = gpu.check_gpu_ecc(doc(nvidia_smi_query_gpu="p5-query-gpu-ecc-and-hot-gpu.csv"), ctx())
    # THEN one FAIL P0 G.1 reboot naming GPU 3 and its bus id, its row as evidence
    [f] = problems(findings)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "G.1", "reboot")
    assert "GPU 3 (00000000:86:00.0): 2" in f.message
    assert any(line.startswith("3, 00000000:86:00.0") for line in f.evidence)
    assert f.evidence[0].startswith("index, pci.bus_id")  # the header explains the row


def test_ecc_aggregate_only_passes_and_names_the_lifetime_count():
    # GIVEN GPU 2 of a p4d with 1 lifetime uncorrectable error and 0 since the driver loaded
    [f] = gpu.check_gpu_ecc(doc(nvidia_smi_query_gpu="p4d-525-query-gpu-throttle-names.csv"), ctx("ml.p4d.24xlarge"))
    # THEN PASS: NVIDIA's memory error management takes the memory out of service at the reset after the error,
    # and the lifetime counter never goes down (a WARN on it could never clear); the count is still said
    assert (f.tag, f.priority, f.node_action) == (Tag.PASS, None, None)
    assert "lifetime counters only" in f.message and "GPU 2 (00000000:20:1C.0): 1" in f.message


def test_ecc_correctable_errors_are_evidence_not_a_problem():
    # GIVEN a GPU with 14 correctable and 0 uncorrectable errors
    text = swap(
        fixture("p5-query-gpu-8-healthy.csv"),
        "0x0000000000000001, Not Active, Not Active, Not Active, Not Active, 0, 0, 0, 0",
        "0x0000000000000001, Not Active, Not Active, Not Active, Not Active, 14, 0, 14, 0",
    )
    [f] = gpu.check_gpu_ecc(doc(nvidia_smi_query_gpu=text), ctx())
    # THEN PASS, and the correctable count is mentioned as background
    assert f.tag is Tag.PASS and "correctable" in f.message and "GPU 0 (00000000:53:00.0): 14" in f.message


def test_ecc_volta_report_fails_retired_pages_and_warns_pending_retirement():
    # GIVEN the recorded V100 report: 1 volatile DBE, 38+24 retired pages, retirement pending
    findings = gpu.check_gpu_ecc(doc(nvidia_smi_q="v100-470-q-retired-pages-throttle.txt"), ctx("ml.p3.16xlarge"))
    got = {(f.tag, f.priority, f.node_action) for f in problems(findings)}
    # THEN P0 reboot (volatile), P1 reboot (pending), P1 replace (near the 64-page limit)
    assert got == {
        (Tag.FAIL, Priority.P0, "reboot"),
        (Tag.WARN, Priority.P1, "reboot"),
        (Tag.FAIL, Priority.P1, "replace"),
    }
    assert all("GPU 00000000:00:1B.0" in f.evidence for f in problems(findings))
    assert all("00:1C.0" not in f.message for f in findings)


def test_ecc_retired_pages_below_the_limit_are_not_a_replace():
    # GIVEN the V100 with 30 retired pages instead of 62, nothing pending and no volatile error
    text = fixture("v100-470-q-retired-pages-throttle.txt")
    text = swap(text, "Single Bit ECC                    : 38", "Single Bit ECC                    : 20")
    text = swap(text, "Double Bit ECC                    : 24", "Double Bit ECC                    : 10")
    text = swap(text, "Pending Page Blacklist            : Yes", "Pending Page Blacklist            : No")
    text = text.replace("Total                     : 1\n", "Total                     : 0\n", 1)
    findings = gpu.check_gpu_ecc(doc(nvidia_smi_q=text), ctx("ml.p3.16xlarge"))
    # THEN no problem: the retired pages are below the limit and the uncorrectable errors are history
    assert problems(findings) == [] and "lifetime counters only" in findings[0].message


@pytest.mark.parametrize("name", ["rtx4090-535.154.05-8gpu.txt", "titanv-560.35.03-ecc-na.txt"])
def test_ecc_not_reported_anywhere_is_skipped_not_passed(name):
    # GIVEN GPUs whose ECC fields are all N/A WHEN judged THEN skipped ("not supported"), not "0 errors"
    with pytest.raises(NotApplicable, match="disabled or not supported"):
        gpu.check_gpu_ecc(doc(nvidia_smi_q=name), ctx("ml.p3.16xlarge"))


def test_ecc_cut_report_is_skipped_saying_output_truncated():
    # GIVEN the real -q cut before its ECC section WHEN judged THEN skipped, never "healthy"
    with pytest.raises(NotApplicable, match="output truncated"):
        gpu.check_gpu_ecc(doc(nvidia_smi_q="h100-535.183.01-truncated.txt"), ctx())


def test_ecc_partial_csv_is_information_not_a_pass():
    # GIVEN 7 GPUs answered and one lost WHEN judged THEN INFO naming the gap, not PASS
    [f] = gpu.check_gpu_ecc(doc(nvidia_smi_query_gpu="p5-query-gpu-7-of-8-lost.csv"), ctx())
    assert f.tag is Tag.INFO and "1 of 8 GPU(s) not reported" in f.message


def test_ecc_minimal_csv_reads_retired_pages_from_q():
    # GIVEN the third (minimal) CSV field list and a -q with a pending retirement for the same GPU
    csv = "index, pci.bus_id, name, uuid, temperature.gpu, ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total\n0, 00000000:00:1C.0, Tesla V100-SXM2-16GB, GPU-a, 45, 0, 0\n"
    q = swap(
        fixture("v100-470-q-retired-pages-throttle.txt"),
        "Pending Page Blacklist            : No",
        "Pending Page Blacklist            : Yes",
    )
    findings = gpu.check_gpu_ecc(doc(nvidia_smi_query_gpu=csv, nvidia_smi_q=q), ctx("ml.p3.16xlarge"))
    # THEN the -q fills the missing field: the pending retirement of 00:1C.0 is found, labelled with its index
    pending = [f for f in problems(findings) if "page retirement pending" in f.message]
    assert pending and "GPU 0 (00000000:00:1C.0)" in pending[0].message


def test_historic_remapped_rows_are_not_an_ecc_failure():
    # GIVEN an A10 whose -q shows "Uncorrectable Error : 4" under Remapped Rows, all ECC counters 0, nothing pending
    text = swap(
        fixture("a10-535.129.03-remap-pending.txt"),
        "Pending                           : Yes",
        "Pending                           : No",
    )
    d = doc(nvidia_smi_q=text)
    # WHEN the ECC and remap checks run
    [ecc] = gpu.check_gpu_ecc(d, ctx("ml.g5.xlarge"))
    [remap] = gpu.check_gpu_row_remap(d, ctx("ml.g5.xlarge"))
    # THEN ECC passes (remap counts are not ECC errors) and the remapped rows in use pass too (§ G.1.a: fine now)
    assert ecc.tag is Tag.PASS
    assert remap.tag is Tag.PASS and "GPU 00000000:07:00.0: 4" in remap.message


# --------------------------------------------------------------------------- probe.gpu_row_remap


def test_remap_pending_from_q_warns_p1_reboot():
    # GIVEN the real A10 report with a pending remap
    [f] = gpu.check_gpu_row_remap(doc(nvidia_smi_q="a10-535.129.03-remap-pending.txt"), ctx("ml.g5.xlarge"))
    # THEN WARN P1 G.1.a, reboot, the Pending line as evidence
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.WARN, Priority.P1, "G.1.a", "reboot")
    assert "Pending                           : Yes" in f.evidence and "GPU 00000000:07:00.0" in f.evidence


def test_pending_printed_as_yes_is_recognised():
    # GIVEN the remap CSV printing pending/failure as Yes/No (GPU 2 pending)
    d = doc(
        nvidia_smi_query_gpu="p5-query-gpu-8-healthy.csv",
        nvidia_smi_remapped_rows="p5-remapped-rows-pending-yes-no.csv",
    )
    [f] = gpu.check_gpu_row_remap(d, ctx())
    # THEN GPU 2 is pending (WARN P1 reboot) and GPU 4's already-remapped rows are not
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "reboot")
    assert "GPU 2 (00000000:75:00.0)" in f.message and "GPU 4" not in f.message
    assert "00000000:75:00.0, GPU-0d6e2b9f-7a43-5c18-e2f7-3b91a4c8d605, 0, 3, Yes, No" in f.evidence


def test_pending_printed_as_a_count_is_recognised():
    # GIVEN numeric pending = 1 for one GPU WHEN judged THEN pending
    text = swap(
        fixture("p5-remapped-rows-healthy-numeric.csv"),
        "c3e8b5d1-0f2a-9764-b8e1-d2a7c4f6e093, 0, 0, 0, 0",
        "c3e8b5d1-0f2a-9764-b8e1-d2a7c4f6e093, 0, 1, 1, 0",
    )
    [f] = gpu.check_gpu_row_remap(doc(nvidia_smi_remapped_rows=text), ctx())
    assert f.tag is Tag.WARN and "00000000:CA:00.0" in f.message


def test_remap_fields_not_available_are_skipped():
    # GIVEN a Volta GPU whose remap fields are all [N/A] WHEN judged THEN skipped, never healthy nor faulty
    with pytest.raises(NotApplicable, match="before Ampere"):
        gpu.check_gpu_row_remap(doc(nvidia_smi_remapped_rows="p3-remapped-rows-na.csv"), ctx("ml.p3.16xlarge"))


def test_remap_failure_fails_p0_replace():
    # GIVEN GPU 7 with failure = 1 WHEN judged THEN FAIL P0 G.1.a replace naming GPU 7
    d = doc(nvidia_smi_query_gpu="p5-query-gpu-8-healthy.csv", nvidia_smi_remapped_rows="p5-remapped-rows-failure.csv")
    [f] = gpu.check_gpu_row_remap(d, ctx())
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "G.1.a", "replace")
    assert "GPU 7 (00000000:CA:00.0)" in f.message


def test_remap_history_without_pending_passes_and_names_the_counts():
    # GIVEN rows remapped on GPU 2 and 4 with nothing pending and no failure
    text = swap(fixture("p5-remapped-rows-pending-yes-no.csv"), "0, 3, Yes, No", "0, 3, No, No")
    [f] = gpu.check_gpu_row_remap(doc(nvidia_smi_remapped_rows=text), ctx())
    # THEN PASS (NVIDIA's memory error guide, § G.1.a: remapped rows in use, fine now), both counts named
    assert f.tag is Tag.PASS and f.priority is None
    assert "00000000:75:00.0: 3" in f.message and "00000000:97:00.0: 2" in f.message


def test_remap_retired_pages_answer_in_the_remap_item_is_not_a_false_alarm():
    # GIVEN the real retired-pages CSV (placeholder rows) where remap data was expected, and no other source
    with pytest.raises(NotApplicable):
        gpu.check_gpu_row_remap(doc(nvidia_smi_remapped_rows="h100-590.48.01-query-retired-pages.csv"), ctx())


def test_remap_590_repair_keys_are_judged():
    # GIVEN the real 590 report with "Unrepairable Memory : Yes", then with "Channel Repair Pending : Yes"
    base = fixture("h100-590.48.01-q-idle-masked.txt")
    unrepairable = swap(
        base,
        "Unrepairable Memory                            : No",
        "Unrepairable Memory                            : Yes",
    )
    channel = swap(
        base,
        "Channel Repair Pending                         : No",
        "Channel Repair Pending                         : Yes",
    )
    [fail] = gpu.check_gpu_row_remap(doc(nvidia_smi_q=unrepairable), ctx())
    [warn] = gpu.check_gpu_row_remap(doc(nvidia_smi_q=channel), ctx())
    # THEN replace for unrepairable memory, reboot for a pending repair
    assert (fail.tag, fail.node_action) == (Tag.FAIL, "replace")
    assert (warn.tag, warn.node_action) == (Tag.WARN, "reboot")


# --------------------------------------------------------------------------- probe.gpu_thermal


def test_thermal_one_hot_gpu_among_cool_ones_is_called_out():
    # GIVEN GPU 5 at 88 °C (HW thermal slowdown) while the others run at 60–64 °C
    findings = gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu="p5-query-gpu-ecc-and-hot-gpu.csv"), ctx())
    hot, slowed = problems(findings)
    # THEN WARN P1 investigate for the temperature, naming the local cause …
    assert (hot.tag, hot.priority, hot.node_action) == (Tag.WARN, Priority.P1, "investigate")
    assert "GPU 5 (00000000:A8:00.0) at 88 °C" in hot.message and "other 7 are at 60–64 °C" in hot.message
    # … and for the active slowdown, naming the thermal cause rather than the parent reason
    assert "HW thermal slowdown on GPU 5 (00000000:A8:00.0)" in slowed.message
    assert "HW slowdown on" not in slowed.message


def test_thermal_all_gpus_hot_points_at_the_node():
    # GIVEN every GPU at 86–91 °C (temperature.gpu is the 5th field)
    lines = fixture("p5-query-gpu-8-healthy.csv").splitlines()
    for number, line in enumerate(lines[1:], start=1):
        parts = line.split(", ")
        parts[4] = str(85 + number % 7)
        lines[number] = ", ".join(parts)
    [f] = gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu="\n".join(lines) + "\n"), ctx())
    # THEN one WARN saying node-level cooling
    assert f.tag is Tag.WARN and "every GPU is hot" in f.message


def test_thermal_power_brake_on_every_gpu_is_named_as_an_external_signal():
    # GIVEN the real 8x H100 -q where every GPU shows HW Power Brake Slowdown Active
    [f] = gpu.check_gpu_thermal(doc(nvidia_smi_q="h100-535.161.08-8gpu-healthy.txt"), ctx())
    # THEN a low-priority WARN naming all 8 GPUs and the power-brake signal: the fixture is a healthy
    # idle node, so a node-wide brake with nothing hot is the baseboard's policy, not a P1 node fault
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, "investigate")
    assert "HW power brake slowdown on all 8 GPUs" in f.message
    assert "HW Power Brake Slowdown       : Active" in f.evidence


def test_thermal_power_brake_on_one_gpu_only_stays_p1():
    # GIVEN the same node but only GPU 0 reports the power brake
    text = fixture("h100-535.161.08-8gpu-healthy.txt")
    first, rest = text.split("HW Power Brake Slowdown       : Active", 1)
    rest = rest.replace("HW Power Brake Slowdown       : Active", "HW Power Brake Slowdown       : Not Active")
    rest = rest.replace("HW Slowdown                       : Active", "HW Slowdown                       : Not Active")
    findings = gpu.check_gpu_thermal(doc(nvidia_smi_q=first + "HW Power Brake Slowdown       : Active" + rest), ctx())
    # THEN it is a P1 warning about that GPU
    [f] = problems(findings)
    assert f.priority is Priority.P1


def test_thermal_old_throttle_reason_names_are_judged():
    # GIVEN the recorded V100 -q with "Clocks Throttle Reasons / SW Thermal Slowdown : Active" at 87 °C
    findings = gpu.check_gpu_thermal(doc(nvidia_smi_q="v100-470-q-retired-pages-throttle.txt"), ctx("ml.p3.16xlarge"))
    messages = " | ".join(f.message for f in problems(findings))
    # THEN both the heat and the SW thermal slowdown of 00:1B.0 are warned about
    assert "GPU 00000000:00:1B.0 at 87 °C" in messages and "SW thermal slowdown on GPU 00000000:00:1B.0" in messages
    # AND the old CSV names (clocks_throttle_reasons.*) are read too
    [ok] = gpu.check_gpu_thermal(
        doc(nvidia_smi_query_gpu="p4d-525-query-gpu-throttle-names.csv"), ctx("ml.p4d.24xlarge")
    )
    assert ok.tag is Tag.PASS and "at 33–35 °C" in ok.message


def test_thermal_reason_bitmask_is_used_when_the_named_columns_are_missing():
    # GIVEN only clocks_event_reasons.active = 0x40 (HW thermal slowdown bit)
    csv = (
        "index, pci.bus_id, temperature.gpu, clocks_event_reasons.active\n0, 00000000:53:00.0, 70, 0x0000000000000040\n"
    )
    [f] = gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu=csv), ctx())
    # THEN the slowdown is decoded from the bitmask
    assert f.tag is Tag.WARN and "HW thermal slowdown on GPU 0" in f.message


def test_thermal_busy_outlier_below_the_limit_is_information_only():
    # GIVEN one GPU 40 °C hotter than its idle peers but below 85 °C
    text = swap(
        fixture("p5-query-gpu-8-healthy.csv"),
        "GPU-7c2f9a1e-d4b6-0835-f1c9-6e3a8d5b2c47, 35,",
        "GPU-7c2f9a1e-d4b6-0835-f1c9-6e3a8d5b2c47, 74,",
    )
    findings = gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu=text), ctx())
    # THEN PASS plus an INFO naming GPU 4, no problem
    assert not problems(findings)
    info = only(findings, Tag.INFO)
    assert "GPU 4 (00000000:97:00.0) runs 74 °C" in info.message


def test_thermal_minimal_csv_is_judged_on_temperature_alone():
    # GIVEN the minimal field list (no reason columns) on a g5 WHEN judged THEN PASS on temperature
    [f] = gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu="g5-query-gpu-minimal-fields.csv"), ctx("ml.g5.xlarge"))
    assert f.tag is Tag.PASS and "at 27 °C" in f.message


def test_thermal_temperature_not_available_is_skipped():
    # GIVEN temperatures printed as [N/A] and no reason columns WHEN judged THEN skipped
    csv = "index, pci.bus_id, temperature.gpu\n0, 00000000:53:00.0, [N/A]\n"
    with pytest.raises(NotApplicable):
        gpu.check_gpu_thermal(doc(nvidia_smi_query_gpu=csv), ctx())


# --------------------------------------------------------------------------- probe.gpu_nvlink


def test_nvlink_inactive_links_fail_p1_reboot_naming_gpu_and_links():
    # GIVEN GPU 2 with links 3 and 4 inactive on a p5
    [f] = gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status="p5-nvlink-status-gpu2-links-inactive.txt"), ctx())
    # THEN FAIL P1 G.1 reboot; message and evidence name GPU 2 and the links
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "G.1", "reboot")
    assert "GPU 2: link(s) 3, 4 of 18 inactive" in f.message
    assert f.evidence[0].startswith("GPU 2: NVIDIA H100 80GB HBM3") and "Link 3: <inactive>" in f.evidence


def test_nvlink_real_a100_capture_passes_on_p4d():
    # GIVEN the real 8x A100 capture on a p4d WHEN judged THEN PASS with all 96 links
    [f] = gpu.check_gpu_nvlink(
        doc(nvidia_smi_nvlink_status="a100-sxm4-80gb-nvlink-status-8gpu-12links.txt"), ctx("ml.p4d.24xlarge")
    )
    assert f.tag is Tag.PASS and "all 96 NVLink links active on 8 GPU(s) at 25 GB/s" in f.message


def test_nvlink_is_skipped_on_parts_without_nvlink():
    # GIVEN a g5 (A10G over PCIe) WHEN judged THEN skipped whatever the output
    with pytest.raises(NotApplicable, match="no NVLink"):
        gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status=""), ctx("ml.g5.48xlarge"))


def test_nvlink_empty_answer_on_an_nvlink_type_is_a_warning():
    # GIVEN an empty answer on a p5 WHEN judged THEN WARN P1 investigate (NVLink state unavailable)
    [f] = gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status=""), ctx())
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "investigate")


def test_nvlink_empty_answer_on_an_unknown_type_is_skipped():
    # GIVEN an empty answer and no expectation WHEN judged THEN skipped (a PCIe part)
    with pytest.raises(NotApplicable, match="PCIe"):
        gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status=""), ctx("ml.p3.16xlarge"))


def test_nvlink_all_links_inactive_on_an_nvlink_type_fails():
    # GIVEN a p5 GPU whose links are all inactive, the others fine
    text = fixture("p5-nvlink-status-18-links-healthy.txt").split("GPU 1:")[1]
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\nNVML: Unable to retrieve NVLink information as all links are inActive\nGPU 1:"
        + text
    )
    [f] = gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status=text), ctx())
    # THEN FAIL P1 for GPU 0 with the driver's line
    assert f.tag is Tag.FAIL and "GPU 0: link(s) all" in f.message
    assert any("all links are inActive" in line for line in f.evidence)


def test_nvlink_timeout_is_unknown():
    # GIVEN the probe's timeout on the item WHEN judged THEN Unobservable
    hung = ProbeItem(command=COMMANDS["nvidia_smi_nvlink_status"], exit_code=124, stdout="")
    with pytest.raises(Unobservable):
        gpu.check_gpu_nvlink(doc(nvidia_smi_nvlink_status=hung), ctx())


# --------------------------------------------------------------------------- probe.dcgm_health


def test_dcgm_failure_fails_p0_investigate_naming_the_gpus():
    # GIVEN DCGM reporting Failure on GPU 3 and GPU 7
    [f] = gpu.check_dcgm_health(doc(dcgmi_health="dcgmi-health-check-failure-memory.txt"), ctx())
    # THEN FAIL P0 G.1.b investigate, message and evidence name both GPUs
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "G.1.b", "investigate")
    assert "GPU 3 failure (Memory system)" in f.message and "GPU 7 failure (Memory system)" in f.message
    assert any("-> Memory system" in line for line in f.evidence)


def test_dcgm_warning_warns_p1():
    # GIVEN DCGM Warning (PCIe replays on GPU 1) WHEN judged THEN WARN P1 investigate naming GPU 1
    [f] = gpu.check_dcgm_health(doc(dcgmi_health="dcgmi-health-check-warning-pcie.txt"), ctx())
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "investigate")
    assert "GPU 1 warning (PCIe system)" in f.message


def test_dcgm_old_layout_warning_is_judged():
    # GIVEN the DCGM 1.x boxed layout WHEN judged THEN WARN naming GPU 0
    [f] = gpu.check_dcgm_health(doc(dcgmi_health="dcgmi-1x-health-check-warning-boxed.txt"), ctx())
    assert f.tag is Tag.WARN and "GPU 0 warning (PCIe system)" in f.message


def test_dcgm_healthy_passes():
    # GIVEN DCGM Healthy WHEN judged THEN PASS
    [f] = gpu.check_dcgm_health(doc(dcgmi_health="dcgmi-health-check-healthy.txt"), ctx())
    assert f.tag is Tag.PASS and f.priority is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("dcgmi-health-check-watches-not-enabled.txt", "Health watches not enabled"),
        ("dcgmi-health-check-hostengine-down.txt", "unable to establish a connection"),
    ],
)
def test_no_watches_or_no_host_engine_is_skipped_with_the_reason(name, reason):
    # GIVEN dcgmi that has no verdict to give WHEN judged THEN skipped with DCGM's own reason, never FAIL
    item = ProbeItem(command=COMMANDS["dcgmi_health"], exit_code=255, stdout=fixture(name))
    with pytest.raises(NotApplicable, match=reason):
        gpu.check_dcgm_health(doc(dcgmi_health=item), ctx())


def test_dcgm_group_error_is_skipped_with_dcgms_reason_not_as_a_missing_tool():
    # GIVEN dcgmi failing with "The Group is not found" (a DCGM error, not a missing binary)
    stdout = "Error: Unable to check health watches. Return: The Group is not found\n"
    item = ProbeItem(command=COMMANDS["dcgmi_health"], exit_code=255, stdout=stdout)
    # WHEN judged THEN skipped quoting DCGM, not "not installed"
    with pytest.raises(NotApplicable, match="The Group is not found") as caught:
        gpu.check_dcgm_health(doc(dcgmi_health=item), ctx())
    assert "not installed" not in str(caught.value)


def test_dcgmi_not_installed_is_skipped():
    # GIVEN no dcgmi on the node WHEN judged THEN skipped (tool missing)
    missing = ProbeItem(command=COMMANDS["dcgmi_health"], exit_code=127, stdout="")
    with pytest.raises(NotApplicable, match="not installed"):
        gpu.check_dcgm_health(doc(dcgmi_health=missing), ctx())


# --------------------------------------------------------------------------- contract-wide rules


FAULTY_DOCS = [
    dict(
        nvidia_smi_query_gpu="p5-query-gpu-7-of-8-lost.csv",
        nvidia_smi_remapped_rows="p5-remapped-rows-pending-yes-no.csv",
        nvidia_smi_nvlink_status="p5-nvlink-status-gpu2-links-inactive.txt",
        dcgmi_health="dcgmi-health-check-failure-memory.txt",
    ),
    dict(
        nvidia_smi_query_gpu="p5-query-gpu-ecc-and-hot-gpu.csv",
        nvidia_smi_remapped_rows="p5-remapped-rows-failure.csv",
        dcgmi_health="dcgmi-health-check-warning-pcie.txt",
    ),
    dict(nvidia_smi_q="v100-470-q-retired-pages-throttle.txt"),
    dict(nvidia_smi_q="a10-535.129.03-remap-pending.txt"),
]


@pytest.mark.parametrize("items", FAULTY_DOCS)
def test_every_problem_is_prioritised_routed_actionable_and_names_its_gpu(items):
    # GIVEN faulty documents WHEN every check runs
    d = doc(**items)
    found = []
    for check in gpu.CHECKS:
        try:
            found.extend(check.run(d, ctx()))
        except (NotApplicable, Unobservable):
            continue
    # THEN every problem has a priority, a G section, a node action, read-only commands,
    # and evidence naming a GPU (index or bus id)
    assert problems(found)
    for f in problems(found):
        assert f.priority is not None and f.section and f.section.startswith("G")
        assert f.node_action in ("investigate", "reboot", "replace")
        assert f.suggested_commands and not any(c.mutates for c in f.suggested_commands)
        assert any("GPU" in line or nvsmi.bus_key(line) for line in f.evidence), f.evidence


def test_garbled_and_cut_items_never_raise_anything_but_skip_or_unknown():
    # GIVEN every item of a healthy node cut at many points, with the probe's marker
    texts = {item_id: fixture(name) for item_id, name in HEALTHY_P5.items()}
    for fraction in (0.0, 0.05, 0.3, 0.5, 0.77, 0.99):
        items = {
            item_id: ProbeItem(
                command=COMMANDS[item_id],
                exit_code=0,
                stdout=text[: int(len(text) * fraction)] + TRUNCATION_MARKER,
                truncated=True,
            )
            for item_id, text in texts.items()
        }
        d = ProbeDocument(hostname="h", collected_at=None, uptime_s=86_400.0, items=items)
        # WHEN every check runs THEN findings or a skip/unknown, never another exception
        for check in gpu.CHECKS:
            try:
                check.run(d, ctx())
            except (NotApplicable, Unobservable):
                pass


def test_each_item_is_parsed_once_per_document_and_q_only_when_needed(monkeypatch):
    # GIVEN a healthy p5 document and counting parsers
    calls: dict[str, int] = {}
    for module, name in (
        (nvsmi, "parse_csv"),
        (nvsmi, "parse_q"),
        (nvsmi, "parse_nvlink"),
        (dcgmi, "parse_dcgm_health"),
    ):
        original = getattr(module, name)

        def counting(*args, _original=original, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
    d = doc(**HEALTHY_P5)
    # WHEN every check runs
    for check in gpu.CHECKS:
        check.run(d, ctx())
    # THEN the two CSVs, nvlink and dcgmi are parsed once each, and -q (not needed) never
    assert calls == {"parse_csv": 2, "parse_nvlink": 1, "parse_dcgm_health": 1}
