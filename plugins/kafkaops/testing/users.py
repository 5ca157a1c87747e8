"""The Unix users a test run creates for itself (sshd's remote hosts, the Spark Workers): named with this
process's suffix (:func:`run_suffix`), so two runs on one machine, or two pytest-xdist workers of one, never
share one, and a dead run's users are told by it (:func:`remove_stale_users`)."""
from __future__ import annotations

import os


def run_suffix() -> str:
    """This pytest process's short name (its pid in base 36, at most 5 characters): the suffix of the Unix
    users tests/sshd.py and kafkaops.testing.spark create, so two runs on one machine, or two xdist workers of
    one, never share one; :func:`remove_stale_users` tells a dead run's users by it."""
    digits, n, out = "0123456789abcdefghijklmnopqrstuvwxyz", os.getpid(), ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def remove_stale_users(user_prefix: str, group_prefix: str | None = None) -> None:
    """Remove the users ``<user_prefix><n>-<suffix>`` (and groups ``<group_prefix><suffix>``) whose pytest
    process (:func:`run_suffix`) is gone: what a killed run left. Their processes are killed first."""
    import grp
    import pwd
    import re
    import signal
    import subprocess
    import time

    def dead(suffix: str) -> bool:
        try:
            return not os.path.exists(f"/proc/{int(suffix, 36)}")
        except ValueError:
            return False

    stale = [u for u in pwd.getpwall()
             if (m := re.fullmatch(re.escape(user_prefix) + r"\d+-([0-9a-z]+)", u.pw_name)) and dead(m[1])]
    if stale:
        uids = {u.pw_uid for u in stale}
        for proc in os.listdir("/proc"):
            try:
                if proc.isdigit() and os.stat(f"/proc/{proc}").st_uid in uids:
                    os.kill(int(proc), signal.SIGKILL)
            except OSError:
                continue
        time.sleep(0.2)
        for user in stale:
            subprocess.run(["userdel", "-f", user.pw_name], capture_output=True)
    if group_prefix:
        for group in grp.getgrall():
            if group.gr_name.startswith(group_prefix) and dead(group.gr_name[len(group_prefix):]):
                subprocess.run(["groupdel", group.gr_name], capture_output=True)
