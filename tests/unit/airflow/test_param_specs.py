"""One place for each default: a capability's param specs (kafkaops.platform.params) give its dataclass's
defaults and its DAG form's, and its modes are str-valued enums that the form, the params and JSON hold as
the same strings."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from kafkaops.airflow import capacity_review, operation_dag, partition_increase
from kafkaops.capacity import steps as capacity
from kafkaops.platform import params as form
from kafkaops.reassign import steps as reassign
from kafkaops.rekey import migration
from kafkaops.rekey import steps as rekey



def specs_of(*modules: Any) -> dict[str, form.Spec[Any]]:
    """The specs the modules declare, by param name (a later module's win)."""
    return {v.name: v for m in modules for v in vars(m).values() if isinstance(v, form.Spec) and v.name}


# (the dataclass, the form it is read from, the specs of its fields)
def form_of(dag_file: str) -> dict[str, Any]:
    """The Trigger form (the params) of the DAG that ``dags/<dag_file>`` builds."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "dags" / dag_file
    module_spec = importlib.util.spec_from_file_location(f"form_of_{path.stem}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return {name: module.dag.params.get_param(name) for name in module.dag.params}


REASSIGN_FORMS = {name: form_of(f"{name}.py") for name in ("kafka_scale_out", "kafka_reassign")}
FORMS = [
    (reassign.OperationParams, operation_dag.COMMON_PARAMS, {s.name: s for s in reassign.PARAMS}),
    (reassign.OperationParams, REASSIGN_FORMS["kafka_scale_out"], {s.name: s for s in reassign.SCALE_OUT_PARAMS}),
    (reassign.OperationParams, REASSIGN_FORMS["kafka_reassign"],
     {s.name: s for s in reassign.REASSIGN_PARAMS if s.name != "operation"}),  # operation is the kind, not a field
    (rekey.PartitionParams, partition_increase.PARAMS, specs_of(form, migration, rekey)),
    (capacity.CapacityParams, capacity_review.PARAMS, specs_of(form, capacity)),
    (migration.LivePolicy, partition_increase.PARAMS, specs_of(migration)),
]
SPECS = [spec for _, _, specs in FORMS for spec in specs.values()]


def defaults_of(cls: Any) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


@pytest.mark.parametrize(("cls", "params", "specs"), FORMS, ids=[f"{cls.__name__}-{i}" for i, (cls, _, _) in enumerate(FORMS)])
def test_each_dataclass_default_is_its_forms_default_from_the_one_spec(cls, params, specs) -> None:
    checked = 0
    for field, default in defaults_of(cls).items():
        if field not in specs:  # not on the form (LivePolicy.max_catch_up_passes) or another DAG's (add_brokers)
            continue
        spec = specs[field]
        assert default == spec.default, f"{cls.__name__}.{field}"
        assert params[field].value == spec.initial, f"the form's {field}"
        assert params[field].schema["title"] == spec.title and params[field].description == spec.described
        checked += 1
    assert checked >= min(len(specs), 5)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_spec_reads_an_empty_value_as_its_default(spec: form.Spec[Any]) -> None:
    for empty in ({}, {spec.name: None}, *([] if isinstance(spec, form.Flag) else [{spec.name: ""}])):
        assert spec.read(empty) == spec.default
    if not spec.required:
        assert spec.read({spec.name: spec.initial}) == spec.default  # the form's prefilled value


@pytest.mark.parametrize(("spec", "enum"), [(rekey.MODE, rekey.Mode), (migration.QUIESCE, migration.Quiesce),
                                            (form.APPROVAL, form.Approval),
                                            (reassign.OPERATION, (reassign.Kind.REBALANCE, reassign.Kind.DRAIN))],
                         ids=lambda v: getattr(v, "name", ""))
def test_a_mode_enum_round_trips_through_the_form_and_the_params(spec, enum) -> None:
    assert spec.schema()["enum"] == [m.value for m in enum]  # the strings the form offers
    for member in enum:
        read = spec.read({spec.name: member.value})
        assert read is member and spec.read({spec.name: read}) is member
        assert json.dumps({spec.name: read}) == json.dumps({spec.name: member.value})
    with pytest.raises(form.ConfigError, match=f"{spec.name} 'sideways' is unknown; use one of"):
        spec.read({spec.name: "sideways"})
    if spec is reassign.OPERATION:  # the reassignment DAG rebalances or drains; a scale-out has its own DAG
        with pytest.raises(form.ConfigError, match="operation 'scale_out' is unknown; use one of rebalance, drain"):
            spec.read({"operation": "scale_out"})


def test_the_partition_plans_mode_crosses_json_as_its_string() -> None:
    params = rekey.PartitionParams.from_params({"topic": "orders", "new_partition_count": 6, "mode": "in_place",
                                                "quiesce": "none", "approval": "auto_approve"})
    assert (params.mode, params.approval, params.policy.quiesce) == (
        rekey.Mode.IN_PLACE, form.Approval.AUTO_APPROVE, migration.Quiesce.NONE)
    plan = rekey.PartitionPlan(params.mode, "orders", 3, 6, 3)
    data = json.loads(json.dumps(plan.to_dict()))
    assert type(plan.to_dict()["mode"]) is str and data["mode"] == "in_place"
    assert rekey.PartitionPlan.from_dict(data) == plan and rekey.PartitionPlan.from_dict(data).mode is rekey.Mode.IN_PLACE


def test_a_reassignments_kind_and_approval_are_enums_given_as_strings() -> None:
    p = reassign.OperationParams.from_params("drain", {"drain_brokers": [3], "approval": "auto_reject"})
    assert (p.kind, p.approval) == (reassign.Kind.DRAIN, form.Approval.AUTO_REJECT)
    assert reassign.OperationParams(kind="rebalance").kind is reassign.Kind.REBALANCE  # type: ignore[arg-type]
    with pytest.raises(form.ConfigError, match="kind 'sideways' is unknown; use one of scale_out, rebalance, drain"):
        reassign.OperationParams.from_params("sideways", {})
