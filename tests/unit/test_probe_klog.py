"""Kernel-log line parser and window rule (probe/parse/klog.py): every layout the kernel_log items arrive in."""

from __future__ import annotations

import pathlib
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse.klog import (
    PREVIOUS_BOOT,
    THIS_BOOT,
    kernel_log,
    parse_line,
    parse_log,
    recent,
    stamp,
    window_label,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "kernel"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
BOOT = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(*, collected: datetime | None = NOW, uptime: float | None = 14400.0, **stdouts: str) -> ProbeDocument:
    items = {key: ProbeItem(command=f"probe {key}", exit_code=0, stdout=value) for key, value in stdouts.items()}
    return ProbeDocument(hostname="ip-10-1-2-3", collected_at=collected, uptime_s=uptime, items=items)


# --------------------------------------------------------------------------- one line, every layout


def test_raw_dmesg_seconds_since_boot_become_wall_clock_with_the_boot_time():
    # GIVEN a plain dmesg line and the boot time of this boot
    # WHEN it is parsed
    line = parse_line("[ 1234.567890] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>'", boot_time=BOOT)
    # THEN the time is boot + uptime and the text has no stamp
    assert line.time == BOOT + timedelta(seconds=1234.56789)
    assert line.uptime == pytest.approx(1234.56789)
    assert line.text == "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>'"


def test_raw_dmesg_without_a_boot_time_keeps_the_uptime_but_has_no_wall_clock_time():
    # GIVEN a previous-boot line in seconds since boot (no boot time known for that boot)
    line = parse_line("[  201.654822] BUG: unable to handle kernel NULL pointer dereference")
    # THEN its time is unknown, never guessed
    assert line.time is None
    assert line.uptime == pytest.approx(201.654822)
    assert line.text.startswith("BUG: unable")


def test_dmesg_T_human_time_is_read_as_utc():
    # GIVEN a `dmesg -T` line (fixture xid119, real capture)
    raw = fixture("xid119-gsp-timeout-h100-dmesgT.txt").splitlines()[2]
    line = parse_line(raw)
    # THEN the bracketed date is the time and the text starts at the message
    assert line.time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
    assert line.text.startswith("NVRM: Xid (PCI:0000:9b:00): 119,")


def test_dmesg_T_with_a_space_padded_day_is_read():
    # GIVEN a dmesg -T stamp with a single-digit, space-padded day
    # WHEN the line is parsed
    # THEN the date is read whole
    line = parse_line("[Mon Nov  3 09:12:01 2026] mce: [Hardware Error]: Machine check events logged")
    assert line.time == datetime(2026, 11, 3, 9, 12, 1, tzinfo=UTC)


def test_dmesg_iso_with_a_comma_decimal_separator_is_read():
    # GIVEN `dmesg --time-format=iso` (fixture xid48, comma before the microseconds)
    raw = fixture("xid48-63-94-dbe-rowremap-iso.txt").splitlines()[10]
    line = parse_line(raw)
    assert line.time == datetime(2024, 11, 15, 12, 2, 3, 470068, tzinfo=UTC)
    assert line.text.startswith("NVRM: Xid (PCI:0000:19:00): 48,")


def test_dmesg_decode_facility_and_level_prefix_is_stripped():
    # GIVEN `dmesg --decode --time-format iso` (fixture xid13-43: "kern  :warn  : <iso> …")
    raw = fixture("xid13-43-sm-exception-decode-iso.txt").splitlines()[0]
    line = parse_line(raw)
    assert line.time == datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC)
    assert line.text.startswith("NVRM: Xid (PCI:0000:38:00): 13,")


def test_journal_short_iso_with_a_basic_offset_strips_the_host_kernel_prefix():
    # GIVEN journalctl -o short-iso: second precision, +0000 offset, "host kernel:" origin
    line = parse_line("2026-11-30T09:12:01+0000 ip-10-1-2-3 kernel: NVRM: Xid (PCI:0000:19:00): 48, pid=1")
    assert line.time == datetime(2026, 11, 30, 9, 12, 1, tzinfo=UTC)
    assert line.text == "NVRM: Xid (PCI:0000:19:00): 48, pid=1"


