"""The CLI's contract: arguments, exit codes, region fallback, JSON output, colour."""

from __future__ import annotations

import json
import re
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
    short = capsys.readouterr().out
    assert "\033[" not in short and "== Node verdicts" in short and "== Summary ==" in short
    main(["triage", "--cluster", endpoint_env.slurm.name, "--region", scenarios.REGION, "--no-probe", "--verbose"])
    full = capsys.readouterr().out
    assert "\033[" not in full and "[PASS]" in full and "== Summary ==" in full


def test_unknown_cluster_is_could_not_look_and_lists_clusters(endpoint_env, capsys):
    code = main(["triage", "--cluster", "nope", "--region", scenarios.REGION, "--no-probe"])
    captured = capsys.readouterr()
    assert code == 3  # could not look: not "problems found"
    assert endpoint_env.eks.name in captured.out and "nope" in captured.err
    assert "did you mean" not in captured.err  # nothing is close to "nope"


def test_a_misspelt_cluster_name_gets_did_you_mean(endpoint_env, capsys):
    code = main(["triage", "--cluster", "ml-eks-prd", "--region", scenarios.REGION, "--no-probe", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 3 == report["exit_code"] and report["error"]["kind"] == "cluster_not_found"
    assert f"did you mean {endpoint_env.eks.name}?" in report["error"]["message"]
    # ListClusters came only after DescribeCluster said there is no such cluster
    assert report["coverage"]["api_calls"].get("sagemaker:ListClusters") == 1


def test_list_clusters_is_not_called_for_a_cluster_that_exists_and_is_in_the_policy(endpoint_env, capsys):
    main(["triage", "--cluster", endpoint_env.slurm.name, "--region", scenarios.REGION, "--no-probe", "--json"])
    assert "sagemaker:ListClusters" not in json.loads(capsys.readouterr().out)["coverage"]["api_calls"]
    assert main(["iam-policy"]) == 0
    assert "sagemaker:ListClusters" in json.loads(capsys.readouterr().out)["Statement"][0]["Action"]


def test_no_credentials_is_could_not_look(endpoint_env, aws_config, monkeypatch, capsys):
    # GIVEN the default profile, which has no credentials, and no other source of them
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    code = main(["triage", "--cluster", endpoint_env.eks.name, "--region", scenarios.REGION, "--no-probe", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 3 == report["exit_code"] and report["error"]["kind"] == "credentials"


def test_access_denied_to_the_first_calls_is_could_not_look(endpoint_env, monkeypatch, capsys):
    from tests.fakes import inject_error

    clients = AwsClients(scenarios.REGION, max_attempts=1)
    inject_error(clients, "sagemaker", "DescribeCluster", "AccessDeniedException", message="not authorized")
    monkeypatch.setattr(AwsClients, "for_profile", lambda *_a, **_k: clients)
    for fail_on in ("P0", "P1"):
        code = main(
            ["triage", "--cluster", endpoint_env.eks.name, "--region", scenarios.REGION, "--json"]
            + ["--fail-on", fail_on]
        )
        report = json.loads(capsys.readouterr().out)
        # THEN nothing was looked at: exit 3 whatever --fail-on says, the missing permission named
        assert code == 3 == report["exit_code"]
        assert [f["check"] for f in report["findings"]] == ["iam.permission"]
        assert "sagemaker:DescribeCluster" in report["findings"][0]["message"]


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
    assert main(["triage", "--cluster", "ok", "--region", "us-west-2"]) == 4  # the tool failed: its own code
    err = capsys.readouterr().err
    assert "unexpected error: RuntimeError: boom" in err and "Traceback" not in err


# --------------------------------------------------------------------------- the AWS CLI's conventions


@pytest.fixture
def aws_config(tmp_path, monkeypatch):
    """A ~/.aws of our own: profile "prod" with its Region, credentials for it (accepted by the simulator)."""
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n\n[profile prod]\nregion = us-west-2\n")
    credentials = tmp_path / "credentials"
    credentials.write_text("[prod]\naws_access_key_id = AKIAPRODEXAMPLE00000\naws_secret_access_key = prod-secret\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    return config


def test_profile_gives_credentials_and_its_region(endpoint_env, aws_config, capsys):
    # GIVEN --profile prod (region = us-west-2 in its config) and no --region anywhere
    code = main(["triage", "--cluster", endpoint_env.eks.name, "--profile", "prod", "--no-probe", "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    # THEN the triage ran in the profile's Region, against the simulated account
    assert report["error"] is None and report["cluster"]["region"] == "us-west-2"
    assert report["cluster"]["name"] == endpoint_env.eks.name and code in (0, 1)


def test_aws_profile_is_honoured_like_the_aws_cli(endpoint_env, aws_config, monkeypatch, capsys):
    monkeypatch.setenv("AWS_PROFILE", "prod")
    code = main(["triage", "--cluster", endpoint_env.eks.name, "--no-probe", "--json"])
    assert json.loads(capsys.readouterr().out)["cluster"]["region"] == "us-west-2" and code in (0, 1)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_profile_that_does_not_exist_says_which_do(how, aws_config, monkeypatch, capsys):
    argv = ["triage", "--cluster", "ok", "--no-probe"]
    if how == "flag":
        argv += ["--profile", "staging"]
    else:
        monkeypatch.setenv("AWS_PROFILE", "staging")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "profile 'staging' not found" in err and "prod" in err and "unexpected error" not in err


@pytest.mark.parametrize(
    ("cluster", "region", "said"),
    [
        ("arn:aws:sagemaker:cn-north-1:123456789012:cluster/abcd1234efgh", None, "arn:aws-cn:"),
        ("arn:aws-us-gov:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh", None, "arn:aws:"),
        ("ml-eks-prod", "us-west-9", "did you mean us-west-2"),
    ],
    ids=["aws-arn-in-china", "govcloud-arn-in-commercial", "misspelt-region"],
)
def test_partition_and_region_are_checked_against_the_sdks_endpoint_data(cluster, region, said, aws_config, capsys):
    argv = ["triage", "--cluster", cluster, "--no-probe"] + (["--region", region] if region else [])
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_invalid_arguments_under_json_print_the_json_error_too(aws_config, capsys):
    assert main(["triage", "--cluster", "bad name", "--region", "us-west-2", "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["error"]["kind"] == "invalid_argument" and "bad name" in report["error"]["message"]
    assert report["exit_code"] == 2 and report["findings"] == []
    assert "error" in captured.err


@pytest.mark.parametrize("fail_on", ["P0", "P1", "P2"])
def test_fail_on_sets_which_problems_fail_the_run(endpoint_env, monkeypatch, fail_on, capsys):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    got = main(["triage", "--cluster", endpoint_env.eks.name, "--no-probe", "--json", "--fail-on", fail_on])
    report = json.loads(capsys.readouterr().out)
    worst = min((f["priority"] for f in report["findings"] if f["tag"] in ("FAIL", "WARN", "UNKNOWN")), default="P9")
    assert got == (1 if worst <= fail_on else 0)


def test_subcommand_help_gives_an_example_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["triage", "--help"])
    out = capsys.readouterr().out
    assert "example:" in out and "exit codes:" in out and "--profile" in out and "--fail-on" in out
    codes = out.split("exit codes:", 1)[1]
    for code, meaning in (("0", "no problem"), ("1", "a problem"), ("2", "invalid"), ("3", "could not look")):
        assert re.search(rf"^  {code} +{meaning}", codes, re.M), codes


def test_a_node_outside_the_cluster_is_refused_before_the_triage(endpoint_env, monkeypatch, capsys):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    code = main(["triage", "--cluster", endpoint_env.eks.name, "--node", "i-0000000000000000a", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 2 and report["error"]["kind"] == "invalid_argument"
    assert "i-0000000000000000a is not a node of cluster" in report["error"]["message"]
    assert "list-cluster-nodes" in report["error"]["message"] and report["findings"] == []
    # only the cluster and the one node were asked about
    assert set(report["coverage"]["api_calls"]) <= {
        "sts:GetCallerIdentity",
        "sagemaker:DescribeCluster",
        "sagemaker:DescribeClusterNode",
    }
