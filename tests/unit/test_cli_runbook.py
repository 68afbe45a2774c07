"""``hyperpod-debugger runbook``: what an alert without a runbook URL points at prints the section itself."""

from __future__ import annotations

import pathlib
import re

from hyperpod_debugger.cli.main import main

RUNBOOK = pathlib.Path(__file__).resolve().parents[2] / "references" / "node-diagnostics-detail.md"


def test_a_section_prints_from_its_heading_to_the_next_of_its_level(capsys):
    assert main(["runbook", "§ D"]) == 0
    out = capsys.readouterr().out
    lines = RUNBOOK.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^#+ D Lifecycle scripts", line))
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    fenced, end = False, len(lines)
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced  # a '#' inside a code block is a shell comment, not a heading
        elif not fenced and re.match(rf"^#{{1,{level}}} ", lines[i]):
            end = i
            break
    expected = "\n".join(line.rstrip() for line in lines[start:end]).rstrip()
    assert out.rstrip() == expected


def test_without_a_section_it_lists_them_and_an_unknown_one_is_refused(capsys):
    assert main(["runbook"]) == 0
    listed = capsys.readouterr().out
    assert "§ G.1.a" in listed and "GPU memory row remapping" in listed
    assert main(["runbook", "Z.9"]) == 2
    assert "'Z.9' is not a runbook section" in capsys.readouterr().err
