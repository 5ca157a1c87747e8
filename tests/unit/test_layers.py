"""The layer contracts import-linter cannot see: DAG files are not a package, so check them here."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

DAGS = sorted((Path(__file__).resolve().parents[2] / "dags").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_there_are_dag_files() -> None:
    assert {p.stem for p in DAGS} >= {"kafka_scale_out", "kafka_reassign", "kafka_partition_increase",
                                      "kafka_capacity_review"}


@pytest.mark.parametrize("path", DAGS, ids=lambda p: p.name)
def test_dag_files_only_wire_kafkaops_airflow(path: Path) -> None:
    """A DAG file calls in through kafkaops.airflow; the logic lives in the package."""
    ours = {m for m in imported_modules(path) if m.split(".")[0] == "kafkaops"}
    assert ours, f"{path.name} wires no kafkaops.airflow builder"
    outside = sorted(m for m in ours if not m.startswith("kafkaops.airflow"))
    assert not outside, f"{path.name} imports {outside}; import the builder from kafkaops.airflow instead"


def test_the_check_sees_a_deeper_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad_dag.py"
    bad.write_text("from kafkaops.airflow.operation_dag import build_operation_dag\n"
                   "from kafkaops.platform.kafka import metadata\n")
    assert "kafkaops.platform.kafka" in imported_modules(bad)
