"""The runbook and the issue catalog as the package ships them: one section's text, and the catalog's list of
what AWS Support asks for. Pure reading of packaged text; no I/O beyond the package's own files."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from hyperpod_debugger.domain.sections import SECTIONS, anchor, is_section, what_to_do

RUNBOOK_FILE = "node-diagnostics-detail.md"
CATALOG_FILE = "node-issue-catalog.md"
#: a section is returned whole up to this many characters (G.1 with its subsections is the longest)
SECTION_MAX_CHARS = 24_000
_HEADING = re.compile(r"^(#{2,6}) (\S+) (.+?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


class UnknownSection(ValueError):
    """Not a runbook section id (the message lists the ids)."""


@lru_cache(maxsize=2)
def packaged(name: str) -> str:
    return resources.files("hyperpod_debugger").joinpath("references", name).read_text(encoding="utf-8")


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(line number, level, section id) of every section heading outside code blocks (a ``# comment`` in a
    shell block is not a heading)."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and (match := _HEADING.match(line)):
            found.append((number, len(match.group(1)), match.group(2)))
    return found


def section_text(section: str, text: str | None = None) -> tuple[str, bool]:
    """The section's Markdown, heading included, down to the next heading of its level or above (its
    subsections with it), and whether it was cut at :data:`SECTION_MAX_CHARS`."""
    if not is_section(section):
        raise UnknownSection(f"{section!r} is not a runbook section; the sections are {', '.join(SECTIONS)}")
    text = packaged(RUNBOOK_FILE) if text is None else text
    lines = text.splitlines()
    headings = _headings(text)
    start = next(((n, level) for n, level, sid in headings if sid == section), None)
    if start is None:
        raise UnknownSection(f"section {section} is missing from {RUNBOOK_FILE}")
    first, level = start
    end = next((n for n, lvl, _ in headings if n > first and lvl <= level), len(lines))
    body = "\n".join(lines[first:end]).rstrip() + "\n"
    if len(body) <= SECTION_MAX_CHARS:
        return body, False
    return body[:SECTION_MAX_CHARS].rsplit("\n", 1)[0] + "\n", True


def section_summary(section: str) -> dict[str, str | None]:
    return {
        "section": section,
        "title": SECTIONS[section],
        "anchor": anchor(section),
        "what_to_do": what_to_do(section),
    }


def support_checklist(text: str | None = None) -> list[str]:
    """The catalog's "What to put in a support case" items, in its order (each item one line)."""
    text = packaged(CATALOG_FILE) if text is None else text
    match = re.search(r"^## What to put in a support case\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if match is None:
        return []
    items: list[str] = []
    for line in match.group(1).splitlines():
        if line.startswith("- [ ] "):
            items.append(line[6:].strip())
        elif items and line.startswith("      ") and line.strip():
            items[-1] += " " + line.strip()  # a wrapped item continues on an indented line
        elif line.strip() and not line.startswith(" "):
            if items:
                break  # the list ended
    return items
