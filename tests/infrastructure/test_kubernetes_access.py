"""EKS access entries: read-only Kubernetes access for the functions that triage EKS clusters."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from infra.constructs.kubernetes_access import validate_eks_clusters
from tests.infrastructure.conftest import synth

LOG_GROUP = "/aws/sagemaker/Clusters/ml-eks-prod/abc123def456"


@pytest.fixture(scope="module")
def with_eks(tmp_path_factory) -> Template:
    return synth(tmp_path_factory, eksClusters="ml-eks-prod-eks,second_cluster", clusterLogGroups=LOG_GROUP)[1]


def _role_of(template: Template, function_prefix: str) -> str:
    functions = template.find_resources("AWS::Lambda::Function")
    [role] = [f["Properties"]["Role"]["Fn::GetAtt"][0] for k, f in functions.items() if k.startswith(function_prefix)]
    return role


def test_each_triaging_role_gets_a_cluster_scoped_view_entry_on_each_eks_cluster(with_eks: Template):
    entries = with_eks.find_resources("AWS::EKS::AccessEntry")
    # the functions that run a triage: the event window and the sweep's cluster step (the event and log
    # functions only keep events for their windows)
    triaging = {_role_of(with_eks, p) for p in ("DetectionEventWindow", "SweepSweepCluster")}
    pairs = set()
    for entry in entries.values():
        props = entry["Properties"]
        assert props["Type"] == "STANDARD"
        [policy] = props["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert policy["PolicyArn"]["Fn::Join"][1][-1].endswith(
            ":eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy"
        )
        pairs.add((props["ClusterName"], props["PrincipalArn"]["Fn::GetAtt"][0]))
    assert pairs == {(c, r) for c in ("ml-eks-prod-eks", "second_cluster") for r in triaging}
    assert len(entries) == 4


def test_probe_and_notifier_roles_get_no_kubernetes_access(with_eks: Template):
    principals = {
        e["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]
        for e in with_eks.find_resources("AWS::EKS::AccessEntry").values()
    }
    assert _role_of(with_eks, "SweepProbeBatch") not in principals
    assert _role_of(with_eks, "NotificationsStreamNotifier") not in principals


def test_no_eks_clusters_no_access_entries(template: Template):
    assert template.find_resources("AWS::EKS::AccessEntry") == {}


@pytest.mark.parametrize(
    "bad", ["arn:aws:eks:us-west-2:111122223333:cluster/x", "-leading-dash", "has space", "x" * 101]
)
def test_an_entry_that_is_not_an_eks_cluster_name_stops_the_synth(bad):
    with pytest.raises(ValueError, match="eksClusters"):
        validate_eks_clusters([bad])


def test_duplicates_are_dropped_in_order():
    assert validate_eks_clusters(["b", "a", "b"]) == ["b", "a"]
