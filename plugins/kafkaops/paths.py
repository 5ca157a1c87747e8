"""Where the repository keeps its playbooks and its git-ignored caches."""
from __future__ import annotations

import os
from pathlib import Path

from kafkaops.errors import SetupError

REPO_ROOT = Path(__file__).resolve().parents[2]
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
