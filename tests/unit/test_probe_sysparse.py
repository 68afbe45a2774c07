"""Parsers of the operating-system probe items: df, findmnt, free, /proc/meminfo, lsblk, chronyc,
timedatectl and systemctl — on real published outputs and on our recordings of the probe's commands."""

from __future__ import annotations

import pathlib

import pytest

from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse.sysparse import (
    PROBE_UNITS,
    cached,
    parse_chronyc_tracking,
    parse_df,
    parse_df_inodes,
    parse_findmnt,
    parse_free,
    parse_is_active,
    parse_lsblk,
    parse_meminfo,
    parse_size,
    parse_timedatectl,
    system_item,
    use_percent,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe"
KIB = 1024
GIB = 1024**3


def fixture(area: str, name: str) -> str:
    return (FIXTURES / area / name).read_text(encoding="utf-8", errors="replace")


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("0", 0),
        ("0B", 0),
        ("4.0K", 4 * KIB),
        ("595Mi", 595 * 1024**2),
        ("7.6Gi", int(7.6 * GIB)),
        ("467.3M", int(467.3 * 1024**2)),
        ("1.5T", int(1.5 * 1024**4)),
        ("1,5G", int(1.5 * GIB)),
        ("-", None),
        ("N/A", None),
    ],
)
def test_given_a_size_token_when_parsed_then_human_units_become_bytes_and_non_sizes_none(token, expected):
    # GIVEN a size as df -h / free -h print it  WHEN parsed  THEN bytes in powers of 1024, or None
    assert parse_size(token) == expected


# --------------------------------------------------------------------------- df


def test_given_df_P_k_when_parsed_then_every_mount_has_bytes_and_its_capacity_column():
    # GIVEN our recording of `df -P -k` on a p5 with both data volumes
    report = parse_df(fixture("system", "rec-df-P-k-p5-healthy.txt"))
    # WHEN the root and the instance-store rows are read
    root, nvme = report.row("/"), report.row("/opt/dlami/nvme")
    # THEN the 1024-blocks are bytes and Capacity is the use percentage
    assert root is not None and nvme is not None
    assert root.use_pct == 38 and root.total == 101430960 * KIB and root.avail == 63001700 * KIB
    assert nvme.filesystem == "/dev/md0" and nvme.use_pct == 4
    assert root.line.startswith("/dev/root") and not report.inodes


def test_given_plain_df_with_1k_blocks_when_parsed_then_the_full_root_and_old_run_shm_are_read():
    # GIVEN the real EC2 `df` with a 100% root and the pre-systemd /run/shm
    report = parse_df(fixture("system", "df-1k-ec2-xvda1-100pct-296k-avail.txt"))
    # WHEN parsed  THEN the root row is 100% with 296 KiB free and /run/shm is a row of its own
    root = report.row("/")
    assert root is not None and root.use_pct == 100 and root.avail == 296 * KIB
    assert report.row("/run/shm") is not None
    assert len(report.blocks) == 8


def test_given_a_transcript_of_df_h_then_df_ih_when_parsed_then_blocks_and_inodes_are_told_apart():
    # GIVEN a pasted transcript: prompt, `df -h`, blank line, prompt, `df -ih` (human inode counts)
    report = parse_df(fixture("system", "df-h-and-df-ih-nvme-root-76pct-inodes-79pct.txt"))
    # WHEN parsed  THEN the blocks table and the inodes table are both read, prompts skipped
    blocks, inodes = report.row("/"), report.row("/", "inodes")
    assert blocks is not None and blocks.use_pct == 76 and blocks.total == int(1.5 * 1024**4)
    assert inodes is not None and inodes.use_pct == 79 and inodes.total == 96 * 1024**2
    assert len(report.blocks) == 7 and len(report.inodes) == 7


def test_given_busybox_df_h_when_parsed_then_decimal_sizes_and_available_header_are_read():
    # GIVEN BusyBox `df -h` (`Available` header, `467.3M`)
    row = parse_df(fixture("system", "df-h-busybox-overlay-75pct.txt")).row("/")
    # WHEN parsed  THEN the overlay root is 75% with 467.3 MiB available
    assert row is not None and row.use_pct == 75 and row.avail == int(467.3 * 1024**2)


def test_given_df_with_author_elisions_when_parsed_then_the_dots_lines_are_skipped():
    # GIVEN `df -h` with `...` lines the author left out
    report = parse_df(fixture("system", "df-h-eks-separate-ebs-volumes-elided.txt"))
    # WHEN parsed  THEN only the four real rows remain
    assert [r.mount for r in report.blocks] == ["/", "/var/log", "/var/lib/docker", "/var/lib/containerd"]


