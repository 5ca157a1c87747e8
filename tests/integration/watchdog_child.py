"""Not collected on its own (no ``test_`` prefix): the child pytest of tests/integration/test_watchdog.py
runs it by name. It starts real servers the way the suite's fixtures do (a one-broker cluster through
``clusters.temporary_cluster``, a throw-away PostgreSQL, a redis-server), writes what runs to the JSON
file ``$KAFKAOPS_WATCHDOG_CHILD_OUT`` and blocks until the parent test kills it."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import sqlalchemy as sa

from kafkaops.platform import provision
from kafkaops.testing import clusters, postgres
from kafkaops.testing import deployment as harness


def listeners(ports: set[int]) -> dict[int, int]:
    """port -> the pid listening on it."""
    return {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port in ports and c.pid}


def test_start_servers_then_block(tmp_path: Path) -> None:
    out = Path(os.environ["KAFKAOPS_WATCHDOG_CHILD_OUT"])
    with clusters.temporary_cluster("kafkaops-watchdog-", brokers=1, controllers=1, heap="256m") as spec, \
            postgres.temporary_postgres(prefix="kafkaops-pg-watchdog-") as pg_url, \
            harness.redis_server(tmp_path / "redis") as redis_url:
        node = spec.nodes[0]
        pg_port = sa.make_url(pg_url).port
        redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        ports = {node.port, node.controller_port, pg_port, redis_port}
        by_port = listeners(ports)
        assert set(by_port) == ports, f"not listening: {ports - set(by_port)}"
        pids = {*by_port.values(), provision.node_pid(spec, node.node_id)}
        for server in list(pids):  # the PostgreSQL backends and helpers too
            pids |= {child.pid for child in psutil.Process(server).children(recursive=True)}
        argv = psutil.Process(by_port[pg_port]).cmdline()  # postgres -D <root>/data -p <port>
        folders = [str(spec.base_dir), str(Path(argv[argv.index("-D") + 1]).parent)]
        out.write_text(json.dumps({"pids": sorted(pids), "ports": sorted(ports), "folders": folders}))
        time.sleep(300)  # the parent test SIGKILLs this process long before
