"""Unit-test fixtures."""
from tests.store_fixtures import local_store  # noqa: F401
