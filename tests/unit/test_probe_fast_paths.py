"""The evaluator's shortcuts answer exactly what the full evaluation answers, and the GPU checks hold to
nvidia-smi's meaning.

- The GPU checks decide each verdict once, over one state per GPU; generated nvidia-smi outputs, healthy and
  not, never break them, a clear output passes, and an error, a pending remap or a hot GPU never passes.
- A plain PASS is a copy of a template validated once; it must equal the finding validation would build.
- Parse results some nodes share are read-only, and an evaluation leaves no reference cycle behind (a sweep
  evaluates thousands of documents: their memory must go back as soon as the findings are kept).
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import NamedTuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hyperpod_debugger.domain.checking import execute, make_finding
from hyperpod_debugger.domain.model import Finding, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe import gpu
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse.sysparse import parse_is_active
from hyperpod_debugger.probe.registry import PROBE_CHECKS, evaluate
from hyperpod_sim.probe_docs import node_document

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CTX = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, orchestrator="EKS", instance_id="i-0abc1234def567890")

QUERY_HEADER = (
    "index, pci.bus_id, temperature.gpu, clocks_event_reasons.hw_slowdown, clocks_event_reasons.hw_thermal_slowdown, "
    "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.hw_power_brake_slowdown, "
    "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.aggregate.total, "
    "retired_pages.single_bit_ecc.count, retired_pages.double_bit.count, retired_pages.pending"
)
REMAP_HEADER = (
    "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, remapped_rows.failure"
)

# values as nvidia-smi prints them, the clear ones most often but every other kind too, and as a person may
# paste them: a note after a readable value, or a value that cannot be read for sure
counts = st.sampled_from(["0", "0", "0", "1", "2", "37", "64", "[N/A]", "N/A", "0.5", "2   <-- here", "zero?"])
reasons = st.sampled_from(["Not Active", "Not Active", "Not Active", "Active", "[N/A]", "1", "Active <=="])
pending = st.sampled_from(["No", "No", "Yes", "[N/A]", "0", "3", "Yes <===", "No # note", "Yes this one"])
temps = st.sampled_from(["31", "35", "40", "44", "52", "60", "84", "85", "91", "[N/A]"])

#: what nvidia-smi's values mean, read by hand: a count of errors (≥ 1), "yes" for a Yes/No field, ≥ 85 °C
ERRORS = {"1", "2", "37", "64", "2   <-- here"}
YES = {"Yes", "3", "Yes <==="}
HOT = {"85", "91"}


class GpuValues(NamedTuple):
    temperature: str
    reasons: tuple[str, str, str, str]
    #: corrected volatile, uncorrected volatile, corrected aggregate, uncorrected aggregate, single-bit and
    #: double-bit retired pages, in QUERY_HEADER's order
    counts: tuple[str, str, str, str, str, str]
    retire_pending: str
    #: correctable, uncorrectable, pending, failure; None: no row in the remap CSV
    remap: tuple[str, str, str, str] | None


def _bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def _texts(gpus: list[GpuValues]) -> tuple[str, str]:
    """The query CSV and the remap CSV nvidia-smi would print for these GPUs."""
    query, remap = [QUERY_HEADER], [REMAP_HEADER]
    for i, g in enumerate(gpus):
        query.append(", ".join([str(i), _bus(i), g.temperature, *g.reasons, *g.counts, g.retire_pending]))
        if g.remap is not None:
            remap.append(", ".join([_bus(i), *g.remap]))
    return "\n".join(query) + "\n", "\n".join(remap) + "\n"


@st.composite
def gpu_values(draw: st.DrawFn) -> list[GpuValues]:
    gpus = []
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        with_remap = draw(st.booleans()) or i == 0
        gpus.append(
            GpuValues(
                draw(temps),
                (draw(reasons), draw(reasons), draw(reasons), draw(reasons)),
                (draw(counts), draw(counts), draw(counts), draw(counts), draw(counts), draw(counts)),
                draw(pending),
                (draw(counts), draw(counts), draw(pending), draw(pending)) if with_remap else None,
            )
        )
    return gpus


def _doc(query: str, remap: str) -> ProbeDocument:
    return ProbeDocument(
        hostname="ip-10-1-2-3",
        collected_at=NOW,
        uptime_s=7200.0,
        items={
            "nvidia_smi_query_gpu": ProbeItem(command="nvidia-smi --query-gpu", exit_code=0, stdout=query),
            "nvidia_smi_remapped_rows": ProbeItem(
                command="nvidia-smi --query-remapped-rows", exit_code=0, stdout=remap
            ),
        },
    )


def _tags(check, doc: ProbeDocument) -> set[Tag]:
    """The tags of the check's findings; a skip or an unknown (nothing to judge) gives none."""
    try:
        return {f.tag for f in check(doc, CTX)}
    except (NotApplicable, Unobservable):
        return set()


