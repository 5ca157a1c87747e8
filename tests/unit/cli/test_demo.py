"""The demo's view of the local cluster: the spec the scale-out DAG grows is the inventory's cluster."""
from __future__ import annotations

import yaml

from kafkaops.cli import demo
from kafkaops.platform import provision


def test_the_local_spec_is_the_local_inventory() -> None:
    spec = demo.local_spec()
    inventory = yaml.safe_load(provision.LOCAL_INVENTORY.read_text())["all"]
    assert spec.cluster_id == inventory["vars"]["kafka_broker_cluster_id"]
    assert spec.bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    assert [(n.node_id, n.controller_port, n.rack, n.roles) for n in spec.nodes] == [
        (1, 19093, "rack-a", ("broker", "controller")), (2, 19095, "rack-b", ("broker", "controller")),
        (3, 19097, "rack-c", ("broker", "controller"))]
    assert spec.base_dir == provision.LOCAL_BASE_DIR
    grown, added = spec.with_new_brokers(1)
    assert [n.node_id for n in added] == [4] and added[0].roles == ("broker",) and grown.nodes[:3] == spec.nodes
