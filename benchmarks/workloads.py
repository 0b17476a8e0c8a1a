"""Benchmark workloads: the grammar sources and the valid documents each engine is timed on.

Everything here is deterministic (fixed seeds) and checked against an external reference when built
(``re.fullmatch`` for regexes, ``jsonschema`` for schemas, ``lark`` for Lark grammars), so a refused
document token is always the engine's fault. The parent harness builds the workloads once, tokenizes
the documents with the real tokenizer, and hands the same token ids to every engine.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__import__("os").environ.get("GRAMMARMASK_CORPUS", ROOT.parent / "shared" / "corpus"))


def taxonomy_labels(n: int = 1000) -> list[str]:
    """The first ``n`` of the 1,000 hierarchical labels ("Technology > AI > NLP") in examples/taxonomy.labels
    (10 top categories x 4 subcategories x 10 leaves, their parents, and regional variants)."""
    labels = (ROOT / "examples" / "taxonomy.labels").read_text(encoding="utf-8").splitlines()
    if n > len(labels):
        raise ValueError(f"only {len(labels)} taxonomy labels exist")
    return labels[:n]


@dataclass
class Workload:
    """One grammar and its documents. ``kind``: labels, regex, json_schema, lark or gbnf."""

    name: str
    kind: str
    source: Any  # list of labels, a pattern, a schema dict, or grammar text
    docs: list[str]
    group: str = ""
    invalid_docs: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


# --- regexes (the common subset of Python re, Rust regex and xgrammar's dialect: no \d, no lookaround)

REGEXES: dict[str, str] = {
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
    "iso-datetime": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    "phone": r"\+?[0-9]{1,3}[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}[ -]?[0-9]{4}",
}


def regex_escape(text: str) -> str:
    """Escape only the metacharacters every dialect agrees on (``re.escape`` also escapes spaces and
    hyphens, which some engines read differently)."""
    return re.sub(r"[\\.^$|?*+()\[\]{}]", lambda m: "\\" + m.group(0), text)


def _regex_docs(name: str, rng: random.Random, n: int = 20) -> list[str]:
    words = ["alice", "bob", "carol.smith", "d.o'neil", "eve+news", "frank_99", "grace-h", "heidi"]
    hosts = ["example.com", "mail.example.org", "uni-hamburg.de", "sub.domain.co.uk", "x.io"]
    out = []
    for _ in range(n):
        if name == "email":
            out.append(f"{rng.choice(words).replace(chr(39), '')}{rng.randint(0, 999)}@{rng.choice(hosts)}")
        elif name == "iso-datetime":
            frac = rng.choice(["", f".{rng.randint(0, 999):03d}", f".{rng.randint(0, 999999):06d}"])
            tz = rng.choice(["Z", f"+{rng.randint(0, 14):02d}:00", f"-{rng.randint(0, 11):02d}:30"])
            out.append(
                f"{rng.randint(1970, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}{tz}"
            )
        elif name == "ipv4":
            out.append(".".join(str(rng.randint(0, 255)) for _ in range(4)))
        elif name == "phone":
            a, b, c = rng.randint(200, 999), rng.randint(100, 999), rng.randint(0, 9999)
            out.append(
                rng.choice(
                    [
                        f"+1 ({a}) {b}-{c:04d}",
                        f"+49 {a} {b} {c:04d}",
                        f"1{a}{b}{c:04d}",
                        f"+33-{a}-{b}-{c:04d}",
                    ]
                )
            )
    return out


# --- JSON Schemas: a few realistic ones with instances ------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 80},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "pattern": "^[a-z0-9._-]+@[a-z0-9.-]+\\.[a-z]{2,}$"},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["street", "city"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "price": {"type": "number", "minimum": 0},
                },
                "required": ["sku", "quantity", "price"],
                "additionalProperties": False,
            },
        },
        "note": {"type": ["string", "null"]},
        "express": {"type": "boolean"},
    },
    "required": ["id", "status", "items"],
    "additionalProperties": False,
}

EVENT = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "start": {"type": "string", "format": "date"},
        "attendees": {"type": "array", "items": {"$ref": "#/$defs/attendee"}},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["title", "start", "attendees"],
    "additionalProperties": False,
    "$defs": {
        "attendee": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "role": {"enum": ["host", "guest", "speaker"]}},
            "required": ["name", "role"],
            "additionalProperties": False,
        }
    },
}


def _person(rng: random.Random) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": rng.choice(["Ada Lovelace", "Alan Turing", "Grace Hopper", "Zoë Müller"]),
        "age": rng.randint(0, 99),
    }
    if rng.random() < 0.7:
        d["email"] = f"user{rng.randint(1, 999)}@example.com"
    if rng.random() < 0.6:
        d["address"] = {
            "street": f"{rng.randint(1, 200)} Main St",
            "city": rng.choice(["Paris", "Köln", "Oslo"]),
            "zip": f"{rng.randint(0, 99999):05d}",
        }
    if rng.random() < 0.5:
        d["tags"] = rng.sample(["vip", "new", "beta", "staff", "remote"], rng.randint(0, 4))
    return d


def _order(rng: random.Random) -> dict[str, Any]:
    items = [
        {
            "sku": f"SKU-{rng.randint(100, 999)}",
            "quantity": rng.randint(1, 9),
            "price": round(rng.uniform(0.5, 500), 2),
        }
        for _ in range(rng.randint(1, 6))
    ]
    d: dict[str, Any] = {
        "id": f"ORD-{rng.randint(0, 999999):06d}",
        "status": rng.choice(["pending", "paid", "shipped", "cancelled"]),
        "items": items,
    }
    if rng.random() < 0.5:
        d["note"] = rng.choice([None, "leave at the door", "gift wrap, please"])
    if rng.random() < 0.5:
        d["express"] = rng.random() < 0.5
    return d


def _event(rng: random.Random) -> dict[str, Any]:
    people = [
        {
            "name": rng.choice(["Kim", "Lee", "Sam", "Noor", "José"]),
            "role": rng.choice(["host", "guest", "speaker"]),
        }
        for _ in range(rng.randint(0, 5))
    ]
    d: dict[str, Any] = {
        "title": rng.choice(["Standup", "Quarterly review", "Café meetup"]),
        "start": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "attendees": people,
    }
    if rng.random() < 0.5:
        d["priority"] = rng.randint(1, 5)
    return d


def _dump(obj: Any) -> str:
    """MaskBench's serialisation: ``json.dumps(data, ensure_ascii=False)``."""
    return json.dumps(obj, ensure_ascii=False)


