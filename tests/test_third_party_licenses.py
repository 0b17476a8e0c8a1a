"""The native extension's third-party notices: THIRD_PARTY_LICENSES.txt quotes the license of every
crate linked into it, as the locked crates give, and ships in wheels and sdists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "third-party-licenses"


def test_the_notices_ship_with_the_package() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # (no tomllib on 3.10)
    files = re.search(r"^license-files = \[(.*)\]$", pyproject, re.M)
    assert files is not None and '"THIRD_PARTY_LICENSES.txt"' in files.group(1)
    text = (ROOT / "THIRD_PARTY_LICENSES.txt").read_text(encoding="utf-8")
    # what the wheel is known to link: the bindings, the allocator and its C, the signatures' hash
    linked = ("pyo3 ", "pyo3-ffi ", "mimalloc ", "libmimalloc-sys ", "mimalloc (C, Microsoft)", "rustc-hash ")
    for name in linked:
        assert f"\n{name}" in text, name
    assert "Copyright (c) 2018-2025 Microsoft Corporation, Daan Leijen" in text


@pytest.mark.skipif(
    shutil.which("cargo") is None,
    reason="reads the crates cargo fetched to build the engine: an install from a wheel has neither",
)
def test_the_notices_are_what_the_locked_crates_give() -> None:
    """Every crate this platform's build links (``cargo metadata`` offline, for the host: the build
    fetched exactly those) is in the file with its license as written: a crate added or updated
    without re-running the tool fails here."""
    run = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
