"""What the Slurm controller says, read through one read-only command, and the parsers of its answer.

The collector runs :func:`slurm_query_command` on the controller node through Session Manager.
Each section of its output follows a marker line ``==HPD:<key>==``; :func:`parse_query_output`
splits the output back into sections, and the ``parse_*`` functions turn each section into
typed rows. Everything here is pure text handling: no Slurm, no AWS.

Node states come in two spellings:

* ``sinfo`` prints one word (``idle``, ``drained``, ``failg``, ``mix``…) plus at most one
  trailing symbol: ``*`` not responding, ``~`` powered off, ``#`` powering up, ``!`` power-down
  pending, ``%`` powering down, ``$`` in a maintenance reservation, ``@`` reboot pending,
  ``^`` reboot issued, ``-`` planned by the backfill scheduler, ``+`` (after ``allocated``)
  jobs still completing;
* ``scontrol show node`` prints a base state and ``+``-joined flags (``IDLE+DRAIN``,
  ``DOWN+NOT_RESPONDING``, ``IDLE+CLOUD+POWERED_DOWN``).

Both are normalised to :class:`NodeState`: one base state and a set of flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hyperpod_debugger.domain.orchestrators import SlurmJob

# --------------------------------------------------------------------------- the query

#: Sections of the query, in the order the command prints them.
QUERY_KEYS: tuple[str, ...] = ("ping", "config", "sinfo", "nodes", "squeue", "jobs", "services")
MARKER = "==HPD:{key}=="
_MARKER = re.compile(r"^==HPD:([a-z_]+)==\s*$")

#: ``sinfo -o`` format of the ``sinfo`` section: node name, long state with its symbol, reason,
#: reason time. ``|`` separates fields (no Slurm node name, state or time contains one).
SINFO_FORMAT = "%N|%T|%E|%H"
#: ``squeue -o`` format of the ``squeue`` section: job id, state, elapsed time, nodes, reason.
SQUEUE_FORMAT = "%i|%T|%M|%N|%R"
#: ``squeue -o`` format of the ``jobs`` section (what runs where, for the blast radius of a node action):
#: job id, state, user, node count, nodes, and the job name last (a name may hold any character).
JOBS_FORMAT = "%i|%T|%u|%D|%N|%j"
#: The job states that occupy a node: what a drain lets finish and a reboot or replacement stops.
OCCUPYING_STATES = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED"
#: The services whose ``systemctl is-active`` state the query prints, one ``<unit> <state>`` line each.
CONTROLLER_SERVICES: tuple[str, ...] = ("slurmctld", "munge")
#: Seconds each Slurm command may take before ``timeout`` stops it (a hung controller must not hang us).
COMMAND_TIMEOUT_S = 10


def _sections() -> list[tuple[str, str]]:
    t = f"timeout {COMMAND_TIMEOUT_S}"
    services = " ".join(CONTROLLER_SERVICES)
    return [
        ("ping", f"{t} scontrol ping 2>&1"),
        ("config", f"{t} scontrol show config 2>&1 | head -n 5"),
        ("sinfo", f'{t} sinfo --noheader -N -o "{SINFO_FORMAT}" 2>&1'),
        ("nodes", f"{t} scontrol show node --oneliner 2>&1"),
        ("squeue", f'{t} squeue --noheader -t COMPLETING,CONFIGURING -o "{SQUEUE_FORMAT}" 2>&1'),
        ("jobs", f'{t} squeue --noheader -t {OCCUPYING_STATES} -o "{JOBS_FORMAT}" 2>&1'),
        (
            "services",
            f'for u in {services}; do printf "%s %s\\n" "$u" "$({t} systemctl is-active "$u" 2>/dev/null)"; done',
        ),
    ]


def slurm_query_command() -> str:
    """One line, read-only: ``bash -c '…'`` printing every section after its marker.

    The Session Manager agent runs a command line without a shell (it splits the line and runs
    the first word), so the script travels as the single-quoted argument of ``bash -c``; the
    script itself uses only double quotes. Slurm's binaries live in ``/opt/slurm/bin`` on
    HyperPod, which a non-login shell may not have on its PATH. Every Slurm call is bounded by
    ``timeout`` and has its stderr folded into its section, so an error message is evidence too.
    """
    parts = ['export PATH="$PATH:/opt/slurm/bin:/usr/local/bin"']
    for key, command in _sections():
        parts.append(f"echo {MARKER.format(key=key)}")
        parts.append(command)
    script = "; ".join(parts)
    assert "'" not in script  # noqa: S101 - a single quote would end the bash -c argument
    return f"bash -c '{script}'"


def parse_query_output(stdout: str) -> dict[str, str]:
    """Split the query's output into its sections, by key. Text before the first marker (a
    login banner) is dropped; a key that appears twice keeps its last section."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.replace("\r\n", "\n").split("\n"):
        match = _MARKER.match(line.strip())
        if match:
            current = sections[match.group(1)] = []
        elif current is not None:
            current.append(line.rstrip())
    return {key: "\n".join(lines).strip("\n") for key, lines in sections.items()}


