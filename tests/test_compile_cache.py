"""Compiled grammars in the on-disk cache (grammarmask.compile_cache): a compile read back from an
entry masks exactly as the compile that made it, at every step of random walks, on both engines;
the constructors still refuse bad input and re-issue their warnings at the caller's line; entries
that cannot be read are made again; keys follow the limits, the engine, the vocabulary and the
%import files; ``off`` writes nothing. Each test has its own cache directory (none is warm)."""

from __future__ import annotations

import functools
import json
import os
import pickle
import random
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask import compile_cache, disk_cache
from grammarmask.cfg import compiled as cfg_compiled
from grammarmask.errors import BudgetExceeded, GrammarError, UnsupportedSchemaError
from grammarmask.frontends import gbnf, json_schema, lark
from grammarmask.frontends import regex as regex_frontend
from grammarmask.frontends.json_schema import SchemaWarning
from grammarmask.ir import builder
from grammarmask.testing import assert_accepts, assert_rejects

ENGINES = ["python", "native"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"enum": ["a", "bc", "d e"]}, "maxItems": 3},
        "score": {"type": "number", "minimum": 0},
        "kind": {"type": "string", "format": "color"},  # not enforceable: a warning when not strict
    },
    "required": ["name"],
}
LARK = r"""
start: stmt+
stmt: NAME "=" expr ";"
expr: term (("+" | "-") term)*
term: NUMBER | NAME | "(" expr ")"
%import common.CNAME -> NAME
%import common.INT -> NUMBER
%import common.WS
%ignore WS
"""
GBNF = r"""
root ::= "[" ws item ("," ws item)* "]"
item ::= [0-9]+ | "\"" [a-z]* "\""
ws ::= [ \t]*
"""


def _vocab() -> gm.Vocabulary:
    """Every single byte, some longer tokens that cross lexeme boundaries, EOS last."""
    extra = [b'{"', b'":', b'",', b'"}', b"name", b"tags", b"score", b"kind", b"  ", b"\n ", b"= ",
             b"ab", b"12", b"0.", b"],", b"[1", b"x_", b"#f", b"true", b"\\u00"]
    tokens = [bytes([b]) for b in range(256)] + extra + [b""]
    return gm.Vocabulary(tokens, eos_token_id=len(tokens) - 1)


def _grammars() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        return {"json": gm.JsonSchema(SCHEMA, strict=False), "lark": gm.Lark(LARK), "gbnf": gm.Gbnf(GBNF)}


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GRAMMARMASK_CACHE_MIN_MS", "0")  # every entry written, however quick
    json_schema._RULES_CACHE.clear()  # the rules of earlier tests' schemas, in this process
    return tmp_path / "cache"


def _entries(cache_dir: Path, pattern: str) -> list[Path]:
    """The entries named by ``pattern`` once every entry handed to the background writer is written."""
    disk_cache.flush()
    return list(cache_dir.glob(pattern))


