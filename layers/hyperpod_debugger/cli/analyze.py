"""``hyperpod-debugger analyze``: evaluate a saved probe document (or a folder of raw outputs)
offline, with the same report as ``triage``."""

from __future__ import annotations

import pathlib
from datetime import datetime, timedelta

from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.probe.base import Orchestrator, ProbeContext, Role
from hyperpod_debugger.probe.delivery import item_ids
from hyperpod_debugger.probe.document import ProbeDocument
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.triage import build_report


class NotText(ValueError):
    """An input that is not text (compressed, an executable, an image): refused, never judged or echoed."""


#: what a binary file starts with, named for the message (the first match wins)
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed data: gunzip it first"),
    (b"\x7fELF", "an ELF executable"),
    (b"BZh", "bzip2-compressed data: bunzip2 it first"),
    (b"\xfd7zXZ\x00", "xz-compressed data: unxz it first"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data: unzstd it first"),
    (b"PK\x03\x04", "a zip archive: unzip it first"),
    (b"\x89PNG", "a PNG image"),
)
#: how much of a file is looked at to tell text from binary
_SNIFF = 8192


def binary_kind(head: bytes) -> str | None:
    """What the first bytes of a file say it is when it is not text (None: text). A NUL byte, or many bytes
    that are neither printable nor whitespace in the first 8 KiB, make it binary; UTF-8 text is text."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if b"\x00" in head:
        return "binary data (NUL bytes)"
    sample = head.decode("utf-8", errors="replace")
    odd = sum(1 for ch in sample if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b\x08"))
    return "binary data (not text)" if sample and odd > len(sample) // 10 else None


def read_text_input(path: pathlib.Path) -> str:
    """A saved probe document's text; :class:`NotText` for a binary file, :class:`OSError` when unreadable."""
    if path.is_dir():
        raise NotText(f"{path} is a folder: --probe-output takes probe.sh's JSON file (a folder: --raw-dir)")
    data = path.read_bytes()
    kind = binary_kind(data[:_SNIFF])
    if kind is not None:
        raise NotText(f"{path} is not a text file ({kind}); analyze reads probe.sh's JSON output")
    return data.decode("utf-8", errors="replace")


def check_raw_dir(path: pathlib.Path) -> None:
    """Refuse a --raw-dir that cannot be listed (:class:`OSError`) or whose ``<item_id>.txt`` files are not
    text (:class:`NotText`, naming the first): nothing is judged from bytes that are not a command's output."""
    if not path.is_dir():
        return  # the document reader says so
    for entry in sorted(path.iterdir()):
        if entry.suffix != ".txt" or not entry.is_file():
            continue
        with entry.open("rb") as handle:
            kind = binary_kind(handle.read(_SNIFF))
        if kind is not None:
            raise NotText(f"{entry} is not a text file ({kind}); --raw-dir reads saved command outputs as text")


def analyze(
    doc: ProbeDocument,
    *,
    instance_type: str,
    now: datetime,
    orchestrator: Orchestrator | None = None,
    role: Role = "compute",
    window: timedelta = timedelta(hours=24),
    instance_id: str | None = None,
    instance_group: str | None = None,
    cluster_name: str | None = None,
    region: str | None = None,
    notes: tuple[str, ...] = (),
) -> TriageReport:
    ctx = ProbeContext(
        instance_type=instance_type,
        now=now,
        orchestrator=orchestrator,
        role=role,
        window=window,
        instance_id=instance_id,
        instance_group=instance_group,
        cluster_name=cluster_name,
    )
    findings, coverage = evaluate(doc, ctx)
    findings.extend(_what_was_read(doc, coverage, notes))
    target = ladder.Target(None, cluster_name, region, orchestrator, None)
    nodes = {}
    if instance_id:
        nodes[instance_id] = ClusterNode(
            instance_id, instance_group or "", instance_type, "Running", "", doc.boot_time, hostname=doc.hostname
        )
    findings = ladder.apply(findings, target, nodes)
    if not instance_id and any(f.node_action in ("reboot", "replace") for f in findings):
        findings.append(
            Finding(
                tag=Tag.INFO,
                check="probe.analysis",
                message="The evidence calls for a node action: give --instance-id, --cluster and --region to get "
                "the commands with the ids filled in",
            )
        )
    ref = ClusterRef(
        name=cluster_name or f"offline analysis of {doc.hostname}",
        region=region or "unknown",
        orchestrator=orchestrator,
        node_count=1,
    )
    return build_report(instance_id, now, ref, findings, Coverage(checks=coverage))


def _what_was_read(doc: ProbeDocument, coverage: list[CheckCoverage], notes: tuple[str, ...]) -> list[Finding]:
    """No PASS without having read: say when nothing could be judged, which files were not probe items,
    and what the evaluation time was taken from."""
    out = [Finding(tag=Tag.INFO, check="probe.analysis", message=note) for note in notes]
    if doc.ignored:
        shown = ", ".join(doc.ignored[:10]) + (f" and {len(doc.ignored) - 10} more" if len(doc.ignored) > 10 else "")
        out.append(
            Finding(
                tag=Tag.INFO,
                check="probe.analysis",
                message=f"Not read: {shown} (not named <item_id>.txt for a probe item)",
            )
        )
    if not any(c.status is CheckStatus.RAN for c in coverage):
        found = ", ".join(doc.ignored[:10]) or "no files"
        out.append(
            Finding(
                tag=Tag.UNKNOWN,
                priority=Priority.P1,
                check="probe.analysis",
                section="L",
                message=f"Nothing could be judged: no check had an output it could read (found: {found})",
                evidence=[
                    "each file must be named for the probe item whose output it holds, e.g. kernel_log.txt for "
                    "`journalctl -k` or dmesg text, nvidia_smi_q.txt for `nvidia-smi -q`",
                    f"item ids: {', '.join(item_ids())}",
                ],
            )
        )
    return out
