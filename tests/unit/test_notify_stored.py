"""Stored finding → the cluster label people are shown."""

from __future__ import annotations

from hyperpod_debugger.notify.stored import cluster_label


def test_cluster_label_is_the_id_of_an_arn_and_anything_else_unchanged():
    assert cluster_label("arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd") == "lw12e0dn1hhd"
    assert cluster_label("ml-eks-prod") == "ml-eks-prod"


def test_cluster_label_prefers_the_stored_name():
    arn = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
    assert cluster_label(arn, "ml-eks-prod") == "ml-eks-prod"
    assert cluster_label(arn, None) == cluster_label(arn, "") == "lw12e0dn1hhd"
