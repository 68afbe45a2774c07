"""Kernel-log lines: a wall-clock time (when the line lets us know it) and the message text.

The probe's ``kernel_log`` / ``kernel_log_previous_boot`` items come from whichever tool the node
had (``references/probe.md``), and raw outputs handed to ``analyze --raw-dir`` come from anywhere,
so each line is read in any of these layouts (prefixes may combine, in this order)::

    <4>                                  kmsg / pstore level
    kern  :warn  :                       dmesg --decode facility and level
    6,3973,227996636,-;                  /dev/kmsg record (microseconds since boot)
    [ 1234.567890]                       dmesg: seconds since boot (current boot only)
    [Mon Nov 30 09:12:01 2026]           dmesg -T / --ctime
    2026-11-30T09:12:01,123456+00:00     dmesg --time-format=iso (comma), journalctl short-iso
    2026-11-30T09:12:01.123456+00:00       (+0000), short-iso-precise (.usec), RFC 3339 syslog
    Nov 30 09:12:01.123456               journalctl short-precise / short, syslog (no year)
    2025-Oct-01 23:48:34.002205          Neuron runtime log lines
    host kernel:                         journalctl / syslog origin (stripped)
    [  378.703529]                       the kernel's own uptime stamp after a syslog prefix

Times without a zone (``dmesg -T``, ``short-precise``, syslog) are read as UTC, the HyperPod AMI
default. A year-less time takes the reference year and goes back one year when it would otherwise
lie in the future. Seconds-since-boot become wall-clock only with the boot time of *this* boot.

The module is pure: no clock, no I/O. :func:`recent` applies the evaluators' window rule (see there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

from hyperpod_debugger.probe.document import NOT_PARSED, TRUNCATION_MARKER, ProbeDocument

THIS_BOOT = "kernel_log"
PREVIOUS_BOOT = "kernel_log_previous_boot"

_MONTHS = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}

_LEVEL = re.compile(r"<\d{1,3}>")
_DECODE = re.compile(r"[a-z]{2,8}\s*:[a-z]{2,7}\s*:\s")
_KMSG = re.compile(r"\d{1,3},\d+,(\d+),[^;]{0,8};")
_MONO = re.compile(r"\[\s*(\d{1,10}\.\d{1,9})\]\s?")
_CTIME = re.compile(r"\[(?:[A-Z][a-z]{2}) ([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?")
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?(?=[\s:]|$)[:]?\s?"
)
_NRT_STAMP = re.compile(r"(\d{4})-([A-Z][a-z]{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s")
_SHORT = re.compile(r"([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s")
#: journalctl's own notes, not messages: "-- No entries --", "-- Boot 3f2a… --", "-- Logs begin at … --"
_JOURNAL_NOTE = re.compile(r"-- .* --$")

_ZONES: dict[str, timezone] = {}


class KernelLine(NamedTuple):
    """One log line: ``raw`` as printed (for evidence), ``text`` without time and origin prefixes.

    A named tuple, not a dataclass: thousands are built per document and construction cost counts."""

    raw: str
    text: str
    time: datetime | None = None
    #: seconds since boot, when the line carried them (kept even where no wall-clock time follows)
    uptime: float | None = None


class KernelLog:
    """The message lines of one kernel-log output, each parsed the first time it is asked for.

    Evaluators look at a few lines out of hundreds (those carrying their keywords), so a line's time
    and text are worked out on demand and kept (:meth:`line`); ``raws`` holds every message line
    as printed. Blank lines, journal notes and the probe's truncation marker are not lines."""

    __slots__ = ("_parsed", "_shape", "boot_time", "raws", "reference", "text", "truncated")

    def __init__(
        self,
        raws: tuple[str, ...],
        *,
        truncated: bool = False,
        boot_time: datetime | None = None,
        reference: datetime | None = None,
        text: str | None = None,
    ) -> None:
        self.raws = raws
        #: the whole output, for a quick "does any line carry this word at all" test
        self.text = "\n".join(raws) if text is None else text
        self.truncated = truncated
        self.boot_time = boot_time
        self.reference = reference
        self._parsed: dict[int, KernelLine] = {}
        #: :func:`not_a_kernel_log`'s answer, once worked out (every kernel-log check asks)
        self._shape: tuple[str | None] | None = None

    def line(self, index: int) -> KernelLine:
        found = self._parsed.get(index)
        if found is None:
            found = self._parsed[index] = parse_line(
                self.raws[index], boot_time=self.boot_time, reference=self.reference
            )
        return found

    @property
    def lines(self) -> tuple[KernelLine, ...]:
        return tuple(self.line(i) for i in range(len(self.raws)))


