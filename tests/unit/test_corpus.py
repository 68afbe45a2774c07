"""The real-output corpus (tests/fixtures/corpus/<item_id>/): every capture scored against the verdict
decided from its source and the vendors' documentation (each ``.meta.md`` says which), never from what
the code prints. The score is printed; every case must be right.

A case is right when, for each check its ``expect`` block names, the worst finding of that check has
the expected tag, runbook section and node action (``replace``/``reboot``, else ``none``), and no check
it does not name recommends replacing the node. Two expectations are not tags: ``SKIPPED`` (the check
must not judge: not applicable, or its input is absent) and ``INFO`` (a partial read: one INFO naming
what was not read, nothing stronger). Neither is a PASS.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Finding, Tag
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse import klog
from hyperpod_debugger.report.analysis import analyze

CORPUS = pathlib.Path(__file__).parents[1] / "fixtures" / "corpus"
#: the evaluation time when a capture carries none (kept fixed: the tiers read no clock)
REFERENCE = datetime(2026, 12, 2, tzinfo=UTC)
_EXPECT = re.compile(r"```expect\n(.*?)```", re.DOTALL)
_WORST = {Tag.FAIL: 4, Tag.UNKNOWN: 3, Tag.WARN: 2, Tag.PASS: 1, Tag.INFO: 0}


@dataclass
class Case:
    item: str
    name: str
    text: str
    settings: dict[str, str] = field(default_factory=dict)
    expected: list[dict[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.item}/{self.name}"


def load_cases() -> list[Case]:
    cases = []
    for meta in sorted(CORPUS.glob("*/*.meta.md")):
        capture = next((p for p in meta.parent.glob(meta.name.removesuffix(".meta.md") + ".*") if p != meta), None)
        block = _EXPECT.search(meta.read_text())
        if capture is None or block is None:
            raise AssertionError(f"{meta}: needs its capture beside it and an ```expect block")
        case = Case(meta.parent.name, meta.name.removesuffix(".meta.md"), capture.read_text(errors="replace"))
        for raw in block.group(1).splitlines():
            key, _, value = raw.partition(":")
            key, value = key.strip(), value.strip()
            if not key:
                continue
            if key == "check":
                case.expected.append({"check": value})
            elif case.expected:
                case.expected[-1][key] = value
            else:
                case.settings[key] = value
        cases.append(case)
    return cases


CASES = load_cases()


def action_of(finding: Finding) -> str:
    return finding.node_action if finding.node_action in ("reboot", "replace") else "none"


def judge(case: Case) -> list[Finding]:
    doc = ProbeDocument(
        hostname=case.name,
        collected_at=None,
        uptime_s=None,
        items={case.item: ProbeItem(command="(capture)", exit_code=0, stdout=case.text)},
    )
    # as `analyze --raw-dir` without --now: the window ends at the capture's newest time, if it has one
    now = klog.newest_time(doc, REFERENCE) or REFERENCE
    orchestrator = case.settings.get("orchestrator")
    report = analyze(
        doc,
        instance_type=case.settings.get("instance_type", "ml.p5.48xlarge"),
        now=now,
        orchestrator={"eks": "EKS", "slurm": "Slurm"}.get(orchestrator or ""),  # type: ignore[arg-type]
        role="controller" if case.settings.get("role") == "controller" else "compute",
    )
    return report.findings


def misses(case: Case) -> list[str]:
    everything = judge(case)
    findings = [f for f in everything if f.tag is not Tag.INFO]
    out = []
    named = {e["check"] for e in case.expected}
    for expect in case.expected:
        if expect.get("tag") == "SKIPPED":
            # the check must not judge at all (not applicable to this hardware, or no input it needs)
            judged = [f for f in everything if f.check == expect["check"]]
            if judged:
                out.append(
                    f"{expect['check']}: judged ({judged[0].tag.value}: {judged[0].message[:120]}), expected skipped"
                )
            continue
        if expect.get("tag") == "INFO":
            # a partial read: an INFO that says what was not read, and nothing stronger
            mine = [f for f in everything if f.check == expect["check"]]
            if [f.tag for f in mine] != [Tag.INFO]:
                out.append(
                    f"{expect['check']}: {[f.tag.value for f in mine]}, expected one INFO naming what was not read"
                )
            continue
        mine = [f for f in findings if f.check == expect["check"]]
        if not mine:
            out.append(f"{expect['check']}: no finding (expected {expect.get('tag')})")
            continue
        worst = max(mine, key=lambda f: (_WORST[f.tag], {"replace": 2, "reboot": 1}.get(action_of(f), 0)))
        got = {"tag": worst.tag.value, "section": worst.section or "", "action": action_of(worst)}
        for key in ("tag", "section", "action"):
            if key in expect and expect[key] != got[key]:
                out.append(f"{expect['check']}: {key} {got[key]!r}, expected {expect[key]!r} ({worst.message[:160]})")
    ignore = {"probe.gpu_count"} if case.settings.get("gpu_count") == "ignore" else set()
    for f in findings:
        if f.check not in named and f.check not in ignore and action_of(f) == "replace":
            out.append(f"{f.check}: recommends replace, not expected ({f.message[:120]})")
    return out


def test_the_corpus_is_large_and_every_case_has_a_documented_expectation():
    assert len(CASES) >= 60
    for case in CASES:
        assert case.expected, case.id
        for expect in case.expected:
            assert expect.get("tag") in ("FAIL", "WARN", "PASS", "UNKNOWN", "INFO", "SKIPPED"), (case.id, expect)
            assert expect.get("action", "none") in ("replace", "reboot", "none"), (case.id, expect)


def test_score_over_the_whole_corpus(capsys):
    wrong = {case.id: found for case in CASES if (found := misses(case))}
    right = len(CASES) - len(wrong)
    with capsys.disabled():
        print(f"\ncorpus: {right} of {len(CASES)} cases right ({100 * right / len(CASES):.1f} %)")
        for case_id, found in wrong.items():
            print(f"  MISS {case_id}: {'; '.join(found)}")
    assert not wrong


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case):
    assert misses(case) == []
