"""Is a schema valid against its draft's metaschema? The answer ``jsonschema`` gives, sooner.

``jsonschema`` walks a schema through its generic machinery (a new validator per subschema, references
resolved through ``referencing``): 20-100 ms for the larger JSONSchemaBench schemas, a fifth of their
compile. ``fastjsonschema`` compiles a metaschema once into plain Python and checks the same schemas
in 2-4 ms. :func:`metaschema_error` asks it first and trusts only its *yes*; for a schema it rejects,
the error (and its wording) comes from ``jsonschema`` itself, which also has the last word on
whether there is one. It covers drafts 4, 6, 7 and 2020-12; other drafts go to ``jsonschema``.

Draft 2020-12's metaschema is seven vocabulary metaschemas joined by ``allOf``, each pointing back
with ``$dynamicRef: "#meta"``. When a schema is validated against the standard metaschema, that
dynamic reference always resolves to the metaschema's root, yet ``jsonschema`` tracks the dynamic
scope at every step (the metaschema check was about a third of a typical schema's compile time;
this check takes about 0.6 of the original's time over the corpus). :func:`flat_2020_12`
is the same metaschema with the vocabularies inlined under ``$defs`` and every ``$dynamicRef: "#meta"``
written ``$ref: "#"``: it accepts exactly the same schemas. ``fastjsonschema`` knows drafts 4 to 7
only, where a ``$ref`` hides its sibling keywords, so :func:`_draft7_form` moves every ``$ref`` that
has siblings into an ``allOf`` (the only keywords the flat metaschema uses whose meaning differs
between draft 7 and 2020-12).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import marshal
import re
import sys
from collections.abc import Callable
from typing import Any

import fastjsonschema
import jsonschema
import jsonschema_specifications

from ... import disk_cache

__all__ = ["fast_verdict", "flat_2020_12", "metaschema_error"]

_META = "https://json-schema.org/draft/2020-12/schema"
_DROP = ("$id", "$schema", "$vocabulary", "$dynamicAnchor")


def _rewrite(node: Any, defs_prefix: str) -> Any:
    """``node`` with ``$dynamicRef: "#meta"`` -> ``$ref: "#"`` and ``$defs`` refs (local, or
    ``meta/<vocabulary>#/$defs/x``) renamed to the flattened ``$defs``."""
    if isinstance(node, list):
        return [_rewrite(x, defs_prefix) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "$dynamicRef" and v == "#meta":
            out["$ref"] = "#"
        elif k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
            out["$ref"] = "#/$defs/" + defs_prefix + v[len("#/$defs/") :]
        elif k == "$ref" and isinstance(v, str) and v.startswith("meta/") and "#/$defs/" in v:
            doc, name = v[len("meta/") :].split("#/$defs/")  # another vocabulary's definition
            out["$ref"] = f"#/$defs/{doc}__{name}"
        else:
            out[k] = _rewrite(v, defs_prefix)
    return out


@functools.cache
def flat_2020_12() -> dict[str, Any]:
    """Draft 2020-12's metaschema with no ``$dynamicRef`` and no reference to another document."""
    registry = jsonschema_specifications.REGISTRY
    top = copy.deepcopy(registry[_META].contents)
    defs: dict[str, Any] = {}
    parts = []
    for item in top.pop("allOf"):
        uri = "https://json-schema.org/draft/2020-12/" + item["$ref"]
        name = item["$ref"].split("/")[-1]
        vocab = {k: v for k, v in registry[uri].contents.items() if k not in _DROP}
        for d, body in vocab.pop("$defs", {}).items():
            defs[f"{name}__{d}"] = _rewrite(body, f"{name}__")
        defs[f"vocab__{name}"] = _rewrite(vocab, f"{name}__")
        parts.append({"$ref": f"#/$defs/vocab__{name}"})
    flat: dict[str, Any] = _rewrite({k: v for k, v in top.items() if k not in _DROP}, "top__")
    flat["allOf"] = parts
    flat["$defs"] = {**defs, **{f"top__{k}": v for k, v in flat.get("$defs", {}).items()}}
    return flat


_DRAFTS_4_TO_7 = (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator)


def _draft7_form(node: Any) -> Any:
    """``node`` with every ``$ref`` that has sibling keywords moved into an ``allOf`` beside them."""
    if isinstance(node, list):
        return [_draft7_form(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _draft7_form(v) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and len(out) > 1:  # a string: "$ref" is a keyword, not a property name
        del out["$ref"]
        out["allOf"] = [*out.get("allOf", []), {"$ref": ref}]
    return out


@functools.cache
def _fast_validator(validator_cls: Any) -> Callable[[Any], Any] | None:
    """``fastjsonschema``'s compiled check of ``validator_cls``'s metaschema, or None for a draft it
    does not cover (no format checks, no defaults written into the schema)."""
    if validator_cls is jsonschema.Draft202012Validator:
        meta = {**_draft7_form(flat_2020_12()), "$schema": "http://json-schema.org/draft-07/schema#"}
    elif validator_cls in _DRAFTS_4_TO_7:
        meta = validator_cls.META_SCHEMA
    else:
        return None
    # fastjsonschema writes Python source and compiles it: 14 ms, the largest part of a process's
    # first JSON Schema compile; the compiled code is kept in the disk cache (0.2 ms to read back)
    key = (hashlib.blake2b(json.dumps(meta, sort_keys=True).encode(), digest_size=16).hexdigest(),
           fastjsonschema.VERSION, sys.version)

    def make() -> tuple[bytes, str]:
        # a copy: fastjsonschema writes into the schema it is given (jsonschema's own metaschema)
        source = fastjsonschema.compile_to_code(copy.deepcopy(meta), use_formats=False, use_default=False,
                                                detailed_exceptions=False)
        entry = re.search(r"^def (\w+)", source, re.M)
        assert entry is not None  # the generated module starts with the root schema's function
        return marshal.dumps(compile(source, "<metaschema check>", "exec")), entry.group(1)

    code, entry = disk_cache.load_or_make("metaschema-check", key, make)
    namespace: dict[str, Any] = {}
    exec(marshal.loads(code), namespace)  # noqa: S102 - code fastjsonschema generated, from our own cache
    check: Callable[[Any], Any] = namespace[entry]
    return check


def fast_verdict(root: Any, validator_cls: Any) -> bool | None:
    """True when ``fastjsonschema`` finds ``root`` valid against the metaschema, False when it finds
    it invalid, None when it cannot tell (a draft it does not cover, or input it cannot read)."""
    check = _fast_validator(validator_cls)
    if check is None:
        return None
    try:
        check(root)
    except fastjsonschema.JsonSchemaException:
        return False
    except Exception:  # noqa: BLE001 - odd input (not JSON data): jsonschema will say what is wrong
        return None
    return True


def metaschema_error(root: Any, validator_cls: Any) -> Any:
    """The best error of ``root`` against ``validator_cls``'s metaschema (no format checks), or None."""
    if fast_verdict(root, validator_cls):
        return None
    meta = validator_cls.META_SCHEMA
    meta_cls = jsonschema.validators.validator_for(meta, default=validator_cls)
    return jsonschema.exceptions.best_match(meta_cls(meta).iter_errors(root))
