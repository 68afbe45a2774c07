"""A small Markdown scanner shared by the document tests (runbook, catalog)."""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE_RE = re.compile(r"^(```|~~~)\s*([\w+-]*)\s*$")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int  # 0-based


@dataclass(frozen=True)
class Fence:
    start: int  # line of the opening fence, 0-based
    end: int  # line of the closing fence
    lang: str
    body: str


def github_slug(text: str) -> str:
    """GitHub's heading anchor, written independently of ``sections.anchor``: lowercase; keep
    letters, digits, underscores, hyphens and spaces; spaces become hyphens."""
    kept = "".join(ch for ch in text.strip().lower() if ch.isalnum() or ch in "_- ")
    return kept.replace(" ", "-")


def scan(markdown: str) -> tuple[list[Heading], list[Fence], list[int]]:
    """Headings and fenced blocks, plus the line numbers that are outside any fence."""
    headings: list[Heading] = []
    fences: list[Fence] = []
    outside: list[int] = []
    lines = markdown.split("\n")
    open_at: int | None = None
    open_marker = ""
    open_lang = ""
    for number, line in enumerate(lines):
        fence = FENCE_RE.match(line.strip()) if not line.startswith("    ") else None
        if open_at is None:
            if fence:
                open_at, open_marker, open_lang = number, fence.group(1), fence.group(2)
                continue
            outside.append(number)
            heading = HEADING_RE.match(line)
            if heading:
                headings.append(Heading(len(heading.group(1)), heading.group(2), number))
        elif fence and fence.group(1) == open_marker and not fence.group(2):
            fences.append(Fence(open_at, number, open_lang, "\n".join(lines[open_at + 1 : number])))
            open_at = None
    if open_at is not None:
        raise AssertionError(f"unclosed code fence opened on line {open_at + 1}")
    return headings, fences, outside
