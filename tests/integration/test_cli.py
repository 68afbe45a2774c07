"""The CLI's contract: arguments, exit codes, region fallback, JSON output, colour."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.cli.main import main
from hyperpod_sim import scenarios
from hyperpod_sim.server import simulated_aws


@pytest.fixture(scope="module")
def server():
    with simulated_aws() as endpoint:
        demo = scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), datetime.now(UTC))
        yield demo, endpoint


@pytest.fixture
def endpoint_env(server, monkeypatch):
    demo, endpoint = server
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return demo


@pytest.mark.parametrize(
    "argv",
    [
        ["triage", "--cluster", "bad name", "--region", "us-west-2"],
        ["triage", "--cluster", "ok", "--region", "mars-1"],
        ["triage", "--cluster", "ok", "--region", "us-west-2", "--node", "i-xyz"],
        [
            "triage",
            "--cluster",
            "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh",
            "--region",
            "us-west-2",
        ],
        ["triage", "--region", "us-west-2"],
        ["triage", "--cluster", "ok", "--region", "us-west-2", "--since-hours", "-3"],
    ],
)
def test_invalid_arguments_exit_2_before_any_call(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_no_region_anywhere_is_an_invalid_argument(monkeypatch, capsys):
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert main(["triage", "--cluster", "ok"]) == 2
    assert "Region" in capsys.readouterr().err


def test_triage_json_exit_1_and_region_from_environment(endpoint_env, monkeypatch, capsys):
    monkeypatch.setenv("AWS_DEFAULT_REGION", scenarios.REGION)
    code = main(["triage", "--cluster", endpoint_env.eks.name, "--json", "--no-probe"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 == doc["exit_code"]
    assert doc["cluster"]["region"] == scenarios.REGION


def test_triage_text_is_plain_when_not_a_tty(endpoint_env, capsys):
    main(["triage", "--cluster", endpoint_env.slurm.name, "--region", scenarios.REGION, "--no-probe"])
    out = capsys.readouterr().out
    assert "\033[" not in out and "[PASS]" in out and "== Summary ==" in out


def test_unknown_cluster_exits_1_and_lists_clusters(endpoint_env, capsys):
    code = main(["triage", "--cluster", "nope", "--region", scenarios.REGION, "--no-probe"])
    captured = capsys.readouterr()
    assert code == 1
    assert endpoint_env.eks.name in captured.out and "nope" in captured.err


def test_cluster_by_arn(endpoint_env, capsys):
    code = main(["triage", "--cluster", endpoint_env.slurm.arn, "--json", "--no-probe"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["cluster"]["name"] == endpoint_env.slurm.name


def test_schema_and_policy_commands(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "TriageReport"
    assert main(["iam-policy"]) == 0
    assert "sagemaker:ListClusterNodes" in capsys.readouterr().out


def test_an_unexpected_error_is_a_message_not_a_traceback(monkeypatch, capsys):
    import hyperpod_debugger.triage as triage

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(triage, "run_triage", broken)
    monkeypatch.delenv("HYPERPOD_DEBUGGER_DEBUG", raising=False)
    assert main(["triage", "--cluster", "ok", "--region", "us-west-2"]) == 1
    err = capsys.readouterr().err
    assert "unexpected error: RuntimeError: boom" in err and "Traceback" not in err
