"""Outputs a person pastes (issue 30): notes after values, excerpts without their header, a CSV with its
command line, chrony in local mode, ``free`` in any unit. A value is read only where its meaning is
certain; where it is not, the check says so (UNKNOWN or INFO), never PASS.

Documentation the verdicts rest on:
- NVIDIA GPU Memory Error Management (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): the
  row-remapping pending flag means the remap is applied at the next GPU reset (work may continue until
  then); a row-remapping failure is an RMA condition; the remapped-row counts are InfoROM entries.
- nvidia-smi(1): ``Pending Page Blacklist`` / ``retired_pages.pending``: pages retire at the next reset.
- chronyc(1), ``tracking``: Reference ID 127.127.1.1 (7F7F0101) = not synchronised to any external source,
  the ``local`` directive serving the node's own clock; AWS "Set the time for your Linux instance": chrony
  should follow the Amazon Time Sync Service (169.254.169.123).
- procps free(1): ``-b`` bytes, ``-k``/``--kibi`` (the default), ``-m``/``--mebi``, ``-g``/``--gibi``,
  ``--kilo``/``--mega``/``--giga`` powers of 1000, ``-h`` each size with its own suffix.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Finding, Tag
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse import nvsmi
from hyperpod_debugger.probe.parse.sysparse import free_unit, parse_chronyc_tracking, parse_free
from hyperpod_debugger.report.analysis import analyze

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def judge(item_id: str, text: str, instance_type: str = "ml.p5.48xlarge", command: str = "(raw output)") -> list:
    doc = ProbeDocument(
        hostname="pasted",
        collected_at=None,
        uptime_s=None,
        items={item_id: ProbeItem(command=command, exit_code=0, stdout=text)},
    )
    return analyze(doc, instance_type=instance_type, now=NOW, orchestrator=None, role="compute").findings


def of(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def only(findings: list[Finding], check: str) -> Finding:
    mine = of(findings, check)
    assert len(mine) == 1, [(f.tag, f.message) for f in mine]
    return mine[0]


REMAP_BLOCK = """GPU 00000000:55:00.0
    Remapped Rows
        Correctable Error                              : 0
        Uncorrectable Error                            : 1
        Pending                                        : {pending}
        Remapping Failure Occurred                     : No
"""


# --------------------------------------------------------------------------- values with a note


@pytest.mark.parametrize(
    ("value", "as_flag", "as_number"),
    [
        ("Yes <===", True, None),
        ("Yes   <-- this one", True, None),
        ("No # note", False, None),
        ("Not Active <-", False, None),
        ("2   <-- here", True, 2.0),
        ("0 (after the reset)", False, 0.0),
        ("4 bank(s)", True, 4.0),
        ("Yes this one", None, None),  # a word after the value, not a mark: not certain
        ("1 2", None, None),
    ],
)
def test_a_value_whose_first_token_is_certain_is_read_and_a_trailing_note_ignored(value, as_flag, as_number):
    assert nvsmi.flag(value) is as_flag
    assert nvsmi.number(value) == as_number


def test_printed_but_uncertain_values_are_unreadable_and_missing_ones_are_not():
    assert nvsmi.unreadable("Yes this one")
    assert nvsmi.unreadable("zero?", "number")
    assert not nvsmi.unreadable("Yes <===")
    assert not nvsmi.unreadable("[N/A]")
    assert not nvsmi.unreadable(None)


@pytest.mark.parametrize("pending", ["Yes <===", "Yes   <-- this one", "Yes # note"])
def test_given_pending_yes_with_a_note_when_analysed_then_remap_pending_warns_reboot(pending):
    # NVIDIA: pending = the remap happens at the next GPU reset → a reboot on HyperPod, not healthy
    found = only(judge("nvidia_smi_q", REMAP_BLOCK.format(pending=pending)), "probe.gpu_row_remap")
    assert (found.tag, found.node_action, found.section) == (Tag.WARN, "reboot", "G.1.a")
    assert any(pending.split()[0] in line and "Pending" in line for line in found.evidence)


def test_given_pending_no_with_a_note_when_analysed_then_only_the_documented_remap_count_is_reported():
    found = only(judge("nvidia_smi_q", REMAP_BLOCK.format(pending="No   # after the reset")), "probe.gpu_row_remap")
    assert found.tag is Tag.PASS and "already remapped" in found.message


def test_given_a_pending_value_that_cannot_be_read_when_analysed_then_unknown_never_pass():
    found = of(judge("nvidia_smi_q", REMAP_BLOCK.format(pending="Yes this one")), "probe.gpu_row_remap")
    assert [f.tag for f in found] == [Tag.UNKNOWN]
    assert "not readable" in found[0].message
    assert any("Yes this one" in line for line in found[0].evidence)


def test_given_pending_page_blacklist_yes_with_a_note_when_analysed_then_page_retirement_pending_warns():
    # nvidia-smi(1): pages pending retirement are retired at the next reset
    text = """GPU 00000000:07:00.0
    Retired Pages
        Single Bit ECC                        : 0
        Double Bit ECC                        : 1
        Pending Page Blacklist                : Yes   <-- this one
