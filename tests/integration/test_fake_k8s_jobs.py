"""The fake EKS API server's PyTorchJobs and label selectors, read through the product's own Kubernetes client
(aws/k8s.py: token, TLS), and the EKS jobs cluster (sim/hyperpod_sim/eks_job_scenarios.py) healthy but for what
its scenarios put there (issue 33)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest

from hyperpod_debugger.aws.errors import ApiCallError
from hyperpod_debugger.aws.k8s import eks_token, open_reader
from hyperpod_debugger.domain.observations import EksCluster
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.remediation.culprits import JOB_SECTIONS
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import eks_job_scenarios as scenario
from hyperpod_sim import seed
from hyperpod_sim.fake_k8s import FakeKubernetes
from hyperpod_sim.probe_docs import OLD_DRIVER
from hyperpod_sim.scenarios import REGION

FAST = ProbeOptions(rate=50.0, timeout=5.0)
JOBS = f"/apis/kubeflow.org/v1/namespaces/{scenario.NAMESPACE}/pytorchjobs"
PODS = f"/api/v1/namespaces/{scenario.NAMESPACE}/pods"


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with scenario.simulated_eks_jobs(now) as (world, ssm, kube, endpoint):
        yield world, ssm, kube, now, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    world, ssm, kube, now, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    yield world, kube, now
    kube.forbid = set()
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def _reader(kube: FakeKubernetes):
    eks = EksCluster(
        name=scenario.EKS_NAME,
        arn=f"arn:aws:eks:{REGION}:{seed.ACCOUNT}:cluster/{scenario.EKS_NAME}",
        status="ACTIVE",
        vpc_id=None,
        security_group_ids=(),
        cluster_security_group_id=None,
        authentication_mode="API_AND_CONFIG_MAP",
        endpoint_public=True,
        endpoint_private=True,
        endpoint=kube.endpoint,
        certificate_authority=kube.ca_data,
    )
    token = eks_token(boto3.session.Session(region_name=REGION), scenario.EKS_NAME, REGION)
    return open_reader(eks, token)


def _failure(call) -> ApiCallError:
    with pytest.raises(ApiCallError) as caught:
        call()
    return caught.value


# --------------------------------------------------------------------------- PyTorchJobs


def test_a_pytorchjob_is_read_by_name_as_the_training_operator_left_it(world):
    world, kube, _ = world
    with _reader(kube) as reader:
        job = reader.get(f"{JOBS}/llama-70b", what="get pytorchjob llama-70b")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert job["metadata"]["name"] == "llama-70b" and job["metadata"]["namespace"] == "training"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    assert [(c["type"], c["status"]) for c in job["status"]["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Failed", "True"),
    ]
    failed = job["status"]["conditions"][-1]
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == "PyTorchJob training/llama-70b is failed because 1 Worker replica(s) failed."
    llama = world.jobs[0]
    assert job["status"]["completionTime"] == failed["lastTransitionTime"] == llama.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert job["status"]["replicaStatuses"]["Worker"]["failed"] == 3


def test_the_jobs_are_listed_per_namespace(world):
    world, kube, _ = world
    with _reader(kube) as reader:
        listed = reader.get_list(JOBS, what="list pytorchjobs in namespace training")
        elsewhere = reader.get_list("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", what="list default")
    assert [j["metadata"]["name"] for j in listed] == [j.name for j in world.jobs]
    assert elsewhere == []


def test_a_missing_pytorchjob_is_a_404_not_found_status(world):
    _, kube, _ = world
    with _reader(kube) as reader:
        failure = _failure(lambda: reader.get(f"{JOBS}/no-such-job", what="get pytorchjob no-such-job")).failure
    assert failure.code == "NotFound" and 'pytorchjobs.kubeflow.org "no-such-job" not found' in failure.message
    # the body itself, as the API server writes it
    token = eks_token(boto3.session.Session(region_name=REGION), scenario.EKS_NAME, REGION)
    code, body = kube.handle("GET", f"{JOBS}/no-such-job", f"Bearer {token}")
    assert code == 404
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pytorchjobs.kubeflow.org "no-such-job" not found',
        "reason": "NotFound",
        "details": {"name": "no-such-job", "group": "kubeflow.org", "kind": "pytorchjobs"},
        "code": 404,
    }


def test_rbac_on_pytorchjobs_names_the_kubeflow_group_and_the_verb(world):
    _, kube, _ = world
    kube.forbid = {"pytorchjobs"}
    with _reader(kube) as reader:
        get = _failure(lambda: reader.get(f"{JOBS}/llama-70b", what="get pytorchjob llama-70b")).failure
        listed = _failure(lambda: reader.get_list(JOBS, what="list pytorchjobs")).failure
        pods = reader.get_list(PODS, what="list pods in namespace training")
    assert get.kind == "denied" and listed.kind == "denied"
    assert 'pytorchjobs.kubeflow.org "llama-70b" is forbidden' in get.message
    assert 'cannot get resource "pytorchjobs" in API group "kubeflow.org" in the namespace "training"' in get.message
    assert 'cannot list resource "pytorchjobs" in API group "kubeflow.org"' in listed.message
    assert pods  # the other resources are still served


# --------------------------------------------------------------------------- label selectors


def test_a_label_selector_keeps_the_pods_with_every_label(world):
    world, kube, _ = world
    sft = world.jobs[1]
    with _reader(kube) as reader:
        job_pods = reader.get_list(
            PODS, what="list the job's pods", params={"labelSelector": "training.kubeflow.org/job-name=sft-ablation"}
        )
        [master] = reader.get_list(
            PODS,
            what="list the job's master",
            params={
                "labelSelector": "training.kubeflow.org/job-name=sft-ablation,"
                "training.kubeflow.org/replica-type==master"
            },
        )
        none = reader.get_list(PODS, what="no such job", params={"labelSelector": "training.kubeflow.org/job-name=x"})
    assert sorted(p["metadata"]["name"] for p in job_pods) == ["sft-ablation-master-0", "sft-ablation-worker-0"]
    assert none == []
    # the pod that failed the job: on worker 0, OOMKilled
    assert master["spec"]["nodeName"] == f"hyperpod-{world.worker(sft, 0)}"
    assert master["status"]["phase"] == "Failed"
    [container] = master["status"]["containerStatuses"]
    assert container["name"] == "pytorch"
    terminated = container["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137) == (sft.reason, sft.exit_code)
    assert terminated["finishedAt"] == sft.end.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    "selector",
    ["training.kubeflow.org/job-name!=llama-70b", "training.kubeflow.org/job-name in (llama-70b,sft-ablation)",
     "training.kubeflow.org/job-name", "!training.kubeflow.org/job-name", "app=a,"],
)  # fmt: skip
def test_a_selector_other_than_equality_is_a_400(world, selector):
    _, kube, _ = world
    with _reader(kube) as reader:
        failure = _failure(lambda: reader.get_list(PODS, what="list pods", params={"labelSelector": selector}))
    assert failure.failure.code == "BadRequest" and "HTTP 400" in failure.failure.message
    assert kube.requests[-1].status == 400


# --------------------------------------------------------------------------- the cluster is healthy


def test_the_triage_finds_only_what_the_scenarios_put_there(world):
    world, kube, now = world
    report = run_triage(
        TriageRequest(cluster=scenario.EKS_JOBS_CLUSTER, region=REGION, now=now, probe=True, probe_options=FAST)
    )
    workers = world.cluster.nodes[scenario.WORKERS]
    problems = [f for f in report.findings if f.is_problem and (f.section or "")[:1] in JOB_SECTIONS]
    found = sorted((f.check, f.section, f.instance_id or "") for f in problems)
    assert found == [("logs.hma", "G", workers[2]), ("probe.software_skew", "E", "")], found
    # the old driver: worker 2 alone, against workers 0, 1 and 3
    [skew] = [f for f in problems if f.check == "probe.software_skew"]
    assert skew.instance_group == scenario.WORKERS
    [old] = [line for line in skew.evidence if line.startswith(OLD_DRIVER)]
    assert workers[2] in old and not any(workers[i] in old for i in (0, 1, 3))
    # the Kubernetes side was read, every read answered
    assert any(r.path == "/api/v1/nodes" and r.status == 200 for r in kube.requests)
    assert not [f for f in report.findings if f.check.startswith("k8s.") and f.is_problem]
