"""Prometheus: PromQL queries through its HTTP API (``/api/v1/query``, ``/api/v1/query_range``), read with httpx.

:class:`PrometheusClient` sends each query with a timeout and turns the API's JSON into typed values: a range
query into :class:`Series` (a series' labels and its ``(timestamp, value)`` points), an instant query into
:class:`Sample` values. A gap stays a gap: Prometheus leaves out the steps where a series had no sample (a
broker down, a target not scraped), and so do these values; nothing here fills in a zero. A query that
matches nothing gives no series at all. Whoever opens a client closes it (``with PrometheusClient(url) as
prometheus: ...``).

The parsing (:func:`parse_matrix`, :func:`parse_vector`) is pure: it takes the API's decoded JSON document.
Errors are :class:`PrometheusError` (a :class:`~kafkaops.errors.KafkaOpsError`) naming the server's URL
without its credentials, the query and what to do.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from kafkaops.errors import KafkaOpsError

log = logging.getLogger(__name__)

#: Seconds a query may take, connecting included, unless the caller says otherwise.
DEFAULT_TIMEOUT_S = 30.0

_T = TypeVar("_T")

Point = tuple[float, float]
"""A sample: its Unix timestamp (seconds) and its value (NaN and ±Inf as Prometheus reports them)."""


class PrometheusError(KafkaOpsError):
    """Prometheus did not answer a query, or answered with an error or a document this client cannot read."""


class PrometheusUnreachable(PrometheusError):
    """The server did not answer in time, or refused the connection: asking again may help."""

    retriable = True


class PrometheusQueryError(PrometheusError):
    """The server refused the query (bad PromQL, a bad range or step): the query must change."""

    final = True


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels (``__name__`` among them when the query keeps it) and its
    points in time order. Steps without a sample are absent, not zero: see :meth:`gaps`."""

    labels: Mapping[str, str]
    points: tuple[Point, ...]

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(value for _, value in self.points)

    def gaps(self, step_s: float) -> tuple[tuple[float, float], ...]:
        """The stretches without a sample: ``(last timestamp before, first timestamp after)`` of each pair of
        neighbouring points more than ``step_s`` apart (half a step of slack for the server's rounding)."""
        if step_s <= 0:
            raise ValueError(f"step_s must be positive, got {step_s}")
        return tuple((before, after) for (before, _), (after, _) in zip(self.points, self.points[1:])
                     if after - before > 1.5 * step_s)


@dataclass(frozen=True)
class Sample:
    """One series of an instant query: its labels and its value at ``timestamp``."""

    labels: Mapping[str, str]
    timestamp: float
    value: float


@dataclass(frozen=True)
class RangeResult:
    """What a range query returned: the query, its window and step, and the series that matched (none: the
    metric or the labels exist nowhere in the window)."""

    query: str
    start: float
    end: float
    step_s: float
    series: tuple[Series, ...]
    warnings: tuple[str, ...] = field(default=())


# -- parsing (pure) -------------------------------------------------------------------------------------------

class _Unreadable(ValueError):
    """The document is not what the API documents; the message says where."""


def _value(pair: Any) -> Point:
    if not (isinstance(pair, list | tuple) and len(pair) == 2):
        raise _Unreadable(f"a sample is [timestamp, \"value\"], got {pair!r}")
    timestamp, text = pair
    if not isinstance(timestamp, int | float) or isinstance(timestamp, bool) or not isinstance(text, str):
        raise _Unreadable(f"a sample is [timestamp, \"value\"], got {pair!r}")
    try:
        return float(timestamp), float(text)  # "NaN", "+Inf" and "-Inf" as Prometheus writes them
    except ValueError as err:
        raise _Unreadable(f"a sample's value is not a number: {text!r}") from err


def _labels(item: Mapping[str, Any]) -> dict[str, str]:
    metric = item.get("metric", {})
    if not isinstance(metric, Mapping) or not all(isinstance(v, str) for v in metric.values()):
        raise _Unreadable(f"a series' metric is an object of label names and string values, got {metric!r}")
    return dict(metric)


