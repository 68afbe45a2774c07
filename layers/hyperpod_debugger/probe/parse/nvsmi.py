"""Parsers for the NVIDIA tool outputs the probe collects (``references/probe.md``).

- ``nvidia-smi --query-gpu=… --format=csv`` and ``--query-remapped-rows=…``: driven by the header
  line, so any field order or subset works; header names may carry units (``power.draw [W]``) and
  the older ``clocks_throttle_reasons.*`` names map onto ``clocks_event_reasons.*``.
- ``nvidia-smi -q``: the indented key/value report of every driver generation we have seen
  (Volta single/double-bit ECC, Ampere SRAM/DRAM, Hopper parity/SEC-DED, 590-era repair keys),
  keyed by PCI bus id. Only the sections the checks read are kept.
- ``nvidia-smi nvlink --status``: per GPU, each link's speed or ``<inactive>``.

``dcgmi health --check`` has its own parser, :mod:`.dcgmi`.

Every parser is total: odd, cut or garbled input gives a partial result, never an exception.
Values nvidia-smi cannot provide (``[N/A]``, ``N/A``, ``[Not Supported]``, ``ERR!``, empty…)
read as ``None``: "cannot judge", never zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from hyperpod_debugger.probe.document import TRUNCATION_MARKER

# --------------------------------------------------------------------------- values

_MISSING_WORDS = frozenset(
    {
        "",
        "n/a",
        "na",
        "not supported",
        "unknown",
        "unknown error",
        "err!",
        "none",
        "-",
        "requested functionality has been deprecated",
        "insufficient permissions",
        "gpu is lost",
        "not available",
    }
)
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/()]+\s*)*$")
#: a person's note after a value (``Yes <===``, ``2   <-- this one``, ``No # note``, ``0 (after reset)``): what
#: follows the value starts with a mark no nvidia-smi value carries, so the value before it stands as printed
_NOTE_MARK = r"(?:<|#|←|=|\*|-{2,}|\(|!|//|\^)"
_ANNOTATED_NUMBER = re.compile(rf"^([-+]?\d+(?:\.\d+)?)(?:[ \t]*[A-Za-z%/]+(?:\([a-z]\))?)?[ \t]+{_NOTE_MARK}")
_ANNOTATED_WORD = re.compile(
    rf"^(not active|active|yes|no|enabled|disabled|true|false|on|off)[ \t]+{_NOTE_MARK}", re.IGNORECASE
)
_TRUE_WORDS = frozenset({"active", "yes", "enabled", "true", "on"})
_FALSE_WORDS = frozenset({"not active", "no", "disabled", "false", "off", "inactive"})


def is_missing(value: str | None) -> bool:
    """``[N/A]``, ``N/A``, ``[Not Supported]``, ``ERR!``, empty … : the tool could not say."""
    if value is None:
        return True
    if value[:1].isdigit():
        return False  # a number or a bus id (no missing-value word starts with a digit)
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return True
    return text.lower() in _MISSING_WORDS


@lru_cache(maxsize=4096)
def number(value: str | None) -> float | None:
    """``350.56 W`` → 350.56, ``81559 MiB`` → 81559.0, ``33 C`` → 33.0; anything else → None.

    Kept per spelling (a fleet prints "0", "[N/A]" and its temperatures over and over)."""
    if value is None or value[:1] == "[":  # "[N/A]", "[Not Supported]": no number, and no exception to pay for
        return None
    try:
        result = float(value)  # the common case: a bare number
    except ValueError:
        if is_missing(value):
            return None
        text = value.strip()
        match = _NUMBER.match(text) or _ANNOTATED_NUMBER.match(text)
        return float(match.group(1)) if match else None
    return result if math.isfinite(result) else None


#: exact spellings nvidia-smi uses, looked up before any normalisation
_FLAG_WORDS = {
    "Active": True,
    "Not Active": False,
    "Yes": True,
    "No": False,
    "Enabled": True,
    "Disabled": False,
    "0": False,
    "1": True,
}


@lru_cache(maxsize=1024)
def flag(value: str | None) -> bool | None:
    """``Active``/``Yes``/``Enabled``/``1`` → True, ``Not Active``/``No``/``Disabled``/``0`` → False.

    A count reads as "any": ``4`` → True (some drivers print a pending count where others print Yes/No)."""
    if value is None:
        return None
    known = _FLAG_WORDS.get(value)
    if known is not None:
        return known
    if value[:1] == "[" and value[-1:] == "]":
        return None  # "[N/A]", "[Not Supported]": missing, without the general test
    if is_missing(value):
        return None
    text = " ".join(value.split()).lower()
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    count = number(text)
    if count is not None:
        return count > 0
    word = _ANNOTATED_WORD.match(text)
    if word is not None:
        return word.group(1) in _TRUE_WORDS
    return None


@lru_cache(maxsize=1024)
def unreadable(value: str | None, kind: str = "flag") -> bool:
    """A value was printed (not ``[N/A]`` or empty) but its meaning is not certain: ``Yes this one``,
    ``maybe``. The checks say so (UNKNOWN), never read it as clear.

    Kept per spelling and kind, as :func:`number` and :func:`flag` are."""
    if value is None or is_missing(value):
        return False
    return (flag(value) if kind == "flag" else number(value)) is None


_BUS_ID = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")


def bus_key(text: str | None) -> str | None:
    """Normalise a PCI bus id so ``00000000:19:00.0`` (nvidia-smi) and ``0000:19:00.0`` match."""
    if not text:
        return None
    return _bus_key(text)


@lru_cache(maxsize=4096)
def _bus_key(text: str) -> str | None:
    # a fleet's nodes share their bus ids: each spelling is read once per process
    match = _BUS_ID.search(text)
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def strip_marker(text: str) -> tuple[str, bool]:
    """The text with the probe's truncation marker turned into a line break, and whether it was there."""
    if TRUNCATION_MARKER in text:
        return text.replace(TRUNCATION_MARKER, "\n"), True
    return text, False


