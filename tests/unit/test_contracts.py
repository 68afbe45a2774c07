"""Contracts kept in files: the JSON schema, the IAM policy and the README stay true to the code."""

from __future__ import annotations

import json
import pathlib
import re

from hyperpod_debugger.aws.iam import READ_ONLY_ACTIONS, policy_json
from hyperpod_debugger.domain.model import TriageReport

ROOT = pathlib.Path(__file__).resolve().parents[2]
AWS_DIR = ROOT / "layers" / "hyperpod_debugger" / "aws"


def test_committed_schema_matches_the_model():
    committed = json.loads((ROOT / "references" / "triage-report.schema.json").read_text())
    assert committed == TriageReport.model_json_schema(), "run `make schema` and commit the result"


def test_every_action_the_adapters_call_is_in_the_policy_and_nothing_else():
    called = set()
    for path in AWS_DIR.glob("*.py"):
        if path.name == "iam.py":
            continue
        called |= set(re.findall(r'"((?:sagemaker|ec2|eks|logs|servicequotas|sts):[A-Z][A-Za-z]+)"', path.read_text()))
    assert called == set(READ_ONLY_ACTIONS)


def test_policy_is_read_only():
    verbs = ("Describe", "List", "Get", "Filter")
    read, sessions = json.loads(policy_json())["Statement"]
    for action in read["Action"]:
        assert action.split(":", 1)[1].startswith(verbs), action
    # the only other statement: opening and closing probe sessions, nothing that changes a resource
    assert sessions["Action"] == ["ssm:StartSession", "ssm:TerminateSession", "ssmmessages:OpenDataChannel"]


def test_readme_shows_the_generated_policy():
    readme = (ROOT / "README.md").read_text()
    assert policy_json().strip() in readme, "README's IAM policy is stale: paste `hyperpod-debugger iam-policy`"


def test_every_section_a_check_can_emit_has_a_heading_in_the_runbook():
    from hyperpod_debugger.checks import classify
    from hyperpod_debugger.checks.registry import ACTION_SECTIONS, ALL_CHECKS
    from hyperpod_debugger.domain.sections import SECTIONS

    source = "\n".join(p.read_text() for p in (ROOT / "layers" / "hyperpod_debugger").rglob("*.py"))
    emitted = set(re.findall(r'section\s*=\s*"([A-O](?:\.\d+(?:\.[a-z])?)?)"', source))
    emitted |= {c.section for c in ALL_CHECKS} | set(ACTION_SECTIONS.values())
    emitted |= {v.section for v in vars(classify).values() if isinstance(v, classify.Cause)}
    headings = set(
        re.findall(
            r"^#{2,4} ([A-O](?:\.\d+(?:\.[a-z])?)?) ",
            (ROOT / "references" / "node-diagnostics-detail.md").read_text(),
            re.M,
        )
    )
    assert emitted <= set(SECTIONS)
    assert emitted <= headings, emitted - headings


def test_the_core_never_imports_the_simulator_moto_or_the_functions():
    from tests.infrastructure.test_layer import FORBIDDEN, imported_roots

    core = ROOT / "layers" / "hyperpod_debugger"
    offenders = {str(p.relative_to(core)): sorted(imported_roots(p) & set(FORBIDDEN)) for p in core.rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}
