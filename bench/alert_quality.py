"""Detection quality of the alerts on streams with known truth (issue 14's acceptance figures).

Each seed draws a stream per 5-minute bucket (``bench/alert_streams.py``: one large group of
~1,200 decisions/h, one small of ~40/h, prevalence 0.5, TPR 0.8, FPR 0.2, labels 1–6 h late)
and runs it through the real ``Engine`` and ``AlertEvaluator`` with the default rules, drift
detection (and the evidence detectors, when the evaluator has them). Every figure is printed
with its 95 % interval (Wilson for detection rates, exact Poisson for false-page rates, order
statistics for median delays) and the target beside it.

Run: python -m bench.alert_quality [--scenario NAME ...] [--seeds N] [--jobs 2]
     python -m bench.alert_quality --scenario fair --seeds 200 --jobs 2   # the acceptance run
     ... --results fair.jsonl   # keep each seed's result; an interrupted run resumes
Exit status 1 if ``replay-check`` finds a replay whose transitions differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench.alert_report import (
    print_cost,
    print_drop,
    print_fair,
    print_slide,
    print_tpr,
)
from bench.alert_streams import (
    ATTRIBUTE,
    BUCKET,
    MODEL,
    SCENARIOS,
    T0,
    Events,
    RunResult,
    Scenario,
    bench_config,
    draw,
    run,
)
from monitor.alerts.evaluator import AlertEvaluator
from monitor.state.engine import Engine

# seeds per scenario in the default run (a few minutes in all with --jobs 2)
DEFAULT_SEEDS = {"fair": 1, "small-drop": 4, "large-drop": 2, "tpr-drop": 2, "dir-slide": 2}
DEFAULT_SEEDS |= {"fair-denials-daily": 1, "tpr-drop-denials-daily": 1, "fair-six": 1}
ORDER = (
    "fair",
    "fair-six",
    "fair-denials-daily",
    "small-drop",
    "large-drop",
    "tpr-drop",
    "tpr-drop-denials-daily",
    "dir-slide",
    "cost",
    "replay-check",
)


def _one(job: tuple[str, int]) -> RunResult:
    name, seed = job
    return run(SCENARIOS[name], seed)[0]


def run_seeds(
    sc: Scenario, seeds: Sequence[int], jobs: int, results: Path | None = None
) -> tuple[list[RunResult], float]:
    """All seeds of one scenario (in ``jobs`` processes); the results in seed order. With
    ``results``, each seed's result is appended to that JSON-lines file as it finishes and the
    seeds already there are not run again (a 200-seed run survives an interruption)."""
    t = time.perf_counter()
    done = load_results(results, sc.name) if results is not None else {}
    work = [(sc.name, s) for s in seeds if s not in done]
    out = [done[s] for s in seeds if s in done]
    if jobs > 1 and len(work) > 1:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(work))) as pool:
            for r in pool.imap_unordered(_one, work):
                out.append(_keep(r, results))
    else:
        out += [_keep(_one(w), results) for w in work]
    out.sort(key=lambda r: r.seed)
    return out, time.perf_counter() - t


def _keep(r: RunResult, results: Path | None) -> RunResult:
    if results is not None:
        with results.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(dataclasses.asdict(r)) + "\n")
    return r


def load_results(path: Path, scenario: str) -> dict[int, RunResult]:
    """The results of ``scenario`` kept in ``path`` (by seed; none when it does not exist)."""
    out: dict[int, RunResult] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if d["scenario"] != scenario:
            continue
        d["transitions"] = [
            (n, tuple((k, v) for k, v in labels), state, h)
            for n, labels, state, h in d["transitions"]
        ]
        out[d["seed"]] = RunResult(**d)
    return out


def budget() -> tuple[float, float, str]:
    """(pages, per seconds, where from): ``alerts.false_page_budget`` if the config has it."""
    b = getattr(bench_config().alerts, "false_page_budget", None)
    if b is not None:
        return float(b.pages), float(b.per), "alerts.false_page_budget"
    return 1.0, 90 * 86400.0, "assumed (no alerts.false_page_budget in the config)"


def replay_check(name: str, seeds: Iterable[int]) -> bool:
    """The same events as JSONL files through ``replay`` (decoder + engine + evaluator, 10,000
    events a batch): the transitions must equal the count-level run's, value and evidence too."""
    import tempfile

    from monitor.app.backtest import replay_files

    sc, cfg, ok = SCENARIOS[name], bench_config(), True
    for seed in seeds:
        t = time.perf_counter()
        _, live = run(sc, seed, cfg)
        ev = draw(sc, seed)
        with tempfile.TemporaryDirectory() as tmp:
            pf, lf = Path(tmp, "predictions.jsonl"), Path(tmp, "labels.jsonl")
            write_events(ev, [g for g, _ in sc.groups], pf, lf)
            _, dead, replayed = replay_files(cfg, predictions=[str(pf)], labels=[str(lf)])
        a = [_key(t) for t in live.history] + _evidence_rows(live)
        b = [_key(t) for t in replayed.history] + _evidence_rows(replayed)
        same = a == b and not dead
        ok &= same
        print(
            f"  seed {seed}: {len(a)} transitions live (count-level), {len(b)} in the replay "
            f"of {len(ev.ts):,} predictions and their labels: "
            f"{'identical' if same else 'DIFFERENT'}{f', {len(dead)} dead letters' if dead else ''}"
            f" ({time.perf_counter() - t:.0f} s)"
        )
        if not same:
            for x, y in zip(a, b, strict=False):
                if x != y:
                    print(f"    first difference:\n      live   {x}\n      replay {y}")
                    break
    return ok


