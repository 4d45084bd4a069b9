"""`python -m warpforge.cli`: the `warpforge` command."""

from warpforge.cli import main

raise SystemExit(main())
