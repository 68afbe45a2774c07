"""CDK entry point (`cdk.json`: `python -m infra.app`); also runnable without the CLI (`CDK_OUTDIR=cdk.out`)."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk  # noqa: E402

from infra.constants import STACK_NAME  # noqa: E402
from infra.stack import HyperPodDebuggerStack  # noqa: E402


def build_app(context: dict | None = None, outdir: str | None = None) -> tuple[cdk.App, HyperPodDebuggerStack]:
    app = cdk.App(context=context or None, outdir=outdir)
    env = None
    if os.environ.get("CDK_DEFAULT_ACCOUNT"):
        env = cdk.Environment(account=os.environ["CDK_DEFAULT_ACCOUNT"], region=os.environ.get("CDK_DEFAULT_REGION"))
    stack = HyperPodDebuggerStack(app, STACK_NAME, env=env)
    return app, stack


def main() -> None:
    app, _ = build_app()
    app.synth()


if __name__ == "__main__":
    main()
