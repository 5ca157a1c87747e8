"""Reading params as Airflow's Trigger form, the API and dag.test() send them."""
from __future__ import annotations

import pytest

from kafkaops.errors import ConfigError
from kafkaops.platform import params


@pytest.mark.parametrize("value", [None, "", "  ", [], ()])
def test_an_empty_field_is_its_default(value: object) -> None:
    given = {"x": value}
    assert params.text_of(given, "x", "d") == "d"
    assert params.number_of(given, "x", 1.5) == 1.5
    assert params.integer_of(given, "x", 3) == 3
    assert params.strings_of(given, "x") == ()
    assert params.ints_of(given, "x", (1, 2)) == (1, 2)


def test_a_missing_field_is_its_default() -> None:
    assert params.integer_of({}, "x") is None and params.ints_of({}, "x") == () and params.text_of({}, "x") == ""


@pytest.mark.parametrize("value, ints", [
    ([4, 5], (4, 5)),                 # the API, the CLI, dag.test()
    (["4", "5"], (4, 5)),             # the form's text area, one per line
    (["4", "", "5", ""], (4, 5)),     # with blank lines
    (["4, 5", " 6 "], (4, 5, 6)),     # several on one line
    ("4,5", (4, 5)),                  # one string
    (7, (7,)),
    ([4.0], (4,)),
])
def test_whole_numbers_come_as_numbers_or_text(value: object, ints: tuple[int, ...]) -> None:
    assert params.ints_of({"ids": value}, "ids") == ints


@pytest.mark.parametrize("value, bad", [
    (["[4]]"], "'[4]]'"),
    (["4", "four"], "'four'"),
    ([4.5], "4.5"),
    ([True], "True"),
    ({"a": 1}, "{'a': 1}"),
])
def test_anything_else_is_refused_naming_the_param_and_the_value(value: object, bad: str) -> None:
    with pytest.raises(ConfigError, match=f"param drain_brokers .*{bad.replace('[', '.').replace(']', '.')}"):
        params.ints_of({"drain_brokers": value}, "drain_brokers")


def test_texts_drop_blank_lines_and_spaces() -> None:
    assert params.strings_of({"t": [" orders ", "", "payments"]}, "t") == ("orders", "payments")
    assert params.strings_of({"t": "orders"}, "t") == ("orders",)


@pytest.mark.parametrize("value, message", [
    ("fast", "param rate is 'fast', not a number"),
    (True, "param rate is True; give a number"),
])
def test_numbers_are_refused_by_name(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        params.number_of({"rate": value}, "rate")


def test_whole_numbers_refuse_fractions() -> None:
    assert params.integer_of({"n": "12"}, "n") == 12
    with pytest.raises(ConfigError, match="param n is 2.5; give a whole number"):
        params.integer_of({"n": 2.5}, "n")