"""
    found = of(judge("nvidia_smi_q", text), "probe.gpu_ecc")
    assert [(f.tag, f.node_action) for f in found] == [(Tag.WARN, "reboot")]
    assert "page retirement pending" in found[0].message


def test_given_a_pending_page_blacklist_that_cannot_be_read_when_analysed_then_unknown():
    text = """GPU 00000000:07:00.0
    Retired Pages
        Single Bit ECC                        : 0
        Double Bit ECC                        : 0
        Pending Page Blacklist                : maybe
"""
    found = of(judge("nvidia_smi_q", text), "probe.gpu_ecc")
    assert [f.tag for f in found] == [Tag.UNKNOWN]


# --------------------------------------------------------------------------- excerpts without a GPU header


FLAT_REMAP = """Remapped Rows
Correctable Error : 0
Uncorrectable Error : 2
Pending : Yes
Remapping Failure Occurred : No
"""


def test_an_excerpt_that_lost_its_indentation_is_read_as_one_gpu_of_unknown_address():
    report = nvsmi.parse_q(FLAT_REMAP)
    assert [g.bus_id for g in report.gpus] == [nvsmi.UNKNOWN_BUS]
    rows = nvsmi.q_remapped_rows(report.gpus[0])
    assert (rows["uncorrectable"].value, rows["pending"].value, rows["failure"].value) == (2, True, False)


def test_a_flat_ecc_excerpt_keeps_its_volatile_and_aggregate_blocks_apart():
    text = "ECC Errors\nVolatile\nDRAM Correctable : 0\nDRAM Uncorrectable : 3\nAggregate\nDRAM Uncorrectable : 5\n"
    unc_v, _ = nvsmi.q_ecc(nvsmi.parse_q(text).gpus[0], "volatile")
    unc_a, _ = nvsmi.q_ecc(nvsmi.parse_q(text).gpus[0], "aggregate")
    assert (unc_v.value, unc_a.value) == (3, 5)


@pytest.mark.parametrize("text", [FLAT_REMAP, "    " + FLAT_REMAP.replace("\n", "\n        ").rstrip() + "\n"])
def test_given_an_excerpt_without_its_gpu_line_when_analysed_then_judged_and_said_to_be_one_unknown_gpu(text):
    findings = judge("nvidia_smi_q", text)
    found = only(findings, "probe.gpu_row_remap")
    assert (found.tag, found.node_action) == (Tag.WARN, "reboot")
    assert "bus id not in the excerpt" in found.message
    # an excerpt cannot say how many GPUs the node has: no "1 of 8 GPUs visible" from it
    assert of(findings, "probe.gpu_count") == []


def test_given_a_clean_excerpt_without_its_gpu_line_when_analysed_then_info_not_pass_for_the_node():
    clean = FLAT_REMAP.replace("Uncorrectable Error : 2", "Uncorrectable Error : 0").replace(
        "Pending : Yes", "Pending : No"
    )
    found = only(judge("nvidia_smi_q", clean), "probe.gpu_row_remap")
    assert found.tag is Tag.INFO
    assert "excerpt of one GPU" in found.message


# --------------------------------------------------------------------------- the remapped-rows CSV alone

REMAP_COMMAND = (
    "nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
    "remapped_rows.pending,remapped_rows.failure --format=csv"
)


def test_given_the_remap_csv_with_its_command_line_when_analysed_then_each_gpu_is_judged():
    text = f"""$ {REMAP_COMMAND}
gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, remapped_rows.failure
00000000:53:00.0, 0, 0, No, No
00000000:64:00.0, 0, 2, Yes, No
00000000:75:00.0, 0, 9, No, Yes
"""
    found = {f.tag: f for f in of(judge("nvidia_smi_remapped_rows", text), "probe.gpu_row_remap")}
    # NVIDIA: a remapping failure is an RMA condition → replace; pending → reset (reboot)
    assert (found[Tag.FAIL].node_action, found[Tag.WARN].node_action) == ("replace", "reboot")
    assert "00000000:75:00.0" in found[Tag.FAIL].message and "00000000:64:00.0" in found[Tag.WARN].message
    assert "00000000:53:00.0" not in found[Tag.FAIL].message + found[Tag.WARN].message


def test_given_a_noheader_remap_csv_after_its_root_prompt_when_parsed_then_the_command_names_the_columns():
    text = f"# {REMAP_COMMAND},noheader\n00000000:53:00.0, 0, 0, 0, 0\n00000000:64:00.0, 0, 2, 1, 0\n"
    table = nvsmi.parse_csv(text, ("pci.bus_id", "uuid", "remapped_rows.correctable"))
    assert [r.bus_id for r in table.rows] == ["00000000:53:00.0", "00000000:64:00.0"]
    assert table.rows[1].flag("remapped_rows.pending") is True
    found = only(judge("nvidia_smi_remapped_rows", text), "probe.gpu_row_remap")
    assert (found.tag, found.node_action) == (Tag.WARN, "reboot")


def test_a_command_not_found_line_is_still_a_message_not_a_command():
    table = nvsmi.parse_csv("bash: nvidia-smi: command not found\n", ("pci.bus_id",))
    assert table.rows == () and table.messages == ("bash: nvidia-smi: command not found",)


def test_given_remapped_rows_recorded_and_nothing_pending_when_analysed_then_a_pass_not_a_fault():
    # NVIDIA: the counts are InfoROM entries of remaps already made; only pending/failure ask for action (§ G.1.a)
    text = (
        "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
        "remapped_rows.failure\n00000000:53:00.0, 0, 3, No, No\n"
    )
    found = only(judge("nvidia_smi_remapped_rows", text), "probe.gpu_row_remap")
    assert found.tag is Tag.PASS and found.node_action is None and "already remapped" in found.message


# --------------------------------------------------------------------------- chrony in local mode

LOCAL = """Reference ID    : {ref}
Stratum         : 10
Ref time (UTC)  : Sun Mar 10 22:30:15 2019
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
Leap status     : Normal
"""


@pytest.mark.parametrize("ref", ["7F7F0101 ()", "127.127.1.1 ()", "4C4F434C (LOCL)"])
def test_given_chrony_following_its_own_clock_when_analysed_then_not_synchronised_whatever_the_offset(ref):
    # chronyc(1): 127.127.1.1 = no external source, `local` mode; the zero offset is against itself
    found = of(judge("chronyc_tracking", LOCAL.format(ref=ref), "ml.m5.xlarge"), "probe.clock")
    assert [(f.tag, f.section) for f in found] == [(Tag.FAIL, "I.5")]
    assert "own clock" in found[0].message


def test_a_legacy_dotted_reference_id_is_read_as_its_hex_form():
    assert parse_chronyc_tracking(LOCAL.format(ref="127.127.1.1 ()")).ref_id == "7F7F0101"
    synced = parse_chronyc_tracking(LOCAL.format(ref="169.254.169.123 (169.254.169.123)"))
    assert (synced.ref_id, synced.local_clock) == ("A9FEA97B", False)


def test_given_chrony_following_the_amazon_time_sync_service_when_analysed_then_pass():
    text = LOCAL.format(ref="A9FEA97B (169.254.169.123)").replace("Stratum         : 10", "Stratum         : 4")
    found = of(judge("chronyc_tracking", text, "ml.m5.xlarge"), "probe.clock")
    assert [f.tag for f in found] == [Tag.PASS]


# --------------------------------------------------------------------------- free in any unit

TABLE = """               total        used        free      shared  buff/cache   available
Mem:           31966       30870         147        1572         947         395
Swap:           2047         137        1910
"""


@pytest.mark.parametrize(
    ("command", "unit"),
    [
        ("free -b", ("bytes", 1)),
        ("free", ("KiB", 1024)),
        ("free -m", ("MiB", 1024**2)),
        ("$ free -g", ("GiB", 1024**3)),
        ("free --mega", ("MB", 1000**2)),
        ("free -m --si", ("MB", 1000**2)),
        ("free -s 2 -mt", ("MiB", 1024**2)),
        ("[root@node ~]# free -hwt", ("human", 0)),
        ("x && free -h", ("human", 0)),
    ],
)
def test_the_unit_is_read_from_the_free_command_form(command, unit):
    assert free_unit(command)[:2] == unit


def test_text_that_is_not_a_free_command_names_no_unit():
    assert free_unit("Mem: 1 2 3") is None
    assert free_unit("After run free -m the output is") is None


@pytest.mark.parametrize(
    ("command", "in_message"),
    [
        ("free -m", "395.0 MiB of 31.2 GiB"),
        ("free", "395.0 KiB of 31.2 MiB"),
        ("free -b", "395 B of 31.2 KiB"),
    ],
)
def test_given_free_with_its_command_when_analysed_then_the_message_prints_the_right_unit(command, in_message):
    found = only(judge("free", TABLE, "ml.m5.xlarge", command=command), "probe.memory")
    assert found.tag is Tag.FAIL and in_message in found.message


def test_given_a_free_m_paste_with_its_prompt_when_analysed_then_mib():
    found = only(judge("free", "$ free -m\n" + TABLE, "ml.m5.xlarge"), "probe.memory")
    assert "395.0 MiB of 31.2 GiB" in found.message


def test_given_free_h_sizes_when_parsed_then_each_carries_its_unit():
    text = """              total        used        free      shared  buff/cache   available