# --------------------------------------------------------------------------- CSV

#: older names (and short aliases) → the names the checks read
_COLUMN_ALIASES = {
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "gpu_bus_id": "pci.bus_id",
    "gpu_uuid": "uuid",
    "gpu_name": "name",
    "temperature.gpu.current": "temperature.gpu",
}
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")
_COLUMN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_KNOWN_SINGLE_COLUMNS = frozenset({"index", "name", "uuid", "count", "timestamp", "pstate", "serial"})
#: lines nvidia-smi prints instead of (or between) rows: never data
_SMI_MESSAGE = re.compile(
    r"Unable to determine the device handle|No devices were found|NVIDIA-SMI has failed|"
    r"Failed to initialize NVML|is not a valid field to query|GPU is lost|Unable to query|"
    r"couldn't communicate with the NVIDIA driver|Driver/library version mismatch|command not found",
    re.IGNORECASE,
)
#: cheap substring test before the message regex runs over a large report
_MESSAGE_HINTS = (
    "Unable to",
    "No devices",
    "has failed",
    "Failed to initialize",
    "not a valid field",
    "GPU is lost",
    "communicate with",
    "version mismatch",
    "command not found",
)
#: a GPU nvidia-smi enumerates but cannot talk to (fallen off the bus, lost)
_LOST_GPU = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+)|GPU is lost", re.IGNORECASE)
#: the driver is not usable at all: nothing can be seen
_DRIVER_DOWN = re.compile(
    r"NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|Failed to initialize NVML|"
    r"Driver/library version mismatch|No devices were found",
    re.IGNORECASE,
)


@lru_cache(maxsize=1024)
def normalize_column(name: str) -> str:
    """``power.draw [W]`` → ``power.draw``; ``clocks_throttle_reasons.x`` → ``clocks_event_reasons.x``."""
    column = _UNIT_SUFFIX.sub("", name.strip()).lower()
    if column.startswith("clocks_throttle_reasons"):
        column = "clocks_event_reasons" + column[len("clocks_throttle_reasons") :]
    return _COLUMN_ALIASES.get(column, column)