def test_journal_short_iso_precise_keeps_the_offset_of_the_line():
    # GIVEN a short-iso-precise line stamped +02:00
    # WHEN the line is parsed
    # THEN the moment is right in UTC and the line's offset is kept
    line = parse_line("2026-11-30T11:12:01.123456+02:00 ip-10-1-2-3 kernel: Kernel panic - not syncing: x")
    assert line.time == datetime(2026, 11, 30, 9, 12, 1, 123456, tzinfo=UTC)
    assert line.time.utcoffset() == timedelta(hours=2)
    assert line.text == "Kernel panic - not syncing: x"


def test_journal_short_precise_takes_the_year_from_the_reference_time():
    # GIVEN short-precise (no year) and a collection time in 2026
    line = parse_line("Nov 30 07:01:12.345678 ip-10-1-2-3 kernel: watchdog: BUG: soft lockup", reference=NOW)
    # THEN the year is 2026
    assert line.time == datetime(2026, 11, 30, 7, 1, 12, 345678, tzinfo=UTC)
    assert line.text == "watchdog: BUG: soft lockup"


def test_year_less_date_after_the_reference_wraps_back_one_year():
    # GIVEN a 31 December line read on 2 January
    line = parse_line("Dec 31 23:59:59.000001 host kernel: x", reference=datetime(2027, 1, 2, tzinfo=UTC))
    # THEN it belongs to the previous year, not to the future
    assert line.time == datetime(2026, 12, 31, 23, 59, 59, 1, tzinfo=UTC)


def test_year_less_date_without_a_reference_has_no_time():
    # GIVEN a year-less stamp and no reference time
    # WHEN the line is parsed
    # THEN the time stays unknown instead of guessing a year
    assert parse_line("Nov 30 07:01:12 host kernel: x").time is None


def test_syslog_line_with_the_kernel_uptime_after_the_origin_keeps_the_syslog_time():
    # GIVEN a syslog line whose message starts with the kernel's own uptime stamp
    # WHEN the line is parsed
    # THEN the syslog date wins, the uptime is kept and both prefixes leave the text
    line = parse_line(
        "Nov  3 09:12:01 ip-10-2-248-222 kernel: [  378.703529] NVRM: Xid (PCI:0000:b9:00): 74", reference=NOW
    )
    assert line.time == datetime(2026, 11, 3, 9, 12, 1, tzinfo=UTC)
    assert line.uptime == pytest.approx(378.703529)
    assert line.text == "NVRM: Xid (PCI:0000:b9:00): 74"


def test_host_kernel_prefix_without_a_date_uses_the_kernel_uptime():
    # GIVEN the HMA Xid 74 injection line (fixture: "<host> kernel: [ 378.703529] NVRM: …", no date)
    raw = fixture("hyperpod-hma-inject-xid74-nvlink-syslog.txt").strip()
    line = parse_line(raw, boot_time=BOOT)
    assert line.time == BOOT + timedelta(seconds=378.703529)
    assert line.text.startswith("NVRM: Xid (PCI:0000:b9:00): 74,")


def test_kmsg_level_prefix_before_the_uptime_is_stripped():
    # GIVEN a pstore record line "<0>[ 3098.275469] Kernel panic …"
    raw = fixture("panic-pstore-crash-test-module.txt").splitlines()[0]
    line = parse_line(raw)
    assert line.uptime == pytest.approx(3098.275469)
    assert line.text.startswith("Kernel panic - not syncing")


def test_dev_kmsg_record_gives_microseconds_since_boot():
    # GIVEN a /dev/kmsg record (priority,seq,usec,flags;text)
    # WHEN the line is parsed
    # THEN the microseconds since boot place it after the boot
    line = parse_line("6,3973,227996636,-;nvidia-peermem nv_get_p2p_free_callback:127 ERROR", boot_time=BOOT)
    assert line.uptime == pytest.approx(227.996636)
    assert line.time == BOOT + timedelta(microseconds=227996636)
    assert line.text.startswith("nvidia-peermem")


