"""The stack's settings: one model (``infra/settings.py``), README's table of them, and the README's deploy.

The deploy test runs the README's deploy block as written, with the pinned CDK CLI and no AWS credentials,
and finds each of its ``-c`` settings in the template the CLI synthesized on the way.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable

import pytest

from hyperpod_debugger.domain import eventbridge
from infra import constants as c
from infra.settings import SettingsError, StackSettings
from tests.infrastructure.conftest import synth
from tests.markdown import scan

REPO = pathlib.Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

# --- README's deploy section ------------------------------------------------------------------------------


def deploy_section() -> str:
    start = README.index("\n## Deploy the monitor\n")
    end = README.index("\n## ", start + 1)
    return README[start:end]


def settings_table() -> dict[str, str]:
    """README's "Every setting" table: key → its default cell."""
    section = deploy_section()
    after = section[section.index("#### Every setting") :].splitlines()[1:]
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    table = itertools.takewhile(lambda line: line.startswith("|"), after[start:])
    rows = [line for line in table if line.startswith("| `")]
    out: dict[str, str] = {}
    for row in rows:
        key, default, _meaning = (cell.strip() for cell in row.strip().strip("|").split("|", 2))
        named = re.fullmatch(r"`(\w+)`", key)
        assert named, f"{key} is not a setting's key in backticks"
        (name,) = named.groups()
        assert name not in out, f"{name} is documented twice"
        out[name] = default
    return out


def deploy_block() -> list[str]:
    """The commands of the README's deploy block (the one ```sh block under "#### Deploy"), each as written:
    continuation lines kept."""
    section = deploy_section()
    start = section.index("\n#### Deploy\n")
    _, fences, _ = scan(section[start : section.index("\n#### ", start + 1)])
    [block] = [f.body for f in fences if f.lang == "sh"]
    commands: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        pending += line + "\n"
        if not line.rstrip().endswith("\\"):
            commands.append(pending.rstrip("\n"))
            pending = ""
    assert not pending, "the deploy block ends inside a command"
    return commands


def deploy_command() -> str:
    [command] = [cmd for cmd in deploy_block() if "cdk deploy" in cmd]
    return command


def deploy_settings() -> dict[str, str]:
    """The ``-c key=value`` pairs of the README's deploy command."""
    words = shlex.split(deploy_command(), comments=True)
    pairs = [words[i + 1] for i, word in enumerate(words) if word in ("-c", "--context")]
    return dict(pair.split("=", 1) for pair in pairs)


# --- the model and the table ------------------------------------------------------------------------------

FIELDS = {field.alias or name: field for name, field in StackSettings.model_fields.items()}


def test_every_setting_is_in_readmes_table_and_every_key_there_is_a_setting():
    documented = settings_table()
    assert sorted(set(FIELDS) - set(documented)) == [], "settings the README's table does not document"
    assert sorted(set(documented) - set(FIELDS)) == [], "keys the README documents that are no setting"


def _written(default) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, list):
        return ",".join(default)
    if isinstance(default, float | int):
        return f"{default:g}"
    return str(default)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_the_tables_default_is_the_models(key):
    default = FIELDS[key].get_default(call_default_factory=True)
    cell = settings_table()[key]
    code = re.match(r"`([^`]*)`", cell)
    if default in (None, "", []):
        # no value of its own: the cell says what happens instead ("none: …"), or names the setting it follows
        assert code is None or code.group(1) in FIELDS, cell
    else:
        assert code is not None and code.group(1) == _written(default), cell


def test_the_constants_name_every_setting():
    # the keys come from infra/constants.py, and every CTX_ constant there is a setting (or the layer's path)
    keys = {v for k, v in vars(c).items() if k.startswith("CTX_")}
    assert keys - set(FIELDS) == {c.CTX_LAYER_DIR}
    assert set(FIELDS) <= keys


# --- values: read as the CLI passes them, refused naming the key --------------------------------------------


