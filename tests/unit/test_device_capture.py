"""probe.sh's real output from an NVIDIA H200 (the device machine lent to one session): read as a node of the
type whose GPU it has. What each check must say comes from the fixture's ``.meta.md``, which cites its source."""

from __future__ import annotations

import pathlib

import pytest

from hyperpod_debugger.domain.model import CheckStatus, Tag
from hyperpod_debugger.probe import versions
from hyperpod_debugger.probe.document import loads
from hyperpod_debugger.report.analysis import analyze

CAPTURE = (
    pathlib.Path(__file__).parents[1] / "fixtures" / "probe" / "device" / "h200-580.159.04-single-gpu-vm-probe.json"
)


@pytest.fixture(scope="module")
def document():
    return loads(CAPTURE.read_text())


@pytest.fixture(scope="module")
def report(document):
    assert document.collected_at is not None
    return analyze(document, instance_type="ml.p5e.48xlarge", now=document.collected_at)


def tags(report, check: str) -> list[tuple[str, str | None, str | None]]:
    return [
        (f.tag.value, f.priority.value if f.priority else None, f.node_action)
        for f in report.findings
        if f.check == check
    ]


def test_the_gpu_itself_is_healthy(report):
    assert tags(report, "probe.gpu_ecc") == [("PASS", None, None)]
    assert tags(report, "probe.gpu_row_remap") == [("PASS", None, None)]
    assert tags(report, "probe.gpu_thermal") == [("PASS", None, None)]


def test_a_panic_boot_parameter_a_disabled_nmi_watchdog_and_a_cleared_interrupt_are_no_fault(report):
    for check in ("probe.xid", "probe.kernel_faults", "probe.oom"):
        assert [t for t, _, _ in tags(report, check)] == ["PASS"], check


def test_judged_as_a_p5e_what_is_missing_is_said_and_nothing_is_a_replace(report):
    [count] = [f for f in report.findings if f.check == "probe.gpu_count"]
    assert (count.tag, count.node_action) == (Tag.WARN, "investigate") and "1 of 8" in count.message
    assert "after boot" in count.message  # 25 s after boot: probe again, not a verdict on the hardware
    assert [t for t, _, _ in tags(report, "probe.fabric_manager")] == ["FAIL"]
    assert [t for t, _, _ in tags(report, "probe.efa")] == ["FAIL"]
    assert all(f.node_action != "replace" for f in report.findings)


def test_what_could_not_be_read_is_skipped_with_its_reason_never_passed(report):
    skipped = {c.check: c.reason or "" for c in report.coverage.checks if c.status is CheckStatus.SKIPPED}
    assert "exit 127" in skipped["probe.services"] and "exit 127" in skipped["probe.clock"]
    assert "exit 127" in skipped["probe.dcgm_health"]
    assert not [f for f in report.findings if f.check in ("probe.services", "probe.clock", "probe.dcgm_health")]


def test_the_software_it_runs_is_read(document):
    found = versions.parse(document)
    assert found.get("nvidia_driver").version == "580.159.04"
    assert found.get("nccl").version == "2.28.3"
    assert found.get("cuda_toolkit").state == "absent"  # no /usr/local/cuda on this machine
    assert found.get("kernel").version == "6.18.44-fc-v1252-gpu"
