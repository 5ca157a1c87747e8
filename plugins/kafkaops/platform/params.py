"""The values of a DAG's params as the operations read them, whoever sent them.

Airflow's Trigger form sends ``null`` for an optional field left empty (and ``""`` for a text
field cleared by hand); the API, the CLI and ``dag.test()`` send what their caller wrote. An
empty value (None, ``""``, blanks, ``[]``) means "not given" everywhere, so each reader returns
its default for it. Lists of integers (broker ids, partition counts) come as JSON numbers from
the API and as strings from the form's one-item-per-line text area (``"4"``, or ``"4, 5"`` on
one line); both read as ints, anything else is refused naming the param and the value.

Text is refused, naming the param, when it is not text, longer than :data:`MAX_TEXT`, not UTF-8 or holds a
control character (:func:`text_problem`); a topic name when Kafka would not take it (:func:`topic_problem`);
a flag when it is not true or false; a number when it is not finite.

Each param's default is written once, in its spec (:class:`Spec`: name, default, bounds, title,
description), next to the capability's dataclass: the dataclass takes its defaults from the specs,
``from_params`` reads through them, and kafkaops.airflow builds the Trigger form from them. Modes are
str-valued enums (:class:`Approval`, a capability's own), so the form, the API and JSON hold their strings.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from kafkaops.errors import ConfigError

_SEPARATORS = re.compile(r"[\s,]+")


def is_empty(value: Any) -> bool:
    """None, an empty or blank string, or an empty list or tuple: a field left empty."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, tuple)) and not value


#: The longest text a param takes (a key rule's JSON path, a list of principals): a longer one is refused,
#: naming the param, before anything reads it further.
MAX_TEXT = 1_000

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def text_problem(name: str, text: str, *, limit: int = MAX_TEXT) -> str | None:
    """Why ``text``, the value of param ``name``, is no text a run can take (None: it is): longer than
    ``limit`` characters, not encodable as UTF-8 (a lone surrogate, as a JSON ``\\udc80`` sends it), or
    holding a control character."""
    if len(text) > limit:
        return f"param {name} is {len(text):,} characters long; give at most {limit:,}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"param {name} holds text that is not valid UTF-8 ({text[:40]!r}); give plain text"
    if _CONTROL.search(text):
        return f"param {name} holds a control character ({text[:40]!r}); give plain text"
    return None


def text_of(params: Mapping[str, Any], name: str, default: str = "") -> str:
    """A text param, stripped; ``default`` when it is empty."""
    value = params.get(name)
    return default if is_empty(value) else str(value).strip()


def checked_text(params: Mapping[str, Any], name: str, default: str = "") -> str:
    """:func:`text_of`, refusing (a ConfigError naming the param) a value that is not text (a number, a list,
    an object) or is no text a run can take (:func:`text_problem`)."""
    value = params.get(name)
    if not is_empty(value) and not isinstance(value, str):
        raise ConfigError(f"param {name} is {_shown(value)}, not text; give text")
    text = text_of(params, name, default)
    problem = text_problem(name, text)
    if problem:
        raise ConfigError(problem)
    return text


def _shown(value: Any) -> str:
    """``value`` for a message, cut short."""
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


#: What Kafka takes as a topic name (org.apache.kafka.common.internals.Topic): letters, digits, ".", "_"
#: and "-", at most 249 characters, neither "." nor "..".
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def topic_problem(name: str, topic: str) -> str | None:
    """Why ``topic``, given in param ``name``, cannot be a Kafka topic's name (None: it can)."""
    if TOPIC_NAME.fullmatch(topic) and topic not in (".", ".."):
        return None
    if len(topic) > 249:
        return f"param {name} names a topic of {len(topic):,} characters; Kafka's topic names have at most 249"
    return (f"param {name} names topic {_shown(topic)}, which is no Kafka topic name: use only letters, digits, "
            "'.', '_' and '-' (no '/', '<', '>' or blanks)")


def duplicates(values: Iterable[Any]) -> list[Any]:
    """The values given more than once, in the order first seen."""
    seen: set[Any] = set()
    repeated: list[Any] = []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated


def number_of(params: Mapping[str, Any], name: str, default: float | None = None) -> float | None:
    """A number param; ``default`` when it is empty. Refuses what is not a number, naming it."""
    value = params.get(name)
    if value is None or is_empty(value):
        return default
    if isinstance(value, bool):
        raise ConfigError(f"param {name} is {value!r}; give a number")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ConfigError(f"param {name} is {_shown(value)}, not a number; give e.g. 10 or 2.5") from err
    if not math.isfinite(number):
        raise ConfigError(f"param {name} is {_shown(value)}, not a finite number; give e.g. 10 or 2.5")
    return number


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
    texts = []
    for item in items:
        if is_empty(item):
            continue
        if not isinstance(item, (str, int, float)) or isinstance(item, bool):
            raise ConfigError(f"param {name} holds {_shown(item)}, not text; give one item per line")
        text = str(item).strip()
        problem = text_problem(name, text)
        if problem:
            raise ConfigError(problem)
        texts.append(text)
    if len(texts) > MAX_ITEMS:
        raise ConfigError(f"param {name} holds {len(texts):,} items; give at most {MAX_ITEMS:,}")
    return tuple(texts)


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
    if len(result) > MAX_ITEMS:
        raise ConfigError(f"param {name} holds {len(result):,} numbers; give at most {MAX_ITEMS:,}")
    return tuple(result) if result else tuple(default)


#: The most items a list param takes (topics, broker ids, racks).
MAX_ITEMS = 10_000


def _listed(name: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"param {name} is {value!r}; give a list (in the form: one item per line)")
    return list(value)


# -- the specs: one place for each param's default ----------------------------------------------------------
#
# A capability declares each param of its runs once, as a spec: its name, its default, its bounds and what the
# form shows (title, description). Its dataclass takes ``spec.default``, its ``from_params`` calls
# ``spec.read(params)``, and kafkaops.airflow builds the Trigger form's Param from ``spec.initial`` (the value
# the form is prefilled with), ``spec.schema()`` and ``spec.described``. Airflow's Trigger form
# (airflow-core/src/airflow/ui/src/components/FlexibleForm) marks a param required unless its type admits
# null, and sends null for an optional field left empty; it opens a JSON editor for an array whose items have
# a type other than string, and a plain text area (one item per line) otherwise. So: an optional param admits
# null and starts empty (None), and a list of whole numbers has untyped items, each a number (API, CLI) or text
# of numbers (the form's lines, "4" or "4, 5"), which :func:`ints_of` reads.

WHOLE_NUMBERS: dict[str, Any] = {"anyOf": [{"type": "integer", "minimum": 0},
                                           {"type": "string", "pattern": r"^[\s,0-9]*$"}]}
"""The JSON schema of one item of a list of whole numbers: a number, or text of numbers."""

Value = TypeVar("Value")
Mode = TypeVar("Mode", bound=StrEnum)


@dataclass(frozen=True, kw_only=True)
class Spec(Generic[Value]):
    """One param of a run. Invariant: ``read`` of an empty value (:func:`is_empty`) is ``default``, and
    ``default`` is ``initial`` (what the form is prefilled with) as the dataclass holds it."""

    name: str
    title: str
    description: str
    required: bool = False
    """The form asks for it: it has no default (only a text param, the run's subject, is required)."""

    @property
    def default(self) -> Value:
        """The value of a run that leaves the param empty, typed as the capability's dataclass holds it."""
        raise NotImplementedError

    @property
    def initial(self) -> Any:
        """What the form is prefilled with (JSON; None: empty)."""
        return self.default

    @property
    def described(self) -> str:
        """The form's description."""
        return self.description

    def schema(self) -> dict[str, Any]:
        """The param's JSON schema (its type first, its title last, as the form reads it)."""
        raise NotImplementedError

    def read(self, params: Mapping[str, Any]) -> Value:
        """The param's value in ``params``, however sent; its default when empty."""
        raise NotImplementedError

    def _typed(self, kind: str, **bounds: Any) -> dict[str, Any]:
        """``kind``, admitting null when the param starts empty, then the bounds set, then the title."""
        shown = [kind] if self.initial is not None or self.required else ["null", kind]
        return {"type": shown[0] if len(shown) == 1 else shown,
                **{k: v for k, v in bounds.items() if v is not None}, "title": self.title}


