"""The ``grammarmask`` command's JSON Schema options (``--no-strict``, ``--whitespace``,
``--property-order``, ``--max-ws``, ``--indent``), the hint for a document rejected only by declared key
order, ``--version``, ``sample``'s limit exit code, and docs/cli.md describing every option and exit
code. Documents are checked against ``jsonschema`` (the external reference) and ``json``."""

from __future__ import annotations

import argparse
import json
import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import grammarmask as gm
from grammarmask import cli

ROOT = Path(__file__).resolve().parent.parent
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["id", "name"],
    "additionalProperties": False,
}
INSTANCE = {"id": 7, "name": "x"}
REORDERED = {"name": "x", "id": 7}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def schema(tmp_path: Path) -> Path:
    p = tmp_path / "item.json"
    p.write_text(json.dumps(SCHEMA))
    return p


def doc(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def check(
    capsys: pytest.CaptureFixture[str], schema: Path, path: str, *opts: str
) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, "check", str(schema), path, "--json", *opts)
    return code, json.loads(out)[0]


# --- --whitespace, --max-ws, --indent ---------------------------------------------------------------


def test_whitespace_compact(capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path) -> None:
    compact = doc(tmp_path, "c.txt", json.dumps(INSTANCE, separators=(",", ":")))
    spaced = doc(tmp_path, "s.txt", json.dumps(INSTANCE))
    for path in (compact, spaced):  # the reference: both are instances of the schema
        jsonschema.validate(json.loads(Path(path).read_text()), SCHEMA)
    assert check(capsys, schema, compact, "--whitespace", "compact")[0] == cli.EXIT_OK
    code, res = check(capsys, schema, spaced, "--whitespace", "compact")
    assert (code, res["status"]) == (cli.EXIT_REJECTED, "rejected")
    assert res["offset"] == json.dumps(INSTANCE).index(" ")  # the first space is what compact refuses
    assert check(capsys, schema, spaced, "--whitespace", "flexible")[0] == cli.EXIT_OK
    assert check(capsys, schema, spaced)[0] == cli.EXIT_OK  # flexible is the default


def test_plain_integers(capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path) -> None:
    fraction = doc(tmp_path, "f.txt", '{"id": 7.0, "name": "x"}')
    jsonschema.validate(json.loads(Path(fraction).read_text()), SCHEMA)  # 7.0 is an integer
    assert check(capsys, schema, fraction)[0] == cli.EXIT_OK
    code, res = check(capsys, schema, fraction, "--plain-integers")
    assert (code, res["status"]) == (cli.EXIT_REJECTED, "rejected")
    assert check(capsys, schema, doc(tmp_path, "p.txt", '{"id": 7, "name": "x"}'), "--plain-integers")[0] == 0


def test_max_ws_bounds_a_run_of_spaces(
    capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path
) -> None:
    two = doc(tmp_path, "two.txt", '{"id":  7, "name": "x"}')
    three = doc(tmp_path, "three.txt", '{"id":   7, "name": "x"}')
    assert check(capsys, schema, two, "--max-ws", "2")[0] == cli.EXIT_OK
    code, res = check(capsys, schema, three, "--max-ws", "2")
    assert (code, res["column"]) == (cli.EXIT_REJECTED, len('{"id":   '))
    assert check(capsys, schema, three)[0] == cli.EXIT_OK  # default bound 16


def test_indent_accepts_json_dumps_layout(
    capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path
) -> None:
    two = doc(tmp_path, "two.txt", json.dumps(INSTANCE, indent=2))
    three = doc(tmp_path, "three.txt", json.dumps(INSTANCE, indent=3))
    assert check(capsys, schema, two, "--indent", "2")[0] == cli.EXIT_OK
    code, res = check(capsys, schema, three, "--indent", "2")
    assert (code, res["line"]) == (cli.EXIT_REJECTED, 2)  # three spaces are not a multiple of two
    assert check(capsys, schema, three)[0] == cli.EXIT_OK


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        (["--whitespace", "compact", "--indent", "2"], "--indent"),
        (["--whitespace", "compact", "--max-ws", "2"], "--max-ws"),
        (["--max-ws", "0"], "--max-ws"),
        (["--indent", "two"], "--indent"),
        (["--whitespace", "tight"], "--whitespace"),
        (["--property-order", "sorted"], "--property-order"),
    ],
)
def test_bad_json_options(
    capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path, opts: list[str], needle: str
) -> None:
    code, _, err = run(capsys, "check", str(schema), doc(tmp_path, "d.txt", "{}"), *opts)
    assert code == cli.EXIT_USAGE
    assert needle in one_line(err)


def test_json_options_refused_for_other_kinds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    grammar = doc(tmp_path, "w.regex", "[a-z]+\n")
    for opts in (["--no-strict"], ["--whitespace", "compact"], ["--property-order", "any"]):
        code, _, err = run(capsys, "sample", grammar, *opts)
        assert code == cli.EXIT_USAGE
        line = one_line(err)
        assert opts[0] in line and "regex grammar" in line


# --- --no-strict ------------------------------------------------------------------------------------


