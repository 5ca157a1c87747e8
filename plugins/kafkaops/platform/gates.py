"""Data-quality gates: the Great Expectations 1.x runner for the suites under ``expectations/``,
and the preflight frames every operation shares (the plan, post-move and backfill frames live with
their capability: :mod:`kafkaops.reassign.frames`, :mod:`kafkaops.rekey.steps`).

The frame builders are pure (a :class:`Cluster` in, pandas frames out); every operator rule is a column that kafkaops computes, so each expectation is a plain
column check a reviewer can read in the suite file. :func:`run` validates the frames with GX
(a fresh in-memory context per call, no files in the repository) and returns a
:class:`GateResult`; with ``docs_dir`` it also renders GX Data Docs there.

One suite file per gate. A gate over several frames says in each expectation's
``meta.frame`` which frame it checks, and ``meta.failure`` says in words what an unexpected row
(or, for a table-level expectation, the ``{observed}`` value) means.
"""
from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster, TopicPartition
from kafkaops.platform import datadocs
from kafkaops.resources import suites

if TYPE_CHECKING:  # pandas and GX cost seconds to import: only the tasks that run a gate pay for them
    import pandas as pd
    from great_expectations.data_context import AbstractDataContext

log = logging.getLogger(__name__)

DEFAULT_FRAME = "data"
SHOWN_ROWS = 3
_SITE = "kafkaops"


class GateError(KafkaOpsError):
    """A gate that cannot run: a missing or unreadable suite, or frames that do not fit it."""


