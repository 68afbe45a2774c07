"""Infrastructure tier: the CDK app synthesized in-process (no CLI, no Docker, no network).

Skipped when the optional `cdk` extra is not installed. Each app build costs a few seconds (jsii starts a
node process), so each set of settings is synthesized once per test process (:func:`synth`).
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
pytest.importorskip("aws_cdk", reason="install the `cdk` extra for infrastructure tests")

from aws_cdk.assertions import Template  # noqa: E402

from infra.app import build_app  # noqa: E402
from infra.constants import CTX_LAYER_DIR  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "infrastructure: CDK template assertions and cdk-nag (slow, no network)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if pathlib.Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.infrastructure)


#: Apps already synthesized in this process, by their context: one synth per set of settings per worker.
_SYNTHESIZED: dict[str, tuple] = {}


def synth(tmp_path_factory: pytest.TempPathFactory, **context) -> tuple:
    """Build and synthesize the app (cdk-nag validation runs here), returning (stack, Template, outdir).

    The same settings give the same app, so it is synthesized once per process and shared (a synth costs
    seconds). A synth that fails is not kept: each test that expects it to fail sees it fail."""
    key = json.dumps(context, sort_keys=True, default=str)
    if key not in _SYNTHESIZED:
        _SYNTHESIZED[key] = synth_again(tmp_path_factory, **context)
    return _SYNTHESIZED[key]


def synth_again(tmp_path_factory: pytest.TempPathFactory, **context) -> tuple:
    """:func:`synth` without the shared result: for a test that changed what the app reads from the checkout."""
    layer = tmp_path_factory.mktemp("layer")
    (layer / "python").mkdir()
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build_app(
        context={"aws:cdk:bundling-stacks": [], CTX_LAYER_DIR: str(layer), **context}, outdir=str(outdir)
    )
    app.synth()
    return stack, Template.from_stack(stack), outdir


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory):
    return synth(tmp_path_factory)


@pytest.fixture(scope="session")
def template(synthesized) -> Template:
    return synthesized[1]


@pytest.fixture(scope="session")
def stack(synthesized):
    return synthesized[0]


#: Every context setting at once (allowlist of names and ids, a subscribed log group, EKS access entries,
#: emails, a runbook URL): the widest template the stack can produce.
EVERY_SETTING = {
    "clusterAllowlist": "ml-eks-prod,abc123def456",
    "clusterLogGroups": "/aws/sagemaker/Clusters/ml-eks-prod/abc123def456",
    "eksClusters": "ml-eks-prod-eks",
    "alertEmails": "ops@example.com,oncall@example.com",
    "runbookBaseUrl": "https://github.com/example/hyperpod-debugger/blob/main/",
    "startSessionRate": 7,
    "sweepSchedule": "rate(30 minutes)",
    "logRetentionDays": 90,
    "slackSecretName": "hyperpod-debugger/slack-webhook",
    "chatNotifications": "true",
    "historyArchive": "true",
    "historyArchiveAccounts": "123456789012,210987654321",
}


@pytest.fixture(scope="session")
def every_setting(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return synth(tmp_path_factory, **EVERY_SETTING)[1]
