"""Lambda entry points of the serverless monitor: thin handlers over the core in ``layers/hyperpod_debugger``."""