def write_events(ev: Events, names: list[str], pf: Path, lf: Path) -> None:
    """The drawn stream as the JSONL records a producer would send (labels up to the run's end,
    as the count-level run saw them)."""
    end = T0 + ev.buckets * float(BUCKET)
    with pf.open("w") as fh:
        for k, ts, g, p in zip(ev.key, ev.ts, ev.group, ev.pred, strict=True):
            rec = {
                "prediction_id": str(int(k)),
                "model_id": MODEL,
                "timestamp": float(ts),
                "prediction": int(p),
                "attributes": {ATTRIBUTE: names[g]},
            }
            fh.write(json.dumps(rec) + "\n")
    with lf.open("w") as fh:
        for i, ts, y in zip(ev.label_idx, ev.label_ts, ev.label, strict=True):
            if ts < end:
                rec = {
                    "prediction_id": str(int(ev.key[i])),
                    "label": int(y),
                    "timestamp": float(ts),
                }
                fh.write(json.dumps(rec) + "\n")


def _evidence_rows(evaluator: object) -> list[tuple[object, ...]]:
    """The evidence detectors' rows at the end (when the evaluator has them), as tuples."""
    evidence = getattr(evaluator, "evidence", None)
    if evidence is None or not hasattr(evidence, "snapshot"):
        return []
    return [("evidence", repr(row)) for row in evidence.snapshot()]


def _key(t: object) -> tuple[object, ...]:
    a = t.alert  # type: ignore[attr-defined]
    value = "nan" if a.value != a.value else a.value
    return (
        a.name,
        tuple(sorted(a.labels.items())),
        a.state,
        t.previous,  # type: ignore[attr-defined]
        a.since,
        a.at,
        value,
        tuple(sorted(a.annotations.items())),
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenario", action="append", choices=ORDER, help="repeatable; default all")
    ap.add_argument("--seeds", type=int, help="seeds per scenario (default: a few each)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--replay-seeds", type=int, default=2, help="seeds for replay-check")
    ap.add_argument("--replay-scenario", default="small-drop", choices=sorted(SCENARIOS))
    ap.add_argument("--days", type=float, help="override every scenario's length (smoke runs)")
    ap.add_argument(
        "--results",
        type=Path,
        help="keep each seed's result in this JSON-lines file; seeds already there are not rerun",
    )
    args = ap.parse_args(argv)
    chosen = args.scenario or list(ORDER)
    pages, per, source = budget()
    cfg = bench_config()
    evidence = hasattr(AlertEvaluator(cfg, Engine(cfg)), "evidence")
    print(
        f"alert quality: model as deploy/compose/monitor.yaml (5-minute buckets; windows 3h, 12h, "
        f"12h lagged 3d), default rules + drift{' + evidence detectors' if evidence else ''}; "
        f"false-page budget {pages:g} per {per / 86400:g} d ({source})"
    )
    started = time.perf_counter()
    ok = True
    for name in chosen:
        if name == "cost":
            print_cost()
            continue
        if name == "replay-check":
            print(f"\n== replay-check ({args.replay_scenario}) ==")
            first = args.first_seed
            if args.days is not None:
                SCENARIOS[args.replay_scenario] = _shortened(
                    SCENARIOS[args.replay_scenario], args.days
                )
            ok &= replay_check(args.replay_scenario, range(first, first + args.replay_seeds))
            continue
        sc = SCENARIOS[name]
        if args.days is not None:
            sc = _shortened(sc, args.days)
            SCENARIOS[sc.name] = sc  # workers are forked: they see the shortened scenario
        n = args.seeds if args.seeds is not None else DEFAULT_SEEDS[name]
        results, secs = run_seeds(
            sc, range(args.first_seed, args.first_seed + n), args.jobs, args.results
        )
        if sc.kind == "none":
            print_fair(sc, results, secs, pages, per)
        elif name in ("small-drop", "large-drop"):
            print_drop(sc, results, secs, pages, per)
        elif sc.kind == "tpr":
            print_tpr(sc, results, secs)
        else:
            print_slide(sc, results, secs)
    print(f"\ntotal {time.perf_counter() - started:.0f} s wall")
    return 0 if ok else 1


def _shortened(sc: Scenario, days: float) -> Scenario:
    from dataclasses import replace

    start = min(sc.start_h, days * 24 / 3) if sc.kind != "none" else sc.start_h
    hold = min(sc.hold_h, days * 24 / 3)
    return replace(sc, days=days, start_h=start, hold_h=hold if math.isfinite(hold) else 0)


if __name__ == "__main__":
    sys.exit(main())