def _zone(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    zone = _ZONES.get(text)
    if zone is None:
        digits = text.replace(":", "")
        minutes = int(digits[1:3]) * 60 + int(digits[3:5])
        zone = timezone(timedelta(minutes=-minutes if digits[0] == "-" else minutes))
        _ZONES[text] = zone
    return zone


def _fromiso(token: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(token)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _micro(fraction: str | None) -> int:
    return int(fraction[:6].ljust(6, "0")) if fraction else 0


def _stamp(y: int, mo: int, d: int, h: str, mi: str, s: str, frac: str | None, tz: timezone) -> datetime | None:
    try:
        return datetime(y, mo, d, int(h), int(mi), int(s), _micro(frac), tzinfo=tz)
    except ValueError:  # 31 Feb, hour 25: a garbled line keeps its text and loses its time
        return None


def _yearless(month: str, day: str, h: str, mi: str, s: str, frac: str | None, ref: datetime | None) -> datetime | None:
    mo = _MONTHS.get(month)
    if mo is None or ref is None:  # no reference, no year: the time stays unknown
        return None
    year = ref.astimezone(UTC).year
    moment = _stamp(year, mo, int(day), h, mi, s, frac, UTC)
    if moment is None and mo == 2 and day == "29":  # 29 Feb of the previous (leap) year
        moment = _stamp(year - 1, mo, 29, h, mi, s, frac, UTC)
    if moment is not None and moment > ref + timedelta(days=1):
        moment = _stamp(year - 1, mo, int(day), h, mi, s, frac, UTC)
    return moment


def parse_line(raw: str, *, boot_time: datetime | None = None, reference: datetime | None = None) -> KernelLine:
    """Read one line. ``boot_time`` turns seconds-since-boot into wall-clock time (give it only for
    the current boot); ``reference`` (the collection time) supplies the year where the line has none."""
    rest = raw.strip()
    time: datetime | None = None
    uptime: float | None = None
    if rest[:1] == "<" and (m := _LEVEL.match(rest)):
        rest = rest[m.end() :]
    if rest[:1].islower() and (m := _DECODE.match(rest)):
        rest = rest[m.end() :]
    first = rest[:1]
    if first == "[":
        if m := _MONO.match(rest):
            uptime = float(m.group(1))
            rest = rest[m.end() :]
        elif m := _CTIME.match(rest):
            mo = _MONTHS.get(m.group(1))
            if mo is not None:
                time = _stamp(int(m.group(6)), mo, int(m.group(2)), m.group(3), m.group(4), m.group(5), None, UTC)
            rest = rest[m.end() :]
    elif first.isdigit():
        token, _, after = rest.partition(" ")
        if len(token) >= 19 and token[10] == "T" and (fast := _fromiso(token)) is not None:
            time, rest = fast, after  # the common journalctl / dmesg-iso case, parsed in C
        elif m := _ISO.match(rest):
            time = _stamp(
                int(m.group(1)),
                int(m.group(2)),
                int(m.group(3)),
                m.group(4),
                m.group(5),
                m.group(6),
                m.group(7),
                _zone(m.group(8)),
            )
            rest = rest[m.end() :]
        elif m := _NRT_STAMP.match(rest):
            mo = _MONTHS.get(m.group(2))
            if mo is not None:
                time = _stamp(int(m.group(1)), mo, int(m.group(3)), m.group(4), m.group(5), m.group(6), m.group(7), UTC)
            rest = rest[m.end() :]
        elif m := _KMSG.match(rest):
            uptime = int(m.group(1)) / 1_000_000
            rest = rest[m.end() :]
    elif first.isupper() and (m := _SHORT.match(rest)):
        time = _yearless(m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6), reference)
        rest = rest[m.end() :]
    origin = rest.find("kernel:", 0, 80)
    if (
        origin != -1
        and rest[origin + 7 : origin + 8] in (" ", "[")
        and (origin == 0 or (rest[origin - 1] == " " and " " not in rest[: origin - 1]))
    ):
        # "host kernel: msg", and the console broadcast's "kernel:[405108.69] msg" (no space)
        rest = rest[origin + 7 :].lstrip(" ")
        if rest[:1] == "[" and (m := _MONO.match(rest)):
            uptime = float(m.group(1))
            rest = rest[m.end() :]
    if time is None and uptime is not None and boot_time is not None:
        time = boot_time + timedelta(seconds=uptime)
    return KernelLine(raw.rstrip(), rest, time, uptime)


_LINE_BREAK = re.compile(r"\r\n|\n|\r")


def parse_log(text: str, *, boot_time: datetime | None = None, reference: datetime | None = None) -> KernelLog:
    """The message lines of a kernel-log output (parsed lazily, see :class:`KernelLog`)."""
    # Only a real line break ends a kernel line: a process name may hold U+2028, NEL or a form feed, and
    # must not split its line into a second, forged one (str.splitlines would).
    raws = [raw for raw in _LINE_BREAK.split(text) if raw and not raw.isspace()]
    truncated = TRUNCATION_MARKER in text
    if truncated:
        raws = [raw for raw in raws if raw.strip() != TRUNCATION_MARKER]
    if "-- " in text:
        raws = [raw for raw in raws if not (raw.lstrip()[:3] == "-- " and _JOURNAL_NOTE.match(raw.strip()))]
    return KernelLog(tuple(raws), truncated=truncated, boot_time=boot_time, reference=reference, text=text)


# --------------------------------------------------------------------------- documents and windows


def boot_time(doc: ProbeDocument, now: datetime) -> datetime | None:
    """When this boot began: from the document, else from the uptime and the evaluation time
    (a document without ``collected_at`` is taken as collected now)."""
    if doc.boot_time is not None:
        return doc.boot_time
    if doc.uptime_s is not None:
        return now - timedelta(seconds=doc.uptime_s)
    return None


def kernel_log(doc: ProbeDocument, item_id: str, now: datetime) -> KernelLog | None:
    """The item's lines (split once per document), or ``None`` when the item is absent, its tool
    missing, or it timed out. Seconds-since-boot are placed in time only for the current boot."""
    # the parse depends on the evaluation time only when the document lacks its own times
    key = ("klog", item_id) if doc.collected_at is not None and doc.uptime_s is not None else ("klog", item_id, now)
    known = doc.cached(key)
    if known is not NOT_PARSED:
        return known  # type: ignore[return-value]
    boot = boot_time(doc, now) if item_id == THIS_BOOT else None
    reference = doc.collected_at or now

    def parse() -> KernelLog | None:
        found = doc.item(item_id)
        if found is None or found.timed_out or found.missing_tool:
            return None
        log = parse_log(found.stdout, boot_time=boot, reference=reference)
        log.truncated = log.truncated or found.truncated
        return log

    return doc.parsed(key, parse)


@dataclass(frozen=True, slots=True)
class Recent:
    """The lines of one kernel-log item that carry a keyword and count for a window, and what was
    left out. ``indices`` are the lines' positions in ``log.raws`` (for context such as call traces)."""

    item_id: str
    log: KernelLog | None
    lines: tuple[KernelLine, ...] = ()
    indices: tuple[int, ...] = ()
    #: lines of unknown time counted (this boot's always; the previous boot's unless it ended earlier)
    undated_counted: int = 0
    #: lines of unknown time left out: the previous boot's, when it ended before the window began
    undated_ignored: int = 0
    #: dated keyword lines older than the window (every line, when the whole output is older)
    older: int = 0

    @property
    def available(self) -> bool:
        return self.log is not None

    @property
    def truncated(self) -> bool:
        return self.log is not None and self.log.truncated

    @property
    def previous_boot(self) -> bool:
        return self.item_id == PREVIOUS_BOOT


def recent(
    doc: ProbeDocument,
    item_id: str,
    now: datetime,
    window: timedelta,
    keywords: re.Pattern[str] | None = None,
    *,
    words: tuple[str, ...] = (),
) -> Recent:
    """The lines of an item that match ``keywords`` (searched in the raw line; every line when
    None) and pass the window rule shared by the kernel-log evaluators. ``words``, when given, are
    plain substrings at least one of which every matching line contains: an output with none of
    them is passed over without a look at its lines (the usual, healthy case).

    A dated line counts when it is no older than ``window`` before ``now`` (later lines count too:
    clock skew is not a reason to drop a fault); output whose newest line is older than the window
    is passed over whole, since kernel logs print in time order.

    A line of unknown time is never dropped from this boot's log: it counts as "this boot, time unknown"
    (the evaluators say so in the evidence). For the previous boot it counts unless that boot is known
    to have ended before the window began (this boot's start is its end: a panic is the previous boot's
    last words).
    """
    log = kernel_log(doc, item_id, now)
    if log is None:
        return Recent(item_id, None)
    start = now - window
    if log.raws and (last := log.line(len(log.raws) - 1).time) is not None and last < start:
        # journal and dmesg print in time order: when the newest line is older than the window,
        # every line is (the usual case for the previous boot), and none needs reading
        return Recent(item_id, log, older=len(log.raws))
    if words and not any(word in log.text for word in words):
        return Recent(item_id, log)
    boot = boot_time(doc, now)
    undated_ok = item_id == THIS_BOOT or boot is None or boot >= start
    kept: list[KernelLine] = []
    indices: list[int] = []
    undated_counted = undated_ignored = older = 0
    search = keywords.search if keywords is not None else None
    for index, raw in enumerate(log.raws):
        if search is not None and search(raw) is None:
            continue
        line = log.line(index)
        if line.time is None:
            if not undated_ok:
                undated_ignored += 1
                continue
            undated_counted += 1
        elif line.time < start:
            older += 1
            continue
        kept.append(line)
        indices.append(index)
    return Recent(item_id, log, tuple(kept), tuple(indices), undated_counted, undated_ignored, older)


#: A line in a kernel-log layout (a time, an uptime, a level, an origin) or opening with a kernel
#: subsystem's own prefix (what ``journalctl -o cat`` leaves). Prose, HTML or a traceback has neither.
_KERNEL_SHAPE = re.compile(
    r"(?m)^[ \t]*(?:<\d{1,3}>|\[\s*\d{1,10}\.\d{1,9}\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2} |\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"
    r"|[A-Z][a-z]{2} {1,2}\d{1,2} \d{2}:\d{2}:\d{2}|\d{1,3},\d+,\d+,|[a-z]{2,8}\s*:[a-z]{2,7}\s*:|kernel:|\S+ kernel: "
    r"|\d{4}-[A-Z][a-z]{2}-\d{2} \d{2}:"
    r"|(?:NVRM|nvidia(?:-\w+)?|nvme\S*|EXT4-fs|XFS|mce|EDAC|watchdog|INFO: task|BUG|Kernel panic|Call Trace|pci \S+"
    r"|ACPI|efa|NEURON|nrt|nd\d+|Killed process|Out of memory|Memory cgroup|oom-kill|\S+ invoked oom-killer"
    r"|Linux version|Command line|systemd\[1\]|audit|IPv6|e1000|ena|md|dm-\d|sd \d|blk_update_request|Buffer I/O)\b)"
)


def not_a_kernel_log(log: KernelLog) -> str | None:
    """Why the output cannot be a kernel log (no line has a kernel log's layout), or None. A check
    says so instead of reporting a clean log it never read."""
    if log._shape is None:
        log._shape = (_not_kernel_shaped(log),)
    return log._shape[0]


def _not_kernel_shaped(log: KernelLog) -> str | None:
    if not log.raws or _KERNEL_SHAPE.search(log.text):
        return None
    first = log.raws[0].strip()
    shown = first if len(first) <= 80 else first[:77] + "..."
    return f"none of its {len(log.raws)} line(s) is in a kernel-log layout (it begins {shown!r})"


def newest_time(doc: ProbeDocument, reference: datetime) -> datetime | None:
    """The latest wall-clock time any kernel-log line of ``doc`` carries (a year-less line takes the year
    of ``reference``), or None. What a saved log was "as of" when nothing else says so."""
    newest: datetime | None = None
    for item_id in (THIS_BOOT, PREVIOUS_BOOT):
        found = doc.item(item_id)
        if found is None or not found.stdout:
            continue
        log = parse_log(found.stdout, reference=reference)
        for index in range(len(log.raws) - 1, -1, -1):
            moment = log.line(index).time
            if moment is not None:
                newest = moment if newest is None or moment > newest else newest
                break
    return newest


def stamp(moment: datetime | None) -> str:
    """A time as evidence prints it: UTC to the second, or ``time unknown``."""
    if moment is None:
        return "time unknown"
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@lru_cache(maxsize=64)
def window_label(window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    if hours >= 48 and hours % 24 == 0:
        return f"{int(hours // 24)} d"
    if hours >= 1 and hours == int(hours):
        return f"{int(hours)} h"
    return f"{int(window.total_seconds() // 60)} min"
