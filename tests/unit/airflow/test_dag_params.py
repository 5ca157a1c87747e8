"""Every DAG can be triggered from Airflow's Trigger form with its defaults plus the operator's real
choices, and its list params are plain text areas, not a JSON editor.

The form's rules (Airflow 3.3, airflow-core/src/airflow/ui/src/components/FlexibleForm):
isParamRequired.tsx marks a param required unless its type admits null, and a required field
left empty blocks the Trigger button; FieldSelector.tsx opens a JSON editor (FieldAdvancedArray)
for an array whose items have a type other than string, and a one-item-per-line text area
(FieldStringArray, which sends null when left empty) otherwise.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from airflow.sdk.definitions._internal.types import NOTSET
from airflow.sdk.definitions.param import ParamValidationError

from kafkaops.capacity.steps import CapacityParams
from kafkaops.reassign.steps import OperationParams
from kafkaops.rekey.steps import PartitionParams

REPO = Path(__file__).resolve().parents[3]
DAG_IDS = ("kafka_capacity_review", "kafka_partition_increase", "kafka_reassign", "kafka_scale_out")
# What an operator must type: params without a default (the form asks for them)
REAL_CHOICES: dict[str, dict[str, Any]] = {"kafka_partition_increase": {"topic": "orders"}}
PARSERS = {
    "kafka_scale_out": lambda p: OperationParams.from_params("scale_out", p),
    "kafka_reassign": lambda p: OperationParams.from_params(p["operation"], p),
    "kafka_partition_increase": PartitionParams.from_params,
    "kafka_capacity_review": CapacityParams.from_params,
}


@pytest.fixture(scope="module")
def dags() -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def types_of(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if kind else set()


def params_of(dag: Any) -> list[tuple[str, Any]]:
    return [(name, dag.params.get_param(name)) for name in dag.params]


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_every_default_validates_and_only_real_choices_have_none(dags: dict[str, Any], dag_id: str) -> None:
    without_default = []
    for name, param in params_of(dags[dag_id]):
        if param.value is NOTSET:
            without_default.append(name)
            continue
        jsonschema.validate(param.value, param.schema)  # the default passes its own schema
    assert sorted(without_default) == sorted(REAL_CHOICES.get(dag_id, {}))


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_optional_params_admit_null_and_lists_are_text_areas(dags: dict[str, Any], dag_id: str) -> None:
    for name, param in params_of(dags[dag_id]):
        types = types_of(param.schema)
        assert param.value not in ("", []), f"{dag_id}.{name}: an empty default must be None (not given)"
        if param.value is None:
            assert "null" in types, f"{dag_id}.{name} defaults to None: its type must admit null, else the form " \
                                    "requires it"
        if "array" in types:
            assert "null" in types, f"{dag_id}.{name}: a list left empty in the form is null"
            assert param.schema["items"].get("type", "string") == "string", \
                f"{dag_id}.{name}: typed items open the form's JSON editor"
        if "null" not in types and param.value is not NOTSET:
            assert param.value is not None  # required, and the form is prefilled


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_the_forms_defaults_plus_real_choices_trigger_and_parse(dags: dict[str, Any], dag_id: str) -> None:
    """What the form sends untouched (defaults, null for the empty ones) plus the real choices
    passes Airflow's validation at trigger time and the DAG's own params parser."""
    params = copy.deepcopy(dags[dag_id].params)
    params.update(REAL_CHOICES.get(dag_id, {}))
    resolved = params.validate()
    assert PARSERS[dag_id](resolved) is not None


@pytest.mark.parametrize("dag_id, name", [("kafka_scale_out", "new_broker_ids"), ("kafka_scale_out", "exclude_brokers"),
                                          ("kafka_reassign", "drain_brokers"),
                                          ("kafka_capacity_review", "candidate_partitions")])
def test_typed_numbers_pass_the_schema_and_junk_does_not(dags: dict[str, Any], dag_id: str, name: str) -> None:
    param = copy.deepcopy(dags[dag_id].params.get_param(name))
    for typed in (["4"], ["4", "5, 6", ""], [4, 5], None):
        assert param.resolve(typed) == typed
    for junk in (["[4]]"], ["four"], [-1], "4"):
        with pytest.raises(ParamValidationError):
            param.resolve(junk)


def test_typed_ids_reach_the_operation_as_ints(dags: dict[str, Any]) -> None:
    params = copy.deepcopy(dags["kafka_reassign"].params)
    params.update({"operation": "drain", "drain_brokers": ["4", "5, 6", ""], "exclude_brokers": ["1"]})
    parsed = OperationParams.from_params("drain", params.validate())
    assert (parsed.drain_brokers, parsed.exclude_brokers) == ((4, 5, 6), (1,))


def test_one_dags_run_values_never_become_another_dags_defaults() -> None:
    """Airflow resolves a run's values into the DAG's Param objects: were they shared between DAGs
    (the common params), a scale-out run with dry_run off would turn the drain's default into a real
    run, and a partition increase's topic would stop being asked for."""
    from airflow.dag_processing.dagbag import DagBag

    first = DagBag(dag_folder=str(REPO / "dags")).dags
    first["kafka_scale_out"].params["dry_run"] = False
    first["kafka_partition_increase"].params["topic"] = "orders"
    second = DagBag(dag_folder=str(REPO / "dags")).dags
    assert first["kafka_reassign"].params.get_param("dry_run").value is True
    assert second["kafka_scale_out"].params.get_param("dry_run").value is True
    assert second["kafka_partition_increase"].params.get_param("topic").value is NOTSET
