"""Rehearsal tier: the synthesized stack run as AWS runs it (``make rehearse``; ``make test`` runs it too).

The app is synthesized with the real layer (``make layer``); the template's resources are created on the
simulated account from the template's own properties (:mod:`hyperpod_sim.rehearsal.deploy`), the sweep runs
in moto's ASL interpreter, and every Lambda task, target and event source runs the handlers from the
synthesized asset in a clean interpreter of the runtime the template names, with the template's
environment, timeout and memory (:mod:`hyperpod_sim.rehearsal.runtime`). The layer's recipe built for this
machine (``make layer-host``) stands in for the arm64 layer asset, after a check that the two are the same
recipe.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
pytest.importorskip("aws_cdk", reason="install the `cdk` extra for the rehearsal")

from infra.constants import LAYER_DIR, REPO_ROOT  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
HOST_LAYER = REPO_ROOT / "build" / "layer-x86_64"
#: The settings the rehearsal deploys with: the demo's two clusters allowlisted, read access to the EKS cluster,
#: an email address and a Slack secret (what a platform team sets first, per the README's deploy section).
SETTINGS = {
    "clusterAllowlist": "ml-eks-prod,ml-slurm-train",
    "eksClusters": "ml-eks-prod-eks",
    "alertEmails": "oncall@example.com",
    "slackSecretName": "hyperpod-debugger/slack-webhook",
    "runbookBaseUrl": "https://github.com/example/hyperpod-node-debugger/blob/main/",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if pathlib.Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.rehearsal)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rehearsal: the synthesized stack executed on the simulated account")


@pytest.fixture(autouse=True)
def _aws_env() -> None:
    """The stage sets the simulated account's endpoint and credentials for the whole module; the suite's
    per-test reset of the AWS environment would cut it off between tests."""


@pytest.fixture(scope="session")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    for layer, target in ((LAYER_DIR, "layer"), (HOST_LAYER, "layer-host")):
        if not (layer / "python").is_dir():
            pytest.fail(f"{layer}/python is missing: run `make {target}` (make rehearse does)")
    from infra.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build_app(context=dict(SETTINGS), outdir=str(outdir))
    app.synth()
    return outdir


@pytest.fixture(scope="module")
def stage(cdk_out: pathlib.Path) -> Iterator:
    from hyperpod_sim.rehearsal.stage import rehearsal

    with rehearsal(cdk_out, host_layer=HOST_LAYER) as on_stage:
        yield on_stage
