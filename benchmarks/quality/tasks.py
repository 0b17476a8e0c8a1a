"""The quality task set, written for this project: extraction into JSON Schemas (gold objects),
classification into label sets (gold labels), and two small Lark DSLs (smart-home commands with a gold
string, arithmetic with a gold value). Each task has a prompt that names what to write, so the
unconstrained model has a fair chance too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # "schema", "labels" or "lark"
    source: Any  # the schema dict, the label list, or the Lark grammar text
    prompt: str
    gold: Any  # a dict (schema), a label, a command string, or a number (arithmetic)


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


S, INT, B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}


def _enum(*xs: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(xs)}


EXTRACTION = [
    Task("person", "schema", _obj({"name": S, "age": INT, "city": S}),
         "Extract name, age and city as JSON: Maria Lopez is 34 and lives in Seville.",
         {"name": "Maria Lopez", "age": 34, "city": "Seville"}),
    Task("order", "schema",
         _obj({"product": _enum("laptop", "phone", "tablet"), "quantity": INT, "express": B}),
         "Extract product, quantity and express (true or false) as JSON: I'd like to order 3 phones, "
         "with express shipping please.",
         {"product": "phone", "quantity": 3, "express": True}),
    Task("weather", "schema", _obj({"city": S, "condition": _enum("sunny", "rain", "snow", "cloudy"),
                                    "temp_c": INT}),
         "Extract city, condition and temp_c as JSON: It is raining in Paris and 12 degrees.",
         {"city": "Paris", "condition": "rain", "temp_c": 12}),
    Task("meeting", "schema", _obj({"day": _enum("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
                                    "hour": INT}),
         "Extract day and hour (0-23) as JSON: Let's meet on Tuesday at 15:00.",
         {"day": "Tuesday", "hour": 15}),
    Task("book", "schema", _obj({"title": S, "author": S, "year": INT}),
         "Extract title, author and year as JSON: 'Dune' by Frank Herbert was published in 1965.",
         {"title": "Dune", "author": "Frank Herbert", "year": 1965}),
    Task("contact", "schema", _obj({"name": S, "email": S}),
         "Extract name and email as JSON: You can reach Ana Silva at ana.silva@example.com.",
         {"name": "Ana Silva", "email": "ana.silva@example.com"}),
    Task("flight", "schema", _obj({"origin": S, "destination": S}),
         "Extract origin and destination as JSON: I need a flight from Berlin to Rome.",
         {"origin": "Berlin", "destination": "Rome"}),
    Task("review", "schema", _obj({"rating": INT, "recommend": B}),
         "Extract rating (1-5) and recommend (true or false) as JSON: Four stars out of five, "
         "and yes, I would recommend it to a friend.",
         {"rating": 4, "recommend": True}),
    Task("company", "schema", _obj({"company": S, "employees": INT}),
         "Extract company and employees as JSON: Acme Corp has 250 employees.",
         {"company": "Acme Corp", "employees": 250}),
    Task("pet", "schema", _obj({"species": _enum("dog", "cat", "bird"), "name": S, "age": INT}),
         "Extract species, name and age as JSON: My cat Luna is 3 years old.",
         {"species": "cat", "name": "Luna", "age": 3}),
]

SENTIMENT = ["positive", "negative", "neutral"]
TOPIC = ["sports", "politics", "technology", "science"]
LANGUAGE = ["English", "French", "German", "Spanish"]
ONE = " Answer with one word."
CLASSIFICATION = [
    Task("sentiment-1", "labels", SENTIMENT,
         "Sentiment (positive, negative or neutral) of: 'I loved this film, it was wonderful.'" + ONE,
         "positive"),
    Task("sentiment-2", "labels", SENTIMENT,
         "Sentiment (positive, negative or neutral) of: 'The food was cold and the waiter was rude.'" + ONE,
         "negative"),
    Task("topic-1", "labels", TOPIC,
         "Topic (sports, politics, technology or science) of: 'The new GPU doubles AI training speed.'" + ONE,
         "technology"),
    Task("topic-2", "labels", TOPIC,
         "Topic (sports, politics, technology or science) of: 'The striker scored twice in the final.'" + ONE,
         "sports"),
    Task("topic-3", "labels", TOPIC,
         "Topic (sports, politics, technology or science) of: 'Parliament passed the new budget law.'" + ONE,
         "politics"),
    Task("language-1", "labels", LANGUAGE,
         "Language (English, French, German or Spanish) of: 'Bonjour, comment allez-vous ?'" + ONE,
         "French"),
    Task("language-2", "labels", LANGUAGE,
         "Language (English, French, German or Spanish) of: 'Wo ist der Bahnhof?'" + ONE,
         "German"),
    Task("emotion", "labels", ["joy", "anger", "fear", "sadness"],
         "Emotion (joy, anger, fear or sadness) of: 'I can't stop crying since my dog died.'" + ONE,
         "sadness"),
    Task("yes-no", "labels", ["yes", "no"], "Is Paris the capital of France? Answer yes or no.", "yes"),
    Task("animal", "labels", ["mammal", "bird", "fish", "reptile"],
         "Is a salmon a mammal, bird, fish or reptile?" + ONE,
         "fish"),
]

HOME = r"""
start: command
command: action " the " device (" in the " room)?
action: "turn on" | "turn off" | "dim"
device: "light" | "fan" | "heater"
room: "kitchen" | "bedroom" | "living room"
"""
ARITHMETIC = r"""
start: expr
expr: term (OP_ADD term)*
term: factor (OP_MUL factor)*
factor: NUMBER | "(" expr ")"
OP_ADD: "+" | "-"
OP_MUL: "*" | "/"
NUMBER: /[0-9]+/
"""
DSL = [
    Task("home-1", "lark", HOME,
         "Write only the smart-home command, in the form 'turn on the light in the kitchen', for: "
         "switch the fan off in the bedroom.", "turn off the fan in the bedroom"),
    Task("home-2", "lark", HOME,
         "Write only the smart-home command, in the form 'turn on the light in the kitchen', for: "
         "make the light in the living room dimmer.", "dim the light in the living room"),
    Task("home-3", "lark", HOME,
         "Write only the smart-home command, in the form 'turn on the light in the kitchen', for: "
         "it is cold, start the heater.", "turn on the heater"),
    Task("math-1", "lark", ARITHMETIC,
         "Write only the arithmetic expression, with digits and + - * /, for: three plus four.", 7),
    Task("math-2", "lark", ARITHMETIC,
         "Write only the arithmetic expression, with digits and + - * /, for: ten minus two.", 8),
    Task("math-3", "lark", ARITHMETIC,
         "Write only the arithmetic expression, with digits and + - * /, for: six times seven.", 42),
]

TASKS = EXTRACTION + CLASSIFICATION + DSL
