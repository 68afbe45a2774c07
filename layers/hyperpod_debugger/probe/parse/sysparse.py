"""Parsers for the operating-system items of the probe document (``references/probe.md``).

Each parser takes the item's stdout and returns typed values plus the verbatim lines they came
from (the evidence). They accept the real-world variants of each tool's output — POSIX and
human-readable ``df``, BusyBox, inode tables, wrapped device names, shell prompts and elisions
pasted around a table, JSON and plain-table ``findmnt``/``lsblk``, old and new ``free``, both
``timedatectl`` forms — and never raise on garbled input: what cannot be read is left out (or
``None``), and the evaluators judge only what parsed.

:func:`cached` parses one item once per document (``ProbeDocument.parsed``), so several checks
can read the same item without parsing it twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Unobservable
from hyperpod_debugger.probe.base import item
from hyperpod_debugger.probe.document import (
    MISSING_TOOL_CODES,
    TRUNCATION_MARKER,
    ProbeDocument,
    ProbeItem,
    fleet_shared,
)

T = TypeVar("T")

TRUNCATED_NOTE = "(output truncated: only the part the probe kept was judged)"


# --------------------------------------------------------------------------------------------
# item access


def system_item(doc: ProbeDocument, item_id: str, *, what: str) -> ProbeItem:
    """Like :func:`~hyperpod_debugger.probe.base.item`, but an item whose command exited non-zero
    with real output (``df`` that could not stat one mount, ``systemctl is-active`` exiting 3
    because a unit is inactive while its stderr says "not found") is still read: only exit
    126/127 or an empty output mean the tool is missing."""
    try:
        return item(doc, item_id, what=what)
    except NotApplicable:
        found = doc.item(item_id)
        if found is not None and found.exit_code not in MISSING_TOOL_CODES and found.stdout.strip():
            return found
        raise


def cached(doc: ProbeDocument, found: ProbeItem, item_id: str, parse: Callable[[str], T]) -> T:
    """``parse(stdout)`` once per document and item (the key names this module and the parser)."""
    return doc.parsed(("sysparse", item_id, parse), lambda: parse(found.stdout))


class Parsed:
    """An item a check can do without: its parse (once per document), or why it is missing —
    ``timeout`` keeps the :class:`Unobservable` apart so a check with nothing else to judge can
    re-raise it (UNKNOWN) instead of skipping."""

    __slots__ = ("item", "reason", "timed_out", "value")

    def __init__(self, doc: ProbeDocument, item_id: str, what: str, parse: Callable[[str], Any]) -> None:
        self.value: Any = None
        self.item: ProbeItem | None = None
        self.reason: str | None = None
        #: what timed out, when the item did (:func:`raise_timed_out` turns it into UNKNOWN)
        self.timed_out: ApiFailure | None = None
        try:
            self.item = system_item(doc, item_id, what=what)
        except NotApplicable as exc:
            self.reason = str(exc)
            return
        except Unobservable as exc:
            self.timed_out, self.reason = exc.failure, f"{item_id} timed out on the node"
            return
        self.value = cached(doc, self.item, item_id, parse)


def raise_timed_out(*sources: Parsed) -> None:
    """UNKNOWN (:class:`Unobservable`) for the first source that timed out, else nothing.

    The exception is made as it is raised, never kept in a variable: one held by the raising frame would
    sit in a reference cycle with that frame (through its traceback), and the evaluation's objects with it."""
    for source in sources:
        if source.timed_out is not None:
            raise Unobservable(source.timed_out)


def _lines(text: str) -> Iterator[str]:
    for raw in text.splitlines():
        line = raw.rstrip()
        if line and TRUNCATION_MARKER not in line:
            yield line


# --------------------------------------------------------------------------------------------
# sizes

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5, "E": 1024**6}
_SIZE_RE = re.compile(r"^(?P<num>\d+(?:[.,]\d+)?)(?P<unit>[KMGTPE]?)(?P<iec>i?)(?:B)?$", re.IGNORECASE)


