"""DAG runs in this process (``dag.test()``), for the tests and the benchmarks: a throw-away
``AIRFLOW_HOME``, its metadata DB migrated, the DAG bag with each DAG's params as loaded, and
:func:`run_dag`, which gives every run those params and leaves them as they were.

Nothing here imports Airflow at import time: Airflow reads its configuration when first imported, so
:func:`use_throwaway_home` must run before anything imports it.
"""
from __future__ import annotations

import atexit
import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Each DAG's params as the bag loaded them (:func:`load_dagbag`), the defaults :func:`run_dag` starts from.
LOADED_PARAMS: dict[str, dict[str, Any]] = {}


def use_throwaway_home(repo: Path) -> Path:
    """Point Airflow at a new temp ``AIRFLOW_HOME`` (removed at interpreter exit) with the checkout
    ``repo``'s DAGs and no examples, so nothing touches a developer's ~/airflow; the jars and the local
    cluster's spec are the checkout's (``repo/.cache``, as under make) unless ``KAFKAOPS_CACHE`` says
    otherwise; child processes (Spark apps, airflow) run the checkout's code. Returns the home."""
    home = Path(tempfile.mkdtemp(prefix="kafkaops-airflow-"))
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "GX_ANALYTICS_ENABLED": "false",
        "KAFKAOPS_CACHE": os.environ.get("KAFKAOPS_CACHE") or str(repo / ".cache"),
        "PYTHONPATH": os.pathsep.join([str(repo / "plugins"), str(repo),
                                       *filter(None, [os.environ.get("PYTHONPATH")])]),
    })
    atexit.register(shutil.rmtree, home, True)
    return home


def migrate_db() -> None:
    """``airflow db migrate`` in ``$AIRFLOW_HOME`` (half a minute of CPU)."""
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                            text=True, env=os.environ.copy(), timeout=300)
    if result.returncode:
        raise RuntimeError(f"airflow db migrate in {os.environ.get('AIRFLOW_HOME')} exited with "
                           f"{result.returncode}: {result.stderr[-2000:]}")


def load_dagbag(folder: Path) -> Any:
    """The DAGs of ``folder``, parsed; their params as loaded are kept for :func:`run_dag`."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(folder))
    for dag_id, dag in bag.dags.items():
        LOADED_PARAMS[dag_id] = copy.deepcopy(dag.params.dump())
    return bag


def run_dag(dagbag: Any, dag_id: str, **conf: Any) -> Any:
    """``dag.test()`` with every param given: ``conf`` over the DAG's defaults as :func:`load_dagbag`
    loaded them; afterwards the DAG's params are as they were. Airflow's process_params copies the DAG's
    (and each task's) Param objects into a task's ParamsDict and resolves the run's conf on them, so a run
    writes its conf into the DAG's own Params: without the restore an earlier run's values (dry_run
    False, another module's inventory, topics, ssh_conn_id) would become the next run's defaults, and
    a later test reading ``dag.params`` (test_dag_integrity) would see them."""
    dag = dagbag.dags[dag_id]
    params = {id(p): p for d in (dag.params, *(t.params for t in dag.tasks)) for p in map(d.get_param, d)}
    saved = [(p, copy.deepcopy(p.value)) for p in params.values()]
    try:
        return dag.test(run_conf={**copy.deepcopy(LOADED_PARAMS[dag_id]), **conf})
    finally:
        for param, value in saved:
            param.value = value
