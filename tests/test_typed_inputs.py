"""Grammars from Python types: Choice from an Enum or a Literal, JsonSchema from a pydantic model class."""

from __future__ import annotations

import enum
from typing import Literal

import pydantic
import pytest

import grammarmask as gm
from grammarmask.testing import assert_accepts, assert_rejects


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Size(enum.IntEnum):
    S = 1
    XL = 42


def test_choice_from_an_enum_takes_its_values() -> None:
    g = gm.Choice(Color)
    assert_accepts(g, "red")
    assert_accepts(g, "green")
    assert_rejects(g, "RED")
    assert_accepts(gm.Choice(Size), "42")


def test_choice_from_a_literal() -> None:
    g = gm.Choice(Literal["yes", "no", 3])
    for s in ("yes", "no", "3"):
        assert_accepts(g, s)
    assert_rejects(g, "maybe")


def test_choice_still_refuses_a_plain_string() -> None:
    with pytest.raises(gm.GrammarError, match="single str"):
        gm.Choice("abc")


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_json_schema_from_a_pydantic_model_class() -> None:
    g = gm.JsonSchema(Person, whitespace="compact")
    assert g.cache_key() == gm.JsonSchema.from_pydantic(Person, whitespace="compact").cache_key()
    assert_accepts(g, '{"name":"Ada","age":36}')
    assert_rejects(g, '{"name":"Ada"}')
    with pytest.raises(gm.GrammarError, match="pydantic model class"):
        gm.JsonSchema(Person(name="a", age=1))  # an instance is not a schema


def test_plain_integers_writes_integer_literals_only() -> None:
    from grammarmask.derivation import accepts
    from grammarmask.testing import byte_vocabulary

    vocab = byte_vocabulary()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 500}},
              "required": ["n"]}
    loose = gm.JsonSchema(schema, whitespace="compact").compile(vocab)
    plain = gm.JsonSchema(schema, whitespace="compact", plain_integers=True).compile(vocab)
    for n in ("0", "-5", "7", "500", "123"):
        doc = f'{{"n":{n}}}'.encode()
        assert accepts(loose, doc) and accepts(plain, doc)
    for n in ("7.0", "-0.0", "2.00", "500.000"):
        doc = f'{{"n":{n}}}'.encode()
        assert accepts(loose, doc) and not accepts(plain, doc), n
    for n in ("501", "-6", "7.5"):
        assert not accepts(plain, f'{{"n":{n}}}'.encode())
    assert gm.JsonSchema(schema).cache_key() != gm.JsonSchema(schema, plain_integers=True).cache_key()
    with pytest.raises(gm.GrammarError, match="plain_integers must be True or False"):
        gm.JsonSchema(schema, plain_integers="yes")  # type: ignore[arg-type]