def parse_size(token: str, multiplier: int = 1) -> int | None:
    """``4.0K``, ``7.6Gi``, ``595Mi``, ``0B``, ``467.3M``, ``1,5G`` or a plain count (times
    ``multiplier``) → bytes (powers of 1024, as ``df -h``/``free -h`` print them); ``None`` when
    the token is not a size (``-``, ``N/A``)."""
    match = _SIZE_RE.match(token.strip())
    if not match:
        return None
    number = float(match["num"].replace(",", "."))
    unit = match["unit"].upper()
    if unit:
        return int(number * _UNITS[unit])
    return int(number * multiplier)


def human(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"  # pragma: no cover - the loop returns at TiB


# --------------------------------------------------------------------------------------------
# df (-P -k, plain, -h, BusyBox, -i, -ih)

DfKind = Literal["blocks", "inodes"]


@dataclass(frozen=True, slots=True)
class DfRow:
    filesystem: str
    mount: str
    #: bytes for a blocks table, counts for an inodes table; ``None`` when the column is unreadable
    total: int | None
    used: int | None
    avail: int | None
    #: the ``Use%``/``Capacity``/``IUse%`` column; ``None`` for ``-`` (no accounting) or garbage
    use_pct: int | None
    line: str


@dataclass(frozen=True, slots=True)
class DfReport:
    blocks: tuple[DfRow, ...] = ()
    inodes: tuple[DfRow, ...] = ()

    def row(self, mount: str, kind: DfKind = "blocks") -> DfRow | None:
        """The row whose ``Mounted on`` is exactly ``mount`` (the last one if listed twice)."""
        found = None
        for row in self.blocks if kind == "blocks" else self.inodes:
            if row.mount == mount:
                found = row
        return found


_DF_ROW_RE = re.compile(
    r"^(?P<fs>\S.*?)\s+(?P<total>\S+)\s+(?P<used>\S+)\s+(?P<avail>\S+)\s+(?P<pct>\d{1,3}%|-)\s+(?P<mount>/.*?)\s*$"
)
_DF_TAIL_RE = re.compile(r"^\s+\S+\s+\S+\s+\S+\s+(?:\d{1,3}%|-)\s+/")
_BLOCK_HEADER_RE = re.compile(r"^(?P<n>\d+)(?P<unit>[KMGB]?)-blocks$", re.IGNORECASE)


def _df_header(line: str) -> tuple[DfKind, int | None] | None:
    """``(kind, multiplier)`` of a header line; multiplier ``None`` means human-readable sizes."""
    if line.lstrip()[:10].lower() != "filesystem":
        return None  # (every row but the header: no need to split it)
    tokens = line.split()
    if not tokens or tokens[0].lower() != "filesystem" or len(tokens) < 2:
        return None
    if any(t.lower() in ("inodes", "iused", "iuse%", "ifree") for t in tokens):
        return "inodes", 1
    match = _BLOCK_HEADER_RE.match(tokens[1])
    if match:
        scale = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match["unit"].upper()]
        return "blocks", int(match["n"]) * scale
    return "blocks", None


def _df_value(token: str, multiplier: int | None) -> int | None:
    if multiplier is None:
        return parse_size(token)
    if token.isdigit():
        return int(token) * multiplier
    return parse_size(token)  # `df -ih` prints 96M inode counts; an unexpected suffix still reads


