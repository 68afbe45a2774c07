"""EFA evaluator (probe/efa.py): driver loaded, EFA device count, libfabric efa provider (§ A)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.efa import CHECK_EFA, CHECKS, check_efa, parse_devices, parse_fi_info

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "efa"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
IID = "i-0123456789abcdef0"
NO_EFA_MODULE = ProbeItem(
    "cat /sys/module/efa/version", 1, "", "cat: /sys/module/efa/version: No such file or directory"
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(**items: str | ProbeItem) -> ProbeDocument:
    built = {
        key: value if isinstance(value, ProbeItem) else ProbeItem(command=f"probe {key}", exit_code=0, stdout=value)
        for key, value in items.items()
    }
    return ProbeDocument(hostname="ip-10-1-2-3", collected_at=NOW, uptime_s=3600.0, items=built)


def ctx(instance_type: str = "ml.p5.48xlarge") -> ProbeContext:
    return ProbeContext(instance_type=instance_type, now=NOW, instance_id=IID)


def healthy_p5(**overrides: str | ProbeItem) -> ProbeDocument:
    items: dict[str, str | ProbeItem] = {
        "efa_module": fixture("rec-sys-module-efa-version.txt"),
        "efa_devices": fixture("rec-ls-sys-class-infiniband-p5-32.txt"),
        "fi_info_efa": fixture("fi_info-efa-p4d-4nic-v111.20.txt"),
    }
    items.update(overrides)
    return doc(**items)


def only(findings):
    assert len(findings) == 1, [f.message for f in findings]
    return findings[0]


def test_module_exports_one_efa_check_in_section_a():
    # GIVEN the module
    # WHEN its CHECKS are read
    # THEN one check, in section A
    assert [(c.id, c.section) for c in CHECKS] == [(CHECK_EFA, "A")]


# --------------------------------------------------------------------------- parsers


def test_ls_output_counts_efa_devices_and_keeps_other_rdma_devices_apart():
    # GIVEN 8 rdmap devices and 2 mlx5 devices
    # WHEN the listing is parsed
    # THEN 8 EFA devices, mlx5 kept apart
    devices = parse_devices(fixture("rec-ls-sys-class-infiniband-b200-8efa-2mlx5.txt"))
    assert len(devices.efa) == 8 and devices.other == ("mlx5_0", "mlx5_1")


def test_old_efa_device_names_are_counted_and_error_text_is_ignored():
    # GIVEN efa_N names and an ls error line
    # WHEN the listing is parsed
    # THEN the efa_N devices count and the error text is ignored
    devices = parse_devices("efa_0\nefa_1\nls: cannot access '/sys/class/infiniband': No such file or directory\n")
    assert devices.efa == ("efa_0", "efa_1") and devices.other == ()


def test_fi_info_nics_are_unique_domains_not_provider_entries():
    # GIVEN libfabric 2 output: efa-direct RDM, efa RDM and efa DGRAM entries for ONE NIC
    info = parse_fi_info(fixture("fi_info-efa-direct-libfabric2-v201.txt"))
    assert info.providers == ("efa",) and info.nics == ("rdmap47s0",)
    assert parse_fi_info(fixture("fi_info-efa-p4d-4nic-v111.20.txt")).nics == (
        "rdmap16s27",
        "rdmap32s27",
        "rdmap144s27",
        "rdmap160s27",
    )


def test_fi_getinfo_failure_has_no_provider():
    # GIVEN fi_getinfo -61 output
    # WHEN it is parsed
    # THEN no provider is listed
    assert parse_fi_info(fixture("fi_getinfo-61-debug-unopenable-verbs-device.txt")).providers == ()


# --------------------------------------------------------------------------- probe.efa


def test_healthy_p5_passes_with_driver_count_and_provider():
    # GIVEN driver 2.13.0g, 32 devices and the efa provider on a p5.48xlarge
    # WHEN probe.efa runs
    # THEN one PASS naming all three
    result = only(check_efa(healthy_p5(), ctx()))
    assert result.tag is Tag.PASS and result.priority is None and result.section == "A"
    assert result.message == (
        "EFA: EFA driver 2.13.0g loaded; 32 of 32 EFA devices; libfabric efa provider present (4 NIC(s))"
    )


def test_healthy_p4d_with_its_own_fi_info_passes():
    # GIVEN a p4d with 4 devices and its fi_info
    # WHEN probe.efa runs
    # THEN 4 of 4
    d = doc(
        efa_module="2.10.0g\n",
        efa_devices="rdmap16s27\nrdmap32s27\nrdmap144s27\nrdmap160s27\n",
        fi_info_efa=fixture("fi_info-efa-p4d-4nic-v111.20.txt"),
    )
    assert "4 of 4 EFA devices" in only(check_efa(d, ctx("ml.p4d.24xlarge"))).message


def test_missing_efa_device_is_p1_reboot():
    # GIVEN 31 EFA devices on a p5.48xlarge
    # WHEN probe.efa runs
    # THEN FAIL P1 reboot with the device list as evidence
    d = healthy_p5(efa_devices=fixture("rec-ls-sys-class-infiniband-p5-31.txt"))
    result = only(check_efa(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P1, "reboot")
    assert result.message.startswith("Only 31 of 32 EFA devices")
    assert "rdmap79s0" in result.evidence and "rdmap132s0" not in result.evidence


def test_unloaded_driver_is_p0_without_a_duplicate_device_count_failure_or_modprobe_advice():
    # GIVEN no /sys/module/efa and therefore no devices and no provider
    d = healthy_p5(
        efa_module=NO_EFA_MODULE, efa_devices="", fi_info_efa=fixture("fi_getinfo-61-debug-unopenable-verbs-device.txt")
    )
    result = only(check_efa(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "investigate")
    assert "driver not loaded" in result.message
    assert result.evidence == ["cat: /sys/module/efa/version: No such file or directory"]
    assert not any("modprobe" in c.command for c in result.suggested_commands)
    assert all(not c.mutates for c in result.suggested_commands)


def test_libfabric_without_the_efa_provider_is_p0_investigate():
    # GIVEN fi_info failing with -61 while driver and devices are fine
    # WHEN probe.efa runs
    # THEN FAIL P0 investigate with the error lines
    d = healthy_p5(
        fi_info_efa=ProbeItem(
            "fi_info -p efa -t FI_EP_RDM", 1, fixture("fi_getinfo-61-debug-unopenable-verbs-device.txt")
        )
    )
    result = only(check_efa(d, ctx()))
    assert (result.tag, result.priority, result.node_action) == (Tag.FAIL, Priority.P0, "investigate")
    assert "fi_getinfo: -61 (No data available)" in result.evidence


def test_connectx_devices_are_not_counted_as_efa():
    # GIVEN a p5 whose listing has 31 EFA devices plus an mlx5 device (32 RDMA devices in all)
    listing = fixture("rec-ls-sys-class-infiniband-p5-31.txt") + "mlx5_0\n"
    result = only(check_efa(healthy_p5(efa_devices=listing), ctx()))
    assert result.tag is Tag.FAIL and "31 of 32" in result.message


def test_type_without_an_efa_expectation_reports_the_count_as_info():
    # GIVEN a p6-b200 (no EFA count in the catalogue) with 8 EFA and 2 mlx5 devices
    # WHEN probe.efa runs
    # THEN PASS for the driver and INFO 'no expectation' for the count
    d = doc(efa_module="2.13.0g\n", efa_devices=fixture("rec-ls-sys-class-infiniband-b200-8efa-2mlx5.txt"))
    findings = check_efa(d, ctx("ml.p6-b200.48xlarge"))
    assert [f.tag for f in findings] == [Tag.PASS, Tag.INFO]
    assert "no expectation for ml.p6-b200.48xlarge" in findings[1].message
    assert "other RDMA devices: mlx5_0, mlx5_1" in findings[1].message


@pytest.mark.parametrize("instance_type", ["ml.g5.xlarge", "ml.c5.xlarge", "ml.x9.weird"])
def test_types_without_efa_and_no_devices_are_skipped(instance_type):
    # GIVEN a type without EFA (or unknown) and no EFA device
    # WHEN probe.efa runs
    # THEN it is skipped
    with pytest.raises(NotApplicable):
        check_efa(doc(efa_module=NO_EFA_MODULE, efa_devices=""), ctx(instance_type))


def test_missing_fi_info_tool_is_skipped_and_named():
    # GIVEN fi_info not on the PATH
    # WHEN probe.efa runs
    # THEN the provider part is skipped and named, the rest passes
    d = healthy_p5(fi_info_efa=ProbeItem("fi_info -p efa -t FI_EP_RDM", 127, "", "fi_info: command not found"))
    result = only(check_efa(d, ctx()))
    assert result.tag is Tag.PASS
    assert "(skipped: libfabric provider (fi_info not found on the node's PATH))" in result.evidence


def test_timed_out_part_is_unknown_and_the_rest_is_kept():
    # GIVEN fi_info timed out
    # WHEN probe.efa runs
    # THEN UNKNOWN P1, keeping what was judged
    d = healthy_p5(fi_info_efa=ProbeItem("fi_info -p efa -t FI_EP_RDM", 124, ""))
    result = only(check_efa(d, ctx()))
    assert (result.tag, result.priority) == (Tag.UNKNOWN, Priority.P1)
    assert "fi_info timed out" in result.message
    assert "32 of 32 EFA devices" in result.evidence


def test_truncated_device_listing_with_fewer_devices_is_unknown():
    # GIVEN a device listing cut after 2 names
    # WHEN probe.efa runs
    # THEN UNKNOWN, not a missing-device failure
    items = ProbeItem("ls -1 /sys/class/infiniband", 0, "rdmap79s0\nrdmap80s0\n", truncated=True)
    result = only(check_efa(healthy_p5(efa_devices=items), ctx()))
    assert result.tag is Tag.UNKNOWN and "truncated" in result.message


def test_empty_module_output_cannot_be_judged_and_is_skipped():
    # GIVEN an empty efa_module output
    # WHEN probe.efa runs
    # THEN the driver part is skipped, not failed
    result = only(check_efa(healthy_p5(efa_module=""), ctx()))
    assert result.tag is Tag.PASS and "(skipped: driver (efa_module empty))" in result.evidence


def test_no_item_at_all_on_an_efa_type_is_skipped():
    # GIVEN a p5 document without any EFA item
    # WHEN probe.efa runs
    # THEN it is skipped
    with pytest.raises(NotApplicable):
        check_efa(doc(), ctx())


def test_findings_carry_the_node_identity_and_section_link():
    # GIVEN a missing device
    # WHEN probe.efa runs
    # THEN each finding names the instance and links § A
    for f in check_efa(healthy_p5(efa_devices=fixture("rec-ls-sys-class-infiniband-p5-31.txt")), ctx()):
        assert f.instance_id == IID and f.runbook and "a-efa-and-security-groups" in f.runbook
