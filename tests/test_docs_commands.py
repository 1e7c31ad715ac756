"""Every ``queerbench …`` command that README.md and docs/*.md show still parses.

Commands are read from shell code blocks (```` ```bash ````, ```` ```sh ````, ```` ```console ```` — only its ``$``
lines — and unlabelled blocks) and from inline code. Continuation lines (a trailing ``\\``) are joined, ``#`` comments
dropped, ``&&`` / ``;`` / ``|`` chains split, environment prefixes (``OPENAI_API_KEY=…``) stripped. In what remains,
``…`` is a placeholder: it becomes a value (a flag's first choice where the flag has choices); ``...`` elided inside a
value (``'{"safety_settings": [...]}'``) is dropped; and inline code's
``[optional]`` brackets and ``a|b`` alternatives are read as the first alternative. Then
:func:`queerbench.cli.build_parser` must accept the subcommand and every flag: a code block's command must parse as it
stands; inline code, which often names a command without its required arguments (`queerbench scm run`), may lack
only those.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from queerbench.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

PLACEHOLDER = "…"
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)[^\n]*\n(.*?)^\1\2\s*$", re.M | re.S)
_SHELL = {"", "bash", "sh", "shell", "console", "zsh"}
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", ";", "|"}


@dataclass(frozen=True)
class Command:
    """One ``queerbench`` command as a page shows it."""

    page: str
    line: int
    text: str
    inline: bool

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _segments(line: str) -> list[list[str]]:
    """The commands of a shell line: tokens split at ``&&``, ``||``, ``;`` and ``|``, comments dropped. A line that
    is not shell (an error message with an apostrophe) gives none, unless it names queerbench."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in _SEPARATORS:
                out.append([])
            else:
                out[-1].append(token)
    except ValueError as exc:
        if re.search(r"(^|[\s;&|])queerbench\s", line):
            raise ValueError(f"{exc} in {line!r}") from None
        return []
    return [seg for seg in out if seg]


def _queerbench(tokens: list[str]) -> list[str] | None:
    """The arguments after ``queerbench`` once environment prefixes are stripped, or None for another program."""
    while tokens and _ENV.match(tokens[0]):
        tokens = tokens[1:]
    return tokens[1:] if tokens and tokens[0] == "queerbench" else None


def _code_block_commands(page: Path, text: str) -> list[Command]:
    found = []
    for match in _FENCE.finditer(text):
        if match.group(3).lower() not in _SHELL:
            continue
        console = match.group(3).lower() == "console"
        first = text.count("\n", 0, match.start(4)) + 1
        lines = match.group(4).splitlines()
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):  # continuation lines
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            if console:
                if not line.lstrip().startswith("$ "):
                    continue  # output
                line = line.lstrip()[2:]
            for tokens in _segments(line):
                args = _queerbench(tokens)
                if args is not None:
                    found.append(Command(page.name, first + start, shlex.join(args), inline=False))
    return found


def _inline_commands(page: Path, text: str) -> list[Command]:
    blanked = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keep line numbers
    found = []
    for match in re.finditer(r"(?<!`)(`{1,2})(?!`)(.+?)(?<!`)\1(?!`)", blanked, flags=re.S):
        code = " ".join(match.group(2).split())
        if not code.startswith("queerbench "):
            continue
        line = blanked.count("\n", 0, match.start()) + 1
        code = code.replace("\\|", "|")
        code = re.sub(r"[\[\]]", " ", code)  # [--flag …] → --flag …
        code = re.sub(r"(\S+?)\|\S+", r"\1", code)  # a|b → a
        for tokens in _segments(code):
            args = _queerbench(tokens)
            if args is not None:
                found.append(Command(page.name, line, shlex.join(args), inline=True))
    return found


def documented_commands() -> list[Command]:
    """Every ``queerbench`` command of README.md and docs/*.md, in page order."""
    commands = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        commands += _code_block_commands(page, text) + _inline_commands(page, text)
    return commands


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _fill_placeholders(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``…`` or ``...`` as a whole value → the flag's first choice where it has choices, else ``X``; ``…`` inside a
    token → ``X``; ``...`` inside a token (an elided JSON list) → nothing."""
    out: list[str] = []
    current = parser
    for token in args:
        current = _subparsers(current).get(token, current)
        if token in (PLACEHOLDER, "..."):
            action = current._option_string_actions.get(out[-1] if out else "")
            token = str(next(iter(action.choices))) if action is not None and action.choices else "X"
        else:
            token = token.replace(PLACEHOLDER, "X").replace("...", "")
        out.append(token)
    return out


def _parse(args: list[str]) -> str | None:
    """None when the parser accepts ``args``, else its one-line error."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip() or f"exit {exc.code}"
    return None


COMMANDS = documented_commands()


def test_the_pages_show_commands() -> None:
    """The reader finds what it should: commands from code blocks, console blocks and inline code of many pages."""
    assert len({c.page for c in COMMANDS}) >= 10
    assert any(c.inline for c in COMMANDS) and any(not c.inline for c in COMMANDS)
    texts = {c.text for c in COMMANDS}
    assert "run --model embedded:smollm2-135m-instruct --limit 10" in texts  # the README's first command
    # a console block's command, an env prefix stripped, a continuation line joined, a chain split
    assert any(t.startswith("run --endpoint http://127.0.0.1:8080/v1 --model smollm2 --method scored") for t in texts)
    assert any(t.startswith("run --endpoint https://api.openai.com/v1 --model gpt-4o-mini") for t in texts)
    assert "lm-eval import lm-eval-out --out runs/smollm2-lm-eval" in texts
    assert "lm-eval import out/ --out runs/lm-eval" in texts


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_a_documented_command_parses(command: Command) -> None:
    args = shlex.split(command.text)
    parser = build_parser()
    assert args[0] in _subparsers(parser), f"{command}: no subcommand {args[0]!r}"
    if "--help" in args or "-h" in args:
        args = [a for a in args if a not in ("--help", "-h")]
    error = _parse(_fill_placeholders(parser, args))
    if error and command.inline and "the following arguments are required" in error:
        return  # inline code may name a command without its required arguments
    assert error is None, f"{command}\n  -> {error}"


def test_the_check_catches_what_it_should() -> None:
    """A flag that does not exist, a bad choice and an unknown subcommand are errors; `…` fills a choice."""
    parser = build_parser()
    assert _parse(["run", "--model", "m", "--no-such-flag"]) is not None
    assert _parse(["run", "--config", "nonsense"]) is not None
    assert "nonsense" not in _subparsers(parser)
    assert _parse(_fill_placeholders(parser, ["run", "--config", PLACEHOLDER, "--model", "RUN_DIR…"])) is None
    inline = _inline_commands(Path("x.md"), "see `queerbench score FILE [--toxicity …]` and `queerbench: error`")
    assert [shlex.split(c.text) for c in inline] == [["score", "FILE", "--toxicity", "…"]]