def parse_df(text: str, default_kind: DfKind = "blocks") -> DfReport:
    """Every ``df`` table in ``text``: each header starts a new table whose kind (blocks or
    inodes) and unit (N-blocks or human sizes) come from the header; rows before any header
    take ``default_kind`` and guess their unit (a suffix means human, digits mean KiB).
    Prompt lines, ``...`` elisions, error lines and trailing spaces are skipped; a device name
    that ``df`` wrapped onto its own line is joined with the numbers on the next line."""
    blocks: list[DfRow] = []
    inodes: list[DfRow] = []
    kind: DfKind = default_kind
    multiplier: int | None = 1 if default_kind == "inodes" else 1024
    pending: str | None = None
    for line in _lines(text):
        header = _df_header(line)
        if header:
            kind, multiplier = header
            pending = None
            continue
        if pending is not None and _DF_TAIL_RE.match(line):
            line = f"{pending} {line.strip()}"
        pending = None
        match = _DF_ROW_RE.match(line)
        if not match:
            tokens = line.split()
            if len(tokens) == 1:
                pending = tokens[0]
            continue
        pct = match["pct"]
        row = DfRow(
            filesystem=match["fs"],
            mount=_unescape(match["mount"]),
            total=_df_value(match["total"], multiplier),
            used=_df_value(match["used"], multiplier),
            avail=_df_value(match["avail"], multiplier),
            use_pct=int(pct[:-1]) if pct != "-" else None,
            line=line,
        )
        (inodes if kind == "inodes" else blocks).append(row)
    return DfReport(blocks=tuple(blocks), inodes=tuple(inodes))


def parse_df_inodes(text: str) -> DfReport:
    return parse_df(text, default_kind="inodes")


def use_percent(row: DfRow) -> int | None:
    """The use column, or (when it is ``-``) ``df``'s own formula ``used / (used + avail)``
    rounded up; ``None`` when nothing is accounted (vfat inodes show ``0 0 0 -``)."""
    if row.use_pct is not None:
        return row.use_pct
    if row.used is None or row.avail is None or row.used + row.avail <= 0:
        return None
    return -(-100 * row.used // (row.used + row.avail))


# --------------------------------------------------------------------------------------------
# findmnt (-J tree or list, plain table with tree glyphs)


@dataclass(frozen=True, slots=True)
class Mount:
    target: str
    source: str | None = None
    fstype: str | None = None
    size: str | None = None


@dataclass(frozen=True, slots=True)
class Mounts:
    mounts: tuple[Mount, ...] = ()
    #: the output could not be read completely (broken JSON, cut short): absence proves nothing
    partial: bool = False

    def is_mount_point(self, path: str) -> bool:
        return any(m.target == path for m in self.mounts)

    def get(self, path: str) -> Mount | None:
        found = None
        for mount in self.mounts:
            if mount.target == path:
                found = mount
        return found


_ESCAPE_RE = re.compile(r"\\x([0-9a-fA-F]{2})")
_TREE_PREFIX_RE = re.compile(r"^[\s│├└─|`\-]*(?=/)")
_JSON_TARGET_RE = re.compile(r'"target"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _unescape(value: str) -> str:
    """``findmnt``/``df`` print a space in a path as ``\\x20`` (and ``\\040`` in mount tables)."""
    if "\\" not in value:
        return value
    value = _ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), value)
    return value.replace("\\040", " ")


def _flatten(nodes: object, out: list[Mount]) -> None:
    if not isinstance(nodes, list):
        return
    for node in nodes:
        if not isinstance(node, dict):
            continue
        target = node.get("target")
        if isinstance(target, str) and target:
            out.append(
                Mount(
                    target=_unescape(target),
                    source=str(node["source"]) if node.get("source") is not None else None,
                    fstype=str(node["fstype"]) if node.get("fstype") is not None else None,
                    size=str(node["size"]) if node.get("size") is not None else None,
                )
            )
        _flatten(node.get("children"), out)


