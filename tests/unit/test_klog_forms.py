"""Every form an operator pastes, or a node produces, of the same kernel event gives the same verdict.

The forms are those of util-linux ``dmesg`` (raw, ``-T``, ``--time-format=iso``, ``--decode``),
``journalctl -k`` output modes (short, short-iso, short-iso-precise, short-precise, short-monotonic,
cat), rsyslog files (``/var/log/messages`` with and without the kernel's own uptime stamp, RFC 3339
with a year) and the console broadcast rsyslog prints for emergencies (``Message from syslogd@…`` then
`` kernel:[uptime] …``). Layouts follow the tools' manual pages; the message bodies are real driver and
kernel lines (NVIDIA's Xid catalogue, the kernel's watchdog and OOM killer).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.kernel import check_xid
from hyperpod_debugger.probe.kernel_faults import check_kernel_faults
from hyperpod_debugger.probe.oom import check_oom

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOST = "ip-10-1-2-3"

EVENTS = {
    "xid79": (
        check_xid,
        "NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        (Tag.FAIL, "G.1"),
    ),
    "xid13": (
        check_xid,
        "NVRM: Xid (PCI:0000:91:00): 13, pid=2771, name=python, Graphics Exception: ESR 0x50dfb0=0x8000000f",
        (Tag.WARN, "G.1"),
    ),
    "soft_lockup": (
        check_kernel_faults,
        "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python:1234]",
        (Tag.WARN, "N"),
    ),
    # a GPU the driver could not bring up, no Xid line (NVIDIA catalogue: GPU_INIT_ERROR → RESET_GPU)
    "gpu_init_failure": (
        check_xid,
        "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
        (Tag.FAIL, "G.1"),
    ),
    # an older kernel's memory-cgroup OOM: the container's limit (runbook § I.3: the workload's)
    "memcg_oom_old_wording": (
        check_oom,
        "Memory cgroup out of memory: Kill process 62685 (bash) score 0 or sacrifice child",
        (Tag.WARN, "I.3"),
    ),
    # an uncorrected machine check (runbook § N: CPU or memory hardware, drain and replace)
    "mce_uncorrected": (
        check_kernel_faults,
        "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 16: bea0000000000108",
        (Tag.FAIL, "N"),
    ),
    "oom": (
        check_oom,
        "Out of memory: Killed process 4321 (python3) total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB",
        (Tag.FAIL, "I.3"),
    ),
}


def forms(at: datetime, boot: datetime, message: str) -> dict[str, str]:
    up = (at - boot).total_seconds()
    us = at.microsecond
    day = at.strftime("%b") + f" {at.day:2d}"  # rsyslog / dmesg -T pad the day with a space
    return {
        "dmesg": f"[{up:12.6f}] {message}",
        "dmesg -T": f"[{at:%a} {day} {at:%H:%M:%S %Y}] {message}",
        "dmesg --time-format=iso": f"{at:%Y-%m-%dT%H:%M:%S},{us:06d}+00:00 {message}",
        "dmesg --decode": f"kern  :warn  : [{up:12.6f}] {message}",
        "dmesg --decode --time-format=iso": f"kern  :err   : {at:%Y-%m-%dT%H:%M:%S},{us:06d}+00:00 {message}",
        "journalctl short": f"{at:%b %d %H:%M:%S} {HOST} kernel: {message}",
        "journalctl short-iso": f"{at:%Y-%m-%dT%H:%M:%S}+0000 {HOST} kernel: {message}",
        "journalctl short-iso-precise": f"{at:%Y-%m-%dT%H:%M:%S}.{us:06d}+00:00 {HOST} kernel: {message}",
        "journalctl short-precise": f"{at:%b %d %H:%M:%S}.{us:06d} {HOST} kernel: {message}",
        "journalctl short-monotonic": f"[{up:12.6f}] {HOST} kernel: {message}",
        "journalctl cat": message,
        "syslog": f"{day} {at:%H:%M:%S} {HOST} kernel: {message}",
        "syslog with uptime": f"{day} {at:%H:%M:%S} {HOST} kernel: [{up:12.6f}] {message}",
        "syslog RFC 3339": f"{at:%Y-%m-%dT%H:%M:%S}.{us:06d}+00:00 {HOST} kernel: [{up:.6f}] {message}",
        "console broadcast": (
            f"\nMessage from syslogd@{HOST} at {day} {at:%H:%M:%S} ...\n kernel:[{up:.2f}] {message}"
        ),
    }


def verdict(check, text: str, *, uptime: float | None, collected: datetime | None):
    doc = ProbeDocument(
        hostname=HOST,
        collected_at=collected,
        uptime_s=uptime,
        items={"kernel_log": ProbeItem(command="journalctl -k", exit_code=0, stdout=text + "\n")},
    )
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, window=timedelta(hours=24))
    found = [f for f in check(doc, ctx) if f.tag is not Tag.INFO]
    return [(f.tag, f.section, f.node_action) for f in found]


@settings(max_examples=60, deadline=None)
@given(
    event=st.sampled_from(sorted(EVENTS)),
    ago=st.integers(min_value=1, max_value=20 * 3600),
    up=st.integers(min_value=30 * 3600, max_value=40 * 86400),
    micro=st.integers(min_value=0, max_value=999_999),
)
def test_every_form_of_one_event_gives_the_same_verdict(event, ago, up, micro):
    check, message, (tag, section) = EVENTS[event]
    at = NOW - timedelta(seconds=ago, microseconds=micro)
    boot = NOW - timedelta(seconds=up)
    seen = {}
    for name, text in forms(at, boot, message).items():
        # with the node's uptime (the probe document) and without it (a pasted log): never dropped
        for uptime in (float(up), None):
            got = verdict(check, text, uptime=uptime, collected=NOW if uptime else None)
            assert len(got) == 1, (name, uptime, got)
            seen[(name, uptime)] = got[0]
    assert {v[:2] for v in seen.values()} == {(tag, section)}, seen
    assert len({v[2] for v in seen.values()}) == 1, seen


def test_an_event_older_than_the_window_is_history_in_every_dated_form():
    # GIVEN the Xid 79 two days ago on a node up for ten days; every form that carries a time places it
    boot, at = NOW - timedelta(days=10), NOW - timedelta(days=2)
    for name, text in forms(at, boot, EVENTS["xid79"][1]).items():
        got = verdict(check_xid, text, uptime=10 * 86400.0, collected=NOW)
        if name == "journalctl cat":
            # no time at all: this boot's, time unknown; a fault is never turned into a PASS
            assert got[0][0] is Tag.FAIL, got
        elif name == "console broadcast":
            assert got[0][0] is Tag.PASS, (name, got)  # placed by the uptime the kernel printed
        else:
            assert got == [(Tag.PASS, "G.1", None)], (name, got)