def test_neuron_runtime_timestamp_is_read():
    # GIVEN a Neuron runtime line stamped 2025-Oct-01 23:48:34.002207
    # WHEN the line is parsed
    # THEN its time is read and the stamp leaves the text
    line = parse_line("2025-Oct-01 23:48:34.002207 516278:516288 ERROR   NRT:nrt_infodump  Failure: X")
    assert line.time == datetime(2025, 10, 1, 23, 48, 34, 2207, tzinfo=UTC)
    assert line.text.startswith("516278:516288 ERROR")


def test_line_without_a_timestamp_keeps_its_whole_text():
    # GIVEN a driver line with no stamp at all
    # WHEN the line is parsed
    # THEN no time is invented and the text is the whole line
    raw = "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 nd-id=0"
    line = parse_line(raw, boot_time=BOOT, reference=NOW)
    assert line.time is None and line.uptime is None
    assert line.text == raw and line.raw == raw


def test_garbled_date_keeps_the_text_and_loses_only_the_time():
    # GIVEN a line stamped 30 February
    # WHEN the line is parsed
    # THEN the time is unknown but the message survives
    line = parse_line("2026-02-30T09:12:01.000000+00:00 host kernel: Kernel panic - not syncing")
    assert line.time is None
    assert line.text == "Kernel panic - not syncing"


def test_other_colon_prefixes_are_not_mistaken_for_an_origin():
    # GIVEN driver lines whose first words end in a colon (not "host kernel:")
    line = parse_line("2026-11-30T06:00:09.925468+00:00 infiniband rdmap79s0: IB device registered")
    assert line.text == "infiniband rdmap79s0: IB device registered"
    assert parse_line("sysrq: SysRq : Trigger a crash").text == "sysrq: SysRq : Trigger a crash"


def test_raw_line_is_kept_verbatim_for_evidence():
    # GIVEN a decode-format line with trailing blanks
    # WHEN the line is parsed
    # THEN raw is the line as printed, for evidence
    raw = "kern  :warn  : 2025-01-21T04:41:44,287197+00:00 NVRM: Xid (PCI:0000:38:00): 43, pid=2924364"
    assert parse_line(raw + "  \n").raw == raw


# --------------------------------------------------------------------------- whole outputs


def test_journal_notes_blank_lines_and_the_truncation_marker_are_not_messages():
    # GIVEN journalctl output with its notes, blank lines and the probe's cut marker
    text = (
        "-- No entries --\n\n-- Boot 3f2a9c --\n2026-11-30T09:00:00+0000 h kernel: NVRM: x\n" + TRUNCATION_MARKER + "\n"
    )
    log = parse_log(text)
    # THEN one message line remains and the log says it was cut
    assert [line.text for line in log.lines] == ["NVRM: x"]
    assert log.truncated


@pytest.mark.parametrize(
    ("name", "expected_first"),
    [
        ("xid48-63-94-dbe-rowremap-iso.txt", datetime(2024, 11, 15, 5, 39, 15, 491363, tzinfo=UTC)),
        ("xid119-gsp-timeout-h100-dmesgT.txt", datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)),
        ("xid13-109-ctx-switch-timeout-dmesg-ctime.txt", datetime(2024, 8, 30, 11, 11, 22, tzinfo=UTC)),
        ("dmesg-decode-iso-nvidia-peermem-invalid-context.txt", datetime(2025, 2, 10, 16, 28, 6, 502716, tzinfo=UTC)),
        ("rec-journal-short-iso-precise-healthy-p5.txt", datetime(2026, 11, 30, 6, 0, 4, 118201, tzinfo=UTC)),
    ],
)
def test_every_line_of_a_dated_fixture_gets_a_time(name, expected_first):
    # GIVEN a real (or recorded) output in one dated layout
    log = parse_log(fixture(name), reference=NOW)
    # THEN every line is dated and the first one is where the file says
    assert log.lines[0].time == expected_first
    assert all(line.time is not None for line in log.lines)


def test_raw_dmesg_fixture_is_placed_in_time_only_with_a_boot_time():
    # GIVEN the GB200 raw dmesg capture (seconds since boot)
    # WHEN it is parsed with and without a boot time
    # THEN only the boot time turns uptimes into wall-clock times
    text = fixture("xid149-154-gb200-nvlink5-recovery-action.txt")
    assert all(line.time is None for line in parse_log(text).lines)
    dated = parse_log(text, boot_time=BOOT).lines
    assert dated[0].time == BOOT + timedelta(seconds=171167.620236)


