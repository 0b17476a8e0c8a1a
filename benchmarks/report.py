"""Render benchmark results: the full markdown tables (results/latest.md), the compact version for the
top-level README, and the README splice."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _f(x: Any, digits: int = 0) -> str:
    if x is None or x != x:  # None or NaN
        return "-"
    return f"{x:,.{digits}f}"


def _cell(r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return ["-"] * 6
    if r.get("status") != "ok":
        return [r.get("status", "?")] + [""] * 5
    refused = str(r["refused"]) + (
        f" (inv. accepted {r['invalid_accepted']})" if r.get("invalid_accepted") else ""
    )
    return [
        _f(r["compile_s"] * 1e3, 1),
        _f(r["p50_us"], 1),
        _f(r["p99_us"], 0),
        _f(r["max_us"], 0),
        _f(r["peak_rss_mb"]),
        refused,
    ]


def _engines(res: list[dict[str, Any]]) -> list[str]:
    names = {r["engine"] for r in res}
    return [e for e in ("grammarmask", "xgrammar", "llguidance", "outlines_core") if e in names]


def _short(r: dict[str, Any] | None) -> str:
    """A compact cell: compile ms / mask p50 us / p99 us, and refusals if any."""
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return str(r.get("status", "?"))
    cell = f"{_f(r['compile_s'] * 1e3, 1)} / {_f(r['p50_us'], 1)} / {_f(r['p99_us'], 0)}"
    return cell + (f" ({r['refused']} refused)" if r["refused"] else "")


def compact_markdown(report: dict[str, Any]) -> str:
    """The README's version: one row per workload with the engines side by side, and the
    JSONSchemaBench summary per sub-dataset; the full tables are in results/latest.md."""
    full = markdown(report)
    head = full.split("| tokenizer | workload |")[0]
    res = [dict(r, group=_group(r)) for r in report["results"] if "workload" in r]
    engines = _engines(res)
    main = [r for r in res if not r["group"].startswith("JSONSchemaBench")]
    lines = [
        head.rstrip(),
        "",
        "Each cell: compile ms / mask p50 us / mask p99 us (refused documents, if any).",
        "",
    ]
    lines += ["| tokenizer | workload | " + " | ".join(engines) + " |", "|---|---|" + "---|" * len(engines)]
    by = {(r["tokenizer"], r["workload"], r["engine"]): r for r in main}
    for t, w in dict.fromkeys((r["tokenizer"], r["workload"]) for r in main):
        lines.append(f"| {t} | {w} | " + " | ".join(_short(by.get((t, w, e))) for e in engines) + " |")
    jsb = [r for r in res if r["group"].startswith("JSONSchemaBench")]
    if jsb:
        lines += [
            "",
            "JSONSchemaBench sample (MaskBench method). Each cell: schemas compiled / valid instances "
            "refused / invalid instances accepted / median mask p50 us.",
            "",
        ]
        lines += [
            "| tokenizer | sub-dataset | " + " | ".join(engines) + " |",
            "|---|---|" + "---|" * len(engines),
        ]
        for t, g in sorted({(r["tokenizer"], r["group"].split("/", 1)[1]) for r in jsb}):
            cells = []
            for e in engines:
                rs = [
                    r
                    for r in jsb
                    if r["tokenizer"] == t and r["group"].endswith("/" + g) and r["engine"] == e
                ]
                ok = [r for r in rs if r.get("status") == "ok"]
                p50 = _f(_pct([r["p50_us"] for r in ok], 0.5), 1)
                refused, accepted = sum(r["refused"] for r in ok), sum(r["invalid_accepted"] for r in ok)
                cells.append(f"{len(ok)}/{len(rs)} / {refused} / {accepted} / {p50}")
            lines.append(f"| {t} | {g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Full tables (max step time, peak RSS, JSONSchemaBench compile times) and every refusal "
        "with its reason: [benchmarks/results/latest.md](benchmarks/results/latest.md).",
    ]
    return "\n".join(lines) + "\n"


def markdown(report: dict[str, Any]) -> str:
    """The results as markdown tables: vocabulary preprocessing, per-workload figures, JSONSchemaBench."""
    m = report["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, {m['os']}; run {m['date']}"
        + (f", load average {m['load']:.1f} when it started." if m.get("load") is not None else "."),
        "",
    ]
    lines += [f"Note: {_clean(n)}" for n in report.get("notes", [])] + ([""] if report.get("notes") else [])
    res = [dict(r, group=_group(r)) for r in report["results"] if "workload" in r]
    prep: dict[tuple[str, str], dict[str, Any]] = {}
    for r in res:
        if "vocab_prep_s" in r:
            prep.setdefault((r["tokenizer"], r["engine"]), r)
    if prep:
        lines += ["| tokenizer | engine | version | vocabulary preprocessing (s) |", "|---|---|---|---:|"]
        lines += [
            f"| {t} | {e} | {r.get('version', '?')} | {r['vocab_prep_s']:.2f} |"
            for (t, e), r in sorted(prep.items())
        ]
        lines.append("")
    main = [r for r in res if not str(r.get("group", "")).startswith("JSONSchemaBench")]
    lines += [
        "| tokenizer | workload | engine | compile ms | mask p50 us | p99 us | max us | peak RSS MB | "
        "refused docs |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in main:
        lines.append("| " + " | ".join([r["tokenizer"], r["workload"], r["engine"], *_cell(r)]) + " |")
    jsb = [r for r in res if str(r.get("group", "")).startswith("JSONSchemaBench")]
    if jsb:
        lines += [
            "",
            "JSONSchemaBench sample (MaskBench method): schemas compiled, compile ms p50/p90, valid "
            "instances refused (validation errors), invalid instances accepted (invalidation errors), "
            "mask us p50/p99 over the compiled schemas' steps (median of per-schema figures).",
            "",
            "| tokenizer | sub-dataset | engine | compiled | compile p50 | compile p90 | validation err. | "
            "invalidation err. | mask p50 | mask p99 |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        keys = sorted({(r["tokenizer"], r["group"].split("/", 1)[1], r["engine"]) for r in jsb})
        for t, g, e in keys:
            rs = [r for r in jsb if r["tokenizer"] == t and r["group"].endswith("/" + g) and r["engine"] == e]
            ok = [r for r in rs if r.get("status") == "ok"]
            comp = [r["compile_s"] * 1e3 for r in ok]
            lines.append(
                "| "
                + " | ".join(
                    [
                        t,
                        g,
                        e,
                        f"{len(ok)}/{len(rs)}",
                        _f(_pct(comp, 0.5), 1),
                        _f(_pct(comp, 0.9), 1),
                        str(sum(r["refused"] for r in ok)),
                        str(sum(r["invalid_accepted"] for r in ok)),
                        _f(_pct([r["p50_us"] for r in ok], 0.5), 1),
                        _f(_pct([r["p99_us"] for r in ok], 0.5), 0),
                    ]
                )
                + " |"
            )
    if report.get("skipped_engines"):
        lines += ["", "Skipped: " + "; ".join(f"{k} ({v})" for k, v in report["skipped_engines"].items())]
    errors = [r for r in res if r.get("status") not in ("ok", None) and r.get("error")]
    if errors:
        lines += ["", "<details><summary>Refusals and errors</summary>", ""]
        lines += [
            f"- {r['tokenizer']} {r['workload']} {r['engine']}: {r['status']}: {_clean(r['error'])}"
            for r in errors
        ]
        lines += ["", "</details>"]
    refusals = [r for r in res if r.get("first_refusal")]
    if refusals:
        lines += ["", "Wrongly refused documents (first refusal):", ""]
        lines += [
            f"- {r['tokenizer']} {r['workload']} {r['engine']}: {_clean(r['first_refusal'])}"
            for r in refusals
        ]
    return "\n".join(lines) + "\n"


def _clean(text: Any) -> str:
    """One printable line: control characters and lone surrogates escaped, whitespace collapsed."""
    out = re.sub(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]", lambda m: f"\\u{ord(m.group(0)):04x}", str(text))
    return " ".join(out.split())


def _group(r: dict[str, Any]) -> str:
    """The workload's group (results of a timed-out worker carry only the workload name)."""
    name = str(r["workload"])
    if r.get("group"):
        return str(r["group"])
    return "JSONSchemaBench/" + name.split("/")[1] if name.startswith("jsb/") else ""


def write_report(report: dict[str, Any], out: Path) -> None:
    """Write ``out``.json (everything) and ``out``.md (the tables)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(report, indent=1))
    Path(f"{out}.md").write_text(markdown(report), encoding="utf-8", errors="backslashreplace")


def update_readme(table: str, readme: Path = ROOT / "README.md") -> None:
    """Replace the text between the benchmark-table markers in README.md."""
    text = readme.read_text(encoding="utf-8")
    start, end = "<!-- benchmark-table:start -->\n", "<!-- benchmark-table:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise SystemExit("README.md has no benchmark-table markers")
    readme.write_text(text[: i + len(start)] + table + text[j:], encoding="utf-8")
