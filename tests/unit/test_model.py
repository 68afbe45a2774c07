"""The finding model's rules and the seed's text contract."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from hyperpod_debugger.domain.model import ClusterRef, Finding, Priority, RunError, SuggestedCommand, Tag, TriageReport
from hyperpod_debugger.report.text import finding_line, render_json, render_text
from tests.builders import NOW


def _finding(**kw):
    base = dict(tag=Tag.FAIL, priority=Priority.P0, check="network.efa_sg", section="A", message="Missing rule")
    base.update(kw)
    return Finding(**base)


def test_fail_line_follows_the_seed_format_exactly():
    # GIVEN a P0 failure routed to section A
    f = _finding(message="SG sg-1 missing outbound self-referencing rule")
    # WHEN rendered as a text line
    line = finding_line(f)
    # THEN it is the seed's contract, character for character
    assert (
        line == "[FAIL] P0 SG sg-1 missing outbound self-referencing rule → references/node-diagnostics-detail.md § A"
    )


def test_pass_line_has_no_priority_and_no_pointer():
    f = Finding(tag=Tag.PASS, check="vpc.dns", section="B.2", message="DNS attributes enabled")
    assert finding_line(f) == "[PASS] DNS attributes enabled"


@pytest.mark.parametrize("tag", [Tag.FAIL, Tag.WARN, Tag.UNKNOWN])
def test_problems_need_a_priority(tag):
    with pytest.raises(ValidationError, match="priority"):
        _finding(tag=tag, priority=None)


def test_problems_need_a_runbook_section():
    with pytest.raises(ValidationError, match="section"):
        _finding(section=None)


def test_unknown_sections_are_rejected():
    with pytest.raises(ValidationError, match="unknown runbook section"):
        _finding(section="Z.9")


def test_pass_findings_carry_no_priority():
    with pytest.raises(ValidationError):
        Finding(tag=Tag.PASS, priority=Priority.P2, check="vpc.dns", message="ok")


def test_mutating_command_must_state_blast_radius():
    with pytest.raises(ValidationError, match="blast radius"):
        SuggestedCommand(command="aws sagemaker batch-reboot-cluster-nodes", purpose="reboot", mutates=True)


def test_unknown_findings_never_suggest_a_state_change():
    reboot = SuggestedCommand(
        command="x",
        purpose="reboot",
        mutates=True,
        blast_radius="the node",
        iac_warning="n",
        preconditions=["p"],
        step="reboot",
    )
    with pytest.raises(ValidationError, match="read-only"):
        _finding(tag=Tag.UNKNOWN, priority=Priority.P1, suggested_commands=[reboot])


def test_messages_are_one_line():
    assert _finding(message="two\nlines   here").message == "two lines here"


def test_exit_code_is_one_for_p0_or_p1_problems_only():
    p2 = _finding(tag=Tag.WARN, priority=Priority.P2)
    p1 = _finding(tag=Tag.WARN, priority=Priority.P1)
    info = Finding(tag=Tag.INFO, check="cluster.identity", message="hello")
    assert TriageReport.exit_code_for([p2, info]) == 0
    assert TriageReport.exit_code_for([p2, p1]) == 1
    assert TriageReport.exit_code_for([], RunError(kind="cluster_not_found", message="x")) == 3  # could not look
    assert TriageReport.exit_code_for([], RunError(kind="invalid_argument", message="x")) == 2


def _report(findings):
    return TriageReport(
        tool_version="0",
        generated_at=NOW.isoformat(),
        cluster=ClusterRef(name="c", region="us-west-2"),
        findings=findings,
        summary=TriageReport.summarise(findings),
        exit_code=TriageReport.exit_code_for(findings),
    )


def test_json_has_the_documented_top_level_and_finding_keys():
    cmd = SuggestedCommand(
        command="aws ec2 x",
        purpose="p",
        mutates=True,
        blast_radius="b",
        iac_warning="w",
        preconditions=["p"],
        step="change",
    )
    doc = json.loads(render_json(_report([_finding(section="B.2", suggested_commands=[cmd])])))
    assert {"cluster", "findings", "coverage", "exit_code"} <= doc.keys()
    f = doc["findings"][0]
    for key in (
        "tag",
        "priority",
        "check",
        "section",
        "instance_id",
        "instance_group",
        "message",
        "evidence",
        "suggested_commands",
    ):
        assert key in f
    assert f["section"] == "B.2"
    assert f["runbook"] == "references/node-diagnostics-detail.md#b2-vpc-dns-attributes"
    assert set(f["suggested_commands"][0]) >= {"command", "mutates", "blast_radius", "iac_warning"}
    assert doc["exit_code"] == 1


def test_text_report_ends_with_a_summary_grouped_by_priority():
    text = render_text(_report([_finding(), _finding(tag=Tag.WARN, priority=Priority.P2, message="minor")]))
    summary = text.split("== Summary ==", 1)[1]
    assert summary.index("P0") < summary.index("P2")
    assert "minor" in summary
    assert "\033[" not in text  # no colour unless asked


def test_colour_is_applied_only_when_asked():
    assert "\033[31m" in finding_line(_finding(), colour=True)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(iac_warning=None), "IaC note"),
        (dict(preconditions=[]), "preconditions"),
        (dict(step="investigate"), "investigate step"),
        (dict(step="replace", blast_radius="the node"), "root and secondary volumes"),
    ],
)
def test_every_mutating_command_carries_preconditions_blast_radius_and_iac_note(kwargs, error):
    base = dict(
        command="x", purpose="p", mutates=True, blast_radius="b", iac_warning="w", preconditions=["p"], step="change"
    )
    with pytest.raises(ValidationError, match=error):
        SuggestedCommand(**{**base, **kwargs})


def test_commands_must_climb_the_ladder_in_order():
    read = SuggestedCommand(command="r", purpose="p", mutates=False)
    replace = SuggestedCommand(
        command="x",
        purpose="p",
        mutates=True,
        iac_warning="n",
        preconditions=["p"],
        blast_radius="destroys the root and secondary volumes",
        step="replace",
    )
    with pytest.raises(ValidationError, match="order"):
        _finding(suggested_commands=[replace, read])
    assert _finding(suggested_commands=[read, replace]).suggested_commands[-1].step == "replace"
