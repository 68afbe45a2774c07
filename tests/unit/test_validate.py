from __future__ import annotations

import pytest

from hyperpod_debugger.domain import validate


@pytest.mark.parametrize("region", ["us-west-2", "us-gov-west-1", "ap-southeast-1", "eu-isoe-west-1", "cn-north-1"])
def test_real_region_names_are_accepted(region):
    assert validate.region(region) == region


@pytest.mark.parametrize("region", ["", "US-WEST-2", "us-west", "us_west_2", "us-west-2;id"])
def test_bad_regions_are_refused(region):
    with pytest.raises(validate.InvalidArgument):
        validate.region(region)


@pytest.mark.parametrize(
    "value",
    [
        "ml-cluster",
        "a",
        "A1-b2",
        "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh",
        "arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:cluster/lw12e0dn1hhd",
    ],
)
def test_cluster_names_and_arns_are_accepted(value):
    assert validate.cluster(value) == value


@pytest.mark.parametrize(
    "value", ["-lead", "has space", "x" * 64, "arn:aws:sagemaker:us-west-2:1234:cluster/abc", "g1;rm -rf /"]
)
def test_bad_cluster_values_are_refused(value):
    with pytest.raises(validate.InvalidArgument):
        validate.cluster(value)


@pytest.mark.parametrize("value", ["i-0123abcd", "i-0123456789abcdef0"])
def test_instance_ids(value):
    assert validate.instance_id(value) == value


@pytest.mark.parametrize("value", ["i-123", "i-0123456789ABCDEF0", "0123abcd", "i-0123abcd0"])
def test_bad_instance_ids(value):
    with pytest.raises(validate.InvalidArgument):
        validate.instance_id(value)


def test_the_region_is_read_from_an_arn():
    assert validate.region_of_arn("arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:cluster/lw12e0dn1hhd") == (
        "us-gov-west-1"
    )
