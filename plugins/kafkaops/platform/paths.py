"""Where this machine keeps kafkaops' caches: named by settings, never by the repository's location.

``KAFKAOPS_CACHE`` names the cache folder (default ``$XDG_CACHE_HOME/kafkaops``, else
``~/.cache/kafkaops``; the Makefile sets the checkout's ``.cache/``). ``KAFKAOPS_JARS`` names the
jar folder (default ``<cache>/jars``) that ``make setup`` fills from Maven Central. The files
kafkaops ships (playbooks, suites, DAG files) are package data: :mod:`kafkaops.resources`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

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
