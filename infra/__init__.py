"""CDK v2 (Python) app of the serverless HyperPod monitor (see infra/README.md)."""
