"""The exit codes of ``python -m kafkaops``, one table for every command (written out in
:mod:`kafkaops.cli.main`'s docstring and ``--help``): 0 ok, 1 failed, 2 bad input, 3 infeasible plan,
130 interrupted. :func:`fail` turns an exception into its code and one line on stderr,
``kafkaops <command>: error|failed|infeasible|interrupted: <message>``.
"""
from __future__ import annotations

import sys
from typing import TextIO

from kafkaops.errors import ConfigError, NotFound, UnknownTopic
from kafkaops.model import ModelError
from kafkaops.reassign.engine import InvalidReassignment
from kafkaops.reassign.planner.errors import PlanInfeasible, PlanInputError

EXIT_OK = 0
EXIT_FAILED = 1  # ran and did not get there: not verified, a move or DAG run failed, Kafka unreachable
EXIT_BAD_INPUT = 2  # options or files that cannot work (argparse's usage errors too); nothing changed
EXIT_INFEASIBLE = 3  # plan: no assignment keeps the rules
EXIT_INTERRUPTED = 130  # Ctrl-C

BAD_INPUT = (InvalidReassignment, PlanInputError, ModelError, ConfigError, UnknownTopic, NotFound)
_WORDS = {EXIT_BAD_INPUT: "error", EXIT_INFEASIBLE: "infeasible", EXIT_INTERRUPTED: "interrupted"}


def exit_code(error: BaseException) -> int:
    """The exit code of a command that raised ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, PlanInfeasible):
        return EXIT_INFEASIBLE
    if isinstance(error, BAD_INPUT):
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def fail(command: str, error: BaseException, err: TextIO | None = None) -> int:
    """Say on ``err`` (stderr) in one line why ``command`` stopped; return its exit code."""
    code = exit_code(error)
    text = one_line(error)
    print(f"kafkaops {command}: {_WORDS.get(code, 'failed')}" + (f": {text}" if text else ""), file=err or sys.stderr)
    return code
