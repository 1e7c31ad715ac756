"""Commands a task declares as data (its ``commands.json``), built into the CLI here.

A task module that brings commands of its own (``queerbench scm …``, ``queerbench check-predictions``) names a
commands file (``COMMANDS``, see :func:`queerbench.tasks.command_files`): ``{"schema_version": 1, "task": NAME,
"commands": [...]}``. Each command has a ``name``, a ``help`` and either sub-``commands`` or an ``action`` and its
``arguments``: ``probes:run`` and ``probes:report`` (the shared probe runner, :mod:`queerbench.cli.probes`) or
``module:function`` inside the task's package, called with the parsed flags as keyword arguments and returning
the exit status. An argument is argparse's own keywords (``flags``, ``help``, ``default``, ``type``, ``choices``,
``action``, ``metavar``, ``required``, ``nargs``) with a ``type`` from :data:`TYPES`, optionally in one of the
command's ``groups``; ``{"include": "endpoint"}`` adds the endpoint flags every command shares. Every fault of the
file is one line naming it, the command and the field.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queerbench.base.arguments import endpoint_arguments

__all__ = ["TYPES", "add_declared_commands"]

_ARG_KEYS = (set(inspect.signature(argparse.Action).parameters) - {"option_strings", "dest", "const", "type"}) | {
    "flags",
    "group",
    "action",
}
"""argparse's keywords an argument may give (``default`` among them), with its ``flags`` and ``group``."""
_TYPE_KEYS = {"type", "keywords", "example"}
_ACTIONS = ("store_true", "append")
_RUNNER_ACTIONS = {"probes:run": "out", "probes:report": "run"}
"""The probe runner's actions, each with the argument it needs (the run folder)."""


def _probability(flag: str, keywords: dict[str, str]) -> Callable[[str], float | str]:
    """A number in (0, 1], or one of ``keywords`` (a word → the value it stands for)."""
    named = " or ".join(repr(k) for k in dict.fromkeys(keywords.values()))

    def parse(value: str) -> float | str:
        if value.lower() in keywords:
            return keywords[value.lower()]
        try:
            p = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a number in (0, 1] or {named}, got {value!r}") from None
        if not 0 < p <= 1:
            raise argparse.ArgumentTypeError(f"{flag} must be in (0, 1], got {p}")
        return p

    return parse


def _json_object(flag: str, example: str) -> Callable[[str], dict[str, Any]]:
    """A JSON object given on the command line."""

    def parse(value: str) -> dict[str, Any]:
        try:
            obj = json.loads(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{flag} is not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise argparse.ArgumentTypeError(f"{flag} must be a JSON object, e.g. {example}")
        return obj

    return parse


TYPES: dict[str, Callable[[str, dict[str, Any]], Callable[[str], Any]]] = {
    "str": lambda flag, a: str,
    "int": lambda flag, a: int,
    "float": lambda flag, a: float,
    "probability": lambda flag, a: _probability(flag, a.get("keywords") or {}),
    "json_object": lambda flag, a: _json_object(flag, a.get("example", "'{}'")),
}
"""The argument types a commands file may name (each made for its flag, from the argument's declaration)."""


def add_declared_commands(sub: argparse._SubParsersAction, path: Path, package: str) -> None:
    """Add the commands declared in ``path`` to the CLI's subcommands, their functions inside ``package`` (the task
    module's package); a one-line ``ValueError`` for a bad file."""
    where = f"commands file {path}"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where} cannot be read ({exc})") from None
    if not (
        isinstance(raw, dict)
        and raw.get("schema_version") == 1
        and isinstance(raw.get("task", ""), str)
        and isinstance(raw.get("commands"), list)
    ):
        raise ValueError(f"{where}: expected an object with schema_version 1, a list 'commands' (and a 'task' name)")
    stray = sorted(set(raw) - {"schema_version", "task", "commands"})
    if stray:
        raise ValueError(f"{where}: unknown field(s) {stray}")
    for command in raw["commands"]:
        _add_command(sub, command, raw.get("task", ""), where, package)


def _add_command(sub: argparse._SubParsersAction, command: Any, task: str, where: str, package: str) -> None:
    if not isinstance(command, dict) or not isinstance(command.get("name"), str):
        raise ValueError(f"{where}: each command is an object with a 'name'")
    where = f"{where} (command {command['name']!r})"
    stray = sorted(set(command) - {"name", "help", "metavar", "commands", "action", "groups", "arguments"})
    if stray:
        raise ValueError(f"{where}: unknown field(s) {stray}")
    if not all(isinstance(command.get(k, ""), str) for k in ("help", "metavar")):
        raise ValueError(f"{where}: 'help' and 'metavar' are strings")
    try:
        parser = sub.add_parser(command["name"], help=command.get("help"))
    except (argparse.ArgumentError, ValueError) as exc:
        raise ValueError(f"{where}: {' '.join(str(exc).split())}") from None
    if "commands" in command:
        if set(command) & {"action", "arguments", "groups"} or not isinstance(command["commands"], list):
            raise ValueError(f"{where}: a command has either a list of 'commands' or an 'action' with 'arguments'")
        dest = f"{command['name']}_command"
        _SUBCOMMAND_DESTS.add(dest)
        inner = parser.add_subparsers(dest=dest, metavar=command.get("metavar"))
        for child in command["commands"]:
            _add_command(inner, child, task, where, package)
        parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
        return
    action = command.get("action")
    if not isinstance(action, str) or ":" not in action:
        raise ValueError(f"{where}: 'action' is one of {', '.join(_RUNNER_ACTIONS)} or 'module:function'")
    groups_raw = command.get("groups") or {}
    if not isinstance(groups_raw, dict) or not all(isinstance(t, str) for t in groups_raw.values()):
        raise ValueError(f"{where}: 'groups' maps a group's key to its title")
    groups = {key: parser.add_argument_group(title) for key, title in groups_raw.items()}
    arguments = command.get("arguments") or []
    if not isinstance(arguments, list):
        raise ValueError(f"{where}: 'arguments' is a list of arguments")
    dests = set()
    for i, argument in enumerate(arguments):
        dests.add(_add_argument(parser, groups, argument, f"{where}: arguments[{i}]"))
    parser.set_defaults(func=_action(action, task, package, where, dests))


