"""mutmut's command line with one change: every mutant is judged by every test of its module's test files.

mutmut 3 runs against a mutant only the tests that called the mutated function while it collected its statistics.
A function called while a module- or session-scoped fixture was being set up is then attributed to the first test
that requested the fixture alone: the other tests that read the fixture's result (most tests of
``tests/test_templates.py`` read one ``build_sentences("default")`` frame) never face that function's mutants, so
they survive although the suite would catch them. Here, once the statistics are collected or loaded, every mutated
function is mapped to every collected test (of the test files ``tools/mutation.py`` selected for the module), file by
file in the order the module's table lists them (``QB_MUTATION_TEST_FILES``), fastest first within a file. A killed
mutant still stops at its first failing test (``-x``); only survivors pay for the whole selection.

Run by ``tools/mutation.py`` in a module's workspace, in place of ``python -m mutmut``; ``generate`` only writes the
mutants.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import mutmut.__main__ as mutmut_main
from mutmut.state import state

_collect_or_load_stats = mutmut_main.collect_or_load_stats


def _every_test_for_every_function(*args: Any, **kwargs: Any) -> None:
    _collect_or_load_stats(*args, **kwargs)
    durations = state().duration_by_test
    # the module's test files in the order its table lists them (its focused fast files first), then fastest first
    # within a file: most mutants die in a fast test, before a slow file's module-scoped fixtures are built
    files = [f for f in os.environ.get("QB_MUTATION_TEST_FILES", "").split(os.pathsep) if f]

    def rank(test: str) -> tuple[int, float, str]:
        path = test.split("::", 1)[0]
        return (files.index(path) if path in files else len(files), durations[test], test)

    tests = sorted(durations, key=rank)
    functions = set(state().current_function_hashes) | set(state().tests_by_mangled_function_name)
    for name in functions:
        # a list, not mutmut's set: mutmut hands the tests to pytest in this order (``-x`` stops at the first failure)
        state().tests_by_mangled_function_name[name] = list(tests)  # type: ignore[assignment]


def generate() -> None:
    """Only write the mutants (what ``mutmut run`` does before it tests any), so that their names can be listed
    (``mutmut results --all true``) and a random sample of them checked."""
    mutmut_main.set_mutant_under_test("mutant_generation")
    os.makedirs("mutants", exist_ok=True)
    mutmut_main.copy_src_dir()
    mutmut_main.copy_also_copy_files()
    mutmut_main.setup_source_paths()
    mutmut_main.store_lines_covered_by_tests()
    mutmut_main.create_mutants(os.cpu_count() or 1)


if __name__ == "__main__":
    if sys.argv[1:] == ["generate"]:
        generate()
    else:
        mutmut_main.collect_or_load_stats = _every_test_for_every_function
        mutmut_main.cli()
