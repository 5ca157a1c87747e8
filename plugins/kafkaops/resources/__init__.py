"""The files kafkaops ships as package data: the Ansible playbooks, the Great Expectations suites
and the DAG files, found through :mod:`importlib.resources`, wherever the package is installed.

In the repository they stay at the top (``playbooks/``, ``expectations/``, ``dags/``); this
package links to them (relative symlinks), and the wheel carries copies. Ansible and Airflow read
folders, so each function returns a real directory: a zipped install is refused.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from kafkaops.errors import SetupError


def _folder(name: str) -> Path:
    folder = files(__name__) / name
    if not isinstance(folder, Path) or not folder.is_dir():
        raise SetupError(f"kafkaops' {name} folder is not a directory on disk ({folder}); install the kafkaops "
                         f"wheel with pip into a virtualenv (not zipped) and check that it holds {name}/")
    return folder


def playbooks() -> Path:
    """The Ansible project folder: ``cluster_up.yml``, ``cluster_down.yml``, ``inventory/``, ``roles/``."""
    return _folder("playbooks")


def suites() -> Path:
    """The gate suites, one ``<gate>.json`` per gate."""
    return _folder("expectations")


def dags_folder() -> Path:
    """The DAG files, one per DAG: Airflow's ``[core] dags_folder``."""
    return _folder("dags")
