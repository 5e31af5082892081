"""The CLI reference page (``reference/cli.md``), from the ``hierl`` argparse parser."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from .markdown import code, table


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = (
                formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            )
            name = ", ".join(f"{o} {metavar}".strip() for o in action.option_strings)
        else:
            name = formatter._format_args(action, action.dest)
        default = action.default
        shown = "-" if default in (None, argparse.SUPPRESS) or action.nargs == 0 else code(default)
        choices = ", ".join(map(str, action.choices)) if action.choices else ""
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append([code(name), shown, choices, help_text])
    return rows


def _command_section(
    path: str, parser: argparse.ArgumentParser, summary: str, level: int = 2
) -> Iterator[str]:
    anchor = path.replace(" ", "-")
    yield f"{'#' * level} `{path}` {{#{anchor}}}\n"
    if summary:
        yield f"{summary[0].upper()}{summary[1:]}.\n"
    if parser.description:
        yield " ".join(parser.description.split()) + "\n"
    yield "```text\n" + parser.format_usage().strip() + "\n```\n"
    rows = _option_rows(parser)
    if rows:
        yield table(["argument", "default", "choices", "meaning"], rows)
    if parser.epilog:
        yield " ".join(parser.epilog.split()) + "\n"
    helps = _subcommand_helps(parser)
    for name, sub in _subcommands(parser).items():
        yield from _command_section(f"{path} {name}", sub, helps.get(name, ""), level + 1)


def _subcommand_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def cli_page() -> str:
    """The CLI reference, from ``hierl.cli.parser.build_parser`` (each command's anchor
    is its words joined by ``-``: ``#hierl-train``)."""
    from hierl.cli.parser import build_parser

    parser = build_parser()
    helps = _subcommand_helps(parser)
    out = [
        "# Command line\n",
        "Generated from `hierl`'s argument parser (`hierl COMMAND --help` prints the same). "
        "Commands: " + ", ".join(f"[`{n}`](#hierl-{n})" for n in _subcommands(parser)) + ".\n",
        "```text\n" + parser.format_usage().strip() + "\n```\n",
        table(["argument", "default", "choices", "meaning"], _option_rows(parser)),
    ]
    for name, sub in _subcommands(parser).items():
        out += list(_command_section(f"hierl {name}", sub, helps.get(name, "")))
    return "\n".join(out)
