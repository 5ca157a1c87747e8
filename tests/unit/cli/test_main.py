"""``kafkaops`` and ``python -m kafkaops``: one parser, one subparser per command, one exit-code table."""
from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from kafkaops.cli import exits, main as cli_main
from kafkaops.cli.main import build_parser, main

NOWHERE = "127.0.0.1:1"
COMMANDS = ["plan", "execute", "verify", "cancel", "snapshot", "records", "lock", "store", "check", "approver-role",
            "datagen", "cluster", "demo"]


def invoke(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_documented_table_is_the_codes_the_commands_return() -> None:
    documented = {int(code): word for code, word in re.findall(r"^ {4}(\d+) +(\w+)", cli_main.EXIT_CODES, re.M)}
    assert documented == {exits.EXIT_OK: "ok", exits.EXIT_FAILED: "failed", exits.EXIT_BAD_INPUT: "bad",
                          exits.EXIT_INFEASIBLE: "infeasible", exits.EXIT_INTERRUPTED: "interrupted"}
    assert cli_main.EXIT_CODES in cli_main.__doc__ and cli_main.EXIT_CODES in build_parser().format_help()


def test_every_command_has_a_summary_a_description_and_its_own_options() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == COMMANDS
    summaries = {a.dest: a.help for a in sub._choices_actions}
    for name, command in sub.choices.items():
        assert summaries[name] and command.description, name
        assert command.format_help().startswith(f"usage: python -m kafkaops {name} "), name
    assert "--throttle-mb" in sub.choices["execute"].format_help()
    assert "--throttle-mb" not in sub.choices["verify"].format_help()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_and_subcommand_answers_help_as_the_console_script() -> None:
    seen = []
    stack = [("kafkaops", build_parser("kafkaops"))]
    while stack:
        path, parser = stack.pop()
        with pytest.raises(SystemExit) as caught, redirect_stdout(io.StringIO()) as out:
            parser.parse_args(["--help"])
        assert caught.value.code == 0 and out.getvalue().startswith(f"usage: {path}"), path
        seen.append(path)
        stack.extend((f"{path} {name}", sub) for name, sub in _subparsers(parser).items())
    assert {"kafkaops records list", "kafkaops lock break", "kafkaops store upgrade"} <= set(seen), seen


def test_the_console_script_is_installed_beside_the_interpreter() -> None:
    script = Path(sys.executable).parent / "kafkaops"
    assert script.is_file(), f"{script} missing: make setup installs the package with its [project.scripts]"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: kafkaops "), done.stderr


def test_a_usage_error_is_bad_input() -> None:
    with pytest.raises(SystemExit) as caught, redirect_stderr(io.StringIO()):
        build_parser().parse_args(["snapshot", "--nope"])
    assert caught.value.code == exits.EXIT_BAD_INPUT


def test_bad_input_of_any_command_is_2_and_one_line() -> None:
    code, out, err = invoke("datagen", "--bootstrap-server", NOWHERE, "--topic", "t", "--records", "-1")
    assert code == exits.EXIT_BAD_INPUT and out == ""
    assert err == "kafkaops datagen: error: bad data generator spec: records is -1; give 0 or more\n"


def test_an_unreachable_cluster_is_1_and_one_line() -> None:
    code, out, err = invoke("snapshot", "--bootstrap-server", NOWHERE, "--timeout", "1")
    assert code == exits.EXIT_FAILED and out == ""
    assert err.count("\n") == 1 and err.startswith("kafkaops snapshot: failed: ") and NOWHERE in err


def test_ctrl_c_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.cli import snapshot

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshot, "run", interrupted)
    code, _, err = invoke("snapshot")
    assert code == exits.EXIT_INTERRUPTED and err == "kafkaops snapshot: interrupted\n"
