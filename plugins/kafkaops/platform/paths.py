"""Where the repository keeps its playbooks and its git-ignored caches."""
from __future__ import annotations

import os
import re
from pathlib import Path

from kafkaops.errors import SetupError

REPO_ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = REPO_ROOT / "playbooks"
EXPECTATIONS = REPO_ROOT / "expectations"
CACHE = Path(os.environ.get("KAFKAOPS_CACHE", REPO_ROOT / ".cache"))
JARS = CACHE / "jars"


def jar_dir(name: str) -> Path:
    """One classpath folder of the jar cache: ``broker``, ``tools`` or ``spark``."""
    path = JARS / name
    if not any(path.glob("*.jar")):
        raise SetupError(f"no jars in {path}: run 'make setup' (Maven copies them from jvm/pom.xml)")
    return path


def safe_name(name: object, *, limit: int = 200) -> str:
    """``name`` (a run id, DAG id, cluster id) as one file or folder name: each run of characters
    other than letters, digits, ``.``, ``_`` and ``-`` becomes one ``_``, cut at ``limit``
    characters. ``manual__2026-11-22T10:00:00+00:00`` -> ``manual__2026-11-22T10_00_00_00_00``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name))[:limit]