def test_no_strict_turns_the_error_into_a_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    grammar = doc(tmp_path, "u.json", json.dumps(schema))
    data = doc(tmp_path, "a.txt", "[1, 2]")
    code, _, err = run(capsys, "check", grammar, data)
    line = one_line(err)
    assert code == cli.EXIT_USAGE
    assert "uniqueItems" in line and "--no-strict" in line
    code, out, err = run(capsys, "check", grammar, data, "--no-strict")
    assert (code, out.strip()) == (cli.EXIT_OK, f"{data}: ok")
    line = one_line(err)
    assert line.startswith("grammarmask: warning: ") and "uniqueItems" in line and "u.json" in line


# --- --property-order, and the hint for a document out of declared order ----------------------------


def test_property_order_any(capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path) -> None:
    reordered = doc(tmp_path, "r.txt", json.dumps(REORDERED))
    jsonschema.validate(REORDERED, SCHEMA)  # valid: JSON Schema does not order members
    assert check(capsys, schema, reordered, "--property-order", "any")[0] == cli.EXIT_OK
    code, res = check(capsys, schema, reordered, "--property-order", "declared")
    assert (code, res["status"]) == (cli.EXIT_REJECTED, "rejected")
    assert "--property-order any" in res["hint"]


def test_declared_order_rejection_says_so(
    capsys: pytest.CaptureFixture[str], schema: Path, tmp_path: Path
) -> None:
    reordered = doc(tmp_path, "r.txt", json.dumps(REORDERED))
    invalid = doc(tmp_path, "i.txt", json.dumps({"name": 7, "id": "x"}))  # wrong in any order
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(Path(invalid).read_text()), SCHEMA)
    code, out, _ = run(capsys, "check", str(schema), reordered, invalid)
    first, second = out.strip().splitlines()
    assert code == cli.EXIT_REJECTED
    assert first.startswith(f"{reordered}:1:3: rejected") and "declared key order" in first
    assert "--property-order any" in first
    assert second.startswith(f"{invalid}:") and "property-order" not in second  # no hint when invalid
    code, res = check(capsys, schema, invalid)
    assert code == cli.EXIT_REJECTED and "hint" not in res


def test_mask_notes_declared_order(capsys: pytest.CaptureFixture[str], schema: Path) -> None:
    code, out, _ = run(capsys, "mask", str(schema), "--text", json.dumps(REORDERED))
    assert code == cli.EXIT_REJECTED
    assert out.strip().splitlines()[-1].startswith("note: rejected only by the schema's declared key order")
    code, out, _ = run(capsys, "mask", str(schema), "--text", json.dumps(REORDERED), "--json")
    assert "--property-order any" in json.loads(out)["hint"]
    code, out, _ = run(
        capsys, "mask", str(schema), "--text", json.dumps(REORDERED), "--property-order", "any"
    )
    assert code == cli.EXIT_OK


def test_sample_takes_json_options(capsys: pytest.CaptureFixture[str], schema: Path) -> None:
    code, out, _ = run(capsys, "sample", str(schema), "-n", "5", "--whitespace", "compact", "--json")
    assert code == cli.EXIT_OK
    for d in json.loads(out):
        jsonschema.validate(json.loads(d), SCHEMA)
        outside_strings = re.sub(r'"(?:[^"\\]|\\.)*"', "", d)
        assert not re.search(r"\s", outside_strings), d  # compact: no whitespace between JSON tokens


# --- --version --------------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == cli.EXIT_OK
    assert out.strip() == f"grammarmask {gm.__version__}"
    assert gm.__version__ == version("grammarmask")


# --- sample's limit ---------------------------------------------------------------------------------


def test_sample_limit_names_it_and_has_its_own_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    grammar = doc(tmp_path, "long.regex", "a{50}\n")  # every document is 50 bytes long
    code, _, err = run(capsys, "sample", grammar, "-n", "1", "--max-bytes", "5")
    assert code == cli.EXIT_LIMIT
    assert code not in (cli.EXIT_OK, cli.EXIT_REJECTED, cli.EXIT_USAGE, cli.EXIT_INTERNAL)
    line = one_line(err)
    assert "--max-bytes 5" in line and "20 bytes" in line
    code, out, _ = run(capsys, "sample", grammar, "-n", "1", "--max-bytes", "13", "--json")
    assert code == cli.EXIT_OK and json.loads(out) == ["a" * 50]  # 50 <= 4 x 13


# --- docs/cli.md describes what is implemented --------------------------------------------------------


def _options(parser: argparse.ArgumentParser) -> set[str]:
    out: set[str] = set()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _options(sub)
        out.update(o for o in action.option_strings if o.startswith("--") and o != "--help")
    return out


def test_docs_describe_every_option_and_exit_code() -> None:
    options = _options(cli.build_parser())
    assert {"--no-strict", "--whitespace", "--property-order", "--max-ws", "--indent", "--version"} <= options
    missing = sorted(o for o in options if f"`{o}" not in CLI_DOC)
    assert not missing, f"docs/cli.md does not describe {missing}"
    codes = {cli.EXIT_OK, cli.EXIT_REJECTED, cli.EXIT_USAGE, cli.EXIT_INTERNAL, cli.EXIT_LIMIT}
    assert codes == set(range(5))
    section = CLI_DOC.split("**Exit codes**", 1)[1].split("\n\n", 1)[0]
    assert {int(c) for c in re.findall(r"`(\d)`", section)} == codes