@fleet_shared
def parse_findmnt(text: str) -> Mounts:
    """``findmnt -J`` (tree with ``children`` or ``--list``), or the plain table with or without
    tree glyphs. Broken or cut JSON still yields the targets it names, marked partial."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            out: list[Mount] = []
            _flatten(data.get("filesystems"), out)
            return Mounts(tuple(out))
        targets = [Mount(target=_unescape(json.loads(f'"{t}"'))) for t in _JSON_TARGET_RE.findall(stripped)]
        return Mounts(tuple(targets), partial=True)
    out = []
    for line in _lines(text):
        if line.lstrip().startswith("TARGET"):
            continue
        match = _TREE_PREFIX_RE.match(line)
        if match is None:
            continue
        tokens = line[match.end() :].split()
        if not tokens or not tokens[0].startswith("/"):
            continue  # a mount target is an absolute path; anything else is not findmnt's table
        out.append(
            Mount(
                target=_unescape(tokens[0]),
                source=tokens[1] if len(tokens) > 1 else None,
                fstype=tokens[2] if len(tokens) > 2 else None,
                size=tokens[3] if len(tokens) > 3 else None,
            )
        )
    return Mounts(tuple(out), partial=TRUNCATION_MARKER in text)


# --------------------------------------------------------------------------------------------
# free (-b, -h; procps 3.3.10+ with `available`, older with buffers/cached, procps 4 `Gi`)


@dataclass(frozen=True, slots=True)
class FreeMem:
    #: bytes when ``unit`` is known; else the numbers as printed (their ratio still holds)
    total: int | None = None
    available: int | None = None
    free: int | None = None
    swap_total: int | None = None
    swap_free: int | None = None
    mem_line: str | None = None
    swap_line: str | None = None
    #: how the numbers were scaled: ``"bytes (free -b)"``, ``"MiB (free -m)"``, ``"sizes printed with units
    #: (free -h)"``…; None when neither the command nor the numbers say (a bare table pasted alone)
    unit: str | None = None

    def size(self, value: int | None) -> str:
        """``value`` for a message: a human size when the unit is known, else the number as printed."""
        if self.unit is None:
            return "?" if value is None else str(value)
        return human(value)


#: free(1) (procps-ng): the unit options and what one printed unit is worth
_FREE_UNITS = {
    "b": ("bytes", 1),
    "bytes": ("bytes", 1),
    "k": ("KiB", 1024),
    "kibi": ("KiB", 1024),
    "m": ("MiB", 1024**2),
    "mebi": ("MiB", 1024**2),
    "g": ("GiB", 1024**3),
    "gibi": ("GiB", 1024**3),
    "tebi": ("TiB", 1024**4),
    "pebi": ("PiB", 1024**5),
    "kilo": ("kB", 1000),
    "mega": ("MB", 1000**2),
    "giga": ("GB", 1000**3),
    "tera": ("TB", 1000**4),
    "peta": ("PB", 1000**5),
    "h": ("human", 0),
    "human": ("human", 0),
}
#: ``$ free -m``, ``[root@x ~]# free -hwt``, ``… && free -h``: a command line pasted with the table
_FREE_COMMAND_RE = re.compile(r"(?:^|[\s;&|$#>])free((?:\s+-{1,2}[A-Za-z][A-Za-z-]*(?:[= ]\d+)?)*)\s*$")


def free_unit(command: str | None) -> tuple[str, int, bool] | None:
    """The unit a ``free`` command line prints in: (name, bytes per printed unit — 0 for ``-h``, whose values
    carry their own suffix —, powers of 1000 for suffixes); None when ``command`` is not a free command.
    Plain ``free`` prints KiB (free(1): "-k, --kibi ... This is the default")."""
    if not command:
        return None
    match = _FREE_COMMAND_RE.search(command.strip())
    if match is None:
        return None
    name, factor, si = "KiB", 1024, False
    for option in match.group(1).split():
        if option.startswith("--"):
            word = option[2:].split("=", 1)[0]
            if word == "si":
                si = True
            elif word in _FREE_UNITS:
                name, factor = _FREE_UNITS[word]
            continue
        if not option.startswith("-"):
            continue
        for letter in option[1:]:
            if letter in "bkmgh":
                name, factor = _FREE_UNITS[letter]
    if si and factor not in (0, 1):
        name, factor = {1024: ("kB", 1000), 1024**2: ("MB", 1000**2), 1024**3: ("GB", 1000**3)}.get(
            factor, (name, factor)
        )
    return name, factor, si


def _free_size(token: str, factor: int, si: bool) -> int | None:
    match = _SIZE_RE.match(token.strip())
    if not match:
        return None
    if match["unit"] and si and not match["iec"]:
        return int(float(match["num"].replace(",", ".")) * 1000 ** "KMGTPE".index(match["unit"].upper()) * 1000)
    return parse_size(token, factor or 1)


def parse_free(text: str, command: str | None = None) -> FreeMem:
    """``free`` in any unit: the unit comes from the command line (``command``, else one pasted in the
    text), or from the sizes' own suffixes (``-h``: ``15Gi``, ``3.5G``, ``0B``). With none of these the
    numbers are kept as printed and ``unit`` is None."""
    columns: list[str] = []
    values: dict[str, int | None] = {}
    swap: dict[str, int | None] = {}
    mem_line = swap_line = None
    told = free_unit(command)
    suffixed = plain = False
    for line in _lines(text):
        tokens = line.split()
        head = tokens[0].lower()
        if told is None and head not in ("mem:", "swap:", "total:", "-/+"):
            told = free_unit(line)
            if told is not None:
                continue
        if not head.endswith(":") and "total" in (t.lower() for t in tokens):
            columns = [t.lower() for t in tokens]
            continue
        if head in ("mem:", "swap:") and columns:
            _, factor, si = told or ("", 1, False)
            row = {col: _free_size(tok, factor, si) for col, tok in zip(columns, tokens[1:], strict=False)}
            for tok in tokens[1:]:
                if tok[-1:].isalpha():
                    suffixed = True
                elif tok[:1].isdigit():
                    plain = True
            if head == "mem:":
                values, mem_line = row, line
            else:
                swap, swap_line = row, line
        elif line.lstrip().startswith("-/+ buffers/cache:") and mem_line and values.get("available") is None:
            # procps before 3.3.10 prints no "available" column. Its -/+ line counts all page cache as free,
            # shared memory (/dev/shm, which cannot be reclaimed) included; the estimate here takes shared
            # out again: free + buffers + cached - shared
            parts = [values.get(k) for k in ("free", "buffers", "cached")]
            if all(v is not None for v in parts):
                estimate = sum(v for v in parts if v is not None) - (values.get("shared") or 0)
                values = {**values, "available": max(estimate, 0)}
                mem_line = f"{mem_line} | {line.strip()} (available estimated: free + buffers + cached - shared)"
    if told is not None:
        unit: str | None = "sizes printed with units (free -h)" if told[1] == 0 else told[0]
    elif suffixed and not plain:
        unit = "sizes printed with units (free -h)"
    else:
        unit = None
    return FreeMem(
        total=values.get("total"),
        available=values.get("available"),
        free=values.get("free"),
        swap_total=swap.get("total"),
        swap_free=swap.get("free"),
        mem_line=mem_line,
        swap_line=swap_line,
        unit=unit,
    )


# --------------------------------------------------------------------------------------------
# /proc/meminfo

_MEMINFO_RE = re.compile(r"^\s*(?P<key>[A-Za-z0-9_()]+):\s+(?P<value>\d+)(?:\s*(?P<unit>[kKmMgG]B))?\s*$")


@dataclass(frozen=True, slots=True)
class Meminfo:
    #: bytes for ``kB`` fields, plain counts for ``HugePages_*``
    values: dict[str, int] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> int | None:
        return self.values.get(key)


def parse_meminfo(text: str) -> Meminfo:
    values: dict[str, int] = {}
    lines: dict[str, str] = {}
    for line in _lines(text):
        match = _MEMINFO_RE.match(line)
        if not match:
            continue
        unit = (match["unit"] or "").upper()
        scale = {"": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[unit]
        values[match["key"]] = int(match["value"]) * scale
        lines[match["key"]] = line.strip()
    return Meminfo(values, lines)


# --------------------------------------------------------------------------------------------
# lsblk (-J with numbers or strings, children; plain table as a fallback)


@dataclass(frozen=True, slots=True)
class BlockDevice:
    name: str
    type: str | None
    size: int | None
    model: str | None
    mountpoint: str | None
    children: tuple[BlockDevice, ...] = ()
    #: the verbatim line of the plain table (``None`` for JSON, whose layout varies by version)
    line: str | None = None

    @property
    def instance_store(self) -> bool | None:
        """``True`` for an NVMe instance-store disk, ``False`` for EBS or a non-NVMe disk,
        ``None`` when the model does not say (on Nitro, EBS volumes are NVMe devices too)."""
        if not self.name.startswith("nvme"):
            return False
        model = (self.model or "").lower()
        if "instance storage" in model or "instance store" in model:
            return True
        if "elastic block store" in model:
            return False
        return None

    def walk(self) -> Iterator[BlockDevice]:
        yield self
        for child in self.children:
            yield from child.walk()


def _device(node: dict) -> BlockDevice:
    size = node.get("size")
    if isinstance(size, str):
        size = parse_size(size)
    mount = node.get("mountpoint")
    if mount is None and isinstance(node.get("mountpoints"), list):
        mount = next((m for m in node["mountpoints"] if m), None)
    model = node.get("model")
    children = node.get("children")
    return BlockDevice(
        name=str(node.get("name", "")),
        type=str(node["type"]) if node.get("type") is not None else None,
        size=size if isinstance(size, int) else None,
        model=str(model).strip() if model is not None else None,
        mountpoint=str(mount) if mount else None,
        children=tuple(_device(c) for c in children if isinstance(c, dict)) if isinstance(children, list) else (),
    )


_LSBLK_NAME_RE = re.compile(r"^[\s│├└─|`\-]*")


#: lsblk's TYPE column (util-linux): what a device line has in its second field
_LSBLK_TYPE = re.compile(r"^(?:disk|part|lvm|crypt|loop|rom|md|mpath|dm|raid\d+|linear|multipath|tape|dmraid)$")


@fleet_shared
def parse_lsblk(text: str) -> tuple[BlockDevice, ...]:
    """``lsblk -J -b -o NAME,TYPE,SIZE,MODEL,MOUNTPOINT`` (sizes as numbers or strings, nested
    ``children``, ``mountpoints`` arrays of newer util-linux), or the plain table in that column
    order (children flattened: only disks matter here)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("blockdevices"), list):
            return tuple(_device(d) for d in data["blockdevices"] if isinstance(d, dict))
        return ()
    devices: list[BlockDevice] = []
    for line in _lines(text):
        tokens = _LSBLK_NAME_RE.sub("", line).split()
        if len(tokens) < 2 or tokens[0] == "NAME" or not _LSBLK_TYPE.match(tokens[1]):
            continue
        mount = tokens[-1] if len(tokens) > 3 and (tokens[-1].startswith("/") or tokens[-1] == "[SWAP]") else None
        model_tokens = tokens[3 : len(tokens) - 1] if mount else tokens[3:]
        devices.append(
            BlockDevice(
                name=tokens[0],
                type=tokens[1],
                size=parse_size(tokens[2]) if len(tokens) > 2 else None,
                model=" ".join(model_tokens) or None,
                mountpoint=mount,
                line=line,
            )
        )
    return tuple(devices)


