"""The sweep's share of the StartSession budget, decided at run time (design rules of issue 15)."""

from __future__ import annotations

import pytest

from functions.monitor.logic import windows
from functions.shared.env import MonitorEnv, SweepEnv
from hyperpod_debugger.lifecycle import budget


def _share(clusters: int, elapsed: float = 12.0, rate: float = 2.7):
    return budget.share(
        rate, clusters=clusters, cluster_concurrency=3, interval_s=900, elapsed_s=elapsed, probe_timeout_s=120
    )


def test_one_cluster_alone_gets_the_whole_budget_and_three_share_it():
    alone, shared = _share(1), _share(3)
    assert alone.rate == pytest.approx(2.7) and alone.workers * alone.worker_rate == pytest.approx(2.7)
    assert shared.rate == pytest.approx(0.9) and shared.workers == 1
    # more clusters than run at once: the share is of those running, never more than the budget in all
    assert _share(10).rate == pytest.approx(0.9)
    assert all(s.worker_rate <= budget.WORKER_RATE + 1e-9 for s in (alone, shared))


def test_rounds_cover_the_sweep_and_fit_a_lambda_with_its_drain():
    share = _share(1)
    assert share.rounds[0][0] == 12.0 and share.rounds[-1][1] == 900 - budget.STOP_MARGIN_S
    assert all(a[1] == pytest.approx(b[0]) for a, b in zip(share.rounds, share.rounds[1:], strict=False))
    assert all(stop - start + 120 <= budget.LAMBDA_LIFE_S for start, stop in share.rounds)
    # slots for the rate times a slow session; every batch in flight at once, each waiting for its round
    assert share.slots >= share.worker_rate * budget.P95_SESSION_S and share.concurrency == share.workers * 2
    assert share.cap == share.workers * sum(share.batch_size(i) for i in range(len(share.rounds)))


def test_checks_that_ran_past_the_window_leave_nothing_to_probe():
    late = _share(1, elapsed=880)
    assert late.rounds == () and late.cap == 0 and late.concurrency == 1


def test_a_share_of_the_account_rate_is_reserved_for_people_by_default():
    settings = budget.SweepSettings(budget.ACCOUNT_RATE, 3)
    # at least one StartSession a second is left to people at the account's default 3/s
    assert settings.reserve_percent == budget.RESERVE_PERCENT == 34
    assert settings.reserved_rate == pytest.approx(1.02) and settings.reserved_rate >= 1.0
    # the sweep and the event windows' probes together use at most the unreserved part, never more
    assert settings.unreserved_rate == pytest.approx(1.98)
    assert settings.usable_rate == pytest.approx(1.98 - budget.EVENT_WINDOW_RATE) == pytest.approx(1.48)
    assert settings.usable_rate + settings.window_rate <= settings.unreserved_rate + 1e-9
    assert budget.usable_rate(3.0) == pytest.approx(settings.usable_rate)
    # one cluster alone gets the whole sweep part, three share it
    assert _share(1, rate=settings.usable_rate).rate == pytest.approx(1.48)
    assert _share(3, rate=settings.usable_rate).rate == pytest.approx(1.48 / 3)


@pytest.mark.parametrize(("rate", "percent"), [(3, 0), (3, 50), (7, 34), (10, 90)])
def test_the_sweep_and_the_windows_add_up_to_the_unreserved_part(rate, percent):
    settings = budget.SweepSettings(rate, 3, reserve_percent=percent)
    assert settings.reserved_rate == pytest.approx(rate * percent / 100)
    assert settings.usable_rate + settings.window_rate == pytest.approx(rate - settings.reserved_rate)


@pytest.mark.parametrize(
    ("percent", "message"),
    [
        (-1, "startSessionReservePercent .*must be at least 0 and below 100, got -1"),
        (100, "startSessionReservePercent .*must be at least 0 and below 100, got 100"),
        # 80 % of 3 would leave 0.6/s, 0.1 for the sweep; 84 % leaves 0.48, less than the windows' 0.5
        (84, "startSessionReservePercent 84 leaves 0.48 .*event windows' 0.5/s: nothing is left for the sweep"),
    ],
)
def test_a_reserve_that_leaves_the_sweep_nothing_is_refused_naming_the_setting(percent, message):
    with pytest.raises(ValueError, match=message):
        budget.SweepSettings(3, 3, reserve_percent=percent)


def test_the_window_rate_the_budget_counts_is_the_one_the_windows_use():
    assert budget.EVENT_WINDOW_RATE == windows.WINDOW_PROBE_RATE
    assert budget.EVENT_WINDOW_RATE == MonitorEnv.model_fields["EVENT_WINDOW_PROBE_RATE"].default
    # a sweep function without the stack's setting uses the default sweep part, not the whole account's rate
    assert SweepEnv.model_fields["START_SESSION_RATE"].default == pytest.approx(budget.usable_rate(3.0))


def test_a_rate_of_zero_is_refused():
    with pytest.raises(ValueError):
        budget.share(0, clusters=1, cluster_concurrency=1, interval_s=900, elapsed_s=0, probe_timeout_s=120)