class GateFailed(KafkaOpsError):
    """A gate ran and some expectation failed; ``result`` holds the details."""

    final = True

    def __init__(self, message: str, result: GateResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate: ``failures`` in words, GX's ``statistics``, the Data Docs page
    (``docs_path``) when asked for, and JSON-safe ``details`` per expectation for the audit."""

    gate: str
    ok: bool
    failures: tuple[str, ...] = ()
    statistics: Mapping[str, float] = field(default_factory=dict)
    docs_path: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.ok:
            return f"gate {self.gate} passed: {int(self.statistics.get('evaluated_expectations', 0))} expectations"
        return f"gate {self.gate} failed: " + "; ".join(self.failures)

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "ok": self.ok, "failures": list(self.failures),
                "statistics": dict(self.statistics), "docs_path": self.docs_path, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateResult:
        return cls(gate=str(data.get("gate") or ""), ok=bool(data.get("ok")), failures=tuple(data.get("failures") or ()),
                   statistics=dict(data.get("statistics") or {}), docs_path=data.get("docs_path"),
                   details=dict(data.get("details") or {}))


def require(result: GateResult) -> GateResult:
    """``result`` when it passed; otherwise raise :class:`GateFailed` naming every failure."""
    if result.ok:
        return result
    docs = f"; Data Docs: {result.docs_path}" if result.docs_path else ""
    raise GateFailed(f"gate {result.gate} failed ({len(result.failures)} expectation(s)): "
                     f"{'; '.join(result.failures)}. Fix the cluster or the plan and run the gate again"
                     f"{docs}", result)


# -- frame builders (pure) ------------------------------------------------------------------------
def id_list(values: Iterable[int | str]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def typed_frame(rows: list[dict[str, Any]], dtypes: Mapping[str, str]) -> pd.DataFrame:
    """Rows as a frame with every column present (even with no rows) in a stable dtype."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(dtypes))
    return frame.astype(dict(dtypes)).reset_index(drop=True)


def topic_partitions(in_flight: Iterable[TopicPartition | Any]) -> set[TopicPartition]:
    """The partitions of reassignments in flight: ``(topic, partition)`` tuples or values with
    ``.topic_partition``."""
    return {tuple(getattr(r, "topic_partition", r)) for r in in_flight}  # type: ignore[misc]


def preflight_frames(cluster: Cluster, in_flight: Iterable[TopicPartition | Any] = ()) -> dict[str, pd.DataFrame]:
    """The frames of the preflight gate: ``brokers`` (one row per broker), ``partitions`` (one
    per partition, plus any partition with a reassignment ``in_flight`` the snapshot lacks) and
    ``cluster`` (one row)."""
    brokers = typed_frame([{"broker": b.id, "host": b.host, "rack": b.rack, "online": b.online}
                      for b in cluster.brokers],
                     {"broker": "int64", "host": "object", "rack": "object", "online": "bool"})
    moving = topic_partitions(in_flight)
    rows = [{"name": p.name, "topic": p.topic, "partition": p.partition, "replicas": id_list(p.replicas),
             "leader": None if p.offline else p.leader, "isr": id_list(p.isr),
             "under_replicated": p.under_replicated, "offline": p.offline, "reassigning": p.topic_partition in moving}
            for p in cluster.partitions]
    rows += [{"name": f"{t}-{n}", "topic": t, "partition": n, "reassigning": True}
             for t, n in sorted(moving - {p.topic_partition for p in cluster.partitions})]
    partitions = typed_frame(rows, {"name": "object", "topic": "object", "partition": "int64", "replicas": "object",
                               "leader": "Int64", "isr": "object", "under_replicated": "object",
                               "offline": "object", "reassigning": "bool"})
    summary = typed_frame([{"cluster_id": cluster.cluster_id, "controller": cluster.controller_id,
                       "brokers": len(cluster.brokers), "partitions": len(cluster.partitions)}],
                     {"cluster_id": "object", "controller": "Int64", "brokers": "int64", "partitions": "int64"})
    return {"brokers": brokers, "partitions": partitions, "cluster": summary}


def suite_path(suite_name: str) -> Path:
    return suites() / f"{suite_name}.json"


def load_suite(suite_name: str) -> dict[str, Any]:
    """The suite file of ``suite_name`` as GX's JSON dict."""
    path = suite_path(suite_name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        known = sorted(p.stem for p in suites().glob("*.json"))
        raise GateError(f"no suite {suite_name!r}: {path} does not exist; suites are {known}") from err
    except json.JSONDecodeError as err:
        raise GateError(f"suite {path} is not valid JSON: {err}; fix the file") from err
    if data.get("name") != suite_name or not isinstance(data.get("expectations"), list):
        raise GateError(f"suite {path} must hold name {suite_name!r} and a list of expectations; "
                        f"it holds name {data.get('name')!r}")
    return data


def _by_frame(suite: Mapping[str, Any], given: pd.DataFrame | Mapping[str, pd.DataFrame]
              ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, pd.DataFrame]]:
    """The suite's expectations by the frame they check (``meta.frame``), and the frames by name;
    a lone DataFrame is the frame of a single-frame suite."""
    import pandas as pd

    grouped: dict[str, list[dict[str, Any]]] = {}
    for exp in suite["expectations"]:
        grouped.setdefault(exp.get("meta", {}).get("frame", DEFAULT_FRAME), []).append(exp)
    if isinstance(given, pd.DataFrame):
        frames = {next(iter(grouped), DEFAULT_FRAME): given} if len(grouped) <= 1 else {}
    else:
        frames = dict(given)
    if set(frames) != set(grouped):
        raise GateError(f"suite {suite['name']} checks frames {sorted(grouped)} but got "
                        f"{sorted(frames) if frames else 'one unnamed frame'}; build them with the gate's "
                        "builder in kafkaops.platform.gates")
    return grouped, frames


# -- running -----------------------------------------------------------------------------------------
def _gx() -> Any:
    """great_expectations, imported on first use (a few seconds: it imports pyspark when present).

    GX imports ``pyspark.sql.connect``, whose ``check_dependencies`` takes a ``__main__`` without a
    file (``python -c``, some notebook kernels) for a doctest run and calls ``sys.exit(0)`` unless
    every Spark Connect client dependency is installed. Pinning pyarrow is not enough: the pinned
    pyspark==4.2.0 without its ``connect`` extra lacks grpcio-status and zstandard, so the process
    would end silently, successfully, in the middle of a gate. ``sys.ps1`` during the import skips
    that check; ``tests/unit/platform/test_gates.py`` runs a gate under ``python -c`` to prove it.
    Analytics are off through GX's own switch, ``analytics_enabled=False`` in :func:`_context`
    (GX 1.24 sends nothing and reads no environment variable for it).
    """
    if "great_expectations" not in sys.modules:
        # GX announces at INFO each of its functions it does not register in its API docs: hundreds of lines
        logging.getLogger("great_expectations._docs_decorators").setLevel(logging.WARNING)
        main = sys.modules.get("__main__")
        fileless = main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__")
        if fileless and not hasattr(sys, "ps1"):
            sys.ps1 = ""
            try:
                import great_expectations  # noqa: F401
            finally:
                del sys.ps1
    import great_expectations as gx

    return gx


def preload() -> None:
    """Import pandas and Great Expectations now: a process that forks its tasks (a Celery worker,
    :mod:`kafkaops.airflow.worker`) then starts each with both imported."""
    import pandas  # noqa: F401

    _gx()


def _context(docs_dir: Path | None) -> AbstractDataContext:
    """A fresh in-memory context (a few ms): silent, no analytics, Data Docs only in ``docs_dir``."""
    gx = _gx()
    from great_expectations.data_context.types.base import (
        DataContextConfig, InMemoryStoreBackendDefaults, ProgressBarsConfig)

    sites = {} if docs_dir is None else {_SITE: {
        "class_name": "SiteBuilder", "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}}
    config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
                               progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
                               analytics_enabled=False, data_docs_sites=sites)
    return gx.get_context(mode="ephemeral", project_config=config)


def _plain(value: Any) -> Any:
    """``value`` with numpy/pandas scalars and NA made JSON-safe."""
    import pandas as pd

    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _columns(kwargs: Mapping[str, Any]) -> str:
    return " ".join(str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs)


def _describe(gate: str, exp: Mapping[str, Any], result: Mapping[str, Any], frame: pd.DataFrame,
              params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """One failed expectation in words, and its JSON-safe detail."""
    template = exp.get("meta", {}).get("failure")
    observed = result.get("observed_value")
    indices = list(result.get("partial_unexpected_index_list") or [])
    count = result.get("unexpected_count")
    rows = [frame.loc[i].to_dict() for i in indices if i in frame.index]
    if rows and template:
        try:
            said = [template.format(**{k: _plain(v) for k, v in row.items()}) for row in rows[:SHOWN_ROWS]]
        except (KeyError, IndexError, ValueError) as err:
            raise GateError(f"suite {gate}: failure text {template!r} of {exp['type']} names a column the "
                            f"frame lacks ({err}); frame columns are {list(frame.columns)}") from err
        more = (count or len(rows)) - len(said)
        words = ", ".join(said) + (f" and {more} more" if more > 0 else "")
    elif template:
        words = template.format(**{**exp.get("kwargs", {}), **params, "observed": _plain(observed)})
    else:
        words = f"{count} unexpected row(s)" if count is not None else f"observed {_plain(observed)}"
    text = f"{gate}: {words} ({exp['type']} {_columns(exp.get('kwargs', {}))})"
    detail = {"observed_value": _plain(observed), "unexpected_count": _plain(count),
              "unexpected_rows": _plain(rows[:SHOWN_ROWS])}
    return text, detail


def run(suite_name: str, dataframe_or_frames: pd.DataFrame | Mapping[str, pd.DataFrame], *,
        params: Mapping[str, Any] | None = None, docs_dir: str | Path | None = None) -> GateResult:
    """Validate the frames with the suite ``expectations/<suite_name>.json``.

    ``params`` fill ``{"$PARAMETER": name}`` values in the suite. With ``docs_dir`` the Data
    Docs of this run go to ``docs_dir/<suite_name>/`` and ``docs_path`` is their index page.
    """
    suite = load_suite(suite_name)
    grouped, frames = _by_frame(suite, dataframe_or_frames)
    params = dict(params or {})
    site = Path(docs_dir).resolve() / suite_name if docs_dir is not None else None
    gx = _gx()
    context = _context(site)
    source = context.data_sources.add_pandas(_SITE)
    run_id = _run_id(suite_name)
    failures: list[str] = []
    details: dict[str, Any] = {"frames": {}, "expectations": [], "params": _plain(params)}
    stats = dict.fromkeys(("evaluated_expectations", "successful_expectations", "unsuccessful_expectations"), 0)
    for name, expectations in grouped.items():
        frame = frames[name].reset_index(drop=True)
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        gx_suite = context.suites.add(gx.ExpectationSuite(
            name=f"{suite_name}.{name}" if name != DEFAULT_FRAME else suite_name, expectations=expectations,
            notes=suite.get("notes"), meta={k: v for k, v in suite.get("meta", {}).items() if k != "frames"}))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=gx_suite.name, data=batch, suite=gx_suite))
        try:
            outcome = definition.run(batch_parameters={"dataframe": frame}, expectation_parameters=params,
                                     result_format={"result_format": "SUMMARY"}, run_id=run_id)
        except Exception as err:  # GX raises its own zoo of exceptions for unusable inputs
            raise GateError(f"gate {suite_name}: GX could not validate frame {name!r} ({len(frame)} rows): "
                            f"{err}; check the frame's columns {list(frame.columns)} and params {params}") from err
        details["frames"][name] = {"rows": len(frame), "success": bool(outcome.success), "suite": gx_suite.name,
                                   "evaluated": int(outcome.statistics["evaluated_expectations"]),
                                   "successful": int(outcome.statistics["successful_expectations"])}
        for key in stats:
            stats[key] += int(outcome.statistics[key])
        order = {e.id: i for i, e in enumerate(gx_suite.expectations)}
        for res in sorted(outcome.results, key=lambda r: order.get(getattr(r.expectation_config, "id", None),
                                                                   len(order))):
            config = res.expectation_config
            if config is None:  # GX gives each result its expectation; a result without one cannot be reported
                raise GateError(f"gate {suite_name}: GX returned a result without its expectation for frame {name!r}; "
                                "the gate cannot say what was checked")
            exp = {"type": config.type, "meta": dict(config.meta or {}),
                   "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"}}
            info = res.exception_info or {}
            if info.get("raised_exception"):
                raise GateError(f"gate {suite_name}: {exp['type']} on frame {name!r} could not run: "
                                f"{info.get('exception_message')}; frame columns are {list(frame.columns)}")
            entry = {"frame": name, "type": exp["type"], "kwargs": _plain(exp.get("kwargs", {})),
                     "success": bool(res.success)}
            if not res.success:
                text, detail = _describe(suite_name, exp, res.result, frame, params)
                failures.append(text)
                entry.update(detail, failure=text)
            details["expectations"].append(entry)
    evaluated = stats["evaluated_expectations"]
    statistics = {**stats, "success_percent": 100.0 * stats["successful_expectations"] / evaluated if evaluated
                  else 100.0}
    docs_path = None
    if site is not None:
        docs_path, details["docs_pages"] = _build_docs(context, site, suite_name, details["frames"], failures)
    result = GateResult(suite_name, not failures, tuple(failures), statistics, docs_path, details)
    log.info("%s", result)
    return result


