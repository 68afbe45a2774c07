"""The demo's output with what changes from run to run taken out, to show a refactoring changed nothing.

Replaced: timestamps (ISO, ``… UTC``, epoch seconds and milliseconds), finding events' ids and open
seconds and incidents' ids (all follow the clock), moto's random resource ids
(``vpc-…``, ``sg-…``, …) and UUIDs (each by a placeholder numbered in order of first appearance, so the
structure stays visible), and the tool's version. Everything else must stay byte for byte the same.

    python -m tests.e2e.snapshot            # print the normalised text and JSON of `make demo`
    python -m tests.e2e.snapshot --write    # rewrite tests/e2e/golden/ (only for an intended change)
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"

_IDS = re.compile(r"\b(vpc|sg|subnet|rtb|eni|vpce|igw|nat|acl|eipalloc|pcx)-[0-9a-f]{8,17}\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| UTC)?")
_EPOCH_MS = re.compile(r"\b1[6-9]\d{11}\b")
_EPOCH_S = re.compile(r"\b1[6-9]\d{8}\b")
_VERSION = re.compile(r'("tool_version": )"[^"]*"')
#: A finding event's id hashes the transition's time; how long a finding was open is clock time too.
_EVENT_ID = re.compile(r'("event_id": )"[0-9a-f]{32}"')
_OPEN_SECONDS = re.compile(r'(open_seconds"?:? )\d+(?:\.\d+)?')
#: An incident's id hashes the time it opened.
_INCIDENT_ID = re.compile(r"(incident `?)[0-9a-f]{16}\b")


def normalise(text: str) -> str:
    seen: dict[str, str] = {}

    def placeholder(kind: str):
        def sub(match: re.Match[str]) -> str:
            key = match.group(0)
            if key not in seen:
                seen[key] = f"<{kind or match.group(1)}-{len(seen) + 1}>"
            return seen[key]

        return sub

    text = _IDS.sub(placeholder(""), text)
    text = _UUID.sub(placeholder("uuid"), text)
    text = _TIME.sub("<time>", text)
    text = _EPOCH_MS.sub("<epoch-ms>", text)
    text = _EPOCH_S.sub("<epoch-s>", text)
    text = _EVENT_ID.sub(r'\1"<event-id>"', text)
    text = _OPEN_SECONDS.sub(r"\1<seconds>", text)
    text = _INCIDENT_ID.sub(r"\1<incident-id>", text)
    return _VERSION.sub(r'\1"<version>"', text)


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    """``hyperpod-debugger demo`` as a user runs it: a subprocess from the checkout, no AWS credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_debugger.cli", "demo", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def demo(*args: str) -> str:
    """The full demo (``--verbose``), normalised."""
    result = run_demo("--no-color", "--verbose", *args)
    result.check_returncode()
    return normalise(result.stdout)


def main() -> int:
    text, reports = demo(), demo("--json")
    if "--write" in sys.argv:
        GOLDEN.mkdir(exist_ok=True)
        (GOLDEN / "demo.txt").write_text(text)
        (GOLDEN / "demo.json").write_text(reports)
        return 0
    sys.stdout.write(text + reports)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