CLEAR = GpuValues("40", ("Not Active",) * 4, ("0",) * 6, "No", ("0", "0", "No", "No"))


@settings(max_examples=400, deadline=None)
@example([CLEAR])
@example([CLEAR._replace(counts=("0", "2", "0", "2", "0", "0"))])
@given(gpu_values())
def test_generated_gpu_outputs_are_judged_by_what_nvidia_smi_means(gpus: list[GpuValues]) -> None:
    query, remap = _texts(gpus)
    # WHEN the ECC, remap and thermal checks judge them THEN findings or a skip, never another exception
    ecc = _tags(gpu.check_gpu_ecc, _doc(query, remap))
    remapping = _tags(gpu.check_gpu_row_remap, _doc(query, remap))
    thermal = _tags(gpu.check_gpu_thermal, _doc(query, remap))
    # an uncorrectable error since the driver loaded fails the GPU; a pending retirement never passes
    if any(g.counts[1] in ERRORS for g in gpus):
        assert Tag.FAIL in ecc and Tag.PASS not in ecc, query
    if any(g.retire_pending in YES for g in gpus):
        assert Tag.PASS not in ecc, query
    # a failed remap fails; a pending one never passes
    if any(g.remap and g.remap[3] in YES for g in gpus):
        assert Tag.FAIL in remapping, remap
    if any(g.remap and g.remap[2] in YES for g in gpus):
        assert Tag.PASS not in remapping, remap
    # a hot GPU or one whose clocks are held down never passes
    if any(g.temperature in HOT or {"Active", "1", "Active <=="} & set(g.reasons) for g in gpus):
        assert Tag.PASS not in thermal, query


@pytest.mark.parametrize("size", [1, 3, 8])
def test_a_clear_output_passes_every_gpu_memory_and_thermal_check(size: int) -> None:
    query, remap = _texts([CLEAR] * size)
    for check in (gpu.check_gpu_ecc, gpu.check_gpu_row_remap, gpu.check_gpu_thermal):
        assert _tags(check, _doc(query, remap)) == {Tag.PASS}, check.__name__


def test_the_simulated_node_passes_and_each_simulated_fault_is_caught() -> None:
    healthy = node_document("ip-10-1-2-3", NOW, orchestrator="EKS")
    for check in (gpu.check_gpu_ecc, gpu.check_gpu_row_remap, gpu.check_gpu_thermal):
        assert _tags(check, healthy) == {Tag.PASS}, check.__name__
    for fault, check, tag in (
        ("uce", gpu.check_gpu_ecc, Tag.FAIL),
        ("remap_pending", gpu.check_gpu_row_remap, Tag.WARN),
        ("hot_gpu", gpu.check_gpu_thermal, Tag.WARN),
    ):
        faulty = node_document("ip-10-1-2-3", NOW, orchestrator="EKS", faults=(fault,))
        assert _tags(check, faulty) == {tag}, fault


IDENTITY = {
    "cluster_arn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh",
    "cluster_name": "train",
    "instance_id": "i-0abc1234def567890",
    "instance_group": "workers",
}


