"""The sweep's share of the StartSession budget, decided at run time (design rules of issue 15)."""

from __future__ import annotations

import pytest

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


def test_the_headroom_is_left_for_people():
    assert budget.usable_rate(3.0) == pytest.approx(3.0 * (1 - budget.SESSION_HEADROOM))
    assert budget.usable_rate(3.0) < 3.0
    with pytest.raises(ValueError):
        budget.share(0, clusters=1, cluster_concurrency=1, interval_s=900, elapsed_s=0, probe_timeout_s=120)
