"""Pinned Session Manager documents: the monitor's sessions can run the probe and the Slurm reads only.

With ``AWS-StartNonInteractiveCommand`` the caller chooses the command, so any role allowed to start a
session could run anything, as root, on any node it can reach. The monitor's stack instead creates one
``Session`` document per command it runs (``sessionType`` ``NonInteractiveCommands``), each carrying its
command fixed, with no parameter a caller could use to change it; the roles may start sessions with
those documents only (see ``infra/constructs/session_documents.py`` and references/decisions.md).

The command in a document is the same line :mod:`hyperpod_debugger.aws.ssm_session` would send: the
probe (or the Slurm query) inside the exit-status wrapper, with a nonce derived from the command
itself, so the client knows the marker to look for without sending anything. Which command each kind
carries is the caller's to say (:func:`hyperpod_debugger.probe.pinned.command_of`): this module pins
commands, it does not build them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: The tag on every pinned document; the roles' Deny refuses sessions with any document without it.
TAG_KEY = "hyperpod-debugger:session-document"
TAG_VALUE = "pinned"
#: the probe, the Slurm controller's query, and its jobs (for the job diagnosis)
KINDS = ("probe", "slurm", "jobs")


def pinned_nonce(command: str) -> str:
    """The marker nonce of a pinned command: fixed by the command's own bytes."""
    return hashlib.sha256(command.encode("utf-8")).hexdigest()[:16]


def pinned_line(command: str) -> str:
    """The exact line the document runs (the command inside the exit-status wrapper)."""
    from hyperpod_debugger.aws.ssm_session import wrap_command  # the session client, loaded when needed

    return wrap_command(command, pinned_nonce(command))


def document_content(kind: str, command: str) -> dict[str, Any]:
    """The Session document (schema 1.0) of ``kind`` that runs ``command`` and nothing else.

    ``runAsElevated``: the probe reads root-only sources (the kernel ring buffer, the journal); the
    command is read-only by construction (``tests/unit/test_probe_script.py``).
    """
    return {
        "schemaVersion": "1.0",
        "description": f"HyperPod node debugger: the read-only {kind} command, fixed (no parameters).",
        "sessionType": "NonInteractiveCommands",
        "properties": {
            "linux": {
                "commands": pinned_line(command),
                "runAsElevated": True,
                "separateOutputStream": True,
            }
        },
    }


@dataclass(frozen=True, slots=True)
class SessionDocuments:
    """The names the stack gave the pinned documents (``SESSION_DOCUMENTS``); empty: the caller's own
    choice of command through ``AWS-StartNonInteractiveCommand`` (the CLI, an operator's identity)."""

    probe: str | None = None
    slurm: str | None = None
    jobs: str | None = None

    @classmethod
    def from_setting(cls, value: str | None) -> SessionDocuments:
        """``{"probe": "<name>", "slurm": "<name>", "jobs": "<name>"}`` (any of them). Raises ``ValueError`` for
        anything else."""
        if not value:
            return cls()
        try:
            data = json.loads(value)
        except ValueError:
            raise ValueError("SESSION_DOCUMENTS is not JSON") from None
        names_ok = isinstance(data, dict) and all(isinstance(v, str) and v for v in data.values())
        if not names_ok or set(data) - set(KINDS):
            raise ValueError(f"SESSION_DOCUMENTS must map {' and '.join(KINDS)} to document names")
        return cls(**data)

    def __bool__(self) -> bool:
        return bool(self.probe or self.slurm or self.jobs)

    def for_command(self, command: str, command_of: Callable[[str], str]) -> str | None:
        """The document that carries ``command``, or None; ``command_of`` gives the command of each kind."""
        for kind in KINDS:
            name = getattr(self, kind)
            if name and command == command_of(kind):
                return name
        return None


#: No pinned documents: commands go through AWS-StartNonInteractiveCommand.
NO_DOCUMENTS = SessionDocuments()

__all__ = [
    "NO_DOCUMENTS",
    "KINDS",
    "TAG_KEY",
    "TAG_VALUE",
    "SessionDocuments",
    "document_content",
    "pinned_line",
    "pinned_nonce",
]