def test_given_df_h_with_trailing_spaces_when_parsed_then_mount_points_are_exact():
    # GIVEN `df -h` whose every line ends in spaces
    report = parse_df(fixture("system", "df-h-ubuntu-health-report-trailing-spaces.txt"))
    # WHEN parsed  THEN mounts have no trailing space and /dev/shm reads 984 MiB
    shm = report.row("/dev/shm")
    assert shm is not None and shm.total == 984 * 1024**2
    assert report.row("/") is not None and report.row("/ ") is None


def test_given_df_i_with_a_dash_iuse_when_parsed_then_the_percentage_is_none_not_zero():
    # GIVEN `df -i` where vfat /boot/efi prints `0 0 0 -`
    report = parse_df_inodes(fixture("system", "df-i-ubuntu-health-report-dash-iuse.txt"))
    efi = report.row("/boot/efi", "inodes")
    # WHEN its use is asked  THEN it is unknown (None), not 0%
    assert efi is not None and efi.use_pct is None and use_percent(efi) is None
    assert report.row("/", "inodes").use_pct == 1


def test_given_a_dash_use_column_with_numbers_when_use_percent_then_df_formula_rounds_up():
    # GIVEN a row whose Use% is `-` but whose used and available counts are known
    row = parse_df("Filesystem 1K-blocks Used Available Use% Mounted on\nfs 100 10 89 - /x\n").row("/x")
    # WHEN use_percent  THEN used / (used + avail) rounded up, like df
    assert row is not None and use_percent(row) == 11


def test_given_a_wrapped_device_name_when_parsed_then_the_two_lines_form_one_row():
    # GIVEN plain `df` that wrapped a long LVM device name onto its own line
    text = (
        "Filesystem                          1K-blocks     Used Available Use% Mounted on\n"
        "/dev/mapper/vg_data-lv_sagemaker_scratch_volume\n"
        "                                    524288000 99614720 424673280  20% /opt/sagemaker\n"
    )
    # WHEN parsed  THEN one row with the device name and the numbers
    row = parse_df(text).row("/opt/sagemaker")
    assert row is not None and row.filesystem == "/dev/mapper/vg_data-lv_sagemaker_scratch_volume" and row.use_pct == 20


def test_given_df_without_a_header_when_parsed_then_digits_are_kib_and_suffixes_human():
    # GIVEN header-less rows (the header was cut)  WHEN parsed
    report = parse_df("/dev/root 1000 800 200 80% /\ntmpfs 1.0G 0 1.0G 0% /dev/shm\n")
    # THEN plain digits are KiB and suffixed values human sizes
    assert report.row("/").total == 1000 * KIB
    assert report.row("/dev/shm").total == GIB


def test_given_garbage_and_a_truncation_marker_when_parsed_then_nothing_raises_and_no_rows():
    # GIVEN text that is not df output  WHEN parsed  THEN an empty report, no exception
    report = parse_df("df: /mnt/x: Stale file handle\n\x00\x01 garbage 12%\n[hyperpod-debugger: output truncated]\n")
    assert report.blocks == () and report.inodes == ()


# --------------------------------------------------------------------------- findmnt


def test_given_findmnt_json_tree_when_parsed_then_nested_children_are_mount_points():
    # GIVEN `findmnt -J -o TARGET,SOURCE,FSTYPE,SIZE` with nested children
    mounts = parse_findmnt(fixture("system", "rec-findmnt-J-p5-data-volumes.json"))
    # WHEN asked  THEN nested targets are mount points, their parents' subdirectories are not
    assert mounts.is_mount_point("/opt/dlami/nvme") and mounts.is_mount_point("/dev/shm")
    assert not mounts.is_mount_point("/opt") and not mounts.partial
    assert mounts.get("/opt/sagemaker").fstype == "xfs"


def test_given_findmnt_plain_table_with_tree_glyphs_when_parsed_then_targets_are_clean():
    # GIVEN the plain `findmnt` table with ├─ └─ │ glyphs
    mounts = parse_findmnt(fixture("system", "rec-findmnt-table-tree.txt"))
    # WHEN parsed  THEN each target loses its glyphs and keeps its source
    assert [m.target for m in mounts.mounts][:3] == ["/", "/dev", "/dev/shm"]
    assert mounts.get("/opt/dlami/nvme").source == "/dev/md0"