# --------------------------------------------------------------------------------------------
# chronyc tracking

_CHRONY_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ()]*?)\s*:\s*(?P<value>.*?)\s*$")
_OFFSET_RE = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s+seconds\s+(?P<dir>fast|slow)", re.I)
_REFID_RE = re.compile(r"^(?P<id>[0-9A-Fa-f]{8})\s*(?:\((?P<name>[^)]*)\))?")
#: chrony before 3.0 printed the reference ID as a dotted quad: ``Reference ID : 127.127.1.1 ()``
_REFID_DOTTED_RE = re.compile(r"^(?P<ip>\d{1,3}(?:\.\d{1,3}){3})\s*(?:\((?P<name>[^)]*)\))?")
#: the reference ID chronyd reports while its ``local`` directive serves the node's own clock
#: (127.127.1.1, chronyc(1) "tracking"); ``LOCL`` is the ID ntpd's local-clock driver uses
LOCAL_REFIDS = frozenset({"7F7F0101", "4C4F434C"})


@dataclass(frozen=True, slots=True)
class ChronyTracking:
    ref_id: str | None = None
    ref_name: str | None = None
    stratum: int | None = None
    #: seconds the system clock is ahead of NTP time (negative: behind)
    offset_s: float | None = None
    leap_status: str | None = None
    #: ``506 Cannot talk to daemon``: chronyc is installed, chronyd is not running
    daemon_unreachable: bool = False
    lines: dict[str, str] = field(default_factory=dict)

    @property
    def synchronised(self) -> bool | None:
        if self.leap_status is None:
            return None
        return "not synchronised" not in self.leap_status.lower()

    @property
    def no_source(self) -> bool:
        return self.ref_id == "00000000" or self.stratum == 0

    @property
    def local_clock(self) -> bool:
        """chronyd follows only the node's own clock (``local`` mode): no external source, whatever the offset."""
        return self.ref_id in LOCAL_REFIDS or (self.ref_name or "").strip().upper() == "LOCL"

    @property
    def readable(self) -> bool:
        return self.leap_status is not None or self.offset_s is not None or self.ref_id is not None


