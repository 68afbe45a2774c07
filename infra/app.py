"""CDK entry point: `cdk.json` runs `.venv/bin/python -m infra.app`, so `npx cdk deploy -c key=value …`
synthesizes with those settings (infra/settings.py); also runnable without the CLI (`CDK_OUTDIR=cdk.out`)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk  # noqa: E402

from infra.constants import STACK_NAME  # noqa: E402
from infra.settings import SettingsError  # noqa: E402
from infra.stack import HyperPodDebuggerStack  # noqa: E402


def build_app(context: dict | None = None, outdir: str | None = None) -> tuple[cdk.App, HyperPodDebuggerStack]:
    app = cdk.App(context=context or None, outdir=outdir)
    env = None
    if os.environ.get("CDK_DEFAULT_ACCOUNT"):
        env = cdk.Environment(account=os.environ["CDK_DEFAULT_ACCOUNT"], region=os.environ.get("CDK_DEFAULT_REGION"))
    stack = HyperPodDebuggerStack(app, STACK_NAME, env=env)
    return app, stack


def main() -> None:
    try:
        app, _ = build_app()
    except SettingsError as exc:
        # the settings' own words, without a traceback: each line names a key and what it takes
        sys.exit(f"{STACK_NAME}: the stack's settings are not right, nothing was synthesized:\n{exc}")
    app.synth()


if __name__ == "__main__":
    main()
