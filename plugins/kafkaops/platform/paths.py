"""Where this machine keeps kafkaops' caches: named by settings, never by the repository's location.

``KAFKAOPS_CACHE`` names the cache folder (default ``$XDG_CACHE_HOME/kafkaops``, else
``~/.cache/kafkaops``; the Makefile sets the checkout's ``.cache/``). ``KAFKAOPS_JARS`` names the
jar folder (default ``<cache>/jars``) that ``make setup`` fills from Maven Central. The files
kafkaops ships (playbooks, suites, DAG files) are package data: :mod:`kafkaops.resources`.

Files holding secrets (client settings, a Spark cluster's secret, an inventory) are written through
:func:`private_file`: created 0600, never overwritten.
"""
from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from kafkaops.errors import SetupError


def _default_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kafkaops"


CACHE = Path(os.environ.get("KAFKAOPS_CACHE") or _default_cache())
JARS = Path(os.environ.get("KAFKAOPS_JARS") or CACHE / "jars")


def jar_dir(name: str) -> Path:
    """One classpath folder of the jar cache: ``broker``, ``tools`` or ``spark``."""
    path = JARS / name
    if not any(path.glob("*.jar")):
        raise SetupError(f"no jars in {path}: set KAFKAOPS_JARS to the folder holding broker/, tools/ and spark/ "
                         f"(now {JARS}), or KAFKAOPS_CACHE to the folder whose jars/ holds them; 'make setup' "
                         f"fills a checkout's .cache/jars from jvm/pom.xml (the Makefile sets KAFKAOPS_CACHE=.cache)")
    return path


def safe_name(name: object, *, limit: int = 200) -> str:
    """``name`` (a run id, DAG id, cluster id) as one file or folder name: each run of characters
    other than letters, digits, ``.``, ``_`` and ``-`` becomes one ``_``, cut at ``limit``
    characters. ``manual__2026-11-22T10:00:00+00:00`` -> ``manual__2026-11-22T10_00_00_00_00``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name))[:limit]


@contextmanager
def private_file(path: Path) -> Iterator[BinaryIO]:
    """A new file at ``path`` for this user only, open for writing (bytes) in the ``with`` block.

    Its invariant: the file is created here, never overwritten (an existing ``path``, a symlink too, is
    refused with :class:`FileExistsError` and left as it was); its mode is 0600 whatever the umask (the
    creation asks for 0600, which a umask can only narrow, and the mode is then set to 0600 exactly, before
    anything is written); the block that opened it closes it when it ends, also on an error (what was
    written stays: the caller removes the file, or the private folder holding it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as err:
        raise FileExistsError(errno.EEXIST, f"{path} exists already; a private file is created, never "
                                            "overwritten: remove it, or write to a new path", str(path)) from err
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, 0o600)
        yield out
