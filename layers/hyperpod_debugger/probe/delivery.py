"""Getting ``probe.sh`` onto a node: one single-line command that carries the script itself.

``AWS-StartNonInteractiveCommand`` runs one command line (it joins a command's lines), so the
script travels compressed and base64-encoded inside the command and is unpacked by the node's own
``base64``/``gunzip``/``bash``. Nothing is written to the node's disk.
"""

from __future__ import annotations

import base64
import gzip
from functools import lru_cache
from importlib import resources

#: The command must stay well inside the session document's parameter size limit (about 64 KiB
#: for a command; we keep half of that as margin).
MAX_COMMAND_BYTES = 32 * 1024


def probe_script() -> str:
    return resources.files("hyperpod_debugger.probe").joinpath("probe.sh").read_text()


@lru_cache(maxsize=1)
def item_ids() -> tuple[str, ...]:
    """Every item id probe.sh collects, in its order (its own ``ITEM_IDS`` list)."""
    script = probe_script()
    start = script.index("ITEM_IDS='") + len("ITEM_IDS='")
    return tuple(script[start : script.index("'", start)].split())


def strip_comments(script: str) -> str:
    """Drop whole-line comments and blank lines (the shebang stays). probe.sh keeps no comment
    inside a multi-line string, so this never changes what bash runs."""
    kept = []
    for number, line in enumerate(script.splitlines()):
        stripped = line.lstrip()
        if number == 0 and stripped.startswith("#!"):
            kept.append(line)
        elif stripped and not stripped.startswith("#"):
            kept.append(line)
    return "\n".join(kept) + "\n"


def encode(script: str) -> str:
    return base64.b64encode(gzip.compress(script.encode(), compresslevel=9, mtime=0)).decode("ascii")


@lru_cache(maxsize=1)
def probe_command() -> str:
    """``bash -c 'echo <base64> | base64 -d | gunzip -c | bash'``: one line, base64 inside single
    quotes (its alphabet needs no escaping)."""
    payload = encode(strip_comments(probe_script()))
    command = f"bash -c 'echo {payload} | base64 -d | gunzip -c | bash'"
    if len(command) > MAX_COMMAND_BYTES:
        raise ValueError(f"the probe command is {len(command)} bytes, over the {MAX_COMMAND_BYTES}-byte budget")
    return command


def decode_command(command: str) -> str | None:
    """The script a probe command carries (used by the fake SSM agent and tests); None otherwise."""
    prefix, suffix = "bash -c 'echo ", " | base64 -d | gunzip -c | bash'"
    start = command.find(prefix)
    if start < 0:
        return None
    end = command.find(suffix, start)
    if end < 0:
        return None
    try:
        return gzip.decompress(base64.b64decode(command[start + len(prefix) : end], validate=True)).decode()
    except (ValueError, OSError):
        return None
