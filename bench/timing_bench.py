"""Benchmark: the time bounds the test tiers used to assert, measured here instead (a loaded machine must
not fail a test; a missed bound fails `make bench`).

    make bench            # or: .venv/bin/python bench/timing_bench.py

* probe.sh on this machine, with hostile tools (3 s per item), with every tool flooding, and with every
  tool hanging and holding its pipes (the default budget): each run ends inside its bound;
* the Session Manager client: a hung agent gives up at its timeout plus the bounded clean-up, a slow
  StartSession does too, a marker without ``channel_closed`` ends after its grace;
* the fake Session Manager: a 2 MiB output completes, the service stops promptly, and its StartSession
  rate limit lets no more calls through than its bucket refilled.

The scenarios are the integration tests' own helpers (``tests/integration``), so both measure one thing.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from botocore.exceptions import ClientError  # noqa: E402

from hyperpod_debugger.aws import ssm_session  # noqa: E402
from hyperpod_sim.fake_ssm import FakeSsm, NodeReply  # noqa: E402
from tests.integration import test_fake_ssm as fake_tests  # noqa: E402
from tests.integration import test_probe_script_run as probe_tests  # noqa: E402
from tests.integration import test_ssm_session as session_tests  # noqa: E402

Bound = tuple[str, float, float]  # (what, seconds taken, bound)


def _probe(scenario: str | None, **extra: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        env = None
        if scenario is not None:
            env = probe_tests.fake_env(probe_tests.make_fakes(tmp_path), scenario, tmp_path, **extra)
        try:
            proc, wall = probe_tests.run_probe(env, cwd=cwd)
        finally:
            probe_tests.kill_leftovers(tmp_path)
        probe_tests.check_document(proc.stdout)
        return wall


def probe_script() -> list[Bound]:
    return [
        ("probe.sh on this machine", _probe(None), 60.0),
        ("probe.sh, hostile tools (3 s per item)", _probe("hostile", HYPERPOD_PROBE_MAX_TIMEOUT_S="3"), 30.0),
        ("probe.sh, every tool flooding", _probe("flood"), 60.0),
        ("probe.sh, every tool hanging (default budget)", _probe("stuck"), 60.0),
    ]


def session_client() -> list[Bound]:
    hung = session_tests.run_session(session_tests.Behaviour(hang=True), timeout=1.0)
    assert hung.error is not None and hung.error.outcome == "TIMEOUT"

    class Slow(session_tests.FakeSSM):
        def start_session(self, **kwargs):
            time.sleep(1.0)
            return super().start_session(**kwargs)

    slow = session_tests.run_session(ssm=Slow(), timeout=0.3)
    assert slow.error is not None and slow.error.outcome == "TIMEOUT"
    saved = ssm_session.MARKER_GRACE
    ssm_session.MARKER_GRACE = 0.2
    try:
        grace = session_tests.run_session(
            session_tests.Behaviour(old_agent=True, send_channel_closed=False), command="echo hi"
        )
    finally:
        ssm_session.MARKER_GRACE = saved
    return [
        ("session: hung agent, timeout 1 s", hung.elapsed, 1.0 + ssm_session.CLOSE_TIMEOUT + 1.0),
        ("session: StartSession slower than the 0.3 s timeout", slow.elapsed, 0.9),
        ("session: marker without channel_closed (grace 0.2 s)", grace.elapsed, 5.0),
    ]


def fake_service() -> list[Bound]:
    out: list[Bound] = []
    with FakeSsm() as fake:
        ssm = fake_tests.ssm_client(fake)
        body = bytes(range(256)) * (2 * 1024 * 1024 // 256)
        began = time.monotonic()
        result, _ = fake_tests.session(fake, ssm, NodeReply(body, b"tail\n", 0), timeout=60)
        assert result.stdout == body
        out.append(("fake SSM: a 2 MiB output", time.monotonic() - began, 30.0))
        began = time.monotonic()
    out.append(("fake SSM: stop", time.monotonic() - began, 5.0))
    with FakeSsm(start_session_rate=5.0) as service:
        service.add_node(fake_tests.TARGET, NodeReply())
        ssm = fake_tests.ssm_client(service)
        oks, began = 0, time.monotonic()
        for _ in range(10):
            try:
                fake_tests.start(ssm)
                oks += 1
            except ClientError:
                pass
        elapsed = time.monotonic() - began
    # the burst of 5, then no more than the bucket refilled meanwhile (5 a second)
    out.append(("fake SSM: calls let through beyond the bucket's refill", float(oks), 5 + 5 * elapsed + 1))
    return out


def main() -> int:
    bounds: list[Bound] = []
    groups: list[Callable[[], list[Bound]]] = [probe_script, session_client, fake_service]
    for group in groups:
        bounds.extend(group())
    width = max(len(what) for what, _, _ in bounds)
    print("timing: bounds the test tiers do not assert (seconds, except where a count is named)")
    for what, took, bound in bounds:
        print(f"  [{'PASS' if took < bound else 'FAIL'}] {what:{width}}  {took:7.2f}  (< {bound:.2f})")
    return 0 if all(took < bound for _, took, bound in bounds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