def _no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every expensive step fail: what runs after this must come from the disk entries."""
    disk_cache.flush()  # on disk, not still waiting for the writer: the next compile reads the file

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built again instead of read from the disk cache")

    monkeypatch.setattr(json_schema, "Compiler", fail)
    monkeypatch.setattr(json_schema, "build_cfg", fail)
    monkeypatch.setattr(lark, "lark_to_cfg", fail)
    monkeypatch.setattr(gbnf, "gbnf_to_cfg", fail)
    monkeypatch.setattr(cfg_compiled, "LexerTables", fail)
    monkeypatch.setattr(cfg_compiled, "EarleyGrammar", fail)
    monkeypatch.setattr(builder, "build_cfg", fail)


def _walk_equal(a: gm.CompiledGrammar, b: gm.CompiledGrammar, seed: int, steps: int = 40) -> int:
    """Random walks in ``a`` with ``b`` beside it: equal masks and acceptance at every step."""
    rng = random.Random(seed)
    ma, mb = a.matcher(), b.matcher()
    n = 0
    for _ in range(steps):
        mask = ma.mask()
        assert mask == mb.mask() and ma.is_accepting() == mb.is_accepting()
        ids = [int(t) for t in mask.token_ids()]
        if not ids:
            break
        t = rng.choice(ids)
        ma.advance(t)
        mb.advance(t)
        n += 1
        if ma.is_finished():
            break
    return n


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["json", "lark", "gbnf"])
def test_a_hit_masks_as_the_miss(name: str, engine: str, cache_dir: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    made = _grammars()[name].compile(_vocab(), engine=engine)
    kinds = sorted(p.name.split("-")[0] for p in _entries(cache_dir, "*.pickle.z"))
    assert kinds == ["compiled", "gbnf", "json", "lark"]  # the three front ends' IR, one compile
    json_schema._RULES_CACHE.clear()
    _no_building(monkeypatch)
    read = _grammars()[name].compile(_vocab(), engine=engine)  # another vocabulary object: no memory hit
    assert read is not made and type(read) is type(made)
    steps = sum(_walk_equal(made, read, seed) for seed in range(8))
    assert steps > 40


def test_a_json_schema_read_back_lets_go_of_its_ir_too(cache_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from grammarmask.native.cfg import NativeCompiledCfg, flat_tables

    made = _grammars()["json"].compile(_vocab(), engine="native")
    json_schema._RULES_CACHE.clear()
    restored = []
    restore = compile_cache._restore
    monkeypatch.setattr(compile_cache, "_restore", lambda *a: restored.append(restore(*a)) or restored[-1])
    read = _grammars()["json"].compile(_vocab(), engine="native")
    assert restored == [read] and isinstance(read, NativeCompiledCfg)
    assert read._cfg is None and made._cfg is None  # neither holds the IR; both make it again
    assert flat_tables(read.cfg) == flat_tables(made.cfg)
    assert read.flat() is None and made.flat() is None  # nor the flat tables, once settled
    # the entry is the engine's flat tables (bytes and ints, quick to pickle), not the IR's objects
    (entry,) = _entries(cache_dir, "compiled-*.pickle.z")
    kind, tables = pickle.loads(zlib.decompress(entry.read_bytes()))
    assert kind == "tables" and tables == flat_tables(made.cfg)


def test_rules_pickle_as_their_constructors_arguments() -> None:
    """Every kind of rule expression survives pickling whole (equal, same type, its build kept)."""
    rules = _grammars()["json"].rules()
    back = pickle.loads(pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == rules and list(back) == list(rules)
    kinds = {x for x in builder.__dict__.values() if isinstance(x, type) and issubclass(x, builder.Expr)}
    pat = builder.Pat("a", build=functools.partial(builder._literal_dfa, "a"), name="A", opaque=True)
    made = [builder.Lit("x"), pat, builder.Ref("r"), builder.Seq((pat, builder.Lit("y"))),
            builder.Alt((pat, builder.Ref("r"))), builder.Rep(pat, 2, None)]
    assert {type(x) for x in made} == kinds - {builder.Expr}
    for x in made:
        y = pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(y) is type(x) and y == x and repr(y) == repr(x)
    back_pat = pickle.loads(pickle.dumps(pat))
    assert back_pat.build is not None  # compare=False: by hand, a DFA equal state for state
    again, first = back_pat.build(), pat.build()
    assert np.array_equal(again.transitions, first.transitions) and again.start == first.start
    assert np.array_equal(again.accepting, first.accepting)


def test_compositions_read_their_context_free_parts(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A composition is not stored itself; its context-free parts compile through the cache (a
    sequence's against the byte-extended vocabulary)."""

    def compositions() -> list[gm.Grammar]:
        g = _grammars()
        return [g["json"] & gm.Regex(r'[^"]*("[a-z]+"[^"]*)*'), gm.Regex("let ") + g["lark"],
                g["gbnf"] | g["json"]]

    made = [c.compile(_vocab()) for c in compositions()]
    json_schema._RULES_CACHE.clear()
    _no_building(monkeypatch)
    read = [c.compile(_vocab()) for c in compositions()]
    for a, b in zip(made, read):
        assert sum(_walk_equal(a, b, seed) for seed in range(4)) > 12


