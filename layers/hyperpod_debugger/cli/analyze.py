"""``hyperpod-debugger analyze``: the files it reads, refused when they are not text; the evaluation of the
saved probe document (or the folder of raw outputs) is :func:`hyperpod_debugger.report.analysis.analyze`."""

from __future__ import annotations

import pathlib


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
