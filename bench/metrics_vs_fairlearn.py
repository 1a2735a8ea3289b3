"""Cost of producing every metric for a 1-hour window at 10k events/s: the engine's snapshot
and metric computation from count tensors vs recomputing with fairlearn's ``MetricFrame`` over
the raw events of the window.

The engine's cost depends on the ring's shape (buckets × groups × cells), not on how many
events were counted, so its ring is filled with a sample of the window's events spread over
the hour; fairlearn gets the full raw window (36 M rows by default) for one attribute, which
favours fairlearn (the engine computes all attribute sets, both windows, all metrics and CIs).

Run: python -m bench.metrics_vs_fairlearn [--rate 10000]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench.common import bench_config, best_of, register_groups, workload
from monitor.outputs.report import build_report
from monitor.state.engine import Engine

warnings.filterwarnings("ignore")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=10_000, help="events per second")
    ap.add_argument("--seconds", type=int, default=3600, help="window length")
    ap.add_argument(
        "--fairlearn-rows",
        type=int,
        default=500_000,
        help="raw rows for fairlearn (0 = the whole window; 36 M takes minutes). "
        "Fewer rows make fairlearn faster, so the ratio is a lower bound.",
    )
    args = ap.parse_args()
    n_window = args.rate * args.seconds
    n_fl = args.fairlearn_rows or n_window

    engine = Engine(bench_config())
    register_groups(engine)
    preds, labels = workload(500_000, seconds=args.seconds)
    engine.apply(0, preds, labels)

    def ours() -> object:
        return build_report(engine.snapshot())

    t_ours = best_of(ours, repeat=5)

    from fairlearn.metrics import (
        MetricFrame,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )

    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, n_fl, dtype=np.int8)
    y_pred = rng.integers(0, 2, n_fl, dtype=np.int8)
    sex = rng.integers(0, 4, n_fl, dtype=np.int8)

    def theirs() -> object:
        mf = MetricFrame(
            metrics={"sr": selection_rate, "tpr": true_positive_rate, "fpr": false_positive_rate},
            y_true=y_true,
            y_pred=y_pred,
            sensitive_features=sex,
        )
        return mf.difference(), mf.ratio()

    t_theirs = best_of(theirs, repeat=1)
    print(f"window: {n_window:,} events ({args.rate:,}/s for {args.seconds}s)")
    print(f"engine: all metrics, 2 windows x 3 attribute sets, with CIs: {t_ours * 1e3:.2f} ms")
    print(
        f"fairlearn MetricFrame recompute over {n_fl:,} raw rows, 1 attribute, 3 metrics: "
        f"{t_theirs * 1e3:.0f} ms"
    )
    print(f"ratio fairlearn/engine: {t_theirs / t_ours:,.0f}x cheaper (target >= 100x)")


if __name__ == "__main__":
    main()
