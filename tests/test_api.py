"""The public surface: every exported name resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import grammarmask as gm


def test_every_exported_name_resolves() -> None:
    for name in gm.__all__:
        assert getattr(gm, name) is not None, name
    assert sorted(gm.__all__) == gm.__all__


def test_errors_form_one_tree_with_builtin_bases() -> None:
    assert issubclass(gm.GrammarError, ValueError)
    assert issubclass(gm.UnsupportedSchemaError, gm.GrammarError)
    assert issubclass(gm.TokenRejected, ValueError)
    assert issubclass(gm.NoLegalContinuation, RuntimeError)
    for name in ("GrammarError", "UnsupportedSchemaError", "TokenRejected", "NoLegalContinuation"):
        assert issubclass(getattr(gm, name), gm.GrammarMaskError)


def test_import_does_not_pull_torch_or_transformers() -> None:
    code = "import sys, grammarmask; print(any(m in sys.modules for m in ('torch', 'transformers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_grammar_error_points_at_line_and_column() -> None:
    err = gm.GrammarError("expected a rule name", line=2, column=3, text="a: b\nc {\n")
    assert str(err).startswith("line 2, column 3: expected a rule name")
    assert err.context.splitlines()[1].index("^") == 4 + 2


def test_operators_build_the_composites_with_the_right_languages() -> None:
    from grammarmask.testing import assert_accepts, assert_rejects

    a, b = gm.Regex("ab|cd"), gm.Regex("[a-c]+")
    assert isinstance(a & b, gm.And) and isinstance(a | b, gm.Union) and isinstance(a + b, gm.Sequence)
    assert_accepts(a & b, "ab")
    assert_rejects(a & b, "cd")
    assert_accepts(a | b, "cd")
    assert_accepts(a | b, "cab")
    assert_accepts(a + b, "abcab")
    assert_rejects(a + b, "ab")


def test_the_namespace_shows_public_names_only() -> None:
    import grammarmask as gm

    names = dir(gm)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib", "types", "_LAZY"} & set(names)
    assert set(gm.__all__) <= set(names) and "apply_token_bitmask_inplace" in names
