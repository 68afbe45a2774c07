"""The Xid catalogue and the kernel-log Xid parser."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import get_args

import pytest

from hyperpod_debugger.domain.xid import XID_TABLE, XidAction, XidClass, XidInfo, decoded, lookup, parse_xid_codes

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hyperpod"

REQUIRED_CODES = (
    13,
    31,
    32,
    43,
    45,
    48,
    62,
    63,
    64,
    68,
    69,
    71,
    74,
    79,
    92,
    94,
    95,
    109,
    119,
    120,
    136,
    140,
    143,
    144,
    145,
    146,
    147,
    148,
    149,
    150,
    154,
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize("code", REQUIRED_CODES)
def test_given_a_code_from_the_required_set_when_looked_up_then_the_catalogue_has_its_own_entry(
    code: int,
) -> None:
    assert code in XID_TABLE
    info = lookup(code)
    assert info.code == code
    assert info.xid_class != "unknown"
    assert info.name != "not in the catalogue"


def test_given_every_entry_when_inspected_then_keys_match_codes_and_values_are_in_the_declared_sets() -> None:
    classes, actions = set(get_args(XidClass)), set(get_args(XidAction))
    for code, info in XID_TABLE.items():
        assert info.code == code
        assert info.xid_class in classes
        assert info.action in actions
        assert info.name.strip()


def test_given_an_unknown_code_when_looked_up_then_it_is_unknown_and_to_be_investigated() -> None:
    info = lookup(9999)
    assert info == XidInfo(9999, "not in the catalogue", "unknown", "investigate")
    assert not info.is_hardware
    assert not info.is_application


@pytest.mark.parametrize("code", [13, 31, 43, 45, 69])
def test_given_an_application_xid_when_classified_then_the_workload_is_blamed_not_the_node(code: int) -> None:
    info = lookup(code)
    assert info.xid_class == "application"
    assert info.action == "none-workload"
    assert info.is_application and not info.is_hardware


@pytest.mark.parametrize("code", [64, 79])
def test_given_a_fault_a_reset_does_not_repair_when_classified_then_the_action_is_replace(code: int) -> None:
    assert lookup(code).action == "replace"
    assert lookup(code).is_hardware


@pytest.mark.parametrize("code", [48, 62, 71, 74, 95, 119, 120, 136, 140, 143, 150])
def test_given_a_fault_cleared_by_a_gpu_reset_when_classified_then_the_action_is_reboot(code: int) -> None:
    assert lookup(code).action == "reboot"
    assert lookup(code).is_hardware


@pytest.mark.parametrize("code", [92, 94, 157, 163])
def test_given_a_contained_error_or_a_thermal_event_then_no_node_action(code: int) -> None:
    # NVIDIA's catalogue: 94 is contained (restart the application; the remap waits for the next reset);
    # 92 (excessive single-bit rate) and 157 (retirement failure) are IGNORE / CONTACT_SUPPORT; 163 says no
    # GPU reset is required
    assert lookup(code).action == "warn"
    assert not lookup(code).is_hardware and not lookup(code).is_application


@pytest.mark.parametrize("code", [32, 68, 109, 144, 145, 146, 147, 148, 149, 154])
def test_given_an_ambiguous_xid_when_classified_then_it_is_neither_hardware_nor_application(
    code: int,
) -> None:
    info = lookup(code)
    assert info.action == "investigate"
    assert not info.is_hardware and not info.is_application


def test_given_the_bus_and_nvlink_codes_when_classified_then_their_classes_say_so() -> None:
    assert lookup(79).xid_class == "bus"
    assert {lookup(c).xid_class for c in (74, 136, 144, 145, 146, 147, 148, 149, 150)} == {"nvlink"}
    assert {lookup(c).xid_class for c in (48, 63, 64, 92, 94, 95, 140)} == {"memory"}


def test_given_an_entry_when_mutated_then_it_refuses_because_the_catalogue_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        lookup(79).action = "none-workload"  # type: ignore[misc]


def test_given_an_entry_when_labelled_then_the_label_names_code_and_meaning() -> None:
    assert lookup(79).label() == "Xid 79 (GPU has fallen off the bus)"


# --------------------------------------------------------------------------- the parser


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("xid79-sxid20034-fallen-off-bus-nvswitch.txt", [79]),
        ("hyperpod-hma-inject-xid74-nvlink-syslog.txt", [74]),
        ("xid119-gsp-timeout-h100-dmesgT.txt", [119, 119, 119, 119, 119]),
        ("xid13-109-ctx-switch-timeout-dmesg-ctime.txt", [13, 13, 13, 109]),
        ("xid13-43-sm-exception-decode-iso.txt", [13] * 16 + [43]),
        ("xid149-154-gb200-nvlink5-recovery-action.txt", [149, 154, 149, 154, 149, 149, 149, 154, 154]),
        ("xid31-109-mmu-fault-pt-main-thread.txt", [31, 109]),
        ("xid48-63-94-dbe-rowremap-iso.txt", [48, 63] + [94] * 9),
        ("hma-cloudwatch-npd-xid71-nvlink-eks-docexample.json", [71]),
    ],
)
def test_given_a_real_kernel_log_when_parsed_then_every_xid_is_found_in_order(name: str, expected: list[int]) -> None:
    assert parse_xid_codes(fixture(name)) == expected


@pytest.mark.parametrize(
    "name",
    [
        "fabricmanager-log-h100-nvswitch-nonfatal-12028-then-restart.txt",
        "dmesg-decode-iso-nvidia-peermem-invalid-context.txt",
    ],
)
def test_given_a_gpu_log_without_xid_lines_when_parsed_then_nothing_is_found(name: str) -> None:
    assert parse_xid_codes(fixture(name)) == []


def test_given_nvswitch_sxid_lines_when_parsed_then_they_are_not_taken_for_gpu_xids() -> None:
    line = "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
    assert parse_xid_codes(line) == []
    assert parse_xid_codes(line, loose=True) == []


def test_given_a_short_switch_code_after_sxid_when_parsed_then_the_s_prefix_still_excludes_it() -> None:
    # real SXids are five digits; the guard must not rely on that
    assert parse_xid_codes("nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 94, Non-fatal, Link 12") == []


def test_given_the_older_bus_id_form_without_pci_prefix_when_parsed_then_the_code_is_found() -> None:
    assert parse_xid_codes("[ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120") == [31]


def test_given_a_lower_case_journal_line_when_parsed_then_the_code_is_found() -> None:
    assert parse_xid_codes("kernel: nvrm: xid (PCI:0000:0a:00): 95, pid=123, Uncontained: FBHUB") == [95]


def test_given_free_text_xid_mentions_when_parsed_strictly_then_they_are_ignored_but_loose_finds_them() -> None:
    text = "GPU reported XID error 79; earlier Xid 48 and Xid=74"
    assert parse_xid_codes(text) == []
    assert parse_xid_codes(text, loose=True) == [79, 48, 74]


def test_given_mixed_kernel_and_free_text_when_parsed_loosely_then_codes_keep_order_without_doubles() -> None:
    text = "Xid 13 first, then NVRM: Xid (PCI:0000:b9:00): 71, pid=1, then XID: 94"
    assert parse_xid_codes(text, loose=True) == [13, 71, 94]


@pytest.mark.parametrize("text", ["", "no gpu trouble here", "Xid (PCI:0000:b9:00): pending", "xidden 12"])
def test_given_text_without_an_xid_code_when_parsed_then_the_result_is_empty(text: str) -> None:
    assert parse_xid_codes(text) == []


def test_given_code_61_then_it_is_listed_as_unused_like_nvidias_catalogue() -> None:
    assert 61 not in XID_TABLE and lookup(61).name == "listed as unused in NVIDIA's catalogue"


@pytest.mark.parametrize(
    ("line", "action"),
    [
        # the driver prints the severity after the sub-unit (NVIDIA's "XID 144-150 Decode": a link- or GPU-fatal
        # error leaves the GPU to be drained and reset; a non-fatal one needs no immediate action)
        ("NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x0 0x0)", "reboot"),
        ("NVRM: Xid (PCI:0009:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 01 (0x021425c6 0x0 0x0)", "warn"),
        ("NVRM: Xid (PCI:0000:3b:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (0x0 0x0)", "warn"),
        ("NVRM: Xid (PCI:0000:3b:00): 145, RLW_RXPIPE Fatal XC0 i0 Link 11 (0x0 0x0)", "reboot"),
        ("NVRM: Xid (PCI:0000:3b:00): 149, (0x0 0x0)", "investigate"),
    ],
)
def test_given_an_nvlink5_line_then_its_severity_word_decides_the_action(line: str, action: str) -> None:
    [code] = parse_xid_codes(line)
    assert decoded(lookup(code), [line]).action == action


def test_given_an_nvlink5_code_named_by_xid_45_then_the_torn_down_channels_make_it_a_reset() -> None:
    assert decoded(lookup(149), [], tore_down_channels=True).action == "reboot"
    assert decoded(lookup(79), ["Nonfatal"]).action == lookup(79).action  # other codes are not decoded