@dataclass(frozen=True, kw_only=True)
class Text(Spec[str]):
    """A text param; ``given`` None: it starts empty (read as ``""``); ``required``: the form asks for it."""

    given: str | None = None

    @property
    def default(self) -> str:
        return self.given or ""

    @property
    def initial(self) -> str | None:
        return self.given

    def schema(self) -> dict[str, Any]:
        return self._typed("string", minLength=1 if self.required else None)

    def read(self, params: Mapping[str, Any]) -> str:
        return checked_text(params, self.name, self.default)


@dataclass(frozen=True, kw_only=True)
class Texts(Spec[tuple[str, ...]]):
    """A list of text, one item per line in the form; starts empty."""

    @property
    def default(self) -> tuple[str, ...]:
        return ()

    @property
    def initial(self) -> None:
        return None

    @property
    def described(self) -> str:
        return f"{self.description} One per line."

    def schema(self) -> dict[str, Any]:
        return {"type": ["null", "array"], "items": {"type": "string"}, "title": self.title}

    def read(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        return strings_of(params, self.name)


@dataclass(frozen=True, kw_only=True)
class Topics(Texts):
    """A list of Kafka topic names: each a name Kafka takes (:func:`topic_problem`), none twice."""

    def read(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        names = strings_of(params, self.name)
        problems = [p for p in (topic_problem(self.name, n) for n in names) if p]
        if problems:
            raise ConfigError("; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))
        repeated = duplicates(names)
        if repeated:
            raise ConfigError(f"param {self.name} names {', '.join(repeated)} more than once; name each topic once")
        return names


@dataclass(frozen=True, kw_only=True)
class Topic(Text):
    """One Kafka topic name (:func:`topic_problem`); empty: ``given`` (or "")."""

    def read(self, params: Mapping[str, Any]) -> str:
        name = checked_text(params, self.name, self.default)
        problem = topic_problem(self.name, name) if name else None
        if problem:
            raise ConfigError(problem)
        return name


@dataclass(frozen=True, kw_only=True)
class WholeNumbers(Spec[tuple[int, ...]]):
    """A list of whole numbers (broker ids, partition counts), one per line in the form."""

    given: tuple[int, ...] = ()

    @property
    def default(self) -> tuple[int, ...]:
        return self.given

    @property
    def initial(self) -> list[int] | None:
        return list(self.given) or None

    @property
    def described(self) -> str:
        return f"{self.description} One per line (or comma-separated)."

    def schema(self) -> dict[str, Any]:
        return {"type": ["null", "array"], "items": WHOLE_NUMBERS, "title": self.title}

    def read(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        return ints_of(params, self.name, self.given)


@dataclass(frozen=True, kw_only=True)
class MaybeNumber(Spec[float | None]):
    """A number that may be left empty (None); ``given``: its default as the form shows it (``120`` or
    ``10.0``), read as a float."""

    given: float | None = None
    minimum: float | None = None
    above: float | None = None

    @property
    def default(self) -> float | None:
        return None if self.given is None else float(self.given)

    @property
    def initial(self) -> float | None:
        return self.given

    def schema(self) -> dict[str, Any]:
        return self._typed("number", minimum=self.minimum, exclusiveMinimum=self.above)

    def read(self, params: Mapping[str, Any]) -> float | None:
        return number_of(params, self.name, self.default)


@dataclass(frozen=True, kw_only=True)
class Number(MaybeNumber):
    """A number with a default, so never None."""

    given: float

    def read(self, params: Mapping[str, Any]) -> float:
        value = number_of(params, self.name)
        return self.default if value is None else value

    @property
    def default(self) -> float:
        return float(self.given)


@dataclass(frozen=True, kw_only=True)
class _WholeNumber(Spec[Value]):
    """What the two whole-number params share: the form's integer field with its minimum."""

    minimum: int | None = None

    def schema(self) -> dict[str, Any]:
        return self._typed("integer", minimum=self.minimum)


@dataclass(frozen=True, kw_only=True)
class MaybeInteger(_WholeNumber[int | None]):
    """A whole number that may be left empty (None)."""

    given: int | None = None

    @property
    def default(self) -> int | None:
        return self.given

    def read(self, params: Mapping[str, Any]) -> int | None:
        return integer_of(params, self.name, self.given)


@dataclass(frozen=True, kw_only=True)
class Integer(_WholeNumber[int]):
    """A whole number with a default (``given``), so never None."""

    given: int

    @property
    def default(self) -> int:
        return self.given

    def read(self, params: Mapping[str, Any]) -> int:
        value = integer_of(params, self.name)
        return self.given if value is None else value


@dataclass(frozen=True, kw_only=True)
class Flag(Spec[bool]):
    """A yes/no param; empty (None) is its default."""

    given: bool = False

    @property
    def default(self) -> bool:
        return self.given

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean", "title": self.title}

    def read(self, params: Mapping[str, Any]) -> bool:
        return flag_of(params, self.name, self.given)


_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def flag_of(params: Mapping[str, Any], name: str, default: bool) -> bool:
    """A yes/no param: a JSON boolean, 0 or 1, or the words true/false (yes/no, on/off); ``default`` when it is
    empty. Anything else is refused naming the param (``bool("false")`` would read as yes)."""
    value = params.get(name)
    if is_empty(value):
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"param {name} is {_shown(value)}; give true or false")


@dataclass(frozen=True, kw_only=True)
class Choice(Spec[Mode]):
    """One of a mode enum's values (str-valued: the form and JSON hold its strings); ``given`` is the
    default. Another value is refused, naming the param and the values it takes."""

    given: Mode
    only: tuple[Mode, ...] = ()

    @property
    def choices(self) -> tuple[Mode, ...]:
        """What the form offers, in order: ``only``, else every member of the enum."""
        return self.only or tuple(type(self.given))

    @property
    def default(self) -> Mode:
        return self.given

    @property
    def initial(self) -> str:
        return self.given.value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": [c.value for c in self.choices], "title": self.title}

    def read(self, params: Mapping[str, Any]) -> Mode:
        return choice_of(params, self.name, self.choices, self.given)


def choice_of(params: Mapping[str, Any], name: str, choices: Iterable[Mode], default: Mode) -> Mode:
    """A mode param as its enum member; ``default`` when it is empty. Refuses another value, naming it."""
    value = text_of(params, name)
    return default if not value else mode_of(name, value, choices)


def mode_of(name: str, value: Any, choices: Iterable[Mode]) -> Mode:
    """``value`` (a member or its string) as the member of ``choices`` it names; a ConfigError naming
    ``name``, the value and the choices otherwise."""
    offered = tuple(choices)
    for choice in offered:
        if value == choice.value:
            return choice
    raise ConfigError(f"{name} {value!r} is unknown; use one of {', '.join(c.value for c in offered)}")


# -- the params every operation shares ------------------------------------------------------------------------

class Approval(StrEnum):
    """Who answers a run's approval: a person in the UI, or the param itself (rehearsals and tests)."""

    MANUAL = "manual"
    AUTO_APPROVE = "auto_approve"
    AUTO_REJECT = "auto_reject"


KAFKA_CONN_ID = Text(name="kafka_conn_id", given="kafka_default", title="Kafka connection",
                     description="Airflow connection of type 'kafka' whose extras hold the librdkafka config "
                                 "(bootstrap.servers, security settings).")
APPROVAL = Choice(name="approval", given=Approval.MANUAL, title="Approval",
                  description="manual: a person approves the plan in the UI. auto_approve / auto_reject: "
                              "the param answers (rehearsals and tests); either way it is recorded.")


def dry_run(description: str) -> Flag:
    """The ``dry_run`` param (on by default: a run changes nothing unless told to), described by its operation."""
    return Flag(name="dry_run", given=True, title="Dry run", description=description)


class Reading:
    """Reads specs from a run's ``params`` and collects what it refuses (``problems``) instead of stopping at
    the first: a refused value reads as its default, so the run's other values are still checked and one
    error names every problem."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params
        self.problems: list[str] = []

    def __call__(self, spec: Spec[Value]) -> Value:
        try:
            return spec.read(self.params)
        except ConfigError as err:
            self.problems.append(str(err))
            return spec.default