# --------------------------------------------------------------------------- node states

#: sinfo's short and long state words -> the canonical (scontrol) base state.
_BASE_WORDS: dict[str, str] = {
    "alloc": "ALLOCATED",
    "allocated": "ALLOCATED",
    "idle": "IDLE",
    "mix": "MIXED",
    "mixed": "MIXED",
    "down": "DOWN",
    "comp": "COMPLETING",
    "completing": "COMPLETING",
    "futr": "FUTURE",
    "future": "FUTURE",
    "unk": "UNKNOWN",
    "unknown": "UNKNOWN",
    "resv": "RESERVED",
    "reserved": "RESERVED",
    "maint": "MAINTENANCE",
    "maintenance": "MAINTENANCE",
    "plnd": "PLANNED",
    "planned": "PLANNED",
    "blocked": "BLOCKED",
    "inval": "INVAL",
    "err": "ERROR",
    "error": "ERROR",
    "npc": "PERFCTRS",
    "perfctrs": "PERFCTRS",
}
#: sinfo words that name a derived state: (base state, flags).
_DERIVED_WORDS: dict[str, tuple[str, frozenset[str]]] = {
    "drain": ("IDLE", frozenset({"DRAIN"})),
    "drained": ("IDLE", frozenset({"DRAIN"})),
    "drng": ("ALLOCATED", frozenset({"DRAIN"})),
    "draining": ("ALLOCATED", frozenset({"DRAIN"})),
    "fail": ("IDLE", frozenset({"FAIL"})),
    "failg": ("ALLOCATED", frozenset({"FAIL"})),
    "failing": ("ALLOCATED", frozenset({"FAIL"})),
    "boot": ("IDLE", frozenset({"REBOOT_ISSUED"})),
    "reboot_issued": ("IDLE", frozenset({"REBOOT_ISSUED"})),
    "reboot_requested": ("IDLE", frozenset({"REBOOT_REQUESTED"})),
    "pow_dn": ("IDLE", frozenset({"POWERING_DOWN"})),
    "powering_down": ("IDLE", frozenset({"POWERING_DOWN"})),
    "power_down": ("IDLE", frozenset({"POWER_DOWN"})),
    "powered_down": ("IDLE", frozenset({"POWERED_DOWN"})),
    "pow_up": ("IDLE", frozenset({"POWERING_UP"})),
    "powering_up": ("IDLE", frozenset({"POWERING_UP"})),
}
#: sinfo's trailing symbols -> flag.
SUFFIX_FLAGS: dict[str, str] = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
    "+": "COMPLETING",
}
#: scontrol flag spellings that differ from the canonical ones.
_FLAG_ALIASES: dict[str, str] = {"NO_RESPOND": "NOT_RESPONDING", "MAINT": "MAINTENANCE", "POWERED_OFF": "POWERED_DOWN"}
_BASES = frozenset(_BASE_WORDS.values())
#: Flags of a node that is powered off or changing power state on purpose (power saving).
POWER_FLAGS = frozenset({"POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "POWER_DOWN"})
#: Base states in which the node is (partly) running jobs.
_BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node state in either spelling, normalised. ``raw`` is kept verbatim for evidence."""

    raw: str
    base: str
    flags: frozenset[str] = frozenset()

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def drained(self) -> bool:
        """Drained and idle: no job left on it."""
        return self.drain and self.base not in _BUSY

    @property
    def draining(self) -> bool:
        """Drain requested while jobs still run on it."""
        return self.drain and self.base in _BUSY

    @property
    def fail(self) -> bool:
        return "FAIL" in self.flags

    @property
    def failing(self) -> bool:
        return self.fail and self.base in _BUSY

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.flags

    @property
    def power_saving(self) -> bool:
        return bool(self.flags & POWER_FLAGS)

    @property
    def label(self) -> str:
        """A word for people: ``down``, ``drained``, ``draining``, ``fail``, ``failing``, or the base state."""
        if self.down:
            return "down"
        if self.fail:
            return "failing" if self.failing else "fail"
        if self.drain:
            return "draining" if self.draining else "drained"
        return self.base.lower()


def parse_state(text: str) -> NodeState:
    """``drained*``, ``failg``, ``mix-``, ``IDLE+DRAIN``, ``DOWN+NOT_RESPONDING`` … -> :class:`NodeState`.
    Case does not matter; a word we do not know becomes the base state as written (upper case)."""
    raw = text.strip()
    word = raw
    flags: set[str] = set()
    if "+" in word.rstrip("+"):
        # scontrol spelling: BASE+FLAG+FLAG (a trailing "+" is sinfo's "jobs completing" symbol).
        head, *rest = word.split("+")
        for part in rest:
            if part:
                flag = part.upper()
                flags.add(_FLAG_ALIASES.get(flag, flag))
        word = head
    while word and word[-1] in SUFFIX_FLAGS:
        flags.add(SUFFIX_FLAGS[word[-1]])
        word = word[:-1]
    lower = word.lower()
    if lower in _DERIVED_WORDS:
        base, derived = _DERIVED_WORDS[lower]
        flags |= derived
    else:
        base = _BASE_WORDS.get(lower, word.upper() or "UNKNOWN")
    if base not in _BASES and base in ("DRAIN", "FAIL", "NOT_RESPONDING"):
        flags.add(base)
        base = "IDLE"
    return NodeState(raw=raw, base=base, flags=frozenset(flags))


# --------------------------------------------------------------------------- hostlists


def expand_hostlist(text: str) -> list[str]:
    """``ip-10-1-57-[141,143-145],node7`` -> every name. Zero padding (``node[001-003]``) is kept."""
    names: list[str] = []
    depth = 0
    start = 0
    pieces: list[str] = []
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:index])
            start = index + 1
    pieces.append(text[start:])
    for piece in (p.strip() for p in pieces):
        if not piece:
            continue
        match = re.fullmatch(r"(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]+)\](?P<rest>.*)", piece)
        if not match:
            names.append(piece)
            continue
        for suffix in expand_hostlist(match["rest"]) if match["rest"] else [""]:
            for item in match["ranges"].split(","):
                low, _, high = item.partition("-")
                if high and low.isdigit() and high.isdigit():
                    width = len(low)
                    names.extend(f"{match['prefix']}{n:0{width}d}{suffix}" for n in range(int(low), int(high) + 1))
                else:
                    names.append(f"{match['prefix']}{item}{suffix}")
    return names


# --------------------------------------------------------------------------- sinfo


@dataclass(frozen=True, slots=True)
class SinfoNode:
    name: str
    state: NodeState
    #: the reason verbatim, None when sinfo says "none" or prints nothing
    reason: str | None = None
    #: when the reason was set (``2024-01-25T15:12:23``), None when "Unknown"
    timestamp: str | None = None
    #: who set the reason, when the output says
    user: str | None = None
    #: the line it came from
    line: str = ""
    #: other columns of the row, by field name
    extra: dict[str, str] = field(default_factory=dict)


def _reason(text: str | None) -> str | None:
    value = (text or "").strip()
    return None if value.lower() in ("", "none", "(null)", "n/a") else value


def _timestamp(text: str | None) -> str | None:
    value = (text or "").strip()
    return None if value.lower() in ("", "unknown", "none", "n/a") else value


def parse_sinfo(text: str, fields: tuple[str, ...] = ("name", "state", "reason", "timestamp")) -> list[SinfoNode]:
    """``|``-separated rows without a header (our ``sinfo`` section, or any ``-o``/``-O`` format
    given its field names). Padded fields are stripped; a node listed once per partition is kept
    once; lines that are not rows (an error message) are skipped."""
    out: dict[str, SinfoNode] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < len(fields) or "name" not in fields or "state" not in fields:
            continue
        if len(parts) > len(fields) and "reason" in fields:
            # A "|" inside the reason: the reason takes the spare columns.
            at = fields.index("reason")
            spare = len(parts) - len(fields)
            parts = [*parts[:at], "|".join(parts[at : at + spare + 1]), *parts[at + spare + 1 :]]
        row = dict(zip(fields, parts, strict=False))
        name, state = row.pop("name"), row.pop("state")
        if not name or not state or " " in name:
            continue
        node = SinfoNode(
            name=name,
            state=parse_state(state),
            reason=_reason(row.pop("reason", None)),
            timestamp=_timestamp(row.pop("timestamp", None)),
            user=_reason(row.pop("user", None)),
            line=line.strip(),
            extra={k: v for k, v in row.items() if k},
        )
        out.setdefault(name, node)
    return list(out.values())


# --------------------------------------------------------------------------- scontrol show node


@dataclass(frozen=True, slots=True)
class ScontrolNode:
    name: str
    state: NodeState
    reason: str | None
    #: ``root`` of ``Reason=… [root@2024-01-25T15:12:23]``
    reason_user: str | None
    reason_time: str | None
    fields: dict[str, str]
    line: str


_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_]*(?:/[A-Za-z0-9_]+)?)=")
_REASON_TAIL = re.compile(r"\s*\[(?P<user>[^@\]\s]+)@(?P<time>[^\]\s]+)\]\s*$")


def parse_key_values(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces …`` -> dict. A value runs to the next `` Key=`` (keys
    start with a capital letter), so ``Reason=Kill task failed [root@…]`` and ``OS=Linux 5.15 …``
    keep their spaces."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for number, match in enumerate(matches):
        end = matches[number + 1].start() if number + 1 < len(matches) else len(line)
        out.setdefault(match.group(1), line[match.end() : end].strip())
    return out


def parse_scontrol_nodes(text: str) -> list[ScontrolNode]:
    """``scontrol show node --oneliner``: one node a line. Lines without ``NodeName=`` are skipped."""
    out: list[ScontrolNode] = []
    for line in text.splitlines():
        if "NodeName=" not in line:
            continue
        values = parse_key_values(line.strip())
        name = values.get("NodeName", "").split()[0] if values.get("NodeName") else ""
        if not name:
            continue
        reason = _reason(values.get("Reason"))
        user = when = None
        if reason:
            tail = _REASON_TAIL.search(reason)
            if tail:
                user, when = tail["user"], tail["time"]
                reason = reason[: tail.start()].strip() or None
        out.append(
            ScontrolNode(
                name=name,
                state=parse_state(values.get("State", "UNKNOWN")),
                reason=reason,
                reason_user=user,
                reason_time=when,
                fields=values,
                line=line.strip(),
            )
        )
    return out


# --------------------------------------------------------------------------- squeue


@dataclass(frozen=True, slots=True)
class SqueueJob:
    job_id: str
    state: str
    #: elapsed time as squeue prints it (``1-02:03:04``, ``12:34``)
    elapsed: str
    #: the same in seconds, None when squeue printed something else (``INVALID``)
    elapsed_s: int | None
    nodes: str
    reason: str
    line: str


_SHORT_JOB_STATES = {
    "CG": "COMPLETING",
    "CF": "CONFIGURING",
    "R": "RUNNING",
    "PD": "PENDING",
    "CD": "COMPLETED",
    "F": "FAILED",
    "CA": "CANCELLED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "S": "SUSPENDED",
    "PR": "PREEMPTED",
    "OOM": "OUT_OF_MEMORY",
}


def parse_elapsed(text: str) -> int | None:
    """squeue's ``%M``: ``[days-][hours:]minutes:seconds`` -> seconds."""
    value = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", value)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_squeue(text: str) -> list[SqueueJob]:
    """Our ``squeue`` section (``%i|%T|%M|%N|%R``), or the default table with its JOBID header."""
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].split()[0].upper() == "JOBID" and "|" not in lines[0]:
        return _parse_squeue_table(lines)
    out: list[SqueueJob] = []
    for line in lines:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or not parts[0] or " " in parts[0]:
            continue
        job_id, state, elapsed, nodes = parts[:4]
        out.append(
            SqueueJob(
                job_id=job_id,
                state=_SHORT_JOB_STATES.get(state.upper(), state.upper()),
                elapsed=elapsed,
                elapsed_s=parse_elapsed(elapsed),
                nodes=nodes,
                reason="|".join(parts[4:]),
                line=line.strip(),
            )
        )
    return out


def _parse_squeue_table(lines: list[str]) -> list[SqueueJob]:
    header = [h.upper() for h in lines[0].split()]
    out: list[SqueueJob] = []
    for line in lines[1:]:
        cells = line.split()
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        state = row.get("ST", row.get("STATE", ""))
        nodes = row.get("NODELIST(REASON)", row.get("NODELIST", ""))
        out.append(
            SqueueJob(
                job_id=row.get("JOBID", ""),
                state=_SHORT_JOB_STATES.get(state.upper(), state.upper()),
                elapsed=row.get("TIME", ""),
                elapsed_s=parse_elapsed(row.get("TIME", "")),
                nodes="" if nodes.startswith("(") else nodes,
                reason=nodes if nodes.startswith("(") else "",
                line=line.strip(),
            )
        )
    return out


def parse_jobs(text: str) -> list[SlurmJob] | None:
    """The ``jobs`` section, or None when it is not squeue's answer (an error such as
    ``slurm_load_jobs error: …``, or text in another shape): then what runs where is not known."""
    out: list[SlurmJob] = []
    for line in (raw for raw in text.splitlines() if raw.strip()):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 6 or not re.fullmatch(r"\d+(?:_\d+|_\[[^\]]*\]|\+\d+)?", parts[0]):
            return None
        job_id, state, user, count, nodelist = parts[:5]
        out.append(
            SlurmJob(
                job_id=job_id,
                state=_SHORT_JOB_STATES.get(state.upper(), state.upper()),
                user=user,
                node_count=int(count) if count.isdigit() else None,
                nodes=tuple(expand_hostlist(nodelist)) if nodelist and not nodelist.startswith("(") else (),
                name="|".join(parts[5:]),
                line=line.strip(),
            )
        )
    return out


# --------------------------------------------------------------------------- scontrol ping, services


@dataclass(frozen=True, slots=True)
class PingResult:
    #: "primary", "backup", "backup1" …
    role: str
    host: str
    #: "UP" or "DOWN" (as printed, upper case)
    status: str
    line: str


_PING = re.compile(r"Slurmctld\((?P<role>[^)]*)\)\s+at\s+(?P<host>\S+)\s+is\s+(?P<status>[A-Za-z]+)", re.I)


def parse_ping(text: str) -> list[PingResult]:
    """``Slurmctld(primary) at ip-10-1-0-10 is UP`` lines. Anything else (an error) yields nothing."""
    return [
        PingResult(m["role"].lower(), m["host"], m["status"].upper(), line.strip())
        for line in text.splitlines()
        if (m := _PING.search(line))
    ]


def controller_up(text: str) -> bool:
    """Whether any slurmctld (primary or backup) answered ``scontrol ping``."""
    return any(p.status == "UP" for p in parse_ping(text))


def parse_services(text: str) -> dict[str, str]:
    """``<unit> <state>`` lines -> {unit: state}. A unit systemctl printed nothing for gets "unknown"."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or not re.fullmatch(r"[A-Za-z0-9@._-]+", words[0]):
            continue
        out[words[0]] = words[1].lower() if len(words) > 1 else "unknown"
    return out