# --------------------------------------------------------------------------- documents and the window rule


def test_kernel_log_is_parsed_once_per_document():
    # GIVEN a document with a kernel_log item
    # WHEN its log is asked for twice
    # THEN the same parsed object comes back
    d = doc(kernel_log="2026-11-30T09:00:00+0000 h kernel: NVRM: x\n")
    assert kernel_log(d, THIS_BOOT, NOW) is kernel_log(d, THIS_BOOT, NOW)


def test_absent_missing_tool_or_timed_out_item_gives_no_log():
    # GIVEN items whose tool is missing or that timed out, and a document without them
    # WHEN their logs are asked for
    # THEN there is no log, and the window selection says it is unavailable
    d = ProbeDocument(
        "h",
        NOW,
        100.0,
        {
            THIS_BOOT: ProbeItem("journalctl", 127, "", "journalctl: command not found"),
            PREVIOUS_BOOT: ProbeItem("journalctl", 124, ""),
        },
    )
    assert kernel_log(d, THIS_BOOT, NOW) is None
    assert kernel_log(d, PREVIOUS_BOOT, NOW) is None
    assert kernel_log(doc(), THIS_BOOT, NOW) is None
    assert not recent(d, THIS_BOOT, NOW, DAY).available


def test_dated_lines_older_than_the_window_do_not_count():
    # GIVEN one line 30 h old and one 2 h old
    text = "2026-11-29T04:00:00+0000 h kernel: NVRM: old\n2026-11-30T08:00:00+0000 h kernel: NVRM: new\n"
    selected = recent(doc(kernel_log=text), THIS_BOOT, NOW, DAY)
    # THEN only the recent one counts, and the old one is accounted for
    assert [line.text for line in selected.lines] == ["NVRM: new"]
    assert selected.older == 1


def test_undated_lines_count_when_this_boot_began_inside_the_window():
    # GIVEN undated lines on a node up for 4 h
    selected = recent(doc(kernel_log="NEURON_HW_ERR=X nd-id=0\n"), THIS_BOOT, NOW, DAY)
    assert len(selected.lines) == 1 and selected.undated_counted == 1


def test_undated_lines_of_this_boot_count_even_when_the_boot_is_older_than_the_window():
    # GIVEN the same line on a node up for 3 days: it carries no time, but it is this boot's
    # THEN it is never dropped (a dropped fault would become a PASS); the evaluators add the caveat
    selected = recent(doc(kernel_log="NEURON_HW_ERR=X nd-id=0\n", uptime=3 * 86400.0), THIS_BOOT, NOW, DAY)
    assert len(selected.lines) == 1 and selected.undated_counted == 1 and selected.undated_ignored == 0


def test_undated_lines_count_when_the_boot_time_is_unknown():
    # GIVEN an undated line in a document without uptime (a pasted log)
    selected = recent(doc(kernel_log="NEURON_HW_ERR=X\n", uptime=None), THIS_BOOT, NOW, DAY)
    assert len(selected.lines) == 1 and selected.undated_counted == 1


def test_undated_previous_boot_lines_are_ignored_only_when_that_boot_ended_before_the_window():
    # GIVEN an undated previous-boot line; this boot began 3 days ago, so the previous one ended then
    old = recent(
        doc(kernel_log="", kernel_log_previous_boot="Kernel panic - not syncing: x\n", uptime=3 * 86400.0),
        PREVIOUS_BOOT,
        NOW,
        DAY,
    )
    assert old.lines == () and old.undated_ignored == 1
    # and with no boot time at all it counts (time unknown)
    unknown = recent(
        doc(kernel_log="", kernel_log_previous_boot="Kernel panic - not syncing: x\n", uptime=None),
        PREVIOUS_BOOT,
        NOW,
        DAY,
    )
    assert len(unknown.lines) == 1