def test_a_misspelt_key_stops_the_synth_naming_the_setting_it_is_closest_to(tmp_path_factory):
    with pytest.raises(
        SettingsError, match=r"alertEmail is not a setting of this stack \(did you mean alertEmails\?\)"
    ):
        synth(tmp_path_factory, alertEmail="oncall@example.com")


def test_a_key_like_no_setting_says_where_the_settings_are_listed():
    with pytest.raises(SettingsError, match="zzz is not a setting of this stack .README.md's settings table"):
        StackSettings.from_mapping({"zzz": "1"})


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("sweepSchedule", "cron(0/15 * * * ? *)", "must be a rate expression such as 'rate(15 minutes)'"),
        ("sweepSchedule", "rate(0 minutes)", "needs a positive interval"),
        ("logRetentionDays", "60", "must be one of 7, 14, 30, 90, 180, 365, got '60'"),
        ("alertMinPriority", "P3", "must be P0, P1 or P2, got 'P3'"),
        ("chatMinPriority", "urgent", "must be P0, P1 or P2, got 'urgent'"),
        ("alertGroupWaitSeconds", "301", "must be a whole number from 0 to 300, got '301'"),
        ("dailySummaryHourUtc", 9.5, "must be a whole number from 0 to 23, got 9.5"),
        ("repairGraceMinutes", "4", "must be a whole number from 5 to 1440, got '4'"),
        ("findingsTtlDays", "0", "must be a whole number from 1 to 3650, got '0'"),
        ("findingsTtlDays", "3651", "must be a whole number from 1 to 3650, got '3651'"),
        ("startSessionRate", "0", "must be a whole number of at least 1, got '0'"),
        ("sweepClusterConcurrency", "two", "must be a number, got 'two'"),
        ("probePeriodHours", "0", "must be above 0, got '0'"),
        ("startSessionReservePercent", "100", "must be at least 0 and below 100, got '100'"),
        ("unknownShareAlarmPercent", True, "must be a number, got True"),
        (
            "dailySummaryChannels",
            "email,pager",
            "names channels of ['chat', 'email', 'slack'] (or none), got ['pager']",
        ),
        ("chatNotifications", "yes", "must be true or false, got 'yes'"),
        ("sessionDocuments", "custom", "must be one of pinned, aws, got 'custom'"),
        ("alertEmails", "oncall", "takes email addresses, got 'oncall'"),
        ("slackSecretName", "team slack", "takes a Secrets Manager secret name"),
        ("runbookBaseUrl", "github.com/my-org/x", "takes an http(s):// URL"),
        ("findingsEventBus", "findings bus", "must be 'default', an event bus name or an event bus ARN"),
        ("clusterAllowlist", "ml-eks-prod,bad name", ": not a HyperPod cluster name"),
        ("clusterAllowlist", "[not json", "must be a list (a JSON list or comma-separated text)"),
        ("eksClusters", "-dash", "takes EKS cluster names"),
        ("clusterLogGroups", "/aws/lambda/x", "entry '/aws/lambda/x' is not a HyperPod cluster log group"),
        ("hmaFilterPattern", "x" * 1025, "takes a pattern of 1 to 1024 characters"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key_and_what_it_takes(key, value, said):
    with pytest.raises(SettingsError) as refused:
        StackSettings.from_mapping({key: value})
    assert str(refused.value).startswith(key)
    assert said in str(refused.value)


def test_every_problem_is_told_at_once_one_line_each():
    with pytest.raises(SettingsError) as refused:
        StackSettings.from_mapping({"alertEmail": "a@example.com", "findingsTtlDays": "0", "alertMinPriority": "P9"})
    lines = str(refused.value).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["alertEmail", "alertMinPriority", "findingsTtlDays"]


def test_settings_that_disagree_are_refused_naming_them():
    # a log group of a cluster the allowlist leaves out, and a reserve that leaves the sweep nothing
    with pytest.raises(SettingsError, match="which clusterAllowlist does not list"):
        StackSettings.from_mapping(
            {"clusterAllowlist": "ml-eks-prod", "clusterLogGroups": "/aws/sagemaker/Clusters/ml-slurm/abc123def456"}
        )
    with pytest.raises(SettingsError, match="startSessionReservePercent 90 leaves"):
        StackSettings.from_mapping({"startSessionReservePercent": "90"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("aws:cdk:bundling-stacks", []),
        ("aws:cdk:enable-path-metadata", True),
        ("@aws-cdk/core:stackRelativeExports", True),
        ("availability-zones:account=111122223333:region=us-west-2", ["us-west-2a", "us-west-2b"]),
        ("acknowledged-issue-numbers", [34892]),
        ("cli-telemetry", False),
    ],
)
def test_cdks_own_keys_pass_untouched(key, value):
    assert StackSettings.from_mapping({key: value}).model_dump() == StackSettings.from_mapping({}).model_dump()


def test_the_layer_path_is_no_setting_but_moves_the_layer(tmp_path):
    assert StackSettings.from_mapping({}).layer_dir == c.LAYER_DIR
    assert StackSettings.from_mapping({c.CTX_LAYER_DIR: str(tmp_path)}).layer_dir == tmp_path
    assert c.CTX_LAYER_DIR not in FIELDS


@pytest.mark.parametrize(
    "given",
    [
        "ops@example.com,oncall@example.com",
        " ops@example.com , oncall@example.com ",
        '["ops@example.com", "oncall@example.com"]',
    ],
)
def test_a_list_is_a_list_json_or_comma_separated_text(given):
    for value in (given, ["ops@example.com", "oncall@example.com"]):
        settings = StackSettings.from_mapping({"alertEmails": value})
        assert settings.alert_emails == ["ops@example.com", "oncall@example.com"]


def test_numbers_and_switches_come_as_text_from_the_command_line_and_as_json_from_a_file():
    as_text = StackSettings.from_mapping(
        {"findingsTtlDays": "30", "chatNotifications": "TRUE", "probePeriodHours": "6"}
    )
    as_json = StackSettings.from_mapping({"findingsTtlDays": 30, "chatNotifications": True, "probePeriodHours": 6})
    assert as_text == as_json
    assert (as_text.findings_ttl_days, as_text.chat_notifications, as_text.probe_period.to_hours()) == (30, True, 6)


def test_an_empty_value_is_the_default():
    assert StackSettings.from_mapping({"findingsTtlDays": "", "sweepSchedule": " ", "alertEmails": ""}) == (
        StackSettings.from_mapping({})
    )
    assert StackSettings.from_mapping({}).findings_ttl_days == c.DEFAULT_FINDINGS_TTL_DAYS


def test_a_channels_minimum_follows_alert_min_priority_unless_given():
    policy = StackSettings.from_mapping({"alertMinPriority": "p2", "slackMinPriority": "P0"}).alert_settings
    assert (policy.slack_min_priority, policy.email_min_priority, policy.chat_min_priority) == ("P0", "P2", "P2")


# --- what the settings reach in the template ----------------------------------------------------------------

#: the functions that write findings: their code builds a FindingStore (checked below)
FINDINGS_WRITERS = {
    c.EVENT_HANDLER,  # functions/monitor/signal_run.py, when events are not windowed
    c.EVENT_WINDOW_HANDLER,  # signal_run.py
    c.LOG_SUBSCRIPTION_HANDLER,  # signal_run.py, when records are not windowed
    c.SWEEP_HANDLER,  # handlers/sweep.py
    c.PROBE_BATCH_HANDLER,  # handlers/probes.py
}


def test_every_findings_store_a_function_builds_is_given_the_history_ttl():
    built = []
    for path in (REPO / "functions").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FindingStore":
                built.append((path.relative_to(REPO).as_posix(), {k.arg for k in node.keywords}))
    assert {path for path, _ in built} == {
        "functions/monitor/signal_run.py",
        "functions/monitor/handlers/sweep.py",
        "functions/monitor/handlers/probes.py",
    }
    assert all("history_ttl" in keywords for _, keywords in built), built


def environments(template: dict) -> dict[str, dict]:
    """Handler → the function's environment variables."""
    return {
        r["Properties"]["Handler"]: r["Properties"].get("Environment", {}).get("Variables", {})
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "Handler" in r["Properties"]
    }


def test_findings_ttl_days_reaches_every_function_that_writes_findings(tmp_path_factory, every_setting):
    default = environments(every_setting.to_json())
    assert FINDINGS_WRITERS <= set(default)  # with clusterLogGroups, the log-subscription function too
    assert {h: default[h].get("FINDINGS_TTL_DAYS") for h in FINDINGS_WRITERS} == dict.fromkeys(FINDINGS_WRITERS, "90")
    week = environments(synth(tmp_path_factory, findingsTtlDays="7")[1].to_json())
    assert {h: v["FINDINGS_TTL_DAYS"] for h, v in week.items() if "FINDINGS_TTL_DAYS" in v} == dict.fromkeys(
        FINDINGS_WRITERS - {c.LOG_SUBSCRIPTION_HANDLER}, "7"
    )


def test_log_retention_days_reaches_every_log_group(every_setting):
    # EVERY_SETTING asks for 90 days: the functions' log groups (alerting ones included) and the state machine's
    groups = every_setting.find_resources("AWS::Logs::LogGroup")
    assert len(groups) >= 9
    assert {g["Properties"]["RetentionInDays"] for g in groups.values()} == {90}


# --- the README's deploy, run as written --------------------------------------------------------------------


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def _variable(template: dict, name: str) -> set[str]:
    return {env[name] for env in environments(template).values() if name in env}


def _patterns(template: dict) -> dict[str, dict]:
    out = {}
    for rule in _resources(template, "AWS::Events::Rule"):
        if "EventPattern" in rule:
            (detail_type,) = rule["EventPattern"]["detail-type"]
            out[detail_type] = rule["EventPattern"]
    return out


#: setting → does the template carry the value the README gives it? (one check per setting the README uses)
FOUND: dict[str, Callable[[dict, str], bool]] = {
    # every rule matches exactly those clusters, by name and ARN (the shared patterns, written verbatim)
    "clusterAllowlist": lambda t, v: _patterns(t) == eventbridge.rule_patterns(_items(v)) and v in json.dumps(t),
    "alertEmails": lambda t, v: (
        sorted(s["Endpoint"] for s in _resources(t, "AWS::SNS::Subscription") if s["Protocol"] == "email")
        == sorted(_items(v))
    ),
    "slackSecretName": lambda t, v: _variable(t, "SLACK_SECRET_NAME") == {v},
    "runbookBaseUrl": lambda t, v: _variable(t, "RUNBOOK_BASE_URL") == {v},
    "findingsTtlDays": lambda t, v: (
        {h for h, env in environments(t).items() if env.get("FINDINGS_TTL_DAYS") == v}
        == FINDINGS_WRITERS & set(environments(t))
    ),
    "sweepSchedule": lambda t, v: {r.get("ScheduleExpression") for r in _resources(t, "AWS::Events::Rule")} >= {v},
    "logRetentionDays": lambda t, v: {g["RetentionInDays"] for g in _resources(t, "AWS::Logs::LogGroup")} == {int(v)},
    "alertMinPriority": lambda t, v: _variable(t, "SLACK_MIN_PRIORITY") == {v.upper()},
}

README_SETTINGS = deploy_settings()


def test_the_readme_deploys_with_settings():
    assert README_SETTINGS, "the README's deploy command sets nothing: the deploy test would prove nothing"
    assert sorted(set(README_SETTINGS) - set(FOUND)) == [], "add a check to FOUND for each setting the README uses"


def test_the_checks_fail_on_a_template_without_the_settings(template):
    # the contrast: the stack's defaults carry none of the README's values
    bare = template.to_json()
    assert {key: FOUND[key](bare, value) for key, value in README_SETTINGS.items()} == dict.fromkeys(
        README_SETTINGS, False
    )


def _no_aws_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    return env | {
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
        # nothing leaves the machine: no usage report, no look-up of newer CLI versions
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> pathlib.Path:
    """A copy of what the deploy reads from a checkout, after ``make deploy-ready``.

    ``make deploy-ready`` is not run here (it builds the Lambda layer from PyPI, minutes); its four
    prerequisites are stood in for, each as the Makefile makes it: the project's venv (this test runs in
    it), a Lambda layer folder (its contents change only the layer asset's hash; ``test_layer.py`` tests the
    real build), the functions without their bytecode (it changes only the function asset's hash;
    ``test_layer.py`` tests it) and the pinned CDK CLI, installed by the Makefile's own
    ``node_modules/.installed`` recipe.
    """
    makefile = (REPO / "Makefile").read_text()
    [prerequisites] = re.findall(r"^deploy-ready:(.*)$", makefile, flags=re.M)
    assert set(prerequisites.split()) == {"$(STAMP)", "$(LAYER_STAMP)", "$(FUNCTIONS_STAMP)", "node_modules/.installed"}
    subprocess.run(["make", "--no-print-directory", "node_modules/.installed"], cwd=REPO, check=True)
    assert (REPO / "node_modules" / ".bin" / "cdk").exists()
    assert (REPO / ".venv" / "bin" / "python").exists()

    root = tmp_path_factory.mktemp("checkout")
    for name in ("cdk.json", "package.json", "package-lock.json"):
        shutil.copy2(REPO / name, root / name)
    for name in ("infra", "functions"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".venv").symlink_to(REPO / ".venv")
    (root / "node_modules").symlink_to(REPO / "node_modules")
    (root / "build" / "layer" / "python").mkdir(parents=True)
    (root / "build" / "layer" / ".built").touch()
    return root


@pytest.fixture(scope="module")
def deployed(checkout) -> tuple[subprocess.CompletedProcess, dict]:
    """The README's deploy block run as written, in the copy, with no AWS credentials anywhere.

    The first command, ``make deploy-ready``, is the one stood in for (see ``checkout``); every other command
    runs in bash exactly as the README writes it. ``cdk deploy`` synthesizes the app, then stops before any
    AWS call because it cannot resolve an account: no credential variables, ``AWS_CONFIG_FILE`` and
    ``AWS_SHARED_CREDENTIALS_FILE`` at /dev/null, the instance metadata service off. It leaves the synthesized
    template in the copy's cdk.out (the CLI's default output folder). Returns the last command's result and
    that template.
    """
    first, *rest = deploy_block()
    assert shlex.split(first, comments=True) == ["make", "deploy-ready"]
    assert rest, "the deploy block has nothing after make deploy-ready"
    for command in rest:
        ran = subprocess.run(
            ["bash", "-c", command],
            cwd=checkout,
            env=_no_aws_environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
    manifest = checkout / "cdk.out" / "manifest.json"
    assert manifest.exists(), f"the deploy synthesized nothing:\n{ran.stdout}{ran.stderr}"
    template_file = json.loads(manifest.read_text())["artifacts"][c.STACK_NAME]["properties"]["templateFile"]
    return ran, json.loads((checkout / "cdk.out" / template_file).read_text())


def test_the_readme_deploy_synthesizes_then_stops_before_aws_without_credentials(deployed):
    ran, _ = deployed
    output = ran.stdout + ran.stderr
    assert ran.returncode != 0
    assert "Unable to resolve AWS account to use" in output, output[-2000:]


@pytest.mark.parametrize(("key", "value"), sorted(README_SETTINGS.items()))
def test_each_setting_of_the_readme_deploy_is_in_the_template_it_synthesized(deployed, key, value):
    _, template = deployed
    assert FOUND[key](template, value), f"-c {key}={value} is not in the synthesized template"


def test_through_the_cli_a_misspelt_key_stops_the_synth_naming_the_setting(checkout):
    ran = subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "-c", "alertEmail=oncall@example.com"],
        cwd=checkout,
        env=_no_aws_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode != 0
    assert "alertEmail is not a setting of this stack (did you mean alertEmails?)" in ran.stderr