def _data(document: Any, expected: tuple[str, ...]) -> tuple[str, Any, tuple[str, ...]]:
    """The result type, result and warnings of a successful API response document."""
    if not isinstance(document, Mapping):
        raise _Unreadable(f"the response is a JSON object, got {type(document).__name__}")
    if document.get("status") != "success":
        raise _Unreadable(f"status is {document.get('status')!r}: {document.get('errorType', '')} "
                          f"{document.get('error', '')}".rstrip())
    data = document.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") not in expected:
        raise _Unreadable(f"data.resultType is one of {list(expected)}, got "
                          f"{data.get('resultType') if isinstance(data, Mapping) else data!r}")
    warnings = document.get("warnings") or ()
    return str(data["resultType"]), data.get("result"), tuple(str(w) for w in warnings)


def parse_matrix(document: Any) -> tuple[tuple[Series, ...], tuple[str, ...]]:
    """The series and warnings of a ``/api/v1/query_range`` response (resultType ``matrix``). Raises
    ValueError naming what does not fit the API's format."""
    _, result, warnings = _data(document, ("matrix",))
    if not isinstance(result, list):
        raise _Unreadable(f"data.result of a matrix is a list, got {result!r}")
    series = []
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("values", []), list):
            raise _Unreadable(f"a matrix series is {{metric, values: [...]}}, got {item!r}")
        points = tuple(sorted(_value(pair) for pair in item.get("values", [])))
        series.append(Series(labels=_labels(item), points=points))
    return tuple(series), warnings


def parse_vector(document: Any) -> tuple[tuple[Sample, ...], tuple[str, ...]]:
    """The samples and warnings of a ``/api/v1/query`` response: a ``vector`` (one sample per series) or a
    ``scalar`` (one sample without labels). Raises ValueError naming what does not fit the API's format."""
    kind, result, warnings = _data(document, ("vector", "scalar"))
    if kind == "scalar":
        timestamp, value = _value(result)
        return (Sample(labels={}, timestamp=timestamp, value=value),), warnings
    if not isinstance(result, list):
        raise _Unreadable(f"data.result of a vector is a list, got {result!r}")
    samples = []
    for item in result:
        if not isinstance(item, Mapping):
            raise _Unreadable(f"a vector sample is {{metric, value: [...]}}, got {item!r}")
        timestamp, value = _value(item.get("value"))
        samples.append(Sample(labels=_labels(item), timestamp=timestamp, value=value))
    return tuple(samples), warnings