def test_raw_dmesg_of_an_old_boot_falls_out_of_the_window_by_its_uptime():
    # GIVEN raw dmesg on a node up for 2 days: a line at 100 s is 2 days old, one at 172000 s is recent
    text = "[  100.000000] NVRM: early\n[172000.000000] NVRM: late\n"
    selected = recent(doc(kernel_log=text, uptime=172800.0), THIS_BOOT, NOW, DAY)
    assert [line.text for line in selected.lines] == ["NVRM: late"]


def test_previous_boot_raw_lines_count_only_while_this_boot_is_recent():
    # GIVEN an undated previous-boot panic line
    # WHEN the window is applied with a 4 h old and a 5 day old boot
    # THEN it counts only when the reboot lies inside the window
    text = "<0>[ 3098.275469] Kernel panic - not syncing: x\n"
    assert len(recent(doc(kernel_log_previous_boot=text), PREVIOUS_BOOT, NOW, DAY).lines) == 1
    old_boot = doc(kernel_log_previous_boot=text, uptime=5 * 86400.0)
    assert recent(old_boot, PREVIOUS_BOOT, NOW, DAY).lines == ()


def test_output_whose_newest_line_is_older_than_the_window_is_passed_over_whole():
    # GIVEN a previous boot that ended two days ago
    text = "2026-11-28T01:00:00+0000 h kernel: NVRM: a\n2026-11-28T02:00:00+0000 h kernel: NVRM: b\n"
    selected = recent(doc(kernel_log_previous_boot=text), PREVIOUS_BOOT, NOW, DAY)
    assert selected.lines == () and selected.older == 2


def test_keywords_select_lines_and_words_skip_outputs_without_them():
    # GIVEN an Xid line and an EFA line
    # WHEN lines are selected by keyword, and by a word absent from the output
    # THEN only the Xid line (at index 0) is selected; the absent word selects nothing
    text = (
        "2026-11-30T09:00:00+0000 h kernel: NVRM: Xid (PCI:0000:19:00): 48\n2026-11-30T09:00:01+0000 h kernel: efa up\n"
    )
    d = doc(kernel_log=text)
    picked = recent(d, THIS_BOOT, NOW, DAY, re.compile("Xid"), words=("Xid",))
    assert [line.text for line in picked.lines] == ["NVRM: Xid (PCI:0000:19:00): 48"]
    assert picked.indices == (0,)
    assert recent(d, THIS_BOOT, NOW, DAY, re.compile("oom"), words=("oom",)).lines == ()


def test_lines_newer_than_now_still_count():
    # GIVEN clock skew: a line stamped after the evaluation time
    text = "2026-11-30T10:05:00+0000 h kernel: Kernel panic - not syncing\n"
    assert len(recent(doc(kernel_log=text), THIS_BOOT, NOW, DAY).lines) == 1


def test_missing_collection_time_places_the_boot_from_the_uptime_and_now():
    # GIVEN a raw-folder document without collected_at but with /proc/uptime
    d = doc(kernel_log="[   10.000000] NVRM: x\n", collected=None, uptime=3600.0)
    (line,) = recent(d, THIS_BOOT, NOW, DAY).lines
    assert line.time == NOW - timedelta(seconds=3590)


def test_truncated_item_marks_the_log_truncated():
    # GIVEN an item the probe cut at its size limit
    # WHEN the window is applied
    # THEN the selection says the log was truncated
    d = ProbeDocument("h", NOW, 100.0, {THIS_BOOT: ProbeItem("j", 0, "[ 1.0] NVRM: x\n", truncated=True)})
    assert recent(d, THIS_BOOT, NOW, DAY).truncated


def test_stamp_and_window_label_print_compactly():
    # GIVEN times with offsets and windows of several sizes
    # WHEN they are printed
    # THEN times are UTC to the second and windows read 24 h / 7 d / 90 min
    assert stamp(datetime(2026, 11, 30, 11, 0, tzinfo=timezone(timedelta(hours=1)))) == "2026-11-30T10:00:00Z"
    assert stamp(None) == "time unknown"
    assert window_label(DAY) == "24 h"
    assert window_label(timedelta(days=7)) == "7 d"
    assert window_label(timedelta(minutes=90)) == "90 min"
