"""kafkaops.resources: the playbooks, suites and DAG files are package data, the checkout's own files."""
from __future__ import annotations

from pathlib import Path

import pytest

import kafkaops
from kafkaops import resources
from kafkaops.errors import SetupError
from kafkaops.platform import gates, provision

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(kafkaops.__file__).resolve().parent


@pytest.mark.parametrize("folder, top", [(resources.playbooks, "playbooks"), (resources.suites, "expectations"),
                                         (resources.dags_folder, "dags")])
def test_each_folder_is_in_the_package_and_is_the_checkouts(folder, top: str) -> None:
    path = folder()
    assert path.parent == PACKAGE / "resources" and path.is_dir()
    assert path.samefile(REPO / top)  # the package links to the top-level folder: one copy of each file


def test_the_users_find_their_files_in_the_package() -> None:
    assert (resources.playbooks() / "roles" / "kafka_broker" / "tasks" / "main.yml").is_file()
    assert provision.LOCAL_INVENTORY == resources.playbooks() / "inventory" / "local.yml"
    assert gates.suite_path("plan") == resources.suites() / "plan.json"
    assert {p.stem for p in resources.suites().glob("*.json")} == {"preflight", "plan", "post_move", "backfill"}
    assert {p.stem for p in resources.dags_folder().glob("*.py")} >= {"kafka_scale_out", "kafka_reassign"}
    assert not (resources.dags_folder() / "__init__.py").exists()  # DAG files, not modules of the package


def test_a_folder_that_is_not_on_disk_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(resources, "files", lambda _name: tmp_path)
    with pytest.raises(SetupError, match=r"kafkaops' playbooks folder is not a directory on disk .*install the "
                                         r"kafkaops wheel with pip"):
        resources.playbooks()