def _schema_workloads(rng: random.Random) -> list[Workload]:
    out = []
    for name, schema, gen in (
        ("person", PERSON, _person),
        ("order", ORDER, _order),
        ("event", EVENT, _event),
    ):
        out.append(
            Workload(
                f"schema-{name}",
                "json_schema",
                schema,
                [_dump(gen(rng)) for _ in range(10)],
                group="JSON Schema",
            )
        )
    blog = CORPUS / "json_schema" / "llguidance_samples"
    if (blog / "blog.schema.json").exists():
        schema = json.loads((blog / "blog.schema.json").read_text())
        doc = json.loads((blog / "examples" / "blog.sample.json").read_text())
        out.append(Workload("schema-blog", "json_schema", schema, [_dump(doc)], group="JSON Schema"))
    return out


# --- CFGs -------------------------------------------------------------------------------------------


def _json_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(
            [
                rng.randint(-1000, 10**6),
                round(rng.uniform(-1e3, 1e3), 3),
                True,
                False,
                None,
                rng.choice(["alpha", "beta gamma", "naïve café", 'x"y', "line\\nbreak", ""]),
            ]
        )
    if r < 0.65:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    keys = ["id", "name", "value", "items", "meta", "enabled", "count", "tags", "data", "über"]
    return {k: _json_value(rng, depth + 1) for k in rng.sample(keys, rng.randint(0, 5))}


def _json_doc(rng: random.Random, n_chars: int) -> str:
    items = []
    while sum(len(x) for x in items) < n_chars:
        items.append(json.dumps(_json_value(rng, 1), ensure_ascii=False, indent=rng.choice([None, 2])))
    return "[" + ", ".join(items) + "]"


