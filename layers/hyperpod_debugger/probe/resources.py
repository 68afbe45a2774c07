"""On-node resources (§ I): root and data volumes, NVMe instance store, inodes, ``/dev/shm``, memory.

A path's usage counts only when that path is itself a mount point: ``df <dir>`` on a directory
that is not mounted reports the root volume's numbers, so ``/opt/sagemaker`` and
``/opt/dlami/nvme`` are judged only when ``findmnt`` (or a ``df`` row of their own) shows them
mounted. Usage comes from ``df -P`` columns, never from a wrapped ``df -h`` line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.parse.sysparse import (
    TRUNCATED_NOTE,
    BlockDevice,
    DfReport,
    DfRow,
    FreeMem,
    Meminfo,
    Mounts,
    Parsed,
    cached,
    human,
    parse_df,
    parse_df_inodes,
    parse_findmnt,
    parse_free,
    parse_lsblk,
    parse_meminfo,
    raise_timed_out,
    system_item,
    use_percent,
)

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

ROOT = "/"
SAGEMAKER = "/opt/sagemaker"
NVME = "/opt/dlami/nvme"
DATA_VOLUMES = (SAGEMAKER, NVME)
#: ``/run/shm`` is the pre-systemd name of the same tmpfs
SHM_MOUNTS = ("/dev/shm", "/run/shm")  # noqa: S108 - mount points we read in df output, not temp files

CRITICAL_PCT = 90
WARNING_PCT = 80
SHM_MIN_BYTES = 1024**3
MEM_CRITICAL_PCT = 5.0
MEM_WARNING_PCT = 10.0

ON_NODE = "on the node (SSM session, § K)"


def _note_truncated(found: ProbeItem | None, evidence: list[str]) -> list[str]:
    if found is not None and found.truncated:
        evidence.append(f"{found.command or 'output'}: {TRUNCATED_NOTE}")
    return evidence


def _df(doc: ProbeDocument) -> tuple[DfReport, ProbeItem]:
    found = system_item(doc, "df", what="disk usage (df -P -k)")
    return cached(doc, found, "df", parse_df), found


def _mounted(path: str, mounts: Mounts | None, df: DfReport | None, df_item: ProbeItem | None) -> bool | None:
    """``True`` when ``path`` is itself a mount point, ``False`` when the outputs prove it is not,
    ``None`` when they cannot tell (missing or cut short)."""
    if mounts is not None and mounts.is_mount_point(path):
        return True
    if df is not None and df.row(path) is not None:
        return True
    if mounts is not None and not mounts.partial and mounts.mounts:
        return False
    if mounts is None and df is not None and df.blocks and df_item is not None and not df_item.truncated:
        return False
    return None


def _disk_commands(path: str) -> list[SuggestedCommand]:
    return [
        read_only(["df", "-hP", path], f"Confirm the usage of {path} {ON_NODE}"),
        read_only(["sudo", "du", "-xh", "--max-depth=2", path], f"Find what fills {path} {ON_NODE}"),
    ]


# --------------------------------------------------------------------------------------------
# probe.root_volume (§ I.2)

ROOT_CAUSE_ROOT = (
    "The root volume (100 GB by default) holds the OS and is not meant to grow; caches, container "
    "images, logs or checkpoints written under / fill it. Move bulk data to /opt/sagemaker (secondary "
    "EBS) or /opt/dlami/nvme (instance store), or to FSx/S3."
)


def check_root_volume(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    report, found = _df(doc)
    row = report.row(ROOT)
    if row is None:
        raise NotApplicable("the df output has no row mounted on / (output unreadable or cut short)")
    pct = use_percent(row)
    if pct is None:
        raise NotApplicable(f"df shows no usable Use% for /: {row.line.strip()}")
    evidence = _note_truncated(found, [row.line])
    if pct > WARNING_PCT:
        critical = pct > CRITICAL_PCT
        return [
            finding(
                ctx,
                "probe.root_volume",
                Tag.FAIL,
                f"Root volume / is {pct}% full ({human(row.avail)} free)"
                + (" — critically full, writes will fail soon" if critical else " — above the 80% threshold"),
                priority=Priority.P0 if critical else Priority.P1,
                section="I.2",
                evidence=evidence,
                root_cause=ROOT_CAUSE_ROOT,
                suggested_commands=[
                    *_disk_commands(ROOT),
                    read_only(["journalctl", "--disk-usage"], f"See how much the systemd journal takes {ON_NODE}"),
                ],
                node_action="investigate",
            )
        ]
    return [
        finding(
            ctx,
            "probe.root_volume",
            Tag.PASS,
            f"Root volume / is {pct}% used ({human(row.avail)} free)",
            section="I.2",
            evidence=evidence,
        )
    ]


# --------------------------------------------------------------------------------------------
# probe.data_volumes (§ I.2)


def _lsblk_evidence(found: ProbeItem | None, disks: list[BlockDevice]) -> list[str]:
    """The verbatim ``lsblk`` line of each disk where the output has one line per device (older
    util-linux, plain table), else a short description naming the fields."""
    lines = found.stdout.splitlines() if found is not None else []
    out: list[str] = []
    for disk in disks:
        if disk.line:
            out.append(disk.line)
            continue
        name_re = re.compile(rf'(^|[\s"─-]){re.escape(disk.name)}(["\s]|$)')
        match = next((ln.strip() for ln in lines if name_re.search(ln) and (disk.model or "") in ln), None)
        out.append(match or f"lsblk: {disk.name} type={disk.type} size={human(disk.size)} model={disk.model or '?'}")
    return out


def check_data_volumes(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    df = Parsed(doc, "df", "disk usage (df -P -k)", parse_df)
    mnt = Parsed(doc, "findmnt", "mount points (findmnt)", parse_findmnt)
    blk = Parsed(doc, "lsblk", "block devices (lsblk)", parse_lsblk)
    sources = (df, mnt, blk)
    if all(s.value is None for s in sources):
        raise_timed_out(*sources)
        raise NotApplicable("; ".join(s.reason for s in sources if s.reason))
    report: DfReport | None = df.value
    mounts: Mounts | None = mnt.value
    out: list[Finding] = []
    notes: list[str] = [s.reason for s in sources if s.reason]
    mounted: dict[str, bool | None] = {}
    for path in DATA_VOLUMES:
        state = mounted[path] = _mounted(path, mounts, report, df.item)
        if state is None:
            notes.append(f"{path}: cannot tell whether it is mounted (mount list missing or cut short)")
            continue
        if not state:
            notes.append(f"{path}: not a mount point, so no usage verdict (df would show the root volume)")
            continue
        row = report.row(path) if report is not None else None
        pct = use_percent(row) if row is not None else None
        if row is None or pct is None:
            notes.append(f"{path}: mounted, but df gives no usage for it")
            continue
        if pct > WARNING_PCT:
            critical = pct > CRITICAL_PCT
            out.append(
                finding(
                    ctx,
                    "probe.data_volumes",
                    Tag.FAIL if critical else Tag.WARN,
                    f"{path} is {pct}% full ({human(row.avail)} free)",
                    priority=Priority.P1 if critical else Priority.P2,
                    section="I.2",
                    evidence=_note_truncated(df.item, [row.line]),
                    root_cause=(
                        f"{path} holds container images, logs, checkpoints or scratch data; when it fills, "
                        "jobs and the container runtime fail to write. Clean up or move data to FSx/S3."
                    ),
                    suggested_commands=_disk_commands(path),
                    node_action="investigate" if critical else None,
                )
            )
        else:
            notes.append(row.line)
    nvme, nvme_judged = _nvme_findings(ctx, blk, mounted.get(NVME), notes)
    out.extend(nvme)
    judged = nvme_judged or any(state is not None for state in mounted.values())
    if not judged and not any(f.is_problem for f in out):
        if any(f.tag is Tag.INFO for f in out):
            return out
        raise NotApplicable(
            "neither the data volumes' mount state nor the instance store could be judged: " + "; ".join(notes)
        )
    if not any(f.is_problem for f in out):
        out.append(
            finding(
                ctx,
                "probe.data_volumes",
                Tag.PASS,
                "No mounted data volume is above 80% and no instance-store problem was found",
                section="I.2",
                evidence=trim_evidence([*notes, *(n for s in sources for n in _note_truncated(s.item, []))]),
            )
        )
    return out


def _nvme_findings(
    ctx: ProbeContext, blk: Parsed, nvme_mounted: bool | None, notes: list[str]
) -> tuple[list[Finding], bool]:
    """Instance-store findings, and whether lsblk let us judge the instance store at all."""
    spec = spec_for(ctx.instance_type)
    devices: tuple[BlockDevice, ...] | None = blk.value
    out: list[Finding] = []
    if spec is None:
        out.append(
            finding(
                ctx,
                "probe.data_volumes",
                Tag.INFO,
                f"No NVMe instance-store expectation for {ctx.instance_type}; only what the node shows is reported",
                section="I.2",
            )
        )
    if devices is None:
        notes.append(f"NVMe instance store not judged: {blk.reason}")
        return out, False
    if not devices:
        # every node has at least its root disk: an lsblk output with no device line was not read
        notes.append("NVMe instance store not judged: the lsblk output holds no device line")
        return out, False
    disks = [d for d in devices if (d.type or "disk") == "disk"]
    stores = [d for d in disks if d.instance_store is True]
    unclear = [d for d in disks if d.instance_store is None]
    if spec is not None and spec.nvme and not stores:
        if unclear:
            notes.append(
                "NVMe instance store: lsblk gives no model for "
                + ", ".join(d.name for d in unclear)
                + ", so instance store and EBS cannot be told apart"
            )
        else:
            out.append(_instance_store_missing(ctx, blk.item, disks))
        return out, not unclear
    if stores and nvme_mounted is False:
        out.append(_instance_store_unmounted(ctx, blk.item, stores))
    elif stores:
        notes.append(f"NVMe instance store: {len(stores)} disk(s)")
    # without an expectation and without instance-store disks there is nothing to say either way
    return out, bool(stores) or (spec is not None and not unclear)


def _instance_store_missing(ctx: ProbeContext, lsblk: ProbeItem | None, disks: list[BlockDevice]) -> Finding:
    return finding(
        ctx,
        "probe.data_volumes",
        Tag.WARN,
        f"{ctx.instance_type} ships NVMe instance storage, but lsblk shows no instance-store disk",
        priority=Priority.P1,
        section="I.2",
        evidence=trim_evidence(_note_truncated(lsblk, _lsblk_evidence(lsblk, disks))),
        root_cause=(
            "The instance-store disks are missing from the OS (device not attached or failed); "
            "scratch data falls back to the root volume."
        ),
        suggested_commands=[
            read_only(["lsblk", "-o", "NAME,TYPE,SIZE,MODEL,MOUNTPOINT"], f"List the disks {ON_NODE}"),
            read_only(["sudo", "nvme", "list"], f"List NVMe controllers and models {ON_NODE}"),
        ],
        node_action="investigate",
    )


def _instance_store_unmounted(ctx: ProbeContext, lsblk: ProbeItem | None, stores: list[BlockDevice]) -> Finding:
    return finding(
        ctx,
        "probe.data_volumes",
        Tag.WARN,
        f"{len(stores)} NVMe instance-store disk(s) present but {NVME} is not mounted",
        priority=Priority.P2,
        section="I.2",
        evidence=trim_evidence(_note_truncated(lsblk, _lsblk_evidence(lsblk, stores))),
        root_cause=(
            f"The lifecycle scripts normally assemble the instance store and mount it at {NVME}; "
            "without it, scratch and cache data written there lands on the 100 GB root volume."
        ),
        suggested_commands=[
            read_only(["findmnt", NVME], f"Confirm {NVME} is not mounted {ON_NODE}"),
            read_only(["lsblk", "-o", "NAME,TYPE,SIZE,MODEL,MOUNTPOINT"], f"See the instance-store disks {ON_NODE}"),
        ],
        node_action="investigate",
    )


# --------------------------------------------------------------------------------------------
# probe.inodes (§ I.4)


def check_inodes(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    found = system_item(doc, "df_inodes", what="inode usage (df -P -i)")
    report = cached(doc, found, "df_inodes", parse_df_inodes)
    rows: list[tuple[DfRow, int]] = []
    unjudged: list[str] = []
    for path in (ROOT, *DATA_VOLUMES):
        row = report.row(path, "inodes")
        if row is None:
            continue
        pct = use_percent(row)
        if pct is None:
            unjudged.append(row.line)
        else:
            rows.append((row, pct))
    if not rows:
        raise NotApplicable("df -i shows no inode usage for /, /opt/sagemaker or /opt/dlami/nvme")
    out: list[Finding] = []
    for row, pct in rows:
        if pct <= WARNING_PCT:
            continue
        critical = pct > CRITICAL_PCT
        out.append(
            finding(
                ctx,
                "probe.inodes",
                Tag.FAIL if critical else Tag.WARN,
                f"{row.mount} has used {pct}% of its inodes",
                priority=Priority.P1 if critical else Priority.P2,
                section="I.4",
                evidence=_note_truncated(found, [row.line]),
                root_cause=(
                    "Many small files (package and model caches, container layers, logs) use up the inode table; "
                    "new files fail with 'No space left on device' even when df shows free space."
                ),
                suggested_commands=[
                    read_only(["df", "-iP", row.mount], f"Confirm inode usage of {row.mount} {ON_NODE}"),
                    read_only(
                        ["sudo", "du", "--inodes", "-x", "--max-depth=2", row.mount],
                        f"Find the directories holding the most files {ON_NODE}",
                    ),
                ],
                node_action="investigate" if critical else None,
            )
        )
    if not out:
        out.append(
            finding(
                ctx,
                "probe.inodes",
                Tag.PASS,
                "Inode usage is at or below 80% on " + ", ".join(f"{row.mount} ({pct}%)" for row, pct in rows),
                section="I.4",
                evidence=_note_truncated(found, [row.line for row, _ in rows] + unjudged),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# probe.shm (§ I.1)


def check_shm(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    report, found = _df(doc)
    row = next((r for r in (report.row(m) for m in SHM_MOUNTS) if r is not None), None)
    if row is None:
        raise NotApplicable("the df output lists no /dev/shm mount")
    pct = use_percent(row)
    spec = spec_for(ctx.instance_type)
    evidence = _note_truncated(found, [row.line])
    out: list[Finding] = []
    commands = [read_only(["df", "-hP", row.mount], f"Check shared memory {ON_NODE}")]
    if pct is not None and pct > CRITICAL_PCT:
        out.append(
            finding(
                ctx,
                "probe.shm",
                Tag.WARN,
                f"{row.mount} is {pct}% full ({human(row.avail)} free): NCCL and DataLoader workers may fail",
                priority=Priority.P1,
                section="I.1",
                evidence=evidence,
                root_cause=(
                    "NCCL's shared-memory transport and PyTorch DataLoader workers exchange data through "
                    f"{row.mount}; when it is full they die with 'Bus error'. Leftover files of crashed jobs "
                    "often fill it."
                ),
                suggested_commands=[
                    *commands,
                    read_only(["sudo", "du", "-sh", row.mount], f"See what holds shared memory {ON_NODE}"),
                ],
            )
        )
    size_note = ""
    if spec is None:
        size_note = f"; size not judged (no expectation for {ctx.instance_type})"
    elif spec.accelerated and row.total is not None and row.total < SHM_MIN_BYTES:
        out.append(
            finding(
                ctx,
                "probe.shm",
                Tag.WARN,
                f"{row.mount} is only {human(row.total)} on {ctx.instance_type}; accelerated jobs need at least 1 GiB",
                priority=Priority.P2,
                section="I.1",
                evidence=evidence,
                root_cause=(
                    "DataLoader workers and NCCL need shared memory; a small /dev/shm makes them fail with "
                    "'Bus error'. Raise the tmpfs size (or the container's --shm-size / emptyDir medium Memory)."
                ),
                suggested_commands=commands,
            )
        )
    if not out:
        used = f"{pct}% used" if pct is not None else "usage not shown"
        out.append(
            finding(
                ctx,
                "probe.shm",
                Tag.PASS,
                f"{row.mount} is {used}, size {human(row.total)}{size_note}",
                section="I.1",
                evidence=evidence,
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# probe.memory (§ I.3, huge pages § I.1)

_MEMINFO_EVIDENCE = ("MemTotal", "MemAvailable", "HugePages_Total", "HugePages_Free", "Hugepagesize")


@functools.lru_cache(maxsize=16)
def _free_parser(command: str | None) -> Callable[[str], FreeMem]:
    """``parse_free`` told the item's command (``free -b`` from the probe; a paste's own command line is
    read from its text): one function per command, so the document's parse cache keeps working."""
    return functools.partial(parse_free, command=command)


