"""Parsers of nvidia-smi (CSV, -q, nvlink --status) and dcgmi health output."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hyperpod_debugger.probe.document import TRUNCATION_MARKER
from hyperpod_debugger.probe.parse import dcgmi, nvsmi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "gpu"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_has_its_meta_sidecar():
    # GIVEN the GPU fixture folder WHEN listing raw files THEN each has a .meta.md saying what it shows
    raw = [p for p in FIXTURES.iterdir() if not p.name.endswith(".meta.md")]
    assert raw
    for path in raw:
        assert (FIXTURES / f"{path.stem}.meta.md").is_file(), path.name


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "value", ["[N/A]", "N/A", "[Not Supported]", "Not Supported", "", "  ", "ERR!", None, "[Unknown Error]"]
)
def test_unsupported_values_read_as_missing_never_zero(value):
    # GIVEN a placeholder nvidia-smi prints for a field it cannot give
    # WHEN reading it as a number or a flag THEN it is "cannot judge" (None)
    assert nvsmi.is_missing(value)
    assert nvsmi.number(value) is None
    assert nvsmi.flag(value) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("350.56 W", 350.56), ("81559 MiB", 81559.0), ("33 C", 33.0), ("0", 0.0), ("12", 12.0), ("0 us", 0.0)],
)
def test_numbers_with_units_are_read(value, expected):
    # GIVEN a value with its unit WHEN read as a number THEN the unit is dropped
    assert nvsmi.number(value) == expected


def test_text_that_is_not_a_number_is_not_read_as_one():
    # GIVEN words or a bitmask WHEN read as a number THEN None (never a guess)
    assert nvsmi.number("Not Active") is None
    assert nvsmi.number("0x0000000000000001") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Active", True),
        ("Not Active", False),
        ("Yes", True),
        ("No", False),
        ("Enabled", True),
        ("Disabled", False),
        ("1", True),
        ("0", False),
        ("4", True),
    ],
)
def test_flags_accept_words_and_counts(value, expected):
    # GIVEN a yes/no style value (or a pending count) WHEN read as a flag THEN its truth
    assert nvsmi.flag(value) is expected


def test_bus_ids_match_across_tools_whatever_the_domain_width_and_case():
    # GIVEN the same GPU written by nvidia-smi, the remap query and the kernel
    # WHEN normalised THEN they are one key
    assert nvsmi.bus_key("00000000:B9:00.0") == nvsmi.bus_key("0000:b9:00.0") == "0000:b9:00.0"
    assert nvsmi.bus_key("GPU 00000000:19:00.0") == "0000:19:00.0"
    assert nvsmi.bus_key("no bus id here") is None


# --------------------------------------------------------------------------- CSV


def test_column_names_lose_units_and_old_throttle_names_map_to_event_names():
    # GIVEN header names as nvidia-smi prints them WHEN normalised THEN the checks' names
    assert nvsmi.normalize_column("power.draw [W]") == "power.draw"
    assert nvsmi.normalize_column(" memory.used [MiB]") == "memory.used"
    assert nvsmi.normalize_column("clocks_throttle_reasons.hw_slowdown") == "clocks_event_reasons.hw_slowdown"
    assert nvsmi.normalize_column("gpu_bus_id") == "pci.bus_id"
    assert nvsmi.normalize_column("retired_pages.sbe") == "retired_pages.single_bit_ecc.count"


def test_csv_is_driven_by_its_header_in_any_field_order():
    # GIVEN two answers with the same facts in different column orders
    a = "index, temperature.gpu, pci.bus_id\n0, 41, 00000000:19:00.0\n"
    b = "pci.bus_id, index, temperature.gpu\n00000000:19:00.0, 0, 41\n"
    # WHEN parsed THEN every value lands under its own column
    for text in (a, b):
        [row] = nvsmi.parse_csv(text).rows
        assert (row.index, row.bus_id, row.number("temperature.gpu")) == (0, "00000000:19:00.0", 41.0)


def test_real_212_field_query_parses_units_placeholders_and_flags():
    # GIVEN the real all-fields capture of an idle H100 (590.48.01)
    table = nvsmi.parse_csv(fixture("h100-590.48.01-query-gpu-allfields-idle.csv"))
    # WHEN reading its single row
    [row] = table.rows
    # THEN numbers, units, [N/A] and Active/Not Active are understood
    assert len(table.columns) == 212
    assert row.raw("name") == "NVIDIA H100 80GB HBM3"
    assert row.bus_id == "00000000:00:09.0"
    assert row.number("power.draw") == pytest.approx(69.85)
    assert row.number("memory.total") == 81559
    assert row.flag("clocks_event_reasons.gpu_idle") is True
    assert row.flag("clocks_event_reasons.hw_slowdown") is False
    assert row.number("retired_pages.single_bit_ecc.count") is None  # [N/A] on Hopper
    assert row.flag("remapped_rows.pending") is False  # "No"


def test_real_h200_query_reads_its_name_and_memory():
    # GIVEN the real H200 capture WHEN parsed THEN the H200 facts are there
    [row] = nvsmi.parse_csv(fixture("h200-590.48.01-query-gpu-allfields-idle.csv")).rows
    assert row.raw("name") == "NVIDIA H200"
    assert row.number("memory.total") == 143771
    assert row.number("temperature.gpu") == 28


def test_csv_without_header_falls_back_to_the_contract_columns():
    # GIVEN a noheader answer WHEN parsed with the contract's default columns THEN values map by position
    table = nvsmi.parse_csv("00000000:53:00.0, GPU-x, 0, 3, Yes, No\n", ("pci.bus_id", "uuid", "a", "b", "c", "d"))
    assert table.header is None
    assert table.rows[0].values["c"] == "Yes"


def test_csv_keeps_lost_gpu_and_driver_lines_out_of_the_rows():
    # GIVEN the recorded p5 answer where GPU 6 is unreachable
    table = nvsmi.parse_csv(fixture("p5-query-gpu-7-of-8-lost.csv"))
    # WHEN parsed THEN 7 rows and the NVML error line is a lost-GPU message
    assert len(table.rows) == 7
    assert table.lost_gpu_lines == ("Unable to determine the device handle for GPU0000:B9:00.0: Unknown Error",)
    # AND a driver failure is recognised as such
    down = nvsmi.parse_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert not down.rows and down.driver_down_line


def test_csv_cut_by_the_probe_drops_the_cut_value_and_flags_truncation():
    # GIVEN an answer cut mid-row with the probe's marker
    text = "index, pci.bus_id, temperature.gpu\n0, 00000000:53:00.0, 34\n1, 00000000:64:00.0, 3" + TRUNCATION_MARKER
    table = nvsmi.parse_csv(text)
    # WHEN parsed THEN the last row keeps its sure fields, not the half value
    assert table.truncated
    assert table.rows[1].partial
    assert table.rows[1].number("temperature.gpu") is None
    assert table.rows[0].number("temperature.gpu") == 34


def test_a_retired_pages_answer_holds_no_remap_columns():
    # GIVEN the real retired-pages query of an H100 (placeholder rows, not retirements)
    table = nvsmi.parse_csv(fixture("h100-590.48.01-query-retired-pages.csv"))
    # WHEN looking for remap columns THEN there are none to misread
    assert not table.has("remapped_rows.pending")
    assert len(table.rows) == 2


# --------------------------------------------------------------------------- nvidia-smi -q


def test_q_ampere_block_reads_remap_pending_and_zero_ecc():
    # GIVEN the real A10 (535.129.03) report with a pending remap
    report = nvsmi.parse_q(fixture("a10-535.129.03-remap-pending.txt"))
    [gpu] = report.gpus
    # THEN ECC counters are zero, and the remapped rows say pending with 4 uncorrectable rows
    unc, cor = nvsmi.q_ecc(gpu, "volatile")
    assert (unc.value, cor.value) == (0, 0)
    rows = nvsmi.q_remapped_rows(gpu)
    assert rows["pending"].value is True and rows["uncorrectable"].value == 4 and rows["failure"].value is False
    assert gpu.get("product name").value == "NVIDIA A10" and report.driver_version == "535.129.03"


def test_q_hopper_eight_gpus_are_keyed_by_bus_id_and_parity_sec_ded_are_summed():
    # GIVEN the real 8x H100 (535.161.08) report
    report = nvsmi.parse_q(fixture("h100-535.161.08-8gpu-healthy.txt"))
    # THEN 8 blocks keyed by bus id, and the Hopper uncorrectable lines are all counted
    assert [g.bus_id for g in report.gpus][:2] == ["00000000:19:00.0", "00000000:3B:00.0"]
    assert report.attached_gpus == 8 and not report.incomplete
    unc, _ = nvsmi.q_ecc(report.gpus[0], "aggregate")
    assert unc.value == 0
    assert {line.split(":")[0].strip() for line in unc.lines} == {
        "SRAM Uncorrectable Parity",
        "SRAM Uncorrectable SEC-DED",
        "DRAM Uncorrectable",
    }
    # AND the "Aggregate Uncorrectable SRAM Sources" breakdown is not double counted
    assert all("SRAM L2" not in line for line in unc.lines)


def test_q_590_wider_keys_and_repair_keys_are_read():
    # GIVEN the real 590.48.01 report (wider key column, new repair keys)
    [gpu] = nvsmi.parse_q(fixture("h100-590.48.01-q-idle-masked.txt")).gpus
    # THEN the repair keys and the temperature are there
    assert gpu.get("ecc errors", "channel repair pending").value == "No"
    assert gpu.get("ecc errors", "unrepairable memory").value == "No"
    assert nvsmi.q_value(gpu, "temperature", "gpu current temp").value == "41 C"


def test_q_cut_report_keeps_the_announced_count_and_is_marked_incomplete():
    # GIVEN the real truncated H100 report (8 attached, cut inside the first GPU)
    report = nvsmi.parse_q(fixture("h100-535.183.01-truncated.txt"))
    # THEN it is incomplete, the count still reads 8, and no ECC section was invented
    assert report.attached_gpus == 8 and len(report.gpus) == 1 and report.incomplete
    assert nvsmi.q_ecc(report.gpus[0], "volatile")[0].value is None
    assert nvsmi.q_remapped_rows(report.gpus[0]) == {}


def test_q_misindented_invalid_slowdown_keys_are_not_read_as_slowdown():
    # GIVEN the truncated report's driver quirk "Invalid HW Slowdown" at odd indentation
    [gpu] = nvsmi.parse_q(fixture("h100-535.183.01-truncated.txt")).gpus
    # THEN no "hw slowdown" value is found (the driver could not tell)
    assert nvsmi.q_value(gpu, "clocks event reasons", "hw slowdown") is None
    assert nvsmi.q_value(gpu, "clocks event reasons", "sw thermal slowdown").value == "Not Active"


def test_q_consumer_and_volta_na_layouts_give_no_ecc_rather_than_zero():
    # GIVEN the real RTX 4090 (ECC disabled) and Titan V (Volta, N/A) reports
    for name in ("rtx4090-535.154.05-8gpu.txt", "titanv-560.35.03-ecc-na.txt"):
        gpu = nvsmi.parse_q(fixture(name)).gpus[0]
        # THEN ECC is "not reported", not 0
        assert nvsmi.q_ecc(gpu, "volatile")[0].value is None
        assert nvsmi.q_ecc(gpu, "aggregate")[0].value is None
    # AND the Titan V's "Remapped Rows : N/A" scalar reads as no remap data
    titan = nvsmi.parse_q(fixture("titanv-560.35.03-ecc-na.txt")).gpus[0]
    assert nvsmi.q_remapped_rows(titan) == {}


def test_q_volta_single_double_bit_totals_retired_pages_and_throttle_names():
    # GIVEN a recorded R470 V100 report with numbers in the Volta layout
    report = nvsmi.parse_q(fixture("v100-470-q-retired-pages-throttle.txt"))
    bad, good = report.gpus
    # THEN the Double Bit Total is the uncorrectable count, Single Bit Total the correctable one
    unc, cor = nvsmi.q_ecc(bad, "volatile")
    assert (unc.value, cor.value) == (1, 3)
    assert nvsmi.q_ecc(bad, "aggregate")[0].value == 2
    # AND retired pages and the pending blacklist flag are read
    pages = nvsmi.q_retired_pages(bad)
    assert (pages["single"].value, pages["double"].value, pages["pending"].value) == (38, 24, True)
    # AND the old "Clocks Throttle Reasons" section is found
    assert nvsmi.q_value(bad, "clocks throttle reasons", "sw thermal slowdown").value == "Active"
    assert nvsmi.q_retired_pages(good)["pending"].value is False


def test_q_driver_failure_text_is_a_message_not_a_gpu():
    # GIVEN nvidia-smi -q when the driver is gone
    report = nvsmi.parse_q("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    # THEN no GPU and the driver-down line is kept
    assert report.gpus == () and report.driver_down_line


# --------------------------------------------------------------------------- nvlink --status


def test_nvlink_real_a100_capture_lists_twelve_active_links_per_gpu():
    # GIVEN the real 8x A100 nvlink --status capture
    report = nvsmi.parse_nvlink(fixture("a100-sxm4-80gb-nvlink-status-8gpu-12links.txt"))
    # THEN 8 GPUs with 12 links at 25 GB/s, none inactive
    assert len(report.gpus) == 8
    assert all(len(g.links) == 12 and not g.inactive for g in report.gpus)
    assert report.gpus[0].links[0].speed_gbps == 25
    assert report.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"


def test_nvlink_pasted_prompt_line_is_ignored():
    # GIVEN the p4de cheat-sheet block that starts with the shell prompt
    report = nvsmi.parse_nvlink(fixture("nvidia-smi-nvlink-s-p4de.txt"))
    # THEN one GPU with 12 links and no stray message
    [gpu] = report.gpus
    assert len(gpu.links) == 12 and report.messages == ()


def test_nvlink_inactive_links_are_named():
    # GIVEN the recorded H100 answer with two links of GPU 2 down
    report = nvsmi.parse_nvlink(fixture("p5-nvlink-status-gpu2-links-inactive.txt"))
    # THEN exactly those links are inactive
    down = {(g.index, link.number) for g in report.gpus for link in g.inactive}
    assert down == {(2, 3), (2, 4)}
    assert len(report.gpus[2].active) == 16


def test_nvlink_empty_output_and_all_inactive_message():
    # GIVEN a PCIe GPU (empty answer) and a GPU whose links are all down
    assert nvsmi.parse_nvlink("").gpus == ()
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\nNVML: Unable to retrieve NVLink information as all links are inActive\n"
    [gpu] = nvsmi.parse_nvlink(text).gpus
    # THEN no links, and the all-inactive line is attached to that GPU
    assert gpu.links == () and "inActive" in (gpu.all_inactive_line or "")


# --------------------------------------------------------------------------- dcgmi health


def test_dcgm_healthy_report_has_a_verdict_and_no_incident():
    # GIVEN the recorded healthy report WHEN parsed THEN Healthy, no incidents
    report = dcgmi.parse_dcgm_health(fixture("dcgmi-health-check-healthy.txt"))
    assert report.overall == "Healthy" and report.incidents == ()


def test_dcgm_failure_report_joins_wrapped_messages_per_gpu_and_system():
    # GIVEN the recorded failure report (two GPUs, wrapped messages)
    report = dcgmi.parse_dcgm_health(fixture("dcgmi-health-check-failure-memory.txt"))
    # THEN overall Failure and one incident per GPU/system with the whole message
    assert report.overall == "Failure"
    found = [(i.entity, i.system, i.health) for i in report.incidents]
    assert found == [
        ("GPU 3", "Memory system", "Failure"),
        ("GPU 7", "Memory system", "Failure"),
        ("GPU 7", "InfoROM system", "Warning"),
    ]
    assert report.incidents[1].message == "GPU 7 had uncorrectable memory errors and row remapping failed."


def test_dcgm_old_boxed_layout_is_understood():
    # GIVEN the recorded DCGM 1.x layout
    report = dcgmi.parse_dcgm_health(fixture("dcgmi-1x-health-check-warning-boxed.txt"))
    # THEN the verdict and the GPU 0 PCIe incident are read
    assert report.overall == "Warning"
    [incident] = report.incidents
    assert (incident.entity, incident.system) == ("GPU 0", "PCIe system")
    assert incident.message.endswith("replays per minute for GPU 0: 13")


@pytest.mark.parametrize(
    "name", ["dcgmi-health-check-watches-not-enabled.txt", "dcgmi-health-check-hostengine-down.txt"]
)
def test_dcgm_errors_give_no_verdict_and_keep_the_reason(name):
    # GIVEN dcgmi without watches or without its host engine WHEN parsed THEN no verdict, the reason kept
    report = dcgmi.parse_dcgm_health(fixture(name))
    assert report.overall is None
    assert report.error_line and report.error_line.startswith("Error")


# --------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    ("name", "parse"),
    [
        ("h100-535.161.08-8gpu-healthy.txt", nvsmi.parse_q),
        ("v100-470-q-retired-pages-throttle.txt", nvsmi.parse_q),
        ("p5-query-gpu-ecc-and-hot-gpu.csv", nvsmi.parse_csv),
        ("p5-nvlink-status-18-links-healthy.txt", nvsmi.parse_nvlink),
        ("dcgmi-health-check-failure-memory.txt", dcgmi.parse_dcgm_health),
    ],
)
def test_parsers_survive_cut_and_garbled_input(name, parse):
    # GIVEN a real or recorded output cut at random points and with lines shuffled
    text = fixture(name)
    rng = random.Random(7)
    samples = [text[: rng.randrange(len(text))] for _ in range(40)]
    lines = text.splitlines()
    for _ in range(10):
        rng.shuffle(lines)
        samples.append("\n".join(lines))
    samples += ["", "\x00\x01garbage ::: | | ,,,", TRUNCATION_MARKER]
    # WHEN parsed THEN nothing raises
    for sample in samples:
        parse(sample)