def test_given_findmnt_ascii_tree_and_escaped_space_when_parsed_then_target_is_decoded():
    # GIVEN a non-UTF-8 locale tree (|- `-) and a target with \x20 for a space
    text = "TARGET SOURCE FSTYPE SIZE\n/ /dev/root ext4 97G\n|-/mnt/my\\x20data /dev/xvdf ext4 10G\n`-/opt/sagemaker /dev/nvme1n1 xfs 500G\n"
    mounts = parse_findmnt(text)
    # WHEN parsed  THEN both targets are exact paths
    assert mounts.is_mount_point("/mnt/my data") and mounts.is_mount_point("/opt/sagemaker")


def test_given_cut_findmnt_json_when_parsed_then_named_targets_remain_and_result_is_partial():
    # GIVEN findmnt JSON cut in the middle (size limit)
    text = fixture("system", "rec-findmnt-J-p5-data-volumes.json")[:700]
    # WHEN parsed  THEN the targets before the cut are known and the result says it is partial
    mounts = parse_findmnt(text)
    assert mounts.partial and mounts.is_mount_point("/") and not mounts.is_mount_point("/opt/dlami/nvme")


# --------------------------------------------------------------------------- free and meminfo


def test_given_free_b_when_parsed_then_total_and_available_are_bytes():
    # GIVEN our recording of `free -b`  WHEN parsed  THEN exact byte counts
    mem = parse_free(fixture("system", "rec-free-b-p5.txt"))
    assert mem.total == 2164509188096 and mem.available == 1993938276352 and mem.swap_total == 0


def test_given_procps4_free_h_with_iec_units_when_parsed_then_gi_and_mi_are_read():
    # GIVEN procps 4 `free -h` (Gi, Mi, 0B)  WHEN parsed  THEN sizes in bytes
    mem = parse_free(fixture("system", "free-h-wsl-procps4-healthy.txt"))
    assert mem.total == int(7.6 * GIB) and mem.available == int(7.0 * GIB) and mem.swap_free == int(2.0 * GIB)


def test_given_old_free_without_available_when_parsed_then_available_is_estimated_without_shared():
    # GIVEN procps 3.3.9 `free -b` (buffers/cached columns, -/+ line)
    text = (
        "             total       used       free     shared    buffers     cached\n"
        "Mem:    8373022720 7990636544  382386176   1032192  140623872 3101888512\n"
        "-/+ buffers/cache: 4748124160 3624898560\n"
        "Swap:            0          0          0\n"
    )
    # WHEN parsed  THEN total is read and available is estimated as free + buffers + cached - shared
    # (procps's own -/+ line would count /dev/shm, which cannot be reclaimed, as free)
    mem = parse_free(text)
    assert mem.total == 8373022720 and mem.free == 382386176
    assert mem.available == 382386176 + 140623872 + 3101888512 - 1032192
    assert "estimated" in (mem.mem_line or "")


def test_given_meminfo_when_parsed_then_kb_fields_are_bytes_and_hugepages_counts():
    # GIVEN /proc/meminfo  WHEN parsed  THEN kB is ×1024, HugePages_* are plain counts, lines kept
    info = parse_meminfo(fixture("system", "rec-meminfo-p5-3pct-available-hugepages-exhausted.txt"))
    assert info.get("MemTotal") == 2113778504 * KIB
    assert info.get("HugePages_Total") == 1024 and info.get("HugePages_Free") == 0
    assert info.lines["MemAvailable"] == "MemAvailable:    63413355 kB"
    assert parse_meminfo("garbage\nMemTotal: lots\n").values == {}


# --------------------------------------------------------------------------- lsblk


def test_given_lsblk_json_on_p5_when_parsed_then_instance_store_and_ebs_are_told_apart():
    # GIVEN `lsblk -J -b` with EBS (NVMe too, on Nitro) and two instance-store disks
    devices = parse_lsblk(fixture("system", "rec-lsblk-J-p5-instance-store.json"))
    # WHEN classified  THEN the model decides, not the nvme name
    kinds = {d.name: d.instance_store for d in devices}
    assert kinds == {"nvme0n1": False, "nvme1n1": False, "nvme2n1": True, "nvme3n1": True}
    assert devices[2].size == 3840755982336
    assert [c.mountpoint for c in devices[2].walk()] == [None, "/opt/dlami/nvme"]


