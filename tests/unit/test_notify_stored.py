"""Stored finding → notice: the conversion the stream notifier and the demo share."""

from __future__ import annotations

import pytest

from hyperpod_debugger.lifecycle.findings import TransitionKind
from hyperpod_debugger.notify.stored import cluster_label, notice_of, region_of


def test_cluster_label_is_the_id_of_an_arn_and_anything_else_unchanged():
    assert cluster_label("arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd") == "lw12e0dn1hhd"
    assert cluster_label("ml-eks-prod") == "ml-eks-prod"


def test_cluster_label_prefers_the_stored_name():
    arn = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
    assert cluster_label(arn, "ml-eks-prod") == "ml-eks-prod"
    assert cluster_label(arn, None) == cluster_label(arn, "") == "lw12e0dn1hhd"


def test_region_comes_from_the_arn_or_the_default():
    assert region_of("arn:aws:sagemaker:eu-north-1:111122223333:cluster/lw12e0dn1hhd", "us-west-2") == "eu-north-1"
    assert region_of("ml-eks-prod", "us-west-2") == "us-west-2"


@pytest.mark.parametrize("kind", [TransitionKind.UNCHANGED, TransitionKind.ACKNOWLEDGED])
def test_a_transition_nobody_is_told_about_has_no_notice(kind):
    with pytest.raises(ValueError, match="not notified"):
        notice_of(kind, "2026-11-30T10:00:00+00:00", None, "us-west-2")  # type: ignore[arg-type]