def _run_id(suite_name: str) -> Any:
    from great_expectations.core.run_identifier import RunIdentifier

    return RunIdentifier(run_name=suite_name, run_time=datetime.now(timezone.utc))


def _build_docs(context: AbstractDataContext, site: Path, gate: str, frames: Mapping[str, Mapping[str, Any]],
                failures: Iterable[str]) -> tuple[str, list[str]]:
    """Render this context's suites and validation results into ``site``, made readable offline
    (:func:`kafkaops.platform.datadocs.make_offline`); the index page and one page per validated frame."""
    from great_expectations.data_context.types.resource_identifiers import (ExpectationSuiteIdentifier,
                                                                            ValidationResultIdentifier)

    def url_of(resource: Any) -> str:
        url = context.get_docs_sites_urls(resource_identifier=resource, site_name=_SITE)[0]["site_url"]
        if url is None:
            raise GateError(f"GX has no Data Docs page for {resource} in {site}")
        return url

    try:
        context.build_data_docs(site_names=[_SITE])
        by_suite = {key.expectation_suite_identifier.name: url_of(key)
                    for key in context.validation_results_store.list_keys()
                    if isinstance(key, ValidationResultIdentifier)}  # what the store holds
        results = [datadocs.ResultPage(
            frame=frame, suite=info["suite"], success=bool(info["success"]), evaluated=int(info["evaluated"]),
            successful=int(info["successful"]), rows=int(info["rows"]),
            page=datadocs.relative(site, by_suite[info["suite"]]),
            suite_page=datadocs.relative(site, url_of(ExpectationSuiteIdentifier(name=info["suite"]))))
            for frame, info in frames.items()]
        datadocs.make_offline(site, gate, results, failures)
    except Exception as err:  # GX's renderers and store backends raise assorted errors
        raise GateError(f"could not build Data Docs in {site}: {err}; check the folder is writable") from err
    index = site / "index.html"
    if not index.is_file():
        raise GateError(f"GX built no Data Docs index at {index}; check the folder is writable")
    return str(index), [str(site / r.page) for r in results]