def test_given_old_lsblk_json_with_string_sizes_and_padded_models_when_parsed_then_values_are_clean():
    # GIVEN util-linux < 2.33 JSON: sizes as strings, models padded with spaces
    devices = parse_lsblk(fixture("system", "rec-lsblk-J-old-util-linux-ebs-only.json"))
    # WHEN parsed  THEN sizes are ints, models stripped, no instance store
    assert devices[0].size == 107374182400 and devices[0].model == "Amazon Elastic Block Store"
    assert not any(d.instance_store for d in devices)


def test_given_lsblk_plain_table_when_parsed_then_model_with_spaces_and_mountpoint_are_split():
    # GIVEN the plain table in the probe's column order
    text = (
        "NAME        TYPE          SIZE MODEL                            MOUNTPOINT\n"
        "nvme0n1     disk  107374182400 Amazon Elastic Block Store\n"
        "└─nvme0n1p1 part  107256741376                                  /\n"
        "nvme2n1     disk 3840755982336 Amazon EC2 NVMe Instance Storage\n"
    )
    # WHEN parsed  THEN the model keeps its spaces and the child's mountpoint is read
    devices = parse_lsblk(text)
    assert devices[0].model == "Amazon Elastic Block Store" and devices[2].instance_store is True
    assert devices[1].name == "nvme0n1p1" and devices[1].mountpoint == "/"


def test_given_broken_lsblk_json_when_parsed_then_no_devices_and_no_exception():
    # GIVEN JSON cut short  WHEN parsed  THEN nothing, quietly
    assert parse_lsblk('{"blockdevices": [{"name":"nvme0n1", "type":"di') == ()


# --------------------------------------------------------------------------- chronyc tracking


def test_given_synced_chrony_tracking_when_parsed_then_offset_sign_follows_fast_or_slow():
    # GIVEN `chronyc tracking` synced to the Amazon Time Sync Service, and one 1.5 s slow
    synced = parse_chronyc_tracking(fixture("time", "rec-chronyc-tracking-aws-synced.txt"))
    slow = parse_chronyc_tracking(fixture("time", "rec-chronyc-tracking-1.5s-slow.txt"))
    # WHEN parsed  THEN fast is positive, slow negative, the source is named
    assert synced.offset_s == pytest.approx(0.000012345) and synced.synchronised is True
    assert synced.ref_id == "A9FEA97B" and synced.ref_name == "169.254.169.123" and synced.stratum == 4
    assert slow.offset_s == pytest.approx(-1.502318841)


def test_given_unsynchronised_chrony_with_zero_refid_when_parsed_then_no_source_and_not_synchronised():
    # GIVEN the real all-zero tracking block
    t = parse_chronyc_tracking(fixture("time", "chronyc-tracking-not-synchronised-refid-zero.txt"))
    # WHEN parsed  THEN leap says not synchronised and there is no source
    assert t.synchronised is False and t.no_source and t.stratum == 0
    assert t.lines["leap status"] == "Leap status     : Not synchronised"


def test_given_chronyc_without_daemon_or_wrong_subcommand_when_parsed_then_nothing_is_readable():
    # GIVEN `506 Cannot talk to daemon`, and `chronyc activity` output fed by mistake
    down = parse_chronyc_tracking(fixture("time", "rec-chronyc-506-daemon-not-running.txt"))
    activity = parse_chronyc_tracking(fixture("time", "chronyc-activity-unknown-address.txt"))
    # WHEN parsed  THEN the daemon is flagged unreachable and neither gives a verdict
    assert down.daemon_unreachable and not down.readable
    assert not activity.readable and not activity.daemon_unreachable


# --------------------------------------------------------------------------- timedatectl


@pytest.mark.parametrize(
    ("name", "synced", "service"),
    [
        ("rec-timedatectl-show-synced.txt", True, True),
        ("rec-timedatectl-show-ntp-off-not-synced.txt", False, False),
        ("rec-timedatectl-status-synced.txt", True, True),
        ("timedatectl-fragment-ntp-active-not-synced.txt", False, True),
    ],
)
def test_given_timedatectl_show_or_status_when_parsed_then_sync_and_service_are_read(name, synced, service):
    # GIVEN `timedatectl show` (key=value) or `status` (right- or left-aligned "Key: value")
    td = parse_timedatectl(fixture("time", name))
    # WHEN parsed  THEN synchronisation and the NTP service state are read
    assert td.synchronized is synced and td.ntp_service is service


def test_given_old_timedatectl_status_wording_when_parsed_then_ntp_synchronized_is_read():
    # GIVEN systemd < 239 wording  WHEN parsed  THEN the old keys count too
    td = parse_timedatectl("  Network time on: yes\n NTP synchronized: no\n")
    assert td.synchronized is False and td.ntp_service is True


