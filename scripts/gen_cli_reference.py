"""Write docs/cli.md from the parser itself, so the command-line reference cannot drift from the
code: every command and subcommand with its `--help` text.

    python scripts/gen_cli_reference.py > docs/cli.md
"""

from __future__ import annotations

import argparse
import os

os.environ["COLUMNS"] = "100"  # argparse wraps help at the terminal's width: fix it, so the page is stable

from warpforge.cli import build_parser  # noqa: E402

HEADER = """# Command-line reference

Every `warpforge` command and its flags, as `warpforge COMMAND --help` prints them; `--help` is
the authority for the version you have installed, and this page is regenerated from it
(`python scripts/gen_cli_reference.py > docs/cli.md`). Conventions that hold for every command:
exit code 0 on success, 1 for a negative result (a rejected candidate, a target missed), 2 for a
usage or configuration error, always with one readable sentence on stderr; with `--json`, stdout
carries machine-readable output only. The JSON fields, the configuration and the environment
variables are in [reference.md](reference.md).
"""


def walk(parser: argparse.ArgumentParser, path: list[str]):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, path + [name])


def main() -> None:
    root = build_parser()
    helps = {a.dest: a.help for action in root._actions if isinstance(action, argparse._SubParsersAction)
             for a in action._choices_actions}
    commands = [(" ".join(path), parser) for path, parser in walk(root, ["warpforge"])][1:]
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    for name, _ in commands:
        if name.count(" ") == 1:
            lines.append(f"| [`{name}`](#{name.replace(' ', '-')}) | {helps.get(name.split()[1], '')} |")
    for name, parser in commands:
        lines += ["", f"{'##' if name.count(' ') == 1 else '###'} {name}", "", "```", parser.format_help().rstrip(), "```"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
