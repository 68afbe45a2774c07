"""``python -m hyperpod_debugger.cli``: the same as the ``hyperpod-debugger`` command."""

from hyperpod_debugger.cli.main import main

raise SystemExit(main())
