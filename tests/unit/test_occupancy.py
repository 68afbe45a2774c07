"""What runs on a node, read before a drain, reboot or replace is suggested, and how the suggestion says it.

The squeue lines follow the ``-o`` specifiers of squeue(1) (Slurm 23.11: ``%i`` job id, ``%T`` extended state,
``%u`` user, ``%D`` node count, ``%N`` node list in hostlist form, ``%j`` name); the pods follow the
Kubernetes Pod object (``metadata.ownerReferences`` with ``controller: true``; a Deployment's pods belong to
a ReplicaSet named ``<deployment>-<pod-template-hash>``; the Kubeflow training operator makes the PyTorchJob
the controller of its pods).
"""

from __future__ import annotations

from hyperpod_debugger.aws.k8s import parse_pod
from hyperpod_debugger.domain import occupancy as occ
from hyperpod_debugger.domain.observations import ApiFailure, Observed
from hyperpod_debugger.remediation.ladder import refine, verdicts
from hyperpod_debugger.slurm.parse import parse_jobs, slurm_query_command
from tests import builders as b
from tests.unit.test_ladder import IID, _node_finding, _slurm_obs

SLURM_NAME = "ip-10-1-2-3"


def test_the_controller_query_lists_the_jobs_that_occupy_nodes():
    command = slurm_query_command()
    assert "squeue --noheader -t RUNNING,COMPLETING,CONFIGURING,SUSPENDED" in command
    assert '"%i|%T|%u|%D|%N|%j"' in command


def test_jobs_are_parsed_with_their_hostlists_expanded():
    text = (
        "4123|RUNNING|alice|64|ip-10-1-2-[3-66]|llama|pretrain\n"
        "4200_7|SUSPENDED|bob|1|ip-10-1-9-4|array task\n"
        "4300+0|COMPLETING|carol|2|ip-10-1-2-3,ip-10-1-5-7|het\n"
    )
    jobs = parse_jobs(text)
    assert jobs is not None and [j.job_id for j in jobs] == ["4123", "4200_7", "4300+0"]
    assert len(jobs[0].nodes) == 64 and jobs[0].nodes[0] == SLURM_NAME and jobs[0].name == "llama|pretrain"
    assert jobs[2].nodes == ("ip-10-1-2-3", "ip-10-1-5-7") and jobs[1].state == "SUSPENDED"
    assert parse_jobs("") == []  # squeue answered: no job occupies any node


def test_an_error_instead_of_a_job_list_is_not_read_as_idle():
    assert parse_jobs("slurm_load_jobs error: Unable to contact slurm controller (connect failure)") is None
    (unread,) = occ.from_slurm(None, {IID: SLURM_NAME}).values()
    assert not unread.available and "not read" in occ.describe(unread, "squeue -w ip-10-1-2-3")


def test_every_job_on_a_node_is_named_with_its_user_and_size():
    jobs = parse_jobs("4123|RUNNING|alice|64|ip-10-1-2-[3-66]|llama\n4124|RUNNING|bob|1|ip-10-1-2-3|eval\n")
    found = occ.from_slurm(jobs, {IID: SLURM_NAME, "i-0aaaaaaaaaaaaaaaa": "ip-10-1-2-70"}, states={SLURM_NAME: "mix"})
    busy = found[IID].get()
    assert busy.stopped_by_action() == "stops job 4123 (alice, 64 nodes), job 4124 (bob, 1 node)"
    idle = found["i-0aaaaaaaaaaaaaaaa"].get()
    assert not idle.occupied and idle.summary() == "nothing (squeue lists no job on ip-10-1-2-70)"


def _pod(name, kind, owner, *, namespace="training", phase="Running", labels=None):
    return parse_pod(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels or {},
                "ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": owner, "controller": True}],
            },
            "spec": {"nodeName": "hyperpod-" + IID},
            "status": {"phase": phase},
        }
    )