# --------------------------------------------------------------------------- systemctl


def test_given_is_active_lines_when_parsed_then_each_unit_has_its_state():
    # GIVEN the probe's `<unit> <state>` lines
    units = parse_is_active(fixture("services", "rec-is-active-slurm-compute-slurmd-failed.txt"))
    # WHEN parsed  THEN every probed unit is there with its word
    assert set(units) == set(PROBE_UNITS)
    assert units["slurmd"].state == "failed" and units["munge"].state == "active"
    assert units["slurmd"].lines == ("slurmd failed",)


def test_given_bare_states_in_probe_order_when_parsed_then_they_map_to_the_probe_units():
    # GIVEN plain `systemctl is-active u1 … u9` output (states only)
    units = parse_is_active(fixture("services", "rec-is-active-bare-states.txt"))
    # WHEN parsed  THEN states are assigned in the contract's unit order
    assert units["kubelet"].state == "failed" and units["containerd"].state == "active"


def test_given_suffixes_and_separators_when_parsed_then_units_are_normalised():
    # GIVEN `.service` suffixes, `:` and `=` separators and an unknown word
    units = parse_is_active("kubelet.service active\ncontainerd: inactive\nmunge=failed\nslurmd sleeping\n")
    # WHEN parsed  THEN names lose the suffix and the unknown word is dropped
    assert {u: s.state for u, s in units.items()} == {"kubelet": "active", "containerd": "inactive", "munge": "failed"}


@pytest.mark.parametrize(
    ("name", "unit", "state", "sub"),
    [
        ("amazon-ssm-agent-active-running-ubuntu-deb.txt", "amazon-ssm-agent", "active", "running"),
        ("amazon-ssm-agent-active-running-ko-mojibake-date.txt", "amazon-ssm-agent", "active", "running"),
        ("amazon-ssm-agent-unit-not-found.txt", "amazon-ssm-agent", "not-found", "dead"),
        ("kubelet-eks-activating-auto-restart-exit255.txt", "kubelet", "activating", "auto-restart"),
        ("slurm-lsb-failed-start-limit.txt", "slurm", "failed", "Result: start-limit"),
        ("slurmd-inactive-condition-slurm-conf-missing.txt", "slurmd", "inactive", "dead"),
    ],
)
def test_given_real_systemctl_status_blocks_when_parsed_then_unit_state_and_substate_are_read(name, unit, state, sub):
    # GIVEN a real `systemctl status` block (bullets ●, *, none; any indentation; mojibake)
    units = parse_is_active(fixture("services", name))
    # WHEN parsed  THEN the unit's state comes from `Active:`, not-found from `Loaded:`
    assert list(units) == [unit]
    assert units[unit].state == state and units[unit].sub == sub
    assert f"{unit}.service" in units[unit].lines[0] and units[unit].lines[-1].startswith("Active:")


# --------------------------------------------------------------------------- item access


def test_given_a_nonzero_exit_with_output_when_system_item_then_the_output_is_still_read():
    # GIVEN systemctl is-active exiting 3 with a "not found" stderr (a unit is missing), and a 127 item
    doc = ProbeDocument(
        hostname="h",
        collected_at=None,
        uptime_s=None,
        items={
            "systemctl_is_active": ProbeItem(
                "systemctl is-active", 3, "kubelet inactive\n", "Unit kubelet.service not found."
            ),
            "lsblk": ProbeItem("lsblk -J", 127, "", "lsblk: command not found"),
        },
    )
    # WHEN fetched  THEN the first is usable and the second skips with the reason
    assert system_item(doc, "systemctl_is_active", what="services").stdout == "kubelet inactive\n"
    with pytest.raises(NotApplicable, match="not installed"):
        system_item(doc, "lsblk", what="disks")


def test_given_the_same_item_twice_when_cached_then_it_is_parsed_once():
    # GIVEN a document and a counting parser
    calls: list[str] = []

    def parse_counting(text: str) -> int:
        calls.append(text)
        return len(text)

    found = ProbeItem("df -P -k", 0, "x")
    doc = ProbeDocument(hostname="h", collected_at=None, uptime_s=None, items={"df": found})
    # WHEN two checks ask for it  THEN one parse
    assert cached(doc, found, "df", parse_counting) == cached(doc, found, "df", parse_counting) == 1
    assert len(calls) == 1
