"""Small disks for fault tests: a tmpfs of a given size mounted on a folder (a broker's log dir that fills),
filled by other data (a file), grown while mounted, and unmounted afterwards, also by the watchdog when the test
process is killed.

Mounting needs root (CAP_SYS_ADMIN), as ``make test`` runs in CI; elsewhere the test fails naming that."""
from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kafkaops.testing import watchdog

log = logging.getLogger(__name__)


def _mount(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode:
        pytest.fail(f"could not {what} ({' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}); "
                    "the fault tests mount a small tmpfs as a broker's log dir and need root (CAP_SYS_ADMIN), "
                    "as `make test` has in CI")


@contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``path`` (created if missing) for the ``with`` block, then unmounted
    lazily (a process still holding files there keeps them until it ends; the folder is free at once)."""
    path.mkdir(parents=True, exist_ok=True)
    unmount = ["umount", "--lazy", str(path)]
    with watchdog.guarding(watchdog.run(unmount, if_exists=path), name=f"tmpfs {path}"):
        _mount(["mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)},mode=0750", "tmpfs", str(path)],
               f"mount a {size_bytes}-byte tmpfs on {path}")
        log.info("tmpfs of %d bytes mounted on %s", size_bytes, path)
        try:
            yield path
        finally:
            subprocess.run(unmount, capture_output=True, timeout=30, check=False)
            log.info("tmpfs on %s unmounted", path)


def grow(path: Path, size_bytes: int) -> None:
    """Give the tmpfs on ``path`` ``size_bytes`` in all, keeping what it holds (what an operator's larger disk is)."""
    _mount(["mount", "-o", f"remount,size={int(size_bytes)}", str(path)], f"grow the tmpfs on {path}")
    log.info("tmpfs on %s grown to %d bytes (%d free)", path, size_bytes, free_bytes(path))


def fill(path: Path, leave_bytes: int, name: str = "filler.bin") -> Path:
    """Write a file ``name`` in the folder ``path`` so that ``leave_bytes`` stay free on its file system (what
    other data written beside a broker's log dir does to it); the file, which the caller removes to free the
    space. Nothing is written when no more than ``leave_bytes`` is free."""
    filler = path / name
    size = max(free_bytes(path) - int(leave_bytes), 0)
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as out:
        while size > 0:
            size -= out.write(chunk[:min(size, len(chunk))])
    log.info("%s filled by %s: %d bytes free", path, filler, free_bytes(path))
    return filler


def free_bytes(path: Path) -> int:
    """Bytes free on the file system of ``path``, as ``df`` counts them for root."""
    stats = os.statvfs(path)
    return stats.f_bfree * stats.f_frsize
