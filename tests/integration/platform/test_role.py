"""The kafka_broker Ansible role: idempotence, refusals, and cleaning up only what it made."""
from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kafkaops.platform import provision
from kafkaops.testing import clusters
from kafkaops.errors import ProvisionError
from tests.conftest import RunningCluster

pytestmark = pytest.mark.integration


def test_cluster_up_twice_changes_nothing(kafka_cluster: RunningCluster) -> None:
    result = provision.cluster_up(kafka_cluster.spec)
    assert result.ok and dict(result.changed) == {}


@pytest.fixture
def scratch_dir():
    base = Path(tempfile.mkdtemp(prefix="kafkaops-role-"))
    yield base
    clusters.kill_strays(base)
    shutil.rmtree(base, ignore_errors=True)


def test_a_port_in_use_is_refused_before_start(scratch_dir: Path) -> None:
    spec = provision.local_cluster_spec(scratch_dir, brokers=1, controllers=1)
    holder = socket.socket()
    holder.bind(("127.0.0.1", spec.nodes[0].port))
    holder.listen(1)
    try:
        with pytest.raises(ProvisionError, match=f"port {spec.nodes[0].port} .* already in use"):
            provision.cluster_up(spec)
    finally:
        holder.close()
    assert provision.node_pid(spec, 1) is None


def test_a_data_dir_of_another_cluster_is_refused_and_kept(scratch_dir: Path) -> None:
    spec = provision.local_cluster_spec(scratch_dir, brokers=1, controllers=1)
    data = scratch_dir / "node-1" / "data"
    data.mkdir(parents=True)
    meta = "version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\n"
    (data / "meta.properties").write_text(meta)
    (data / "precious-0").mkdir()
    with pytest.raises(ProvisionError, match="holds cluster AAAAAAAAAAAAAAAAAAAAAA .*refusing to format"):
        provision.cluster_up(spec)
    assert (data / "meta.properties").read_text() == meta
    assert (data / "precious-0").is_dir()
    assert provision.node_pid(spec, 1) is None


def test_cluster_down_removes_only_what_it_created(scratch_dir: Path) -> None:
    spec = provision.local_cluster_spec(scratch_dir, brokers=1, controllers=1)
    neighbour = scratch_dir / "not-ours.txt"
    neighbour.write_text("keep me")
    provision.cluster_up(spec)
    assert provision.node_pid(spec, 1) is not None
    provision.cluster_down(spec)
    assert provision.node_pid(spec, 1) is None
    assert (scratch_dir / "node-1" / "data" / "meta.properties").exists()  # stop keeps the data
    provision.cluster_down(spec, purge=True)
    assert not (scratch_dir / "node-1").exists()
    assert neighbour.read_text() == "keep me"