def parse_chronyc_tracking(text: str) -> ChronyTracking:
    values: dict[str, str] = {}
    lines: dict[str, str] = {}
    unreachable = False
    for line in _lines(text):
        if "cannot talk to daemon" in line.lower():
            unreachable = True
            continue
        match = _CHRONY_RE.match(line)
        if not match:
            continue
        key = " ".join(match["key"].lower().split())
        values[key] = match["value"]
        lines[key] = line.strip()
    offset = None
    match = _OFFSET_RE.match(values.get("system time", ""))
    if match:
        offset = float(match["num"]) * (1 if match["dir"].lower() == "fast" else -1)
    ref_id = ref_name = None
    match = _REFID_RE.match(values.get("reference id", ""))
    dotted = _REFID_DOTTED_RE.match(values.get("reference id", ""))
    if match:
        ref_id, ref_name = match["id"].upper(), match["name"]
    elif dotted and all(int(part) < 256 for part in dotted["ip"].split(".")):
        ref_id = "".join(f"{int(part):02X}" for part in dotted["ip"].split("."))
        ref_name = dotted["name"]
    stratum_text = values.get("stratum", "")
    return ChronyTracking(
        ref_id=ref_id,
        ref_name=ref_name,
        stratum=int(stratum_text) if stratum_text.isdigit() else None,
        offset_s=offset,
        leap_status=values.get("leap status") or None,
        daemon_unreachable=unreachable,
        lines=lines,
    )


