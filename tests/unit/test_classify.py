"""Failure-text classification against real published HyperPod messages."""

from __future__ import annotations

import pytest

from hyperpod_debugger.checks.classify import classify
from tests.conftest import FIXTURES

FIX = FIXTURES / "hyperpod"


@pytest.mark.parametrize(
    ("name", "section"),
    [
        ("describe-cluster-failuremessage-insufficient-capacity.txt", "C"),
        ("describe-cluster-failuremessage-lifecycle-real-instance.txt", "D"),
        ("describe-cluster-failuremessage-lifecycle-scripts.txt", "D"),
        ("describe-cluster-event-capacity-k8-1-wrapped-elided.txt", "C"),
    ],
)
def test_real_failure_messages(name, section):
    assert classify((FIX / name).read_text()).section == section


@pytest.mark.parametrize(
    ("text", "section"),
    [
        ("We currently do not have sufficient capacity to launch new ml.p5.48xlarge instances. Please try again.", "C"),
        ("EFA health checks did not run successfully", "A"),
        ("Failed to create Customer ENI for instance i-0abc", "B.1"),
        ("Instance likely experienced a hardware failure", "F"),
        ("Slurm configuration drift detected: nodes", "H"),
        ("something entirely new", "F"),
    ],
)
def test_rules(text, section):
    assert classify(text).section == section