def check_memory(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    meminfo = Parsed(doc, "meminfo", "memory (/proc/meminfo)", parse_meminfo)
    given = doc.item("free")
    free = Parsed(doc, "free", "memory (free)", _free_parser(given.command if given is not None else None))
    info: Meminfo | None = meminfo.value
    total = available = None
    evidence: list[str] = []
    size: Callable[[int | None], str] = human
    unit_note = ""
    if info is not None:
        total, available = info.get("MemTotal"), info.get("MemAvailable")
        evidence = [info.lines[k] for k in _MEMINFO_EVIDENCE if k in info.lines]
    if (total is None or available is None) and free.value is not None and free.value.available is not None:
        fm: FreeMem = free.value
        total, available, size = fm.total, fm.available, fm.size
        unit_note = "" if fm.unit else ", in a unit the paste does not show"
        if fm.mem_line:
            evidence.append(fm.mem_line)
        evidence.append(f"(free: {fm.unit})" if fm.unit else "(free: no command line or unit pasted; ratio only)")
    hugepages = _hugepage_findings(ctx, info, meminfo.item)
    if not total or available is None:
        if hugepages:
            return hugepages
        if meminfo.value is None and free.value is None:
            raise_timed_out(meminfo, free)
        reasons = "; ".join(r for r in (meminfo.reason, free.reason) if r)
        raise NotApplicable(
            "neither /proc/meminfo nor free shows total and available memory" + (f" ({reasons})" if reasons else "")
        )
    evidence = _note_truncated(meminfo.item if info is not None else free.item, evidence)
    share = 100.0 * available / total
    out: list[Finding] = []
    if share < MEM_WARNING_PCT:
        critical = share < MEM_CRITICAL_PCT
        out.append(
            finding(
                ctx,
                "probe.memory",
                Tag.FAIL if critical else Tag.WARN,
                f"Only {share:.1f}% of memory is available ({size(available)} of {size(total)}{unit_note})",
                priority=Priority.P1 if critical else Priority.P2,
                section="I.3",
                evidence=evidence,
                root_cause=(
                    "Processes on the node (usually the training job or its DataLoader workers) hold almost all "
                    "memory; the kernel's OOM killer will end processes next."
                ),
                suggested_commands=[
                    read_only(["free", "-h"], f"Confirm memory use {ON_NODE}"),
                    read_only(["ps", "aux", "--sort=-rss"], f"Find the processes using the most memory {ON_NODE}"),
                ],
                node_action="investigate" if critical else None,
            )
        )
    out.extend(hugepages)
    if not out:
        out.append(
            finding(
                ctx,
                "probe.memory",
                Tag.PASS,
                f"{share:.0f}% of memory is available ({size(available)} of {size(total)}{unit_note})",
                section="I.3",
                evidence=evidence,
            )
        )
    return out


def _hugepage_findings(ctx: ProbeContext, info: Meminfo | None, found: ProbeItem | None) -> list[Finding]:
    if info is None:
        return []
    total, free = info.get("HugePages_Total"), info.get("HugePages_Free")
    if not total or free is None or free > 0:
        return []
    return [
        finding(
            ctx,
            "probe.memory",
            Tag.WARN,
            f"All {total} reserved huge pages are in use (HugePages_Free 0)",
            priority=Priority.P2,
            section="I.1",
            evidence=_note_truncated(found, [info.lines[k] for k in _MEMINFO_EVIDENCE[2:] if k in info.lines]),
            root_cause=(
                "With FI_EFA_USE_HUGE_PAGE=1 the EFA provider backs its buffers with huge pages; once none are "
                "free, memory registration and os.fork() in DataLoader workers fail with 'Cannot allocate memory'. "
                "Set FI_EFA_USE_HUGE_PAGE=0 in the job or reserve more huge pages."
            ),
            suggested_commands=[read_only(["grep", "-i", "huge", "/proc/meminfo"], f"Check huge pages {ON_NODE}")],
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check("probe.root_volume", "I.2", "Root volume space", check_root_volume),
    Check("probe.data_volumes", "I.2", "Data volumes and NVMe instance store", check_data_volumes),
    Check("probe.inodes", "I.4", "Inode usage", check_inodes),
    Check("probe.shm", "I.1", "Shared memory (/dev/shm)", check_shm),
    Check("probe.memory", "I.3", "Available memory and huge pages", check_memory),
)