# --------------------------------------------------------------------------------------------
# timedatectl (show: key=value; status: "Key: value", right- or left-aligned)

_YES = {"yes": True, "no": False, "true": True, "false": False, "1": True, "0": False}


@dataclass(frozen=True, slots=True)
class TimeDate:
    synchronized: bool | None = None
    #: NTP service enabled/active (``NTP=yes``, ``NTP service: active``, ``Network time on: yes``)
    ntp_service: bool | None = None
    sync_line: str | None = None
    service_line: str | None = None


def parse_timedatectl(text: str) -> TimeDate:
    synced = service = None
    sync_line = service_line = None
    for line in _lines(text):
        stripped = line.strip()
        if "=" in stripped and ":" not in stripped.split("=", 1)[0]:
            key, _, value = stripped.partition("=")
        elif ":" in stripped:
            key, _, value = stripped.partition(":")
        else:
            continue
        key = " ".join(key.lower().split())
        value = value.strip().lower()
        if key in ("ntpsynchronized", "system clock synchronized", "ntp synchronized"):
            synced, sync_line = _YES.get(value), stripped
        elif key in ("ntp", "network time on"):
            service, service_line = _YES.get(value), stripped
        elif key == "ntp service":
            service = {"active": True, "inactive": False, "n/a": None}.get(value)
            service_line = stripped
    return TimeDate(synced, service, sync_line, service_line)


