"""How long a drift cohort's labels settle before its TPR/FPR is read, and whether the ring
still holds that cohort (see :mod:`monitor.alerts.drift_alerts`).

Why its own module: the settle time joins two parts of the configuration — the drift spec
(``alerts.drift``) and each model's windows, lateness and label time — and the check that
they fit runs once both are resolved (:func:`monitor.config.spec.parse_config`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from monitor.config.decode import ConfigError, sub
from monitor.config.durations import format_duration
from monitor.config.model import ModelSpec
from monitor.config.rules import AlertsSpec, DriftSpec

log = logging.getLogger(__name__)


def label_settle(d: DriftSpec, model: ModelSpec) -> int:
    """Seconds after a prediction-time cohort ends before its TPR/FPR is fed to a detector.

    Why: a label-based value read as soon as its hour ends rests on the few labels already
    known (with outcomes 1–6 h late, almost none) — noise, and a drift detector fed noise is
    blind. The cohort predicted in ``[k − bucket − settle, k − settle)`` is read as of ``k``.
    Default: the model's largest window lag — a window lagged by *d* is how a config says
    "outcomes take *d*" (docs/deploy.md) — clamped so that the cohort stays in the ring
    (:func:`cohort_room`). ``label_time: arrival`` counts a label in its own bucket, so the
    newest drift bucket is already final there: no settling (0).
    """
    if model.label_time != "prediction":
        return 0
    if d.label_settle is not None:
        return d.label_settle
    lag = max(w.lag for w in model.windows)
    return max(0, min(lag, cohort_room(d, model)))


def cohort_room(d: DriftSpec, model: ModelSpec) -> int:
    """The longest settle whose cohort the ring still holds at its boundary: the ring keeps
    the longest window with its lag plus lateness; the cohort needs the drift bucket."""
    span = max(w.length + w.lag for w in model.windows) + model.lateness
    room = span - d.bucket
    return room - room % model.bucket


def check_drift_fits(
    alerts: AlertsSpec, models: Mapping[str, ModelSpec], path: str, *, explicit: bool = True
) -> None:
    """A configured ``label_settle`` must leave each cohort in its model's ring (a cohort that
    left it cannot be read): fail at start, naming the key, rather than feed partial cohorts.
    A model that cannot hold even one drift cohort would never be judged for drift: refused
    when ``alerts.drift`` is configured (``explicit``), else a warning names the model."""
    d = alerts.drift
    if not d.enabled:
        return
    for name, model in models.items():  # not even one cohort fits: drift would never run
        if cohort_room(d, model) < 0:
            keeps = max(w.length + w.lag for w in model.windows) + model.lateness
            why = (
                f"a drift cohort of {format_duration(d.bucket)} is more than model {name!r} "
                f"keeps ({format_duration(keeps)}: its longest window with its lag, plus "
                "lateness), so drift would never be judged; shorten the drift bucket, raise "
                "the model's lateness, or disable drift"
            )
            if explicit:
                raise ConfigError(sub(sub(path, "drift"), "bucket"), why)
            log.warning("%s: %s", sub(sub(path, "drift"), "bucket"), why)
    if d.label_settle is None:
        return
    key_path = sub(sub(path, "drift"), "label_settle")
    for name, model in models.items():
        if model.label_time != "prediction":
            continue
        if d.label_settle % model.bucket:
            raise ConfigError(
                key_path,
                f"{format_duration(d.label_settle)} is not a multiple of the bucket width "
                f"{format_duration(model.bucket)} of model {name!r}",
            )
        room = cohort_room(d, model)
        if d.label_settle > room:
            raise ConfigError(
                key_path,
                f"{format_duration(d.label_settle)} plus the drift bucket "
                f"{format_duration(d.bucket)} is more than model {name!r} keeps (its longest "
                f"window with its lag, plus lateness: at most {format_duration(max(room, 0))} "
                "of settling); lag a window by the labels' delay or raise lateness",
            )