def test_pods_are_grouped_by_workload_and_daemonsets_are_left_out():
    pods = [
        _pod("llama-70b-worker-0", "PyTorchJob", "llama-70b"),
        _pod("llama-70b-worker-1", "PyTorchJob", "llama-70b"),
        _pod("llama-70b-worker-2", "PyTorchJob", "llama-70b"),
        _pod("aws-node-x1", "DaemonSet", "aws-node", namespace="kube-system"),
        _pod("kube-apiserver-proxy", "Node", "hyperpod-" + IID, namespace="kube-system"),
        _pod("web-7d9f8c6b5-abcde", "ReplicaSet", "web-7d9f8c6b5", labels={"pod-template-hash": "7d9f8c6b5"}),
        _pod("done-1", "Job", "nightly", phase="Succeeded"),
    ]
    found = occ.from_pods(IID, "hyperpod-" + IID, pods)
    assert (
        found.stopped_by_action()
        == "evicts 3 pods of training/llama-70b (PyTorchJob), 1 pod of training/web (Deployment)"
    )
    only_daemons = occ.from_pods(IID, "hyperpod-" + IID, pods[3:5])
    assert not only_daemons.occupied and "no pod outside DaemonSets" in only_daemons.summary()


def _commands(findings):
    return [c for f in findings for c in f.suggested_commands]


def test_an_occupied_node_is_drained_first_and_its_jobs_are_named_before_a_replace():
    obs = _slurm_obs()
    jobs = parse_jobs("4123|RUNNING|alice|64|ip-10-1-2-[3-66]|llama\n")
    found = occ.from_slurm(jobs, {IID: SLURM_NAME})
    refined = refine([_node_finding(obs, "replace")], obs, b.context(), occupancy=found)
    steps = [c.step for c in _commands(refined)]
    assert steps.index("drain") < steps.index("replace")
    replace = next(c for c in _commands(refined) if c.step == "replace")
    assert "stops job 4123 (alice, 64 nodes)" in (replace.blast_radius or "")
    assert any("job 4123 (alice, 64 nodes)" in p and "Drain first" in p for p in replace.preconditions)
    (finding,) = refined
    assert "Drain it first" in (finding.next_step or "") and "job 4123" in (finding.next_step or "")
    look = next(c for c in _commands(refined) if not c.mutates and c.command.startswith("squeue"))
    assert look.command == "squeue -w ip-10-1-2-3"
    (verdict,) = verdicts(refined, obs, b.context(), occupancy=found)
    assert verdict.occupancy == "job 4123 (alice, 64 nodes)"


def test_a_node_whose_jobs_could_not_be_read_is_never_called_idle():
    obs = _slurm_obs()
    unread: Observed = Observed.failed(ApiFailure("ssm:StartSession", "timeout", "controller session"))
    refined = refine([_node_finding(obs, "reboot")], obs, b.context(), occupancy={IID: unread})
    reboot = next(c for c in _commands(refined) if c.step == "reboot")
    assert "stops whatever runs there (not read" in (reboot.blast_radius or "")
    assert "squeue -w ip-10-1-2-3" in (reboot.blast_radius or "") and "nothing runs" not in (reboot.blast_radius or "")
    (verdict,) = verdicts(refined, obs, b.context(), occupancy={IID: unread})
    assert verdict.occupancy and verdict.occupancy.startswith("not read (ssm:StartSession timed out)")
    # No occupancy at all (a run that could not read it): the same, never "nothing".
    bare = refine([_node_finding(obs, "reboot")], obs, b.context())
    assert "not read" in (next(c for c in _commands(bare) if c.step == "reboot").blast_radius or "")


def test_only_nodes_on_a_rung_carry_their_occupancy_in_the_verdict():
    obs = _slurm_obs()
    found = occ.from_slurm([], {IID: SLURM_NAME})
    refined = refine([_node_finding(obs, "investigate")], obs, b.context(), occupancy=found)
    (verdict,) = verdicts(refined, obs, b.context(), occupancy=found)
    assert verdict.verdict == "investigate" and verdict.occupancy is None


def test_a_node_slurm_already_drained_is_not_drained_again():
    obs = _slurm_obs()
    found = occ.from_slurm([], {IID: SLURM_NAME}, states={SLURM_NAME: "drained"})
    refined = refine([_node_finding(obs, "reboot")], obs, b.context(), occupancy=found)
    assert [c.step for c in _commands(refined)].count("drain") == 0
    assert "drained already (Slurm state drained)" in (refined[0].next_step or "")
    down = occ.from_slurm([], {IID: SLURM_NAME}, states={SLURM_NAME: "down*"})
    refined = refine([_node_finding(obs, "reboot")], obs, b.context(), occupancy=down)
    assert [c.step for c in _commands(refined)].count("drain") == 1  # a DOWN node is drained so it stays out
