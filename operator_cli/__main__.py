"""``python -m operator_cli``: the operator CLI (see docs/supervisor.md)."""

from operator_cli.cli import main

raise SystemExit(main())
