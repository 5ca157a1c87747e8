"""Fixtures of the platform tests: the role-provisioned secured nodes, shared by the modules that
test the role's secured listeners and kafkaops' paths over them (one pair of brokers for all)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.platform.secured_node import SecuredNodes, secured_nodes


@pytest.fixture(scope="package")
def tls_nodes() -> Iterator[SecuredNodes]:
    with secured_nodes() as nodes:
        yield nodes
