"""HyperPod Node Debugger: the diagnostic core shared by the CLI and the serverless monitor."""

__version__ = "0.1.0"