# --------------------------------------------------------------------------------------------
# systemctl is-active, one "<unit> <state>" line per unit

#: the units the probe asks about, in its order (``references/probe.md``)
PROBE_UNITS = (
    "amazon-ssm-agent",
    "snap.amazon-ssm-agent.amazon-ssm-agent",
    "containerd",
    "kubelet",
    "slurmd",
    "slurmctld",
    "munge",
    "nvidia-dcgm",
    "dcgm",
)
UNIT_STATES = frozenset(
    {
        "active",
        "inactive",
        "failed",
        "activating",
        "deactivating",
        "reloading",
        "refreshing",
        "maintenance",
        "unknown",
        "not-found",
    }
)


@dataclass(frozen=True, slots=True)
class UnitState:
    unit: str
    #: ``systemctl is-active`` word (``active``, ``inactive``, ``failed``, ``activating`` …),
    #: ``not-found`` for a unit systemd does not know; anything else is kept as printed
    state: str
    #: the sub-state from ``systemctl status`` (``running``, ``dead``, ``auto-restart``), if shown
    sub: str | None
    #: the verbatim lines the state was read from (a status block gives its header line too)
    lines: tuple[str, ...]


_UNIT_LINE_RE = re.compile(
    r"^\s*(?P<unit>[A-Za-z0-9@_.:\\-]+?)(?:\.service)?(?:\s*[:=]\s*|\s+)(?P<state>[a-z-]+)\b(?P<rest>.*)$"
)
_STATUS_HEAD_RE = re.compile(r"^\W*\s*(?P<unit>[A-Za-z0-9@_.:\\-]+)\.service(?:\s+-\s.*)?$")
_STATUS_ACTIVE_RE = re.compile(r"^\s*Active:\s*(?P<state>[a-z-]+)(?:\s*\((?P<sub>[^)]*)\))?")
_STATUS_LOADED_RE = re.compile(r"^\s*Loaded:\s*not-found\b")


@fleet_shared
def parse_is_active(text: str) -> Mapping[str, UnitState]:
    """``<unit> <state>`` lines (``.service`` suffix, ``:`` or ``=`` separators tolerated);
    ``systemctl status`` blocks (header line, ``Loaded: not-found``, ``Active: <state> (<sub>)``,
    any indentation or bullet glyph); or bare states in the probe's unit order (plain
    ``systemctl is-active u1 u2 …``). Unreadable lines are left out."""
    units: dict[str, UnitState] = {}
    bare: list[tuple[str, str]] = []
    current: str | None = None
    block: list[str] = []
    not_found = False
    for line in _lines(text):
        head = _STATUS_HEAD_RE.match(line)
        if head:
            current, not_found, block = head["unit"], False, [line.strip()]
            continue
        if current is not None:
            if _STATUS_LOADED_RE.match(line):
                not_found = True
                block.append(line.strip())
                continue
            active = _STATUS_ACTIVE_RE.match(line)
            if active:
                state = "not-found" if not_found and active["state"] == "inactive" else active["state"]
                units[current] = UnitState(current, state, active["sub"], (*block, line.strip()))
                continue
            if line[:1].isspace() or ":" in line.split()[0]:
                continue
        tokens = line.split()
        if len(tokens) == 1 and tokens[0] in UNIT_STATES:
            bare.append((tokens[0], line.strip()))
            continue
        match = _UNIT_LINE_RE.match(line)
        if match and match["state"] in UNIT_STATES:
            unit = match["unit"]
            sub = re.search(r"\(([^)]*)\)", match["rest"])
            units[unit] = UnitState(unit, match["state"], sub.group(1) if sub else None, (line.strip(),))
            current = None
    if not units and len(bare) == len(PROBE_UNITS):
        for unit, (state, raw) in zip(PROBE_UNITS, bare, strict=True):
            units[unit] = UnitState(unit, state, None, (f"{unit} {raw}",))
    return MappingProxyType(units)  # shared by every node that printed the same states: read-only
