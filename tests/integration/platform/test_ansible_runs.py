"""provision.run_ansible: a playbook run leaves the process's signal handlers alone, and an exception that
interrupts it (a task's timeout, SIGTERM) stops the playbook and what it started before going on."""
from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kafkaops.platform import provision

pytestmark = pytest.mark.integration


def project(tmp_path: Path, seconds: float) -> Path:
    """A project whose playbook runs ``sleep <seconds>`` on the controller (the argument marks the process)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "sleep.yml").write_text(textwrap.dedent(f"""\
        - name: Sleep on the controller
          hosts: all
          gather_facts: false
          tasks:
            - name: Sleep
              ansible.builtin.command: sleep {seconds}
        """))
    return folder


def run(tmp_path: Path, folder: Path) -> object:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    return provision.run_ansible(
        private_data_dir=str(private), project_dir=str(folder), playbook=str(folder / "sleep.yml"),
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                   "ansible_python_interpreter": sys.executable}}}},
        envvars={"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                 "ANSIBLE_LOCAL_TEMP": str(private / "tmp"), "ANSIBLE_HOME": str(private / "home")}, timeout=120)


def processes_naming(text: str) -> list[str]:
    """Command lines of this machine's processes that contain ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def test_a_run_leaves_the_signal_handlers_as_they_were(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    runner = run(tmp_path, project(tmp_path, 0.1))
    assert runner.status == "successful", runner.stdout.read()[-2000:]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


class Interrupted(Exception):
    pass


# the runner's thread must end cleanly too (it failed when another waiter reaped ansible-playbook first)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_interrupted_run_stops_the_playbook_and_its_command(tmp_path: Path) -> None:
    marker = "61.4321"  # the sleep's argument: only this test's command carries it
    folder = project(tmp_path, float(marker))
    seen: dict[str, object] = {}

    def interrupt(signum: int, frame: object) -> None:  # as Airflow's execution_timeout does, in the main thread
        seen["running"] = processes_naming(f"sleep {marker}")
        seen["at"] = time.monotonic()
        raise Interrupted("the task's time is up")

    def alarm_once_sleeping() -> None:  # the signal once the playbook's command runs (at most 120 s on)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not processes_naming(f"sleep {marker}"):
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGALRM)

    old = signal.signal(signal.SIGALRM, interrupt)
    watcher = threading.Thread(target=alarm_once_sleeping, daemon=True)
    try:
        watcher.start()
        with pytest.raises(Interrupted):
            run(tmp_path, folder)
        went_on_after = time.monotonic() - float(seen["at"])  # type: ignore[arg-type]
    finally:
        watcher.join(130)
        signal.signal(signal.SIGALRM, old)
    assert seen["running"], "the sleep was not running when the run was interrupted: nothing was tested"
    assert went_on_after < 15, went_on_after
    left = processes_naming(str(folder)) + processes_naming(f"sleep {marker}")
    for _ in range(50):  # the killed processes' parents reap them
        if not left:
            break
        time.sleep(0.1)
        left = processes_naming(str(folder)) + processes_naming(f"sleep {marker}")
    assert left == [], f"still running after the interrupted run: {left}"