def test_a_plain_pass_is_the_finding_validation_would_build() -> None:
    quick = make_finding(IDENTITY, "probe.gpu_count", Tag.PASS, "8 of 8  GPU(s)\n visible", evidence=["a", "b"])
    validated = Finding(
        tag=Tag.PASS,
        check="probe.gpu_count",
        section="G.1",
        message="8 of 8  GPU(s)\n visible",
        evidence=["a", "b"],
        **IDENTITY,
    )
    assert quick == validated
    assert quick.model_dump(mode="json") == validated.model_dump(mode="json")
    assert quick.message == "8 of 8 GPU(s) visible"
    assert quick.runbook == validated.runbook == "references/node-diagnostics-detail.md#g1-nvidia-gpus"
    again = make_finding(IDENTITY, "probe.gpu_count", Tag.PASS, "other", evidence=["c"])
    assert again.evidence == ["c"] and quick.evidence == ["a", "b"]  # copies share no list
    assert again.suggested_commands is not quick.suggested_commands


def test_a_pass_that_needs_validating_is_still_validated() -> None:
    with pytest.raises(ValidationError, match="message must not be empty"):
        make_finding(IDENTITY, "probe.gpu_count", Tag.PASS, "   ")
    with pytest.raises(ValidationError):
        make_finding(IDENTITY, "not a check id", Tag.PASS, "fine")
    with pytest.raises(ValidationError):
        make_finding({**IDENTITY, "instance_id": 42}, "probe.gpu_count", Tag.PASS, "fine")  # type: ignore[dict-item]


def test_the_runner_gives_a_hand_built_pass_its_section_and_link() -> None:
    from hyperpod_debugger.domain.checking import Check

    def hand_built(_obs: object, _ctx: object) -> list[Finding]:
        return [Finding(tag=Tag.PASS, check="probe.hand_built", message="fine")]

    findings, coverage, _ = execute((Check("probe.hand_built", "I.2", "Hand built", hand_built),), None, None, {})
    assert findings[0].section == "I.2"
    assert findings[0].runbook == "references/node-diagnostics-detail.md#i2-root-volume-space"
    assert coverage[0].status.value == "ran" and coverage[0].reason is None


def test_shared_unit_states_cannot_be_changed_by_one_reader() -> None:
    text = "containerd active\nkubelet failed\n"
    first, second = parse_is_active(text), parse_is_active(text)
    assert first is second  # two nodes that printed the same states share one reading
    assert first["kubelet"].state == "failed"
    with pytest.raises(TypeError):
        first["kubelet"] = first["containerd"]  # type: ignore[index]


def _variants() -> list[ProbeDocument]:
    """Healthy, faulty, and every item of a faulty document timed out, missing its tool, or absent."""
    faulty = node_document(
        "ip-10-1-2-4", NOW, orchestrator="Slurm", faults=("xid79", "uce", "root_full", "slurmd_down")
    )
    docs = [node_document("ip-10-1-2-3", NOW, orchestrator="EKS"), faulty]
    for item_id in faulty.items:
        for changed in (
            ProbeItem(command=item_id, exit_code=124, stdout=""),
            ProbeItem(command=item_id, exit_code=127, stdout="", stderr="bash: tool: command not found"),
            None,
        ):
            items = dict(faulty.items)
            if changed is None:
                del items[item_id]
            else:
                items[item_id] = changed
            docs.append(
                ProbeDocument(hostname=faulty.hostname, collected_at=NOW, uptime_s=faulty.uptime_s, items=items)
            )
    return docs


def test_an_evaluation_leaves_no_reference_cycle_behind() -> None:
    docs = _variants()
    for doc in docs:
        evaluate(doc, CTX)  # first runs fill the process-wide caches
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for doc in docs:
            fresh = ProbeDocument(
                hostname=doc.hostname, collected_at=doc.collected_at, uptime_s=doc.uptime_s, items=dict(doc.items)
            )
            findings, coverage = evaluate(fresh, CTX)
            assert findings and len(coverage) == len(PROBE_CHECKS)
            del fresh, findings, coverage
            # the collector is off, so what this evaluation made is all in the youngest generation: collecting
            # that one alone finds its cycles without walking the worker's whole heap each time
            left = gc.collect(0)
            assert left == 0, f"{sorted(doc.items)}: {left} objects only the garbage collector can free"
    finally:
        if was_enabled:
            gc.enable()