Mem:           11Gi       2.0Gi       1.9Gi       346Mi       7.6Gi       8.9Gi
Swap:            0B          0B          0B
"""
    mem = parse_free(text)
    assert mem.total == 11 * 1024**3 and mem.unit == "sizes printed with units (free -h)"


def test_given_a_bare_table_without_its_command_when_analysed_then_ratio_judged_and_unit_said_unknown():
    found = only(judge("free", TABLE, "ml.m5.xlarge"), "probe.memory")
    assert found.tag is Tag.FAIL  # 395 of 31966 is 1.2 % in any unit
    assert "395 of 31966, in a unit the paste does not show" in found.message
    assert "KiB" not in found.message and " B " not in found.message


# --------------------------------------------------------------------------- ECC the driver could not read

ECC_BLOCK = """GPU 00000000:52:00.0
    ECC Mode
        Current                           : {mode}
        Pending                           : {mode}
    ECC Errors
        Volatile
            DRAM Correctable              : N/A
            DRAM Uncorrectable            : N/A
        Aggregate
            DRAM Correctable              : N/A
            DRAM Uncorrectable            : N/A
"""


@pytest.mark.parametrize("mode", ["Unknown Error", "ERR!", "[GPU is lost]"])
def test_given_an_ecc_mode_the_driver_failed_to_read_when_analysed_then_unknown_not_skipped(mode):
    # nvidia-smi prints "Unknown Error"/"ERR!" where NVML returned an error, unlike N/A (not supported): the
    # memory's state was not read, so it is UNKNOWN (never PASS, never "ECC not supported", never a reboot)
    found = only(judge("nvidia_smi_q", ECC_BLOCK.format(mode=mode)), "probe.gpu_ecc")
    assert (found.tag, found.node_action) == (Tag.UNKNOWN, None)
    assert "could not read the ECC state" in found.message and any(mode in line for line in found.evidence)


def test_given_ecc_disabled_counters_na_when_analysed_then_skipped_as_not_supported():
    found = of(judge("nvidia_smi_q", ECC_BLOCK.format(mode="Disabled")), "probe.gpu_ecc")
    assert found == []
