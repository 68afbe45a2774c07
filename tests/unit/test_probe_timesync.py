"""Clock synchronisation: chrony's numeric offset and leap status first, timedatectl as the fallback,
and a missing tool is a skip with its reason — never "unhealthy"."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe import timesync
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.timesync import check_clock

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "time"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
COMMANDS = {"chronyc_tracking": "chronyc tracking", "timedatectl": "timedatectl show"}
MISSING = {
    "chronyc_tracking": ProbeItem("chronyc tracking", 127, "", "bash: chronyc: command not found"),
    "timedatectl": ProbeItem("timedatectl show", 127, "", "bash: timedatectl: command not found"),
}


def fx(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc(**items: str | ProbeItem) -> ProbeDocument:
    return ProbeDocument(
        hostname="ip-10-1-2-3",
        collected_at=NOW,
        uptime_s=86400.0,
        items={
            k: v if isinstance(v, ProbeItem) else ProbeItem(command=COMMANDS[k], exit_code=0, stdout=v)
            for k, v in items.items()
        },
    )


CTX = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW)


def run(**items) -> list:
    return check_clock(doc(**items), CTX)


# --------------------------------------------------------------------------- chrony


def test_given_chrony_synced_to_amazon_time_sync_when_checked_then_pass_with_the_offset():
    # GIVEN `chronyc tracking` synced, 12 µs fast
    (f,) = run(chronyc_tracking=fx("rec-chronyc-tracking-aws-synced.txt"))
    # WHEN judged  THEN PASS naming the source and the offset, with the verbatim lines
    assert f.tag is Tag.PASS and f.priority is None
    assert "169.254.169.123" in f.message and "+0.012 ms" in f.message
    assert "Leap status     : Normal" in f.evidence


def test_given_the_real_unsynchronised_zero_refid_block_when_checked_then_fail_p1_investigate():
    # GIVEN the real all-zero tracking block (Leap status: Not synchronised, refid 00000000)
    (f,) = run(chronyc_tracking=fx("chronyc-tracking-not-synchronised-refid-zero.txt"))
    # WHEN judged  THEN one FAIL P1 § I.5 that also names the missing source
    assert (f.tag, f.priority, f.section, f.node_action) == (Tag.FAIL, Priority.P1, "I.5", "investigate")
    assert "no reference source" in f.message
    assert "Reference ID    : 00000000 ()" in f.evidence
    assert all(not c.mutates for c in f.suggested_commands)


def test_given_an_offset_of_1_5_seconds_slow_when_checked_then_fail_p1_by_number():
    # GIVEN a synchronised chrony 1.502 s behind NTP time
    (f,) = run(chronyc_tracking=fx("rec-chronyc-tracking-1.5s-slow.txt"))
    # WHEN judged  THEN FAIL P1 on the numeric offset (not a string match)
    assert (f.tag, f.priority, f.node_action) == (Tag.FAIL, Priority.P1, "investigate")
    assert "1.502 s behind" in f.message


def test_given_an_offset_of_0_25_seconds_fast_when_checked_then_warn_p2():
    # GIVEN 0.25 s ahead
    (f,) = run(chronyc_tracking=fx("rec-chronyc-tracking-0.25s-fast.txt"))
    # WHEN judged  THEN WARN P2
    assert (f.tag, f.priority, f.node_action) == (Tag.WARN, Priority.P2, None)
    assert "0.250 s ahead of" in f.message


@pytest.mark.parametrize(
    ("seconds", "tag"),
    [(0.0999, Tag.PASS), (0.1, Tag.WARN), (0.9999, Tag.WARN), (1.0, Tag.FAIL), (-1.0, Tag.FAIL)],
)
def test_given_offsets_at_the_thresholds_when_checked_then_at_or_above_counts(seconds, tag):
    # GIVEN a synced tracking block with the given offset (negative = slow)
    direction = "fast" if seconds >= 0 else "slow"
    text = (
        "Reference ID    : A9FEA97B (169.254.169.123)\nStratum         : 4\n"
        f"System time     : {abs(seconds):.9f} seconds {direction} of NTP time\nLeap status     : Normal\n"
    )
    # WHEN judged  THEN |offset| ≥ 0.1 s warns and ≥ 1 s fails
    (f,) = run(chronyc_tracking=text)
    assert f.tag is tag


def test_given_normal_leap_but_stratum_zero_when_checked_then_warn_p1_no_source():
    # GIVEN chrony that claims Normal leap but has no reference (stratum 0)
    text = "Reference ID    : 00000000 ()\nStratum         : 0\nSystem time     : 0.000000000 seconds fast of NTP time\nLeap status     : Normal\n"
    (f,) = run(chronyc_tracking=text)
    # WHEN judged  THEN WARN P1
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P1) and "no reference source" in f.message


def test_given_chrony_readable_when_timedatectl_disagrees_then_chrony_decides():
    # GIVEN chrony synced and a timedatectl that says not synchronised
    (f,) = run(
        chronyc_tracking=fx("rec-chronyc-tracking-aws-synced.txt"),
        timedatectl=fx("rec-timedatectl-show-ntp-off-not-synced.txt"),
    )
    # WHEN judged  THEN chrony's numbers win
    assert f.tag is Tag.PASS


# --------------------------------------------------------------------------- fallback to timedatectl


def test_given_no_chrony_and_timedatectl_show_synced_when_checked_then_pass():
    # GIVEN chronyc not installed, `timedatectl show` NTPSynchronized=yes
    (f,) = run(chronyc_tracking=MISSING["chronyc_tracking"], timedatectl=fx("rec-timedatectl-show-synced.txt"))
    # WHEN judged  THEN PASS, evidence the NTPSynchronized line
    assert f.tag is Tag.PASS and "NTPSynchronized=yes" in f.evidence


def test_given_no_chrony_and_timedatectl_not_synced_when_checked_then_fail_p1():
    # GIVEN no chrony item and `timedatectl show` NTP=no, NTPSynchronized=no
    (f,) = run(timedatectl=fx("rec-timedatectl-show-ntp-off-not-synced.txt"))
    # WHEN judged  THEN FAIL P1 § I.5 (the kernel's unsynchronised state, as chrony's Leap status), saying
    # the NTP service is off
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P1, "I.5")
    assert "NTP service is off" in f.message


def test_given_the_real_timedatectl_fragment_not_synced_when_checked_then_fail_p1():
    # GIVEN the real left-aligned `timedatectl status` fragment (synchronized: no, NTP service active)
    (f,) = run(timedatectl=fx("timedatectl-fragment-ntp-active-not-synced.txt"))
    # WHEN judged  THEN FAIL P1: the service runs but has not synchronised
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P1)
    assert "on but has not synchronised" in f.message
    assert "System clock synchronized: no" in f.evidence


def test_given_timedatectl_status_synced_when_checked_then_pass():
    (f,) = run(timedatectl=fx("rec-timedatectl-status-synced.txt"))
    assert f.tag is Tag.PASS


def test_given_chronyd_not_running_and_timedatectl_synced_when_checked_then_pass_noting_chrony():
    # GIVEN `506 Cannot talk to daemon` (exit 1) and timedatectl synchronised (another NTP client)
    chrony = ProbeItem("chronyc tracking", 1, fx("rec-chronyc-506-daemon-not-running.txt"))
    (f,) = run(chronyc_tracking=chrony, timedatectl=fx("rec-timedatectl-show-synced.txt"))
    # WHEN judged  THEN PASS, the evidence says chronyd is not running
    assert f.tag is Tag.PASS and any("chronyd is not running" in e for e in f.evidence)


def test_given_chronyd_not_running_and_no_timedatectl_when_checked_then_warn_p1():
    # GIVEN chronyd unreachable and timedatectl missing
    chrony = ProbeItem("chronyc tracking", 1, fx("rec-chronyc-506-daemon-not-running.txt"))
    (f,) = run(chronyc_tracking=chrony, timedatectl=MISSING["timedatectl"])
    # WHEN judged  THEN WARN P1: nothing keeps the clock in step
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P1) and "chronyd is not running" in f.message


def test_given_wrong_chronyc_output_when_timedatectl_answers_then_timedatectl_is_used():
    # GIVEN `chronyc sources -v` lines where tracking was expected (real fixture) and timedatectl not synced
    (f,) = run(
        chronyc_tracking=fx("chronyc-sources-v-aws-timesync-partial.txt"),
        timedatectl=fx("timedatectl-fragment-ntp-active-not-synced.txt"),
    )
    # WHEN judged  THEN timedatectl decides
    assert f.tag is Tag.FAIL and "timedatectl" in f.message


# --------------------------------------------------------------------------- nothing to judge


def test_given_neither_tool_installed_when_checked_then_skipped_with_the_reason_not_unhealthy():
    # GIVEN chronyc and timedatectl both exit 127 (a missing tool is not "unhealthy")
    with pytest.raises(NotApplicable, match="neither chronyc nor timedatectl"):
        run(**MISSING)
    # AND absent items skip the same way
    with pytest.raises(NotApplicable):
        run()


def test_given_unreadable_chrony_output_and_no_timedatectl_when_checked_then_skipped():
    # GIVEN `chronyc activity` output (real) where tracking was expected, no timedatectl
    with pytest.raises(NotApplicable):
        run(chronyc_tracking=fx("chronyc-activity-unknown-address.txt"))


def test_given_chrony_timed_out_and_no_timedatectl_when_checked_then_unknown():
    # GIVEN chronyc timed out (exit 124) and timedatectl missing
    with pytest.raises(Unobservable):
        run(chronyc_tracking=ProbeItem("chronyc tracking", 124, ""), timedatectl=MISSING["timedatectl"])


def test_given_chrony_timed_out_but_timedatectl_answers_when_checked_then_timedatectl_judges():
    (f,) = run(
        chronyc_tracking=ProbeItem("chronyc tracking", 124, ""), timedatectl=fx("rec-timedatectl-show-synced.txt")
    )
    assert f.tag is Tag.PASS and any("timed out" in e for e in f.evidence)


def test_given_truncated_chrony_output_when_checked_then_evidence_says_so():
    item = ProbeItem("chronyc tracking", 0, fx("rec-chronyc-tracking-aws-synced.txt"), truncated=True)
    (f,) = run(chronyc_tracking=item)
    assert any("output truncated" in e for e in f.evidence)


def test_the_module_exports_the_clock_check_in_i5():
    assert [(c.id, c.section) for c in timesync.CHECKS] == [("probe.clock", "I.5")]