def test_a_json_schema_hit_warns_at_the_callers_line(cache_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(SchemaWarning, match="format") as first:
        gm.JsonSchema(SCHEMA, strict=False)
    json_schema._RULES_CACHE.clear()
    _no_building(monkeypatch)
    with pytest.warns(SchemaWarning, match="format") as again:
        gm.JsonSchema(SCHEMA, strict=False)
    assert [str(w.message) for w in again] == [str(w.message) for w in first]
    assert {w.filename for w in again} == {__file__}


def test_bad_input_is_still_refused_on_a_hit(cache_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        gm.JsonSchema(SCHEMA, strict=False).compile(_vocab())
    gm.Lark(LARK).compile(_vocab())
    # the same content with a bad option, a stricter mode or a smaller budget: refused as on a miss
    with pytest.raises(GrammarError, match="strict must be True or False"):
        gm.JsonSchema(SCHEMA, strict="no")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedSchemaError, match="format"):
        gm.JsonSchema(SCHEMA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        g = gm.JsonSchema(SCHEMA, strict=False)
        with pytest.raises(BudgetExceeded, match="json_schema_depth"):
            g.compile(_vocab(), limits=gm.Limits(json_schema_depth=1))
    with pytest.raises(GrammarError, match="start"):
        gm.Lark(LARK, start="nothing")
    with pytest.raises(GrammarError, match="line 2"):
        gm.Gbnf('root ::= "a"\nx ::= [a-')


def test_an_unreadable_entry_is_made_again(cache_dir: Path) -> None:
    made = _grammars()["json"].compile(_vocab())
    entries = [*_entries(cache_dir, "json-*.pickle.z"), *_entries(cache_dir, "compiled-*.pickle.z")]
    assert len(entries) == 2
    for e in entries:
        e.write_bytes(b"not zlib")
    json_schema._RULES_CACHE.clear()
    again = _grammars()["json"].compile(_vocab())
    assert _walk_equal(made, again, 0) > 5
    disk_cache.flush()
    for e in entries:  # written again, readable
        assert pickle.loads(zlib.decompress(e.read_bytes()))


def test_an_entry_from_other_tables_is_compiled_again(cache_dir: Path) -> None:
    """An entry that unpickles but does not fit (a snapshot this code does not know) is not used."""
    vocab = _vocab()
    assert compile_cache._restore(("something else",), vocab, gm.Limits()) is None
    assert compile_cache._restore(("cfg+tables", None, None, None), vocab, gm.Limits()) is None


def test_keys_follow_limits_engine_and_vocabulary(cache_dir: Path) -> None:
    g = _grammars()["lark"]
    g.compile(_vocab(), engine="python")
    g.compile(_vocab(), engine="native")
    g.compile(_vocab(), engine="python", limits=gm.Limits(cfg_masks=1000))
    tokens = [*_vocab().token_bytes[:-1], b"stmt", b""]
    other = gm.Vocabulary(tokens, eos_token_id=len(tokens) - 1)
    g.compile(other, engine="python")
    assert len(_entries(cache_dir, "compiled-*")) == 4
    g.compile(_vocab(), engine="python")  # the first again: no new entry
    assert len(_entries(cache_dir, "compiled-*")) == 4


def test_only_costly_work_is_written(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under $GRAMMARMASK_CACHE_MIN_MS a compile leaves no grammar entry: it is redone faster than
    written and read back; a bad value is an error naming the variable."""
    monkeypatch.setenv("GRAMMARMASK_CACHE_MIN_MS", "1e9")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        for g in _grammars().values():
            g.compile(_vocab(), engine="python")
        assert not [p for p in _entries(cache_dir, "*") if not p.name.startswith("vocabulary")]
        monkeypatch.setenv("GRAMMARMASK_CACHE_MIN_MS", "0")
        json_schema._RULES_CACHE.clear()
        other = gm.Limits(cfg_masks=999)  # another key: the grammars compile again
        for g in _grammars().values():
            g.compile(_vocab(), engine="python", limits=other)
    assert len(_entries(cache_dir, "compiled-*")) == len(_grammars())
    monkeypatch.setenv("GRAMMARMASK_CACHE_MIN_MS", "soon")
    with pytest.raises(GrammarError, match="GRAMMARMASK_CACHE_MIN_MS"):
        disk_cache.worth_storing(0.1)


def test_the_native_cfg_engine_entry_holds_no_native_handle(cache_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", "1")
    made = _grammars()["gbnf"].compile(_vocab(), engine="native")
    assert type(made).__name__ == "NativeCompiledCfg"
    _no_building(monkeypatch)
    read = _grammars()["gbnf"].compile(_vocab(), engine="native")
    assert type(read).__name__ == "NativeCompiledCfg"
    assert sum(_walk_equal(made, read, seed) for seed in range(4)) > 20
    monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", "0")  # the Python CFG engine: its own entry
    with pytest.raises(AssertionError, match="built again"):
        _grammars()["gbnf"].compile(_vocab(), engine="native")


def test_a_lark_import_that_changes_is_read_again(cache_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "words.lark").write_text('WORD: "cat" | "dog"\n')
    main = tmp_path / "main.lark"
    main.write_text("start: WORD\n%import .words.WORD\n")
    first = gm.Lark.from_file(main).compile(_vocab())
    (tmp_path / "words.lark").write_text('WORD: "cow"\n')
    os.utime(tmp_path / "words.lark", ns=(1, 1))  # a different modification time, whatever the clock
    second = gm.Lark.from_file(main).compile(_vocab())
    assert_accepts(first, b"cat")
    assert_rejects(first, b"cow")
    assert_accepts(second, b"cow")
    assert_rejects(second, b"cat")


def test_a_loader_function_in_import_paths_is_not_stored(cache_dir: Path) -> None:
    def nothing_here(base: Any, path: str) -> tuple[str, str]:
        raise OSError(path)  # a lark loader that has no file: lark goes on to its own grammars

    g = gm.Lark(LARK, import_paths=[nothing_here])
    assert g._disk_extra() is None
    g.compile(_vocab())
    assert _entries(cache_dir, "*.pickle.z") == []


def test_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for g in _grammars().values():
        g.compile(_vocab())
    assert list(tmp_path.iterdir()) == []


def test_the_dfas_every_schema_asks_for_are_made_once_per_installation(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DFAs of the patterns nearly every schema asks for (whitespace, strings, keys, numbers) are
    made once, kept on disk and put where regex_to_dfa finds them at a process's first JSON Schema
    compile: equal to what it makes of each pattern, so a schema using them builds none. With the
    disk cache off, or a directory that cannot be written, nothing is made."""
    from grammarmask.automata import regex as rx_module
    from grammarmask.cache import automata
    from grammarmask.frontends.jsonschema import common_dfas
    from grammarmask.frontends.jsonschema.numbers import JSON_NUMBER
    from grammarmask.frontends.jsonschema.strings import ANY_CHAR

    # (imported here: a child process of test_a_new_process_reads_the_compiled_grammar imports this
    # module alone, outside the tests package)
    from .support import made_once_per_installation

    made = common_dfas._made()
    assert JSON_NUMBER in made and ANY_CHAR in made and len(made) >= 5
    for pattern, (table, accepting, start) in made.items():
        automata().clear()
        again = rx_module.regex_to_dfa(pattern)
        assert table == again.transitions.tobytes() and accepting == again.accepting.tobytes()
        assert start == again.start
    kept = made_once_per_installation(common_dfas, "json-schema-common-dfas", cache_dir, monkeypatch)
    assert kept >= len(made)
    automata().clear()
    common_dfas._keep.cache_clear()
    monkeypatch.setattr(common_dfas, "_made", lambda: pytest.fail("made again"))
    common_dfas.keep_common_dfas()
    assert len(automata()) == len(made)
    built: list[str] = []
    build = rx_module._build
    monkeypatch.setattr(rx_module, "_build", lambda p, *a: built.append(p) or build(p, *a))
    schema = {"type": "object", "properties": {"note": {"type": "string"}, "x": {"type": "number"}}}
    compiled = gm.JsonSchema(schema).compile(_vocab())
    assert built == []
    assert_accepts(compiled, '{"note": "a\\u00e9", "x": -1.5e3}')
    assert_rejects(compiled, '{"note": 1}')
    # a cache directory that cannot be written: nothing made (each process would make it again)
    blocker = cache_dir.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(blocker / "cache"))
    automata().clear()
    common_dfas._keep.cache_clear()
    common_dfas.keep_common_dfas()  # (_made fails the test if called)
    assert len(automata()) == 0


def test_a_large_regex_dfa_is_read_back(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big, small = r"[a-z]{1,300}(@[0-9]+)?", r"[a-z]+@[0-9]+"
    made = gm.Regex(big).to_dfa()
    assert made.n_states >= regex_frontend.DISK_STATES > gm.Regex(small).to_dfa().n_states
    assert len(_entries(cache_dir, "regex-dfa-*")) == 1  # the small one is not stored

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built again")

    monkeypatch.setattr(regex_frontend, "regex_to_dfa", fail)
    read = gm.Regex(big).to_dfa()
    assert np.array_equal(read.transitions, made.transitions) and read.start == made.start
    assert np.array_equal(read.accepting, made.accepting)
    with pytest.raises(AssertionError, match="built again"):
        gm.Regex(big, max_states=5000)  # another budget: another key
    monkeypatch.undo()
    with pytest.raises(GrammarError, match="pattern"):
        gm.Regex("[a-z]{1,300}(")


def test_packed_dfas_are_exact(cache_dir: Path) -> None:
    """Large DFAs are stored by their byte classes, small ones as they are: both read back equal."""
    patterns = (r"[a-z]{1,80}@[a-z]+\.(com|org)", r"[0-9]{3}-[0-9]{4}",
                r"([^\x00-\x1f\"]|\\u[0-9a-f]{4}){2,70}")
    dfas = [gm.Regex(p).to_dfa() for p in patterns]
    assert sorted(d.n_states >= disk_cache._PACK_STATES for d in dfas) == [False, True, True]
    assert disk_cache.store("test", "dfas", dfas, packed=True)
    (entry,) = _entries(cache_dir, "test-*.pickle.z")
    assert zlib.decompress(entry.read_bytes()).count(b"_unpack_dfa") == 1  # the name, memoised
    back = disk_cache.load("test", "dfas", packed=True)
    for a, b in zip(dfas, back):
        assert np.array_equal(a.transitions, b.transitions) and np.array_equal(a.accepting, b.accepting)
        assert a.start == b.start
        # (a packed one comes back with its table by class, which the native engines read)
        assert b.class_table() == a.class_table()
        assert np.array_equal(b.byte_classes()[0], a.byte_classes()[0])


def test_a_new_process_reads_the_compiled_grammar(cache_dir: Path) -> None:
    disk_cache.code_hash.cache_clear()  # this checkout's code now, as the new process will hash it
    made = _grammars()["json"].compile(_vocab())
    code = (
        "import sys, warnings; sys.path.insert(0, sys.argv[1])\n"
        "import pytest\n"
        "import test_compile_cache as t\n"
        "mp = pytest.MonkeyPatch(); t._no_building(mp)\n"
        "c = t._grammars()['json'].compile(t._vocab())\n"
        "m = c.matcher(); print(m.mask().token_ids().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True,
                         text=True, check=True, env={**os.environ, "GRAMMARMASK_CACHE_DIR": str(cache_dir)})
    assert out.stdout.strip() == str(made.matcher().mask().token_ids().tolist())


def test_a_restored_native_grammar_leaves_the_python_engine_unimported(cache_dir: Path) -> None:
    """A new process rebuilds the native engine's entry without importing the Python engine (its
    import was 30 ms of such a process's first restored JSON Schema compile)."""
    code = (
        "import json, sys, warnings\n"
        "import grammarmask as gm\n"
        "from grammarmask import compile_cache\n"
        "restored = []\n"
        "def restore(*a, _restore=compile_cache._restore):\n"
        "    restored.append(_restore(*a)); return restored[-1]\n"
        "compile_cache._restore = restore\n"
        "warnings.simplefilter('ignore')\n"
        "vocab = gm.Vocabulary([bytes([b]) for b in range(256)] + [b''], eos_token_id=256)\n"
        "gm.JsonSchema(json.loads(sys.argv[1]), strict=False).compile(vocab)\n"
        "print(bool(restored and restored[0] is not None), 'grammarmask.cfg.compiled' in sys.modules)\n"
    )
    env = {**os.environ, "GRAMMARMASK_CACHE_DIR": str(cache_dir), "GRAMMARMASK_NATIVE_CFG": "1"}

    def run() -> str:
        args = [sys.executable, "-c", code, json.dumps(SCHEMA)]
        return subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout.strip()

    assert run() == "False False"  # made, and its entry written at exit
    assert run() == "True False"  # read back, the Python engine never imported
