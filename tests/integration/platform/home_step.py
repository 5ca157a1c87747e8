"""One lifecycle step of a kafkaops operation in a process of its own, as an Airflow worker on
another host runs it: ``python -m tests.integration.platform.home_step STEP < input.json``.

The input names the run (dag_id, run_id, try_number), the Kafka config, the params and the step's
arguments; the step's return value is printed as JSON on stdout. The process shares nothing with the
others but the kafkaops store (``KAFKAOPS_STORE_URL``) and Kafka: it has its own AIRFLOW_HOME and
working directory. A step that raises is recorded as failed (as the operators' ``recorded`` does)
and exits 1 with the error on stderr.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

from kafkaops.platform import lifecycle
from kafkaops.reassign import steps
from kafkaops.reassign.records import PlannedReassignment


def _execute(ctx: lifecycle.OperationContext, plan: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The deferrable execute_batches, blocking: submit a batch, poll its progress, repeat."""
    started = time.time()
    while True:
        step = steps.next_batch(ctx, plan)
        if not step.wait_for:
            return {"done": True}
        spec = steps.wait_spec(plan, step.wait_for, before)
        deadline = time.monotonic() + 120
        while not steps.progress_of(ctx.conn_config, spec, started).done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {step.wait_for} did not finish within 120 s")
            time.sleep(0.5)


def main(name: str, data: dict[str, Any]) -> Any:
    ctx = lifecycle.OperationContext(dag_id=data["dag_id"], run_id=data["run_id"], conn_config=data["conn_config"],
                                     params=steps.OperationParams.from_params(data["kind"], data["params"]),
                                     triggered_by=data.get("user", "alice"), task_id=name,
                                     try_number=data.get("try_number", 1))
    args = data.get("args", {})
    if name == "begin":
        return lifecycle.begin(ctx, data["params"])
    if name == "finish":
        return lifecycle.finish(ctx, args.get("cluster_id"), failed_tasks=args.get("failed_tasks", ()))
    ctx.step(name, "started")
    try:
        if name == "preflight_gate":
            result = lifecycle.preflight(ctx)
        elif name == "provision":
            result = steps.provision_brokers(ctx, planned=PlannedReassignment.from_dict(args["plan"]).provisioned.new_brokers).to_dict()
        elif name == "plan":
            result = steps.make_plan(ctx, args["before"])
        elif name == "plan_gate":
            result = steps.plan_gate(ctx, args["plan"])
        elif name == "set_throttles":
            result = steps.set_throttles(ctx, args["plan"]).to_dict()
        elif name == "execute_batches":
            result = _execute(ctx, args["plan"], args["before"])
        elif name == "verify":
            result = {"ok": steps.verify_moves(ctx, args["plan"], args["before"]).ok}
        elif name == "remove_throttles":
            result = steps.remove_throttles(ctx, args.get("record"), args["plan"]).to_dict()
        elif name == "elect_leaders":
            result = steps.elect_leaders(ctx, args["plan"]).to_dict()
        elif name == "post_move_gate":
            result = steps.post_move_gate(ctx, args["plan"], args["before"])
        else:
            raise SystemExit(f"unknown step {name}")
    except Exception as err:
        ctx.step(name, "failed", error=f"{type(err).__name__}: {err}"[:2000])
        raise
    ctx.step(name, "success")
    return result


if __name__ == "__main__":
    try:
        out = main(sys.argv[1], json.load(sys.stdin))
    except Exception as err:  # noqa: BLE001 - the parent test reads the class and message
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout, default=str)
