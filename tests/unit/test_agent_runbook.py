"""The packaged runbook and catalog as the agent tools and support-case drafts read them (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.observations import ClusterEvent
from hyperpod_debugger.domain.sections import SECTIONS
from hyperpod_debugger.report import runbook, support_case

TEXT = """# Title

## A First

intro of A

```bash
# A comment in a shell block, not a heading
## nor this
```

### A.1 Sub

detail

## B Second

b text
"""


def test_a_section_runs_to_the_next_heading_of_its_level_and_keeps_its_subsections(monkeypatch):
    monkeypatch.setattr(runbook, "is_section", lambda s: s in ("A", "A.1", "B"))
    text, cut = runbook.section_text("A", TEXT)
    assert text.startswith("## A First") and "### A.1 Sub" in text and "# A comment" in text
    assert "## B Second" not in text and not cut
    sub, _ = runbook.section_text("A.1", TEXT)
    assert sub == "### A.1 Sub\n\ndetail\n"


def test_a_long_section_is_cut_at_a_line_and_says_so(monkeypatch):
    monkeypatch.setattr(runbook, "is_section", lambda s: True)
    monkeypatch.setattr(runbook, "SECTION_MAX_CHARS", 40)
    text, cut = runbook.section_text("A", TEXT)
    assert cut and len(text) <= 40 and text.endswith("\n")


def test_every_section_is_in_the_packaged_runbook():
    for section in SECTIONS:
        text, _ = runbook.section_text(section)
        assert text.split("\n", 1)[0].endswith(f"{section} {SECTIONS[section]}"), section


def test_an_unknown_section_lists_the_real_ones():
    with pytest.raises(runbook.UnknownSection, match="G.1.a"):
        runbook.section_text("Z.9")


def test_the_support_checklist_comes_from_the_catalog_in_its_order():
    items = runbook.support_checklist()
    assert len(items) >= 8
    assert items[0].startswith("Cluster name, cluster ARN and Region")
    assert any("what you already tried" in item for item in items)
    assert all("- [ ]" not in item and "\n" not in item for item in items)


def _event(hours: int, text: str) -> ClusterEvent:
    return ClusterEvent(
        event_id=f"e{hours}",
        time=datetime(2026, 12, 1, tzinfo=UTC) - timedelta(hours=hours),
        level="Info",
        resource_type="Instance",
        description=text,
        instance_group="g",
        instance_id="i-0123456789abcdef0",
    )


def test_reboots_and_replacements_are_read_from_the_events_oldest_first():
    events = (
        _event(1, "Replacement of EC2 Instance i-0123456789abcdef0 has Succeeded."),
        _event(30, "Rebooting EC2 Instance i-0123456789abcdef0"),
        _event(5, "Instance lifecycle script execution for EC2 Instance i-0123456789abcdef0 has Succeeded."),
    )
    tried = support_case.attempts(events)
    assert [(a.event_id, a.kind) for a in tried] == [("e30", "reboot"), ("e1", "replacement")]


def test_quoted_text_cannot_break_the_markdown():
    assert support_case._cell("a | b\nc") == "a \\| b c"
    fenced = support_case._fence(["before", "``` not the end", "after"])
    # CommonMark: a fence closes only on a run of backticks at least as long as the opening one
    opening = re.match(r"`+", fenced[0]).group(0)
    assert len(opening) > 3 and fenced[-1] == opening
    assert all(not line.startswith(opening) for line in fenced[1:-1])
