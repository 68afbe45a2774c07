"""On-node resource evaluators: root volume, data volumes and NVMe instance store, inodes, /dev/shm, memory."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe import resources
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.resources import (
    check_data_volumes,
    check_inodes,
    check_memory,
    check_root_volume,
    check_shm,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "system"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
COMMANDS = {
    "df": "df -P -k",
    "df_inodes": "df -P -i",
    "findmnt": "findmnt -J -o TARGET,SOURCE,FSTYPE,SIZE",
    "free": "free -b",
    "meminfo": "cat /proc/meminfo",
    "lsblk": "lsblk -J -b -o NAME,TYPE,SIZE,MODEL,MOUNTPOINT",
}


def fx(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(**items: str | ProbeItem) -> ProbeDocument:
    return ProbeDocument(
        hostname="ip-10-1-2-3",
        collected_at=NOW,
        uptime_s=86400.0,
        items={
            k: v if isinstance(v, ProbeItem) else ProbeItem(command=COMMANDS.get(k, k), exit_code=0, stdout=v)
            for k, v in items.items()
        },
    )


def ctx(instance_type: str = "ml.p5.48xlarge", **kw) -> ProbeContext:
    return ProbeContext(instance_type=instance_type, now=NOW, instance_id="i-0123456789abcdef0", **kw)


def df_text(rows: list[tuple[str, int, int, str]]) -> str:
    """`df -P -k` with (mount, used KiB, available KiB, pct) rows."""
    lines = ["Filesystem     1024-blocks      Used Available Capacity Mounted on"]
    for mount, used, avail, pct in rows:
        lines.append(f"/dev/x{len(lines)}  {used + avail}  {used}  {avail}  {pct} {mount}")
    return "\n".join(lines) + "\n"


def problems(findings):
    return [f for f in findings if f.is_problem]


# --------------------------------------------------------------------------- probe.root_volume


def test_given_a_healthy_p5_df_when_root_volume_is_checked_then_pass_with_the_df_line():
    # GIVEN our `df -P -k` recording at 38%
    findings = check_root_volume(doc(df=fx("rec-df-P-k-p5-healthy.txt")), ctx())
    # WHEN judged  THEN one PASS, no priority, the verbatim root line as evidence
    assert [f.tag for f in findings] == [Tag.PASS]
    assert findings[0].priority is None and findings[0].evidence[0].startswith("/dev/root")
    assert "38%" in findings[0].message


def test_given_root_at_93_percent_when_checked_then_fail_p0_investigate_in_i2():
    # GIVEN a root volume at 93%
    findings = check_root_volume(doc(df=fx("rec-df-P-k-p5-root-93pct-no-data-mounts.txt")), ctx())
    # WHEN judged  THEN FAIL P0 in § I.2 with node_action investigate and read-only commands
    (f,) = findings
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P0, "I.2", "investigate")
    assert "93%" in f.message and "/opt/sagemaker" in f.root_cause
    assert all(not c.mutates for c in f.suggested_commands)


def test_given_the_real_100_percent_ec2_root_when_checked_then_fail_p0():
    # GIVEN the real `df` of an EC2 instance whose root is 100% full (296 KiB free)
    (f,) = check_root_volume(doc(df=fx("df-1k-ec2-xvda1-100pct-296k-avail.txt")), ctx())
    # WHEN judged  THEN critically full
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P0)
    assert f.evidence == ["/dev/xvda1      16369496 15598924       296 100% /"]


@pytest.mark.parametrize(
    ("pct", "tag", "priority"),
    [(80, Tag.PASS, None), (81, Tag.FAIL, Priority.P1), (90, Tag.FAIL, Priority.P1), (91, Tag.FAIL, Priority.P0)],
)
def test_given_root_around_the_thresholds_when_checked_then_strictly_greater_than_counts(pct, tag, priority):
    # GIVEN a root at exactly/just over 80% and 90%
    text = df_text([("/", pct, 100 - pct, f"{pct}%")])
    # WHEN judged  THEN > 80 is P1, > 90 is P0, 80 itself passes
    (f,) = check_root_volume(doc(df=text), ctx())
    assert (f.tag, f.priority) == (tag, priority)


def test_given_real_df_h_transcript_at_76_percent_when_checked_then_pass():
    # GIVEN the real `df -h` + `df -ih` transcript (root 76%)
    (f,) = check_root_volume(doc(df=fx("df-h-and-df-ih-nvme-root-76pct-inodes-79pct.txt")), ctx())
    # WHEN judged  THEN below the 80% threshold
    assert f.tag is Tag.PASS


def test_given_no_df_item_or_missing_tool_when_checked_then_skipped_and_timeout_is_unknown():
    # GIVEN no df item, df exit 127, and df timed out
    with pytest.raises(NotApplicable):
        check_root_volume(doc(), ctx())
    with pytest.raises(NotApplicable, match="not installed"):
        check_root_volume(doc(df=ProbeItem("df -P -k", 127, "", "df: command not found")), ctx())
    # THEN a timeout is UNKNOWN, never a verdict
    with pytest.raises(Unobservable):
        check_root_volume(doc(df=ProbeItem("df -P -k", 124, "")), ctx())


def test_given_df_without_a_root_row_when_checked_then_skipped_not_failed():
    # GIVEN df output with no `/` row (cut before it)
    with pytest.raises(NotApplicable, match="no row mounted on /"):
        check_root_volume(
            doc(df="Filesystem 1024-blocks Used Available Capacity Mounted on\ntmpfs 10 0 10 0% /run\n"), ctx()
        )


def test_given_truncated_df_when_checked_then_evidence_says_output_truncated():
    # GIVEN a truncated df item that still holds the root row
    item = ProbeItem(
        "df -P -k", 0, fx("rec-df-P-k-p5-healthy.txt") + "[hyperpod-debugger: output truncated]\n", truncated=True
    )
    (f,) = check_root_volume(doc(df=item), ctx())
    # WHEN judged  THEN still a verdict, and the evidence says the output was truncated
    assert f.tag is Tag.PASS and any("output truncated" in e for e in f.evidence)


# --------------------------------------------------------------------------- probe.data_volumes


def test_given_mounted_healthy_data_volumes_and_instance_store_when_checked_then_pass():
    # GIVEN a p5 with /opt/sagemaker (20%) and /opt/dlami/nvme (4%) mounted, 2 instance-store disks
    d = doc(
        df=fx("rec-df-P-k-p5-healthy.txt"),
        findmnt=fx("rec-findmnt-J-p5-data-volumes.json"),
        lsblk=fx("rec-lsblk-J-p5-instance-store.json"),
    )
    findings = check_data_volumes(d, ctx())
    # WHEN judged  THEN one PASS listing both rows
    assert [f.tag for f in findings] == [Tag.PASS]
    assert any("/opt/sagemaker" in e and "20%" in e for e in findings[0].evidence)


def test_given_a_data_volume_at_95_percent_when_mounted_then_fail_p1():
    # GIVEN /opt/sagemaker mounted and 95% full
    text = df_text([("/", 40, 60, "40%"), ("/opt/sagemaker", 95, 5, "95%")])
    findings = check_data_volumes(doc(df=text, findmnt=fx("rec-findmnt-J-p5-data-volumes.json")), ctx())
    # WHEN judged  THEN FAIL P1 in § I.2, investigate
    (f,) = problems(findings)
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "I.2", "investigate")
    assert f.message.startswith("/opt/sagemaker is 95% full")


def test_given_a_data_volume_at_85_percent_when_mounted_then_warn_p2():
    # GIVEN /opt/dlami/nvme mounted and 85% full
    text = df_text([("/", 40, 60, "40%"), ("/opt/dlami/nvme", 85, 15, "85%")])
    (f,) = problems(check_data_volumes(doc(df=text, findmnt=fx("rec-findmnt-J-p5-data-volumes.json")), ctx()))
    # WHEN judged  THEN WARN P2
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P2)


def test_given_data_dirs_that_are_not_mount_points_when_checked_then_no_usage_verdict_from_the_root():
    # GIVEN findmnt without the data volumes and a df row of `df /opt/sagemaker` that shows the root (98%)
    text = df_text([("/", 98, 2, "98%")])
    findings = check_data_volumes(
        doc(df=text, findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json")), ctx("ml.c5.xlarge")
    )
    # WHEN judged  THEN no usage finding for the data paths (the root's 98% is not theirs)
    assert [f.tag for f in findings] == [Tag.PASS]
    assert any("/opt/sagemaker: not a mount point" in e for e in findings[0].evidence)


def test_given_p5_without_any_instance_store_disk_when_checked_then_warn_p1_investigate():
    # GIVEN a p5 (NVMe expected) whose lsblk shows only EBS volumes
    d = doc(
        df=fx("rec-df-P-k-p5-root-93pct-no-data-mounts.txt"),
        findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json"),
        lsblk=fx("rec-lsblk-J-old-util-linux-ebs-only.json"),
    )
    (f,) = problems(check_data_volumes(d, ctx()))
    # WHEN judged  THEN WARN P1 that the instance store is missing
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P1, "investigate")
    assert "no instance-store disk" in f.message


def test_given_hyphenated_family_p6_b200_without_instance_store_when_checked_then_expected_all_the_same():
    # GIVEN ml.p6-b200.48xlarge (hyphenated family, NVMe expected) with EBS only
    d = doc(findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json"), lsblk=fx("rec-lsblk-J-old-util-linux-ebs-only.json"))
    # WHEN judged  THEN the expectation applies (the hyphen does not hide the family)
    (f,) = problems(check_data_volumes(d, ctx("ml.p6-b200.48xlarge")))
    assert f.priority is Priority.P1 and "ml.p6-b200.48xlarge" in f.message


def test_given_instance_store_disks_but_nvme_not_mounted_when_checked_then_warn_p2():
    # GIVEN two instance-store disks and no /opt/dlami/nvme mount
    d = doc(
        df=fx("rec-df-P-k-p5-root-93pct-no-data-mounts.txt"),
        findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json"),
        lsblk=fx("rec-lsblk-J-p5-instance-store.json"),
    )
    (f,) = problems(check_data_volumes(d, ctx()))
    # WHEN judged  THEN WARN P2: data meant for the instance store lands on the root volume
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, "investigate")
    assert "/opt/dlami/nvme is not mounted" in f.message
    assert f.evidence[0].startswith('{"name":"nvme2n1"')


def test_given_an_unknown_instance_type_when_checked_then_info_no_expectation_and_no_guess():
    # GIVEN a type the catalogue does not know, with EBS only
    d = doc(findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json"), lsblk=fx("rec-lsblk-J-old-util-linux-ebs-only.json"))
    findings = check_data_volumes(d, ctx("ml.x99.48xlarge"))
    # WHEN judged  THEN INFO "no expectation", no WARN about missing NVMe
    assert {f.tag for f in findings} == {Tag.INFO, Tag.PASS}
    assert "No NVMe instance-store expectation for ml.x99.48xlarge" in findings[0].message


def test_given_lsblk_without_models_when_checked_then_instance_store_is_not_judged():
    # GIVEN nvme disks with no model (EBS and instance store look alike on Nitro)
    text = '{"blockdevices": [{"name":"nvme0n1","type":"disk","size":1,"model":null,"mountpoint":null}]}'
    findings = check_data_volumes(doc(lsblk=text, findmnt=fx("rec-findmnt-J-p5-no-data-volumes.json")), ctx())
    # WHEN judged  THEN no WARN, and the evidence says why
    assert [f.tag for f in findings] == [Tag.PASS]
    assert any("cannot be told apart" in e for e in findings[0].evidence)


def test_given_cut_findmnt_and_no_df_when_checked_then_mount_state_is_unknown_not_missing():
    # GIVEN findmnt JSON cut before the data volumes, no df, instance-store disks present
    cut = fx("rec-findmnt-J-p5-data-volumes.json")[:700]
    findings = check_data_volumes(doc(findmnt=cut, lsblk=fx("rec-lsblk-J-p5-instance-store.json")), ctx())
    # WHEN judged  THEN no "not mounted" WARN: absence in a cut list proves nothing
    assert not problems(findings)


def test_given_only_modelless_lsblk_when_checked_then_nothing_is_judged_and_the_check_skips():
    # GIVEN no df, no findmnt, and nvme disks whose model lsblk does not give
    text = '{"blockdevices": [{"name":"nvme0n1","type":"disk","size":1,"model":null,"mountpoint":null}]}'
    # WHEN judged  THEN skipped with the reason, not a PASS that judged nothing
    with pytest.raises(NotApplicable, match="cannot be told apart"):
        check_data_volumes(doc(lsblk=text), ctx())


def test_given_only_lsblk_on_an_unknown_type_when_checked_then_only_the_info_is_reported():
    # GIVEN an unknown type, EBS-only lsblk, no mount information
    findings = check_data_volumes(doc(lsblk=fx("rec-lsblk-J-old-util-linux-ebs-only.json")), ctx("ml.x99.large"))
    # WHEN judged  THEN the INFO "no expectation" alone (no PASS claiming anything)
    assert [f.tag for f in findings] == [Tag.INFO]


def test_given_no_storage_items_when_checked_then_skipped_or_unknown():
    # GIVEN none of df/findmnt/lsblk  THEN skipped; one of them timed out  THEN unknown
    with pytest.raises(NotApplicable):
        check_data_volumes(doc(), ctx())
    with pytest.raises(Unobservable):
        check_data_volumes(doc(findmnt=ProbeItem("findmnt -J", 124, "")), ctx())


# --------------------------------------------------------------------------- probe.inodes


def test_given_real_df_i_with_a_dash_when_inodes_checked_then_pass():
    # GIVEN the real `df -i` with `-` on /boot/efi and 1% on /
    (f,) = check_inodes(doc(df_inodes=fx("df-i-ubuntu-health-report-dash-iuse.txt")), ctx())
    # WHEN judged  THEN PASS; the dash is not read as 0 or as an error
    assert f.tag is Tag.PASS and "/ (1%)" in f.message


def test_given_sagemaker_inodes_at_95_percent_when_checked_then_fail_p1():
    # GIVEN /opt/sagemaker at 95% of its inodes
    (f,) = check_inodes(doc(df_inodes=fx("rec-df-P-i-p5-sagemaker-inodes-95pct.txt")), ctx())
    # WHEN judged  THEN FAIL P1 in § I.4
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P1, "I.4")
    assert f.message == "/opt/sagemaker has used 95% of its inodes"


def test_given_root_inodes_at_85_percent_when_checked_then_warn_p2():
    # GIVEN `df -P -i` with / at 85%
    text = "Filesystem Inodes IUsed IFree IUse% Mounted on\n/dev/root 1000 850 150 85% /\n"
    (f,) = check_inodes(doc(df_inodes=text), ctx())
    # WHEN judged  THEN WARN P2
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P2)


def test_given_real_df_ih_transcript_at_79_percent_when_inodes_checked_then_pass():
    # GIVEN the real transcript with `df -ih` (human inode units) at 79% on /
    (f,) = check_inodes(doc(df_inodes=fx("df-h-and-df-ih-nvme-root-76pct-inodes-79pct.txt")), ctx())
    # WHEN judged  THEN below the 80% threshold: PASS
    assert f.tag is Tag.PASS and "/ (79%)" in f.message


def test_given_only_unaccounted_rows_when_inodes_checked_then_skipped():
    # GIVEN `df -i` whose root shows `-` (no inode accounting)
    text = "Filesystem Inodes IUsed IFree IUse% Mounted on\nbtrfs 0 0 0 - /\n"
    with pytest.raises(NotApplicable):
        check_inodes(doc(df_inodes=text), ctx())


# --------------------------------------------------------------------------- probe.shm


def test_given_a_large_empty_shm_when_checked_then_pass():
    # GIVEN the p5 recording: /dev/shm ~1 TiB, 0%
    (f,) = check_shm(doc(df=fx("rec-df-P-k-p5-healthy.txt")), ctx())
    assert f.tag is Tag.PASS and f.section == "I.1"


def test_given_shm_at_95_percent_when_checked_then_warn_p1():
    # GIVEN /dev/shm 95% full
    text = df_text([("/", 40, 60, "40%"), ("/dev/shm", 95 * 1024**2, 5 * 1024**2, "95%")])
    (f,) = check_shm(doc(df=text), ctx())
    # WHEN judged  THEN WARN P1 in § I.1
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "I.1")
    assert "Bus error" in f.root_cause


def test_given_a_984_mib_shm_on_a_gpu_type_when_checked_then_warn_p2_but_not_on_cpu_types():
    # GIVEN the real `df -h` with /dev/shm at 984M
    d = doc(df=fx("df-h-ubuntu-health-report-trailing-spaces.txt"))
    # WHEN judged on a GPU type  THEN WARN P2 (too small); on a CPU type  THEN PASS
    (gpu,) = check_shm(d, ctx("ml.g5.2xlarge"))
    (cpu,) = check_shm(d, ctx("ml.c5.xlarge"))
    assert (gpu.tag, gpu.priority) == (Tag.WARN, Priority.P2) and "984.0 MiB" in gpu.message
    assert cpu.tag is Tag.PASS


def test_given_an_unknown_type_when_shm_checked_then_size_is_not_judged():
    # GIVEN a tiny /dev/shm on a type with no expectation
    (f,) = check_shm(doc(df=fx("df-h-ubuntu-health-report-trailing-spaces.txt")), ctx("ml.x99.large"))
    # WHEN judged  THEN PASS that says no expectation
    assert f.tag is Tag.PASS and "no expectation for ml.x99.large" in f.message


def test_given_old_run_shm_name_when_checked_then_it_is_used():
    # GIVEN the real EC2 df with /run/shm (pre-systemd)
    (f,) = check_shm(doc(df=fx("df-1k-ec2-xvda1-100pct-296k-avail.txt")), ctx("ml.c5.xlarge"))
    assert f.tag is Tag.PASS and "/run/shm" in f.message


def test_given_df_without_shm_when_checked_then_skipped():
    with pytest.raises(NotApplicable, match="/dev/shm"):
        check_shm(doc(df=fx("df-h-busybox-overlay-75pct.txt")), ctx())


# --------------------------------------------------------------------------- probe.memory


def test_given_healthy_meminfo_when_memory_checked_then_pass_with_hugepage_lines():
    # GIVEN a p5 with 92% available
    (f,) = check_memory(doc(meminfo=fx("rec-meminfo-p5-healthy.txt")), ctx())
    # WHEN judged  THEN PASS with MemTotal, MemAvailable and huge-page lines
    assert f.tag is Tag.PASS
    assert f.evidence[0].startswith("MemTotal:") and any(e.startswith("HugePages_Total:") for e in f.evidence)


def test_given_3_percent_available_and_exhausted_hugepages_when_checked_then_fail_p1_and_warn_i1():
    # GIVEN 3% available and HugePages_Total 1024 / Free 0
    findings = check_memory(doc(meminfo=fx("rec-meminfo-p5-3pct-available-hugepages-exhausted.txt")), ctx())
    # WHEN judged  THEN FAIL P1 § I.3 investigate, plus WARN P2 § I.1 for huge pages
    mem, huge = findings
    assert (mem.tag, mem.priority, mem.section, mem.node_action) == (Tag.FAIL, Priority.P1, "I.3", "investigate")
    assert (huge.tag, huge.priority, huge.section) == (Tag.WARN, Priority.P2, "I.1")
    assert huge.evidence[:2] == ["HugePages_Total:    1024", "HugePages_Free:        0"]


def test_given_8_percent_available_when_checked_then_warn_p2():
    # GIVEN 8% available, no huge pages
    text = "MemTotal: 1000000 kB\nMemAvailable: 80000 kB\nHugePages_Total: 0\nHugePages_Free: 0\n"
    (f,) = check_memory(doc(meminfo=text), ctx())
    # WHEN judged  THEN WARN P2 (no node action)
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, None)


def test_given_only_free_b_when_memory_checked_then_it_is_the_fallback():
    # GIVEN no meminfo item, only `free -b`
    (f,) = check_memory(doc(free=fx("rec-free-b-p5.txt")), ctx())
    # WHEN judged  THEN PASS from free's available column, its Mem line as evidence
    assert f.tag is Tag.PASS and f.evidence[0].startswith("Mem:")


def test_given_old_kernel_meminfo_without_memavailable_and_no_free_when_checked_then_skipped():
    # GIVEN meminfo without MemAvailable and no free item
    with pytest.raises(NotApplicable, match="available memory"):
        check_memory(doc(meminfo="MemTotal: 1000 kB\nMemFree: 10 kB\n"), ctx())


def test_given_memory_items_timed_out_when_checked_then_unknown():
    with pytest.raises(Unobservable):
        check_memory(doc(meminfo=ProbeItem("cat /proc/meminfo", 124, "")), ctx())


# --------------------------------------------------------------------------- whole module


def test_every_check_is_exported_with_its_section():
    assert {(c.id, c.section) for c in resources.CHECKS} == {
        ("probe.root_volume", "I.2"),
        ("probe.data_volumes", "I.2"),
        ("probe.inodes", "I.4"),
        ("probe.shm", "I.1"),
        ("probe.memory", "I.3"),
    }
