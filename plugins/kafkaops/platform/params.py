"""The values of a DAG's params as the operations read them, whoever sent them.

Airflow's Trigger form sends ``null`` for an optional field left empty (and ``""`` for a text
field cleared by hand); the API, the CLI and ``dag.test()`` send what their caller wrote. An
empty value (None, ``""``, blanks, ``[]``) means "not given" everywhere, so each reader returns
its default for it. Lists of integers (broker ids, partition counts) come as JSON numbers from
the API and as strings from the form's one-item-per-line text area (``"4"``, or ``"4, 5"`` on
one line); both read as ints, anything else is refused naming the param and the value.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kafkaops.errors import ConfigError

_SEPARATORS = re.compile(r"[\s,]+")


def is_empty(value: Any) -> bool:
    """None, an empty or blank string, or an empty list or tuple: a field left empty."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, tuple)) and not value


def text_of(params: Mapping[str, Any], name: str, default: str = "") -> str:
    """A text param, stripped; ``default`` when it is empty."""
    value = params.get(name)
    return default if is_empty(value) else str(value).strip()


def number_of(params: Mapping[str, Any], name: str, default: float | None = None) -> float | None:
    """A number param; ``default`` when it is empty. Refuses what is not a number, naming it."""
    value = params.get(name)
    if is_empty(value):
        return default
    if isinstance(value, bool):
        raise ConfigError(f"param {name} is {value!r}; give a number")
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"param {name} is {value!r}, not a number; give e.g. 10 or 2.5") from err


def integer_of(params: Mapping[str, Any], name: str, default: int | None = None) -> int | None:
    """A whole-number param; ``default`` when it is empty. Refuses fractions and words, naming them."""
    number = number_of(params, name)
    if number is None:
        return default
    if not number.is_integer():
        raise ConfigError(f"param {name} is {params.get(name)!r}; give a whole number")
    return int(number)


def strings_of(params: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """A list-of-text param without its blank items (the form's text area sends one per line)."""
    value = params.get(name)
    if is_empty(value):
        return ()
    items = [value] if isinstance(value, str) else _listed(name, value)
    return tuple(str(item).strip() for item in items if not is_empty(item))


def ints_of(params: Mapping[str, Any], name: str, default: Iterable[int] = ()) -> tuple[int, ...]:
    """A list-of-integers param: JSON numbers, or text items holding numbers separated by commas or
    blanks (``["4", "5"]``, ``["4, 5"]``, ``"4 5"``); ``default`` when it is empty."""
    value = params.get(name)
    items = [value] if isinstance(value, (str, int)) and not isinstance(value, bool) else _listed(name, value)
    result: list[int] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            result.append(item)
            continue
        if isinstance(item, float) and item.is_integer():
            result.append(int(item))
            continue
        words = _SEPARATORS.split(item.strip()) if isinstance(item, str) else [item]
        for word in words:
            if word == "":
                continue
            if not isinstance(word, str) or not re.fullmatch(r"[+-]?\d+", word):
                raise ConfigError(f"param {name} holds {item!r}, not a whole number; give one number per line "
                                  "(e.g. 4), or several separated by commas (e.g. 4, 5)")
            result.append(int(word))
    return tuple(result) if result else tuple(default)


def _listed(name: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"param {name} is {value!r}; give a list (in the form: one item per line)")
    return list(value)