class CsvRow:
    """One row of a CSV answer: the line as printed, its values by column, and their typed readings.

    Each value is converted (number, flag) the first time a check asks for it and kept, so the checks
    of one document share one reading of the row."""

    __slots__ = ("_flags", "_numbers", "line", "partial", "values")

    def __init__(self, line: str, values: dict[str, str], partial: bool = False) -> None:
        self.line = line
        self.values = values
        #: fewer fields than the header: the row was cut (its last field is dropped)
        self.partial = partial
        self._numbers: dict[str, float | None] | None = None
        self._flags: dict[str, bool | None] | None = None

    def __repr__(self) -> str:
        return f"CsvRow({self.line!r}, partial={self.partial})"

    def raw(self, column: str) -> str | None:
        value = self.values.get(column)
        return None if is_missing(value) else value

    def number(self, column: str) -> float | None:
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = {}
        elif column in numbers:
            return numbers[column]
        value = numbers[column] = number(self.values.get(column))
        return value

    def flag(self, column: str) -> bool | None:
        flags = self._flags
        if flags is None:
            flags = self._flags = {}
        elif column in flags:
            return flags[column]
        value = flags[column] = flag(self.values.get(column))
        return value

    @property
    def bus_id(self) -> str | None:
        return self.raw("pci.bus_id")

    @property
    def index(self) -> int | None:
        value = self.number("index")
        return int(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class CsvTable:
    #: the header line as printed, None when there was none (columns then come from the contract)
    header: str | None
    columns: tuple[str, ...]
    rows: tuple[CsvRow, ...]
    #: lines that are not rows: driver errors, lost GPUs, field errors
    messages: tuple[str, ...] = ()
    truncated: bool = False

    def has(self, column: str) -> bool:
        return column in self.columns

    @property
    def lost_gpu_lines(self) -> tuple[str, ...]:
        return tuple(line for line in self.messages if _LOST_GPU.search(line))

    @property
    def driver_down_line(self) -> str | None:
        return next((line for line in self.messages if _DRIVER_DOWN.search(line)), None)


def _split(line: str, width: int) -> list[str]:
    fields = list(map(str.strip, line.split(",")))
    if width and len(fields) > width:
        # a value holding a bare comma: nvidia-smi itself separates with ", "
        fields = list(map(str.strip, line.split(", ")))
    return fields


def _looks_like_header(fields: list[str]) -> bool:
    if not all(_COLUMN_NAME.match(f) for f in fields):
        return False
    return any(("." in f or "_" in f or f.lower() in _KNOWN_SINGLE_COLUMNS) for f in fields)


@lru_cache(maxsize=256)
def _header_columns(line: str) -> tuple[str, ...] | None:
    """The normalised columns of a header line, or None when the line is not a header (a fleet prints
    the same few header lines: each is read once per process)."""
    fields = _split(line, 0)
    return tuple(normalize_column(f) for f in fields) if _looks_like_header(fields) else None


_QUERY_OPTION = re.compile(r"--query-[a-z-]+=([A-Za-z0-9_.,]+)")


def _command_columns(line: str) -> tuple[str, ...] | None:
    """A pasted command line (``$ nvidia-smi --query-remapped-rows=a,b --format=csv``): its field list, or
    () when the line is a command without one; None when the line is not a command."""
    if "nvidia-smi" not in line or "," in line.split("nvidia-smi", 1)[0]:
        return None
    fields = _QUERY_OPTION.search(line)
    return tuple(normalize_column(f) for f in fields.group(1).split(",") if f) if fields else ()


def parse_csv(text: str, default_columns: tuple[str, ...] = ()) -> CsvTable:
    """Rows of a ``--format=csv`` answer keyed by normalised column names.

    Without a header line the fields of a pasted command line (``$ nvidia-smi --query-…=a,b …``) are the
    columns, else the contract's ``default_columns`` (``--format=csv,noheader``)."""
    text, truncated = strip_marker(text or "")
    header: str | None = None
    columns: tuple[str, ...] = ()
    rows: list[CsvRow] = []
    messages: list[str] = []
    lines = [line.strip() for line in text.splitlines()]
    # the line cut by the size limit is the last non-empty line when the marker was found
    last_content = max((i for i, line in enumerate(lines) if line), default=-1) if truncated else -1
    may_hold_messages = any(hint in text for hint in _MESSAGE_HINTS)
    for number_, line in enumerate(lines):
        if not line:
            continue
        if may_hold_messages and _SMI_MESSAGE.search(line):
            messages.append(line)
            continue
        if not rows and (asked := _command_columns(line)) is not None:
            if asked and not columns:
                default_columns = asked  # the command says which fields follow, in which order
            continue
        if line.startswith("#"):
            continue
        if not columns:
            found = _header_columns(line)
            if found is not None:
                header, columns = line, found
                continue
        fields = _split(line, len(columns))
        if not columns:
            if not default_columns:
                messages.append(line)
                continue
            columns = tuple(default_columns)
        if len(columns) > 1 and len(fields) < 2:
            messages.append(line)
            continue
        cut = number_ == last_content or len(fields) < len(columns)
        if number_ == last_content and len(fields) >= 1:
            fields = fields[:-1]  # the last value may be cut mid-way: do not trust it
        values = dict(zip(columns, fields, strict=False))
        rows.append(CsvRow(line=line, values=values, partial=cut))
    return CsvTable(header=header, columns=columns, rows=tuple(rows), messages=tuple(messages), truncated=truncated)


# --------------------------------------------------------------------------- nvidia-smi -q

_Q_GPU = re.compile(r"^GPU[ \t]+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])[ \t]*$", re.MULTILINE)
_Q_TOP = re.compile(r"^(Driver Version|Attached GPUs)[ \t]*:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
#: GPU-level sections the checks read; nothing else is walked (an 8-GPU report is ~1,600 lines)
_Q_SECTIONS = (
    "Product Name",
    "ECC Mode",
    "ECC Errors",
    "Retired Pages",
    "Remapped Rows",
    "Temperature",
    "Clocks Event Reasons",
    "Clocks Throttle Reasons",
    "GPU Reset Status",
    "Fabric",
)
_SECTION_FOLLOWERS = frozenset({"", " ", "\t", ":", "\n"})
_FIRST_INDENT = re.compile(r"^([ \t]+)\S", re.MULTILINE)
_SECTION_END: dict[int, re.Pattern[str]] = {}


def _section_end(level: int) -> re.Pattern[str]:
    """The start of the next line indented ``level`` or less (or a blank line)."""
    pattern = _SECTION_END.get(level)
    if pattern is None:
        pattern = _SECTION_END[level] = re.compile(rf"\n(?![ \t]{{{level + 1}}})")
    return pattern


class QEntry(NamedTuple):
    path: tuple[str, ...]
    value: str
    line: str


@dataclass(frozen=True, slots=True)
class QGpu:
    """One ``GPU <bus id>`` block of ``nvidia-smi -q`` (only the sections the checks read)."""

    bus_id: str
    header_line: str
    entries: tuple[QEntry, ...]
    sections: frozenset[str] = frozenset()
    _index: dict[tuple[str, ...], QEntry] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for entry in self.entries:
            self._index.setdefault(entry.path, entry)

    def get(self, *path: str) -> QEntry | None:
        return self._index.get(path)

    def under(self, *prefix: str) -> list[QEntry]:
        size = len(prefix)
        return [e for e in self.entries if len(e.path) > size and e.path[:size] == prefix]


@dataclass(frozen=True, slots=True)
class QReport:
    driver_version: str | None
    attached_gpus: int | None
    attached_line: str | None
    gpus: tuple[QGpu, ...]
    messages: tuple[str, ...] = ()
    truncated: bool = False

    @property
    def incomplete(self) -> bool:
        """Cut short: the marker, or fewer GPU blocks than "Attached GPUs" announced."""
        return self.truncated or (self.attached_gpus is not None and len(self.gpus) < self.attached_gpus)

    @property
    def lost_gpu_lines(self) -> tuple[str, ...]:
        return tuple(line for line in self.messages if _LOST_GPU.search(line))

    @property
    def driver_down_line(self) -> str | None:
        return next((line for line in self.messages if _DRIVER_DOWN.search(line)), None)


def _parse_section(text: str, entries: list[QEntry]) -> None:
    """Key/value lines of one GPU-level section into entries, the path following the indentation."""
    indents: list[int] = []
    keys: list[str] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped:
            continue
        indent = len(raw) - len(raw.lstrip())
        key, sep, value = stripped.partition(":")
        key = key.rstrip().lower()
        while indents and indents[-1] >= indent:
            indents.pop()
            keys.pop()
        keys.append(key)
        indents.append(indent)
        if sep:
            entries.append(QEntry(tuple(keys), value.strip(), stripped))


def _message_lines(text: str) -> tuple[str, ...]:
    """Whole lines holding an nvidia-smi error message (each once)."""
    found: dict[int, str] = {}
    if not any(hint in text for hint in _MESSAGE_HINTS):
        return ()
    for match in _SMI_MESSAGE.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start not in found:
            end = text.find("\n", match.end())
            found[start] = text[start : end if end != -1 else len(text)].strip()
    return tuple(found.values())


UNKNOWN_BUS = "unknown"
_TOP_SECTION = re.compile(r"(?m)^([ \t]*)(?:ECC Errors|ECC Mode|Retired Pages|Remapped Rows|Fabric)[ \t]*$")


def _read_sections(text: str, begin: int, stop: int, indent: str, entries: list[QEntry], sections: set[str]) -> None:
    level = len(indent)
    for name in _Q_SECTIONS:
        start = text.find(f"\n{indent}{name}", begin, stop)
        if start == -1:
            continue
        name_end = start + 1 + level + len(name)
        if text[name_end : name_end + 1] not in _SECTION_FOLLOWERS:
            continue
        end = _section_end(level).search(text, name_end, stop)
        block_end = end.start() if end else stop
        if "\n" not in text[name_end:block_end].rstrip() and not text[name_end:block_end].strip(" \t:"):
            # a bare section title with nothing indented under it: a paste that lost its indentation
            # (chat, e-mail, some Markdown renderings) keeps its lines flush, read by position instead
            _parse_flat_section(name, text[block_end:stop], entries)
        else:
            _parse_section(text[start + 1 : block_end], entries)
        sections.add(name.lower())


_FLAT_TITLE = re.compile(r"^[A-Za-z][A-Za-z0-9 /()-]{0,40}$")
_SECTION_NAMES = frozenset(name.lower() for name in _Q_SECTIONS)


def _parse_flat_section(name: str, rest: str, entries: list[QEntry]) -> None:
    """The lines after a bare section title, all at one indentation: ``Key : value`` lines belong to the
    section (or to the last bare sub-title, ``Volatile``/``Aggregate``), until a blank line, the next
    section title or a line that is neither."""
    section = name.lower()
    sub: str | None = None
    for raw in rest.splitlines()[1:] if rest.startswith("\n") else rest.splitlines():
        stripped = raw.strip()
        if not stripped:
            break
        key, sep, value = stripped.partition(":")
        key = key.rstrip().lower()
        if not sep:
            if key in _SECTION_NAMES or not _FLAT_TITLE.match(stripped) or _Q_GPU.match(stripped):
                break
            sub = key
            continue
        if key in _SECTION_NAMES:
            break
        path = (section, sub, key) if sub else (section, key)
        entries.append(QEntry(path, value.strip(), stripped))


def parse_q(text: str) -> QReport:
    text, truncated = strip_marker(text or "")
    headers = list(_Q_GPU.finditer(text))
    preamble = text[: headers[0].start()] if headers else text
    driver = attached_line = None
    attached: int | None = None
    for top in _Q_TOP.finditer(preamble):
        if top.group(1) == "Driver Version":
            driver = top.group(2)
        else:
            attached_line = top.group(0).strip()
            count = number(top.group(2))
            attached = int(count) if count is not None else None
    blocks = [
        (
            header.group(1),
            header.group(0).strip(),
            header.end(),
            headers[i + 1].start() if i + 1 < len(headers) else len(text),
        )
        for i, header in enumerate(headers)
    ]
    top_indent: str | None = None
    if not blocks and (margin := _TOP_SECTION.search(text)):
        # one GPU's sections with no "GPU <bus id>" line: printed at the left margin (seen with -d ECC),
        # or cut out of a full report (`nvidia-smi -q | grep -A3 Fabric`) with their indentation kept
        top_indent = margin.group(1)
        text = "\n" + text
        blocks = [(UNKNOWN_BUS, "(one GPU, no bus id printed)", 0, len(text))]
    gpus: list[QGpu] = []
    for bus_id, header_line, begin, stop in blocks:
        first = _FIRST_INDENT.search(text, begin, stop)
        entries: list[QEntry] = []
        sections: set[str] = set()
        # the usual layout indents the sections under their GPU; some print them at the left margin
        candidates = (top_indent,) if top_indent is not None else (first.group(1) if first else "    ", "")
        for indent in dict.fromkeys(candidates):
            _read_sections(text, begin, stop, indent, entries, sections)
            if sections:
                break
        gpus.append(QGpu(bus_id=bus_id, header_line=header_line, entries=tuple(entries), sections=frozenset(sections)))
    # driver and lost-GPU messages come before the GPU blocks, or instead of them
    cut = attached is not None and len(gpus) < attached
    messages = _message_lines(text if cut or not gpus else preamble)
    return QReport(
        driver_version=driver,
        attached_gpus=attached,
        attached_line=attached_line,
        gpus=tuple(gpus),
        messages=messages,
        truncated=truncated,
    )


@dataclass(frozen=True, slots=True)
class Counted:
    """A summed counter and the lines it came from; ``value`` None = not reported."""

    value: int | None
    lines: tuple[str, ...] = ()


def _sum(entries: list[QEntry]) -> Counted:
    total: float | None = None
    lines: list[str] = []
    for entry in entries:
        value = number(entry.value)
        if value is None:
            continue
        total = (total or 0) + value
        lines.append(entry.line)
    return Counted(int(total) if total is not None else None, tuple(lines))


def q_ecc(gpu: QGpu, scope: str) -> tuple[Counted, Counted]:
    """(uncorrectable, correctable) ECC counts of ``scope`` ("volatile" or "aggregate").

    Ampere/Hopper list ``SRAM/DRAM (Un)Correctable[ Parity| SEC-DED]`` (summed); Volta lists
    ``Single Bit``/``Double Bit`` blocks per memory type with a ``Total`` (used when present)."""
    uncorrected: list[QEntry] = []
    corrected: list[QEntry] = []
    bits: dict[str, list[QEntry]] = {"single bit": [], "double bit": []}
    for entry in gpu.under("ecc errors", scope):
        rel = entry.path[2:]
        if rel[0] in bits:
            bits[rel[0]].append(entry)
            continue
        leaf = rel[-1]
        if "uncorrectable" in leaf:
            uncorrected.append(entry)
        elif "correctable" in leaf:
            corrected.append(entry)
    for kind, target in (("double bit", uncorrected), ("single bit", corrected)):
        block = bits[kind]
        totals = [e for e in block if e.path[-1] == "total"]
        target.extend(totals if totals and number(totals[0].value) is not None else block)
    return _sum(uncorrected), _sum(corrected)


@dataclass(frozen=True, slots=True)
class Reading:
    """One value (a count or a flag) with the verbatim line it was read from."""

    value: float | bool
    line: str


def q_value(gpu: QGpu, section: str, *leaves: str) -> QEntry | None:
    """The first entry under ``section`` whose last key is one of ``leaves`` (any depth)."""
    for entry in gpu.under(section):
        if entry.path[-1] in leaves:
            return entry
    return None


def q_retired_pages(gpu: QGpu) -> dict[str, Reading]:
    """``single``/``double`` (counts) and ``pending`` (flag) of the Retired Pages block."""
    found: dict[str, Reading] = {}
    for entry in gpu.under("retired pages"):
        leaf = entry.path[-1]
        if leaf.startswith("single bit"):
            value: float | bool | None = number(entry.value)
            name = "single"
        elif leaf.startswith("double bit"):
            value = number(entry.value)
            name = "double"
        elif leaf.startswith("pending"):
            value = flag(entry.value)
            name = "pending"
        else:
            continue
        if value is not None and name not in found:
            found[name] = Reading(value, entry.line)
    return found


def q_unreadable(gpu: QGpu) -> dict[str, tuple[str, ...]]:
    """The lines of the remapping and page-retirement fields that were printed but cannot be read with
    certainty (``Pending : Yes this one``), by section: ``remapped rows`` and ``retired pages``."""
    out: dict[str, tuple[str, ...]] = {}
    remap = tuple(
        e.line
        for e in gpu.under("remapped rows")
        if len(e.path) == 2
        and e.path[1] in _REMAP_KEYS
        and unreadable(e.value, "number" if e.path[1].endswith("error") else "flag")
    )
    retired = tuple(
        e.line
        for e in gpu.under("retired pages")
        if e.path[-1].startswith(("single bit", "double bit", "pending"))
        and unreadable(e.value, "flag" if e.path[-1].startswith("pending") else "number")
    )
    for section, lines in (("remapped rows", remap), ("retired pages", retired)):
        if lines:
            out[section] = lines
    return out


_REMAP_KEYS = ("correctable error", "uncorrectable error", "pending", "remapping failure occurred")


def q_remapped_rows(gpu: QGpu) -> dict[str, Reading]:
    """``correctable``/``uncorrectable`` (counts), ``pending``/``failure`` (flags); {} when N/A."""
    keys: dict[str, tuple[str, Callable[[str | None], float | bool | None]]] = {
        "correctable error": ("correctable", number),
        "uncorrectable error": ("uncorrectable", number),
        "pending": ("pending", flag),
        "remapping failure occurred": ("failure", flag),
    }
    found: dict[str, Reading] = {}
    for entry in gpu.under("remapped rows"):
        if len(entry.path) != 2 or entry.path[1] not in keys:
            continue
        name, convert = keys[entry.path[1]]
        value = convert(entry.value)
        if value is not None:
            found[name] = Reading(value, entry.line)
    return found


# --------------------------------------------------------------------------- nvlink --status

_NVL_GPU = re.compile(r"^\s*(?:#\s*)?GPU\s+(\d+)\s*:\s*(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$")
_NVL_ALL_INACTIVE = re.compile(r"all links are in ?active", re.IGNORECASE)


class NvLink(NamedTuple):
    number: int
    line: str
    #: True up, False inactive/down, None unreadable
    active: bool | None
    speed_gbps: float | None = None


@dataclass(frozen=True, slots=True)
class NvLinkGpu:
    index: int
    name: str
    uuid: str | None
    line: str
    links: tuple[NvLink, ...]
    #: the driver's "all links are inActive" line for this GPU, if printed
    all_inactive_line: str | None = None

    @property
    def inactive(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.links if link.active is False)

    @property
    def active(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.links if link.active)


@dataclass(frozen=True, slots=True)
class NvLinkReport:
    gpus: tuple[NvLinkGpu, ...]
    messages: tuple[str, ...] = ()
    truncated: bool = False

    @property
    def all_inactive_line(self) -> str | None:
        return next((line for line in self.messages if _NVL_ALL_INACTIVE.search(line)), None)


def _link_state(value: str) -> tuple[bool | None, float | None]:
    text = value.strip()
    if text.endswith("GB/s"):
        try:
            gbps = float(text[:-4])
        except ValueError:
            gbps = None
        if gbps is not None:
            return gbps > 0, gbps
    lowered = text.lower()
    if "inactive" in lowered or "down" in lowered or "disabled" in lowered:
        return False, None
    return None, None


def parse_nvlink(text: str) -> NvLinkReport:
    text, truncated = strip_marker(text or "")
    gpus: list[NvLinkGpu] = []
    messages: list[str] = []
    current: dict | None = None

    def close() -> None:
        if current is not None:
            gpus.append(NvLinkGpu(**{**current, "links": tuple(current["links"])}))

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Link ") and current is not None:
            number_text, sep, state = line[5:].partition(":")
            if sep and number_text.strip().isdigit():
                active, speed = _link_state(state)
                current["links"].append(NvLink(int(number_text), line, active, speed))
                continue
        gpu = _NVL_GPU.match(line) if "GPU" in line else None
        if gpu:
            close()
            uuid = gpu.group(3).strip() if gpu.group(3) else None
            current = {"index": int(gpu.group(1)), "name": gpu.group(2), "uuid": uuid, "line": line, "links": []}
            continue
        if _NVL_ALL_INACTIVE.search(line) and current is not None and not current["links"]:
            current["all_inactive_line"] = line
            continue
        if "$" in line and "nvidia-smi" in line:
            continue  # a shell prompt pasted with the output
        messages.append(line)
    close()
    return NvLinkReport(gpus=tuple(gpus), messages=tuple(messages), truncated=truncated)
