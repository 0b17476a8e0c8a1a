"""Benchmarks time first compiles, so grammarmask's on-disk cache must not hand them a grammar an
earlier run compiled (grammarmask.compile_cache): :func:`use` points ``GRAMMARMASK_CACHE_DIR`` at a
fresh directory for this process, holding only the vocabularies of the cache in force (tekken loads
in 0.2 s instead of 4 s; loading a vocabulary is never what is timed), and what an installation
makes once (the JSON Schema metaschema checks fastjsonschema generates, the Unicode tables of
Python's ``re``, the tree of lark's bundled ``common.lark`` and its terminals' DFAs, the DFAs every
JSON Schema asks for), made there first if missing. Grammars compiled here are written there and the
directory is deleted at exit.
``GRAMMARMASK_CACHE_DIR=off`` is kept as it is. Work before the timed compiles (which schemas compile
at all) runs under :func:`off`, so a timed compile never reads what it wrote.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["off", "use"]


def use() -> None:
    """Give this process a cache directory with the vocabularies and the metaschema checks (made once
    per installation, not per grammar) and no compiled grammar."""
    from grammarmask import disk_cache

    current = disk_cache.directory()
    if current is None or os.environ.get("GRAMMARMASK_COLD_CACHE") == str(os.getpid()):
        return
    _installation_entries()
    fresh = Path(tempfile.mkdtemp(prefix="grammarmask-bench-cache-"))
    if current.is_dir():
        for pattern in ("vocabulary-*.pickle*", "metaschema-check-*.pickle*", "unicode-table-*.pickle*",
                        "lark-bundled-*.pickle*", "json-schema-common-dfas-*.pickle*"):
            for entry in current.glob(pattern):
                shutil.copy2(entry, fresh / entry.name)
    os.environ["GRAMMARMASK_CACHE_DIR"] = str(fresh)
    os.environ["GRAMMARMASK_COLD_CACHE"] = str(os.getpid())
    atexit.register(shutil.rmtree, fresh, True)


def _installation_entries() -> None:
    """Make the entries an installation makes once, in the cache in force, where missing: the
    metaschema checks, the Unicode tables of Python's ``re``, lark's common.lark read and the DFAs of
    common.lark's terminals and of every JSON Schema's common patterns (on a new
    machine the first process would pay them, ~100 ms, inside whichever compile came first). Made
    through the functions' own code, not their in-process caches, which stay cold: a timed compile
    reads the entries back."""
    import jsonschema
    import lark

    from grammarmask.automata import charsets
    from grammarmask.frontends import lark_syntax
    from grammarmask.frontends.jsonschema import metaschema

    for escape in ("\\d", "\\D", "\\w", "\\W", "\\s", "\\S"):
        for ascii_only in (False, True):
            charsets.category_set.__wrapped__(escape, ascii_only)
    charsets._case_related.__wrapped__()
    for ascii_only in (False, True):
        charsets._ascii_ignorecase_sets.__wrapped__(ascii_only)
    charsets.all_chars.cache_clear()
    common = Path(lark.__file__).parent / "grammars" / "common.lark"
    lark_syntax._bundled_tree.__wrapped__(common.read_text("utf-8"))
    # lark's token scanner (0.7 ms to compile; used where re cuts the text, without the extension),
    # if the reading compiled it, is a first compile's to pay: kept by the reader and by re's own
    # cache of patterns
    lark_syntax._scanner.cache_clear()
    re.purge()
    from grammarmask import disk_cache
    from grammarmask.frontends import lark_bundled
    from grammarmask.frontends.jsonschema import common_dfas

    for kind, module in (("lark-bundled-dfas", lark_bundled), ("json-schema-common-dfas", common_dfas)):
        if disk_cache.load(kind, module.entry_key()) is None:
            # made by a child process: made here, it would fill this process's caches (the automata,
            # what lark's reader keeps)
            code = f"from {module.__name__} import keep_common_dfas; keep_common_dfas()"
            subprocess.run([sys.executable, "-c", code], check=True)
    for draft in (
        jsonschema.Draft4Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft202012Validator,
    ):
        metaschema._fast_validator.__wrapped__(draft)


@contextlib.contextmanager
def off() -> Iterator[None]:
    """The on-disk cache off inside the block: work done there (checking which schemas compile, say)
    leaves no entry for a timed first compile to read back."""
    before = os.environ.get("GRAMMARMASK_CACHE_DIR")
    os.environ["GRAMMARMASK_CACHE_DIR"] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GRAMMARMASK_CACHE_DIR", None)
        else:
            os.environ["GRAMMARMASK_CACHE_DIR"] = before