def _arith(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice(
            [
                str(rng.randint(0, 999)),
                f"{rng.randint(0, 99)}.{rng.randint(0, 99)}",
                rng.choice(["x", "y", "rate", "total_2"]),
            ]
        )
    if r < 0.4:
        return f"({_arith(rng, depth + 1)})"
    if r < 0.47:
        return f"-{_arith(rng, depth + 1)}"
    if r < 0.55:
        return f"{rng.choice(['max', 'f', 'sqrt'])}({_arith(rng, depth + 1)}, {_arith(rng, depth + 1)})"
    return f"{_arith(rng, depth + 1)} {rng.choice(['+', '-', '*', '/', '%', '**'])} {_arith(rng, depth + 1)}"


def _arith_doc(rng: random.Random, n_chars: int) -> str:
    parts = [_arith(rng)]
    while sum(len(p) for p in parts) < n_chars:
        parts.append(_arith(rng))
    return " + ".join(parts)


def _sql_docs(rng: random.Random) -> list[str]:
    tsv = CORPUS / "lark" / "syncode" / "examples" / "sql_spider_gold_first25.tsv"
    docs = [line.split("\t")[0] for line in tsv.read_text().splitlines()] if tsv.exists() else []
    cond = " AND ".join(
        f"t.c{i} {rng.choice(['=', '<', '>=', '<>'])} {rng.randint(0, 999)}" for i in range(60)
    )
    docs.append(
        f"SELECT t.a, count(*) AS n, max(t.b) FROM big_table AS t JOIN other o ON t.id = o.id "
        f"WHERE {cond} GROUP BY t.a HAVING count(*) > 3 ORDER BY n DESC LIMIT 10"
    )
    return docs


def _lark_workloads(rng: random.Random) -> list[Workload]:
    gram = ROOT / "grammars"
    out = []
    if (gram / "json.lark").exists():
        docs = [_json_doc(rng, 600) for _ in range(3)] + [_json_doc(rng, 6000) for _ in range(2)]
        out.append(Workload("lark-json", "lark", (gram / "json.lark").read_text(), docs, group="Lark"))
    if (gram / "arithmetic.lark").exists():
        docs = [_arith_doc(rng, 500) for _ in range(3)] + [_arith_doc(rng, 5000) for _ in range(2)]
        out.append(
            Workload("lark-arithmetic", "lark", (gram / "arithmetic.lark").read_text(), docs, group="Lark")
        )
    if (gram / "sql.lark").exists():
        out.append(
            Workload("lark-sql", "lark", (gram / "sql.lark").read_text(), _sql_docs(rng), group="Lark")
        )
    gbnf = CORPUS / "gbnf" / "llama.cpp"
    if (gbnf / "arithmetic.gbnf").exists():
        # root ::= (expr "=" ws term "\n")+ : an expression, "=", then a single term
        docs = [
            f"{_arith_ident(rng)}+{rng.randint(0, 99)}*({_arith_ident(rng)}-7)={_arith_ident(rng)}\n" * 3
            for _ in range(5)
        ]
        out.append(
            Workload("gbnf-arithmetic", "gbnf", (gbnf / "arithmetic.gbnf").read_text(), docs, group="GBNF")
        )
    if (gbnf / "json.gbnf").exists():
        docs = [json.dumps(_json_value(random.Random(i), 0), ensure_ascii=False) for i in range(12)]
        docs = [d for d in docs if d.startswith("{")][:5]
        out.append(Workload("gbnf-json", "gbnf", (gbnf / "json.gbnf").read_text(), docs, group="GBNF"))
    return out


def _arith_ident(rng: random.Random) -> str:
    return rng.choice(["a", "b2", "total", "x_1"])


# --- validation against the external references ---------------------------------------------------


def validate(w: Workload) -> list[str]:
    """The documents of ``w`` the external reference rejects (empty when all are valid)."""
    bad = []
    if w.kind == "labels":
        labels = set(w.source)
        bad = [d for d in w.docs if d not in labels]
    elif w.kind == "regex":
        bad = [d for d in w.docs if not re.fullmatch(w.source, d)]
    elif w.kind == "json_schema":
        import jsonschema

        cls = jsonschema.validators.validator_for(w.source)
        v = cls(w.source, format_checker=cls.FORMAT_CHECKER)
        bad = [d for d in w.docs if not v.is_valid(json.loads(d))]
    elif w.kind == "lark":
        import lark

        parser = lark.Lark(w.source)
        for d in w.docs:
            try:
                parser.parse(d)
            except lark.exceptions.LarkError:
                bad.append(d)
    return bad


def build(*, jsb_per_dataset: int = 4) -> list[Workload]:
    """All workloads, deterministic. JSONSchemaBench schemas are the first ``jsb_per_dataset`` of each
    sub-dataset of the sample in the shared corpus (0 to skip)."""
    rng = random.Random(20261122)
    labels = taxonomy_labels(1000)
    label_docs = [labels[i] for i in range(0, 1000, 50)]
    out = [Workload("labels-1000", "labels", labels, label_docs, group="Choice")]
    for name, pattern in REGEXES.items():
        out.append(Workload(f"regex-{name}", "regex", pattern, _regex_docs(name, rng), group="Regex"))
    alternation = "(" + "|".join(regex_escape(x) for x in labels) + ")"
    out.append(Workload("regex-1000-labels", "regex", alternation, label_docs, group="Regex"))
    out += _schema_workloads(rng)
    out += _lark_workloads(rng)
    out += jsonschemabench(jsb_per_dataset)
    return out


def jsonschemabench(per_dataset: int) -> list[Workload]:
    """The MaskBench method on the JSONSchemaBench sample: valid and invalid instances per schema."""
    root = CORPUS / "json_schema" / "jsonschemabench"
    out: list[Workload] = []
    if per_dataset <= 0 or not root.exists():
        return out
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted((sub / "examples").glob("*.json"))[:per_dataset]:
            data = json.loads(f.read_text())
            tests = data.get("tests", [])
            out.append(
                Workload(
                    f"jsb/{sub.name}/{f.stem}",
                    "json_schema",
                    data["schema"],
                    [_dump(t["data"]) for t in tests if t["valid"]],
                    group=f"JSONSchemaBench/{sub.name}",
                    invalid_docs=[_dump(t["data"]) for t in tests if not t["valid"]],
                )
            )
    return out
