"""docs/cli.md is generated from the parser (scripts/gen_cli_reference.py): it must be what the
parser prints today, so a flag added or changed without regenerating the page fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_what_the_parser_prints() -> None:
    made = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_reference.py")], capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert made == (ROOT / "docs" / "cli.md").read_text(), \
        "docs/cli.md is out of date: run `python scripts/gen_cli_reference.py > docs/cli.md`"
