"""Cluster events: structured levels, real failure text, windows, no arbitrary cut."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hyperpod_debugger.checks.events import check_events
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ClusterEvent, EventWindow, NotApplicable, Observed
from tests import builders as b

CAPACITY = "We currently do not have sufficient capacity to launch new ml.g5.8xlarge instances. Please try again."


def _event(
    n: int,
    level: str = "Error",
    description: str = "Failed to provision EC2 Instance in Cluster k8-1 and InstanceGroup worker4",
    failure: tuple[str, ...] = (),
    instance: str | None = None,
) -> ClusterEvent:
    return ClusterEvent(
        event_id=f"e{n}",
        time=b.NOW - timedelta(minutes=n),
        level=level,
        resource_type="InstanceGroup",
        description=description,
        instance_group="worker4",
        instance_id=instance,
        failure_messages=failure,
        described=True,
    )


def _obs(*events: ClusterEvent):
    return b.observation(events=Observed.ok(EventWindow(b.NOW - timedelta(hours=24), b.NOW, tuple(events))))


def test_capacity_text_in_event_metadata_routes_to_section_c():
    # GIVEN the real pair: a generic description and the capacity text only in EventMetadata
    obs = _obs(_event(1, failure=(CAPACITY,)))
    # WHEN the events are checked
    [f] = check_events(obs, b.context())
    # THEN capacity is recognised from the metadata, with the verbatim text as evidence
    assert (f.tag, f.section, f.priority) == (Tag.FAIL, "C", Priority.P1)
    assert any(CAPACITY in line for line in f.evidence)


def test_every_failure_event_is_counted_not_the_first_five():
    events = [_event(n, failure=(CAPACITY,), instance=f"i-{n:017x}") for n in range(30)]
    [f] = check_events(_obs(*events), b.context())
    assert f.message.startswith("30 Error event(s)")
    assert "30 node(s)" in f.message


def test_event_level_decides_not_keywords():
    # An Info event whose text says "failed" is not a problem; a Warn without keywords is.
    info = _event(1, level="Info", description="Reboot failed earlier; instance is now healthy")
    warn = _event(2, level="Warn", description="Slurm configuration drift detected: partition p1")
    findings = check_events(_obs(info, warn), b.context())
    problems = [f for f in findings if f.is_problem]
    assert len(problems) == 1 and problems[0].tag is Tag.WARN and problems[0].section == "H"
    assert problems[0].priority is Priority.P2


def test_clusters_without_continuous_provisioning_are_skipped_with_the_reason():
    obs = b.observation(
        events=Observed.skip("cluster events exist only for clusters with NodeProvisioningMode=Continuous")
    )
    with pytest.raises(NotApplicable, match="Continuous"):
        check_events(obs, b.context())


def test_quiet_window_passes_and_counts_info_events():
    [f] = check_events(_obs(_event(1, level="Info", description="Instance started")), b.context())
    assert f.tag is Tag.PASS and "1 informational" in f.message


def test_lifecycle_event_for_one_node_names_it():
    e = _event(
        1,
        description="Instance lifecycle script execution for EC2 Instance i-0b66516c4a8bfcea4 has Failed.",
        instance="i-0b66516c4a8bfcea4",
    )
    [f] = check_events(_obs(e), b.context())
    assert (f.section, f.instance_id) == ("D", "i-0b66516c4a8bfcea4")
    assert f.suggested_commands and not any(c.mutates for c in f.suggested_commands)
