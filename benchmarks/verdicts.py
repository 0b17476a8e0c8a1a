"""The native-engine issue's mask criteria over several harness runs, each run judged against the
same run's peer: on a shared host both engines speed up and slow down together, so ranges over
runs compared with each other's ranges judge the host, not the engines.

    python benchmarks/verdicts.py run1.json run2.json run3.json [--peer llguidance]

Per workload: compile ms per run (ours, the peer's), then per run ``ours/bound`` for mask p99
against half of the peer's p99, with ``+`` where it holds; and whether every run holds mask p50 <=
the peer's p50, max <= 5 ms and no refused document. Reads the harness's ``--out`` JSON files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["judge", "main"]

MAX_US = 5000.0  # the bound on any one step


def _ok_rows(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The ``status == "ok"`` results of one harness run by (workload, engine); a workload run on
    a named tokenizer as ``workload [tokenizer]`` (a run of several tokenizers has a row of each).
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["results"] if isinstance(data, dict) else data
    return {(_name(r), r["engine"]): r for r in rows if r.get("status") == "ok"}


def _name(r: dict[str, Any]) -> str:
    return f"{r['workload']} [{r['tokenizer']}]" if r.get("tokenizer") else str(r["workload"])


def judge(runs: list[dict[tuple[str, str], dict[str, Any]]], ours: str = "grammarmask",
          peer: str = "llguidance") -> dict[str, dict[str, Any]]:
    """Per workload run by ``ours`` in every run: the per-run figures and the verdicts."""
    names = list(dict.fromkeys(w for run in runs for (w, e) in run if e == ours))  # as first run
    out: dict[str, dict[str, Any]] = {}
    for w in names:
        if any((w, ours) not in run for run in runs):
            continue  # not in every run: nothing to say about it over runs
        pairs = [(run[w, ours], run.get((w, peer))) for run in runs]
        p99 = [(a["p99_us"], b["p99_us"] / 2 if b else None) for a, b in pairs]
        out[w] = {
            "compile_ms": [(a["compile_s"] * 1e3, b["compile_s"] * 1e3 if b else None) for a, b in pairs],
            "p99": p99,
            "p99_met": all(bound is not None and mine <= bound for mine, bound in p99),
            "p99_runs_met": sum(bound is not None and mine <= bound for mine, bound in p99),
            "p50_met": all(b is not None and a["p50_us"] <= b["p50_us"] for a, b in pairs),
            "max_met": all(a["max_us"] <= MAX_US for a, _ in pairs),
            "refused": sum(a["refused_docs"] for a, _ in pairs),
        }
    return out


def _ms(pair: tuple[float, float | None]) -> str:
    mine, theirs = pair
    return f"{mine:.1f} ({theirs:.1f})" if theirs is not None else f"{mine:.1f} (-)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="harness result JSON files, one per run")
    ap.add_argument("--ours", default="grammarmask")
    ap.add_argument("--peer", default="llguidance")
    args = ap.parse_args(argv)
    try:
        runs = [_ok_rows(p) for p in args.runs]
    except (OSError, ValueError, KeyError) as e:
        print(f"verdicts: cannot read the runs: {e}", file=sys.stderr)
        return 2
    verdicts = judge(runs, args.ours, args.peer)
    if not verdicts:
        print(f"verdicts: no workload of {args.ours!r} is in every run", file=sys.stderr)
        return 2
    print(f"| workload | compile ms per run ({args.ours} ({args.peer})) | mask p99 us per run, "
          f"{args.ours} / half {args.peer}'s | p99 | p50 | max | refused |")
    print("|---|---|---|---|---|---|---|")
    met = {True: "met", False: "unmet"}
    for w, v in verdicts.items():
        p99 = ", ".join(f"{a:.0f}/-" if b is None else f"{a:.0f}/{b:.0f}{'+' if a <= b else ''}"
                        for a, b in v["p99"])
        p99_verdict = "met" if v["p99_met"] else f"{v['p99_runs_met']} of {len(v['p99'])} runs"
        compile_ms = ", ".join(_ms(c) for c in v["compile_ms"])
        print(f"| {w} | {compile_ms} | {p99} | {p99_verdict} | {met[v['p50_met']]} | "
              f"{met[v['max_met']]} | {v['refused']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