def _add_argument(
    parser: argparse.ArgumentParser, groups: dict[str, argparse._ArgumentGroup], argument: Any, where: str
) -> str:
    """Add one declared argument; return where argparse puts its value (its ``dest``)."""
    if not isinstance(argument, dict):
        raise ValueError(f"{where} must be an object")
    group = argument.get("group")
    if group is not None and group not in groups:
        raise ValueError(f"{where}: 'group' {group!r} is none of the command's groups {sorted(groups)}")
    target: argparse.ArgumentParser | argparse._ArgumentGroup = groups[group] if group else parser
    if "include" in argument:
        if argument["include"] != "endpoint" or set(argument) - {"include", "group", "help"}:
            raise ValueError(f"{where}: 'include' adds the shared flags 'endpoint' (with its 'help')")
        endpoint_arguments(target, endpoint_help=str(argument.get("help", "OpenAI-compatible base URL")))
        return "endpoint"
    flags = argument.get("flags")
    stray = sorted(set(argument) - _ARG_KEYS - _TYPE_KEYS)
    if stray or not isinstance(flags, list) or not flags or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"{where}: an argument has 'flags' (a list) and argparse keywords, not {stray}")
    if argument.get("action") not in (None, *_ACTIONS):
        raise ValueError(f"{where}: 'action' is one of {', '.join(_ACTIONS)}")
    keywords = argument.get("keywords", {})
    if not isinstance(keywords, dict) or not all(isinstance(v, str) for v in keywords.values()):
        raise ValueError(f"{where}: 'keywords' maps each word a value may be to what it stands for")
    if not all(isinstance(argument.get(k, ""), str) for k in ("help", "metavar", "example")):
        raise ValueError(f"{where}: 'help', 'metavar' and 'example' are strings")
    kwargs = {k: v for k, v in argument.items() if k in _ARG_KEYS - {"flags", "group"}}
    if "type" in argument:
        if argument["type"] not in TYPES:
            raise ValueError(f"{where}: 'type' is one of {', '.join(TYPES)}, got {argument['type']!r}")
        kwargs["type"] = TYPES[argument["type"]](flags[-1], argument)
    try:
        target.add_argument(*flags, **kwargs)
    except (argparse.ArgumentError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: argparse refuses it ({' '.join(str(exc).split())})") from None
    long = [f for f in flags if f.startswith("--")]
    return (long[0] if long else flags[0]).lstrip("-").replace("-", "_")


def _action(action: str, task: str, package: str, where: str, dests: set[str]) -> Callable[[argparse.Namespace], int]:
    """The function a parsed command calls: a runner action, or a task function with the flags as keywords."""
    if action in _RUNNER_ACTIONS:
        if not task:
            raise ValueError(f"{where}: 'action' {action!r} runs a task: name it under 'task'")
        needed = _RUNNER_ACTIONS[action]
        if needed not in dests:
            raise ValueError(f"{where}: 'action' {action!r} needs the argument {needed!r} (the run folder)")

        def run(args: argparse.Namespace) -> int:
            from queerbench.cli.probes import report, run

            return (run if action == "probes:run" else report)(task, _flags(args))

        return run
    module, _, name = action.partition(":")
    if not package or not (module == package or module.startswith(package + ".")) or not name.isidentifier():
        raise ValueError(f"{where}: 'action' {action!r} must name a function inside {package or 'its package'}")
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"{where}: 'action' {action!r} names a module that does not exist")

    def call(args: argparse.Namespace) -> int:
        function = getattr(importlib.import_module(module), name, None)
        if not callable(function):
            raise ValueError(f"{where}: 'action' {action!r} names no function")
        flags = _flags(args)
        try:
            inspect.signature(function).bind(**flags)
        except TypeError as exc:
            raise ValueError(f"{where}: {action} does not take the command's flags ({exc})") from None
        return int(function(**flags) or 0)

    return call


_SUBCOMMAND_DESTS: set[str] = {"command"}
"""Where argparse puts the chosen (sub)command's name: the CLI's bookkeeping, not a flag."""


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags, without the CLI's own bookkeeping (the command names and the handler)."""
    return {k: v for k, v in vars(args).items() if k != "func" and k not in _SUBCOMMAND_DESTS}
