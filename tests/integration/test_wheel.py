"""The kafkaops wheel needs no checkout: built from a copy of the source tree, installed into a
virtualenv outside it (``--no-deps``; the dependencies come from the dev venv's site-packages through
a ``.pth`` line, as the deployment installs it), and run from ``/`` with no ``PYTHONPATH``, the CLI,
the Spark apps, the plugin's entry point, the playbooks, suites, DAG files and migrations are all the
installed package's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
#: The store's migrations in the checkout, oldest first: the wheel carries each, and the newest is its head.
MIGRATIONS = sorted((REPO / "plugins/kafkaops/platform/migrations/versions").glob("[0-9]*_*.py"))
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info", "__pycache__", "target",
                                    ".pytest_cache", ".hypothesis", "airflow_home")

PROBE = """
import json, sys
from importlib.metadata import entry_points
import kafkaops, spark_apps
from kafkaops import resources
from kafkaops.platform import gates, migrations, provision
from kafkaops.platform.render import html_templates
(plugin,) = [e for e in entry_points(group="airflow.plugins") if e.name == "kafkaops"]
print(json.dumps({
    "kafkaops": kafkaops.__file__, "spark_apps": spark_apps.__file__,
    "playbooks": str(resources.playbooks()), "suites": str(resources.suites()), "dags": str(resources.dags_folder()),
    "role": str(resources.playbooks() / "roles" / "kafka_broker" / "tasks" / "main.yml"),
    "inventory": str(provision.LOCAL_INVENTORY), "suite": gates.load_suite("preflight")["name"],
    "suite_path": str(gates.suite_path("preflight")), "migrations": migrations.head(),
    "template": html_templates("kafkaops.airflow").get_template("record.html.j2").filename,
    "plugin": plugin.value, "plugin_dist": str(plugin.dist.locate_file("")), "plugin_class": plugin.load().__name__,
    "sys_path": sys.path,
}))
"""

DAGBAG = """
import json
from airflow.dag_processing.dagbag import DagBag
from kafkaops.resources import dags_folder
bag = DagBag(dag_folder=str(dags_folder()))
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": {k: v[-300:] for k, v in bag.import_errors.items()},
                  "files": sorted({d.fileloc for d in bag.dags.values()})}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout (no build/ or egg-info of earlier builds in it)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(work / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = (work / "dist").glob("kafkaops-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv outside the checkout holding the wheel; the dev venv's packages through a .pth line."""
    target = tmp_path_factory.mktemp("venv") / "kafkaops-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    python = target / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout is no installed kafkaops
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--force-reinstall", str(wheel)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def run_in(venv: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``venv``'s python with ``args``, from ``/``, without PYTHONPATH, kafkaops settings or a DAG folder."""
    env = {k: v for k, v in os.environ.items()  # AIRFLOW_HOME stays the tests' throw-away home
           if k not in ("PYTHONPATH", "AIRFLOW__CORE__DAGS_FOLDER") and not k.startswith("KAFKAOPS_")}
    done = subprocess.run([str(venv / "bin" / "python"), *args], cwd="/", env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}: {done.stderr[-3000:]}"
    return done


def test_the_wheel_holds_the_package_its_data_and_the_spark_apps(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "kafkaops/resources/"
    assert {f"{data}playbooks/cluster_up.yml", f"{data}playbooks/cluster_down.yml",
            f"{data}playbooks/inventory/local.yml", f"{data}playbooks/roles/kafka_broker/tasks/main.yml",
            f"{data}playbooks/roles/kafka_broker/templates/server.properties.j2"} <= names
    for top, package in (("playbooks/roles/kafka_broker", f"{data}playbooks/roles/kafka_broker"),
                         ("expectations", f"{data}expectations"), ("dags", f"{data}dags")):
        files = {f"{package}/{p.relative_to(REPO / top)}" for p in (REPO / top).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
        assert files and files <= names, sorted(files - names)
    assert {f"{data}expectations/{g}.json" for g in ("preflight", "plan", "post_move", "backfill")} <= names
    assert {"spark_apps/__init__.py", "spark_apps/key_skew.py", "spark_apps/rekey_backfill.py"} <= names
    assert {"kafkaops/airflow/templates/record.html.j2", "kafkaops/platform/templates/base.html.j2",
            "kafkaops/capacity/templates/report.html.j2"} <= names
    assert len(MIGRATIONS) >= 3  # 0001 to 0003 at least: the glob found them
    assert {"kafkaops/platform/migrations/env.py"} | {f"kafkaops/platform/migrations/versions/{m.name}"
                                                     for m in MIGRATIONS} <= names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "plugins/", "dags/"))]
    entry_points = zipfile.ZipFile(wheel).read("kafkaops-0.1.0.dist-info/entry_points.txt").decode()
    assert "[airflow.plugins]\nkafkaops = kafkaops.airflow.plugin:KafkaOpsPlugin" in entry_points


def test_the_installed_package_runs_without_the_checkout(venv: Path) -> None:
    site = str(venv.resolve())
    probe = json.loads(run_in(venv, "-c", PROBE).stdout)
    assert not {str(REPO), str(REPO / "plugins")} & {str(Path(p).resolve()) for p in probe["sys_path"] if p}
    for key in ("kafkaops", "spark_apps", "playbooks", "suites", "dags", "role", "inventory", "suite_path",
                "template", "plugin_dist"):
        assert probe[key].startswith(site), (key, probe[key])
    assert Path(probe["role"]).is_file() and Path(probe["inventory"]).is_file()
    assert probe["suite"] == "preflight" and probe["migrations"].startswith(MIGRATIONS[-1].name.split("_")[0])
    assert (probe["plugin"], probe["plugin_class"]) == ("kafkaops.airflow.plugin:KafkaOpsPlugin", "KafkaOpsPlugin")
    assert run_in(venv, "-m", "kafkaops", "--help").stdout.startswith("usage: python -m kafkaops")
    assert run_in(venv, "-m", "spark_apps.key_skew", "--help").stdout.startswith("usage: key_skew")


def test_airflow_parses_the_installed_dag_files(venv: Path, tmp_path: Path) -> None:
    found = json.loads(run_in(venv, "-c", DAGBAG, timeout=600).stdout.strip().splitlines()[-1])
    assert found["errors"] == {}
    assert set(found["dags"]) == {"kafka_scale_out", "kafka_reassign", "kafka_partition_increase",
                                  "kafka_capacity_review"}
    assert all(f.startswith(str(venv.resolve())) for f in found["files"]), found["files"]