def public_url(url: str) -> str:
    """``url`` without its user and password, for messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _seconds(at: datetime | float) -> float:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise ValueError(f"a naive datetime is ambiguous: give {at} a time zone (e.g. UTC)")
        return at.timestamp()
    return float(at)


# -- the client -----------------------------------------------------------------------------------------------

class PrometheusClient:
    """Queries one Prometheus server. ``url``: its base URL (``http://host:9090``, a path prefix kept;
    ``user:password@`` in it is sent as basic auth and never shown). Close it (or use it as a context
    manager): it holds an HTTP connection pool."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, verify: bool | str = True,
                 headers: Mapping[str, str] | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusQueryError(f"Prometheus URL {public_url(url)!r} is not an http(s) URL; give its base "
                                       "URL, e.g. http://prometheus:9090")
        if not timeout_s > 0:
            raise PrometheusQueryError(f"timeout_s must be positive, got {timeout_s}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.url + "/", timeout=httpx.Timeout(timeout_s), verify=verify,
                                  headers=dict(headers or {}), follow_redirects=False)

    @property
    def public_url(self) -> str:
        return public_url(self.url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def query(self, promql: str, *, at: datetime | float | None = None) -> tuple[Sample, ...]:
        """The instant query ``promql`` at ``at`` (a Unix time or an aware datetime; the server's now if
        None): one sample per series it matches, none when it matches nothing."""
        form = {"query": promql, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            form["time"] = f"{_seconds(at):.3f}"
        samples, _ = self._ask("api/v1/query", form, promql, parse_vector)
        return samples

    def query_range(self, promql: str, *, start: datetime | float, end: datetime | float,
                    step_s: float) -> RangeResult:
        """The range query ``promql`` from ``start`` to ``end`` every ``step_s`` seconds: the series it
        matches, each with the steps where it had a value (a step without one is left out, not zeroed)."""
        first, last = _seconds(start), _seconds(end)
        if not step_s > 0 or last < first:
            raise PrometheusQueryError(
                f"range query {promql!r} on Prometheus {self.public_url}: needs start <= end and a positive step, "
                f"got start {first:.3f}, end {last:.3f}, step {step_s} s; fix the window")
        form = {"query": promql, "start": f"{first:.3f}", "end": f"{last:.3f}", "step": f"{step_s:g}",
                "timeout": f"{self.timeout_s:g}s"}
        series, warnings = self._ask("api/v1/query_range", form, promql, parse_matrix)
        return RangeResult(query=promql, start=first, end=last, step_s=step_s, series=series, warnings=warnings)

    # -- the HTTP exchange

    def _ask(self, path: str, form: Mapping[str, str], promql: str,
             parse: Callable[[Any], tuple[_T, tuple[str, ...]]]) -> tuple[_T, tuple[str, ...]]:
        """POST the query to ``path`` and ``parse`` the answer; its warnings logged."""
        document = self._post(path, form, promql)
        try:
            result, warnings = parse(document)
        except ValueError as err:
            raise self._unreadable(path, promql, err) from err
        for warning in warnings:
            log.warning("Prometheus warned about query %r: %s", promql, warning)
        return result, warnings

    def _post(self, path: str, form: Mapping[str, str], promql: str) -> Any:
        where = f"{self.public_url}/{path}"
        try:
            response = self._http.post(path, data=dict(form))
        except httpx.TimeoutException as err:
            raise PrometheusUnreachable(
                f"Prometheus {where} did not answer query {promql!r} within {self.timeout_s:g} s "
                f"({type(err).__name__}); check that the server runs and is not overloaded, or narrow the query "
                "(a shorter window, a larger step)") from err
        except httpx.HTTPError as err:
            raise PrometheusUnreachable(
                f"cannot reach Prometheus {where} for query {promql!r}: {type(err).__name__}: "
                f"{err}; check the URL (the prometheus connection or param) and that the server "
                "runs") from err
        if response.status_code in (400, 422):  # bad_data, execution: the API's own errors, in its JSON
            raise PrometheusQueryError(
                f"Prometheus {where} refused query {promql!r} (HTTP {response.status_code}: "
                f"{self._error_text(response)}); fix the PromQL or its window")
        if response.status_code in (401, 403):
            raise PrometheusQueryError(
                f"Prometheus {where} refused the credentials for query {promql!r} (HTTP {response.status_code}); "
                "fix the login or token of the prometheus connection")
        if response.status_code >= 300:
            error: type[PrometheusError] = PrometheusUnreachable if response.status_code >= 500 else PrometheusError
            raise error(f"Prometheus {where} answered query {promql!r} with HTTP {response.status_code}: "
                        f"{self._error_text(response)}; check that the URL names the server's base URL "
                        "(e.g. http://prometheus:9090) and that it is up")
        try:
            return response.json()
        except ValueError as err:
            raise self._unreadable(path, promql, err) from err

    @staticmethod
    def _error_text(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return response.text[:300].strip() or "no body"
        if isinstance(body, Mapping) and body.get("error"):
            return f"{body.get('errorType', 'error')}: {body['error']}"
        return str(body)[:300]

    def _unreadable(self, path: str, promql: str, err: Exception) -> PrometheusError:
        return PrometheusError(
            f"Prometheus {self.public_url}/{path} answered query {promql!r} with a document that is not the "
            f"Prometheus HTTP API's: {err}; check that the URL names a Prometheus server (not a proxy's page)")


def finite(points: tuple[Point, ...]) -> tuple[Point, ...]:
    """The points whose value is a number (NaN and ±Inf left out, never replaced)."""
    return tuple((t, v) for t, v in points if math.isfinite(v))
