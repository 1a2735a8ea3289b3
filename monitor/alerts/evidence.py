"""Anytime-valid evidence detectors of one model, per (attribute set, group), fed once per
closed bucket (math: ``metrics/sequential.py``; their alerts: ``evidence_alerts.py``).

Per group g of a set, with reference r (the configured ``reference_groups[set]``, else the
group with the most decisions in its baseline once one has ``min_baseline``; it stays):

* ``selection_rate``, ``tpr``, ``fpr``: g's rate against ``p0 = ρ0 · p_r,t``, ρ0 the ratio of
  g's and r's baseline rates and ``p_r,t`` r's rate over the trailing hour before the bucket
  (shrunk towards its baseline rate by 20 pseudo-counts); r against its own baseline rate.
  While r's own detector fires, the others of that metric pause (one change, one page).
  Per bucket the likelihood ratio of ``x`` of ``n`` under bets ``q`` 10–50 % below p0 or
  10–50 % nearer 1, mixed. Plug-ins make it approximately valid: each direction bets against
  the far end of p0 ± ``baseline_z`` (1.5) standard errors of p0 (the baselines' and the
  trailing hour's), so their error gives no drift towards an alarm. Labelled outcomes count
  when their label arrives (its own time), whatever their prediction's bucket: valid if the
  label delay does not depend on the outcome; a run of one predicted class waits for the
  other class (``selective.py``), so a delay that depends on the decision does no harm.
* ``four_fifths``: the null ``0.8 ≤ p_g/p_r ≤ 1.25`` by betting on random pairs of g's and r's
  decisions of the bucket; exact however the rates drift (Chugg et al. 2023).
* ``equalized_odds``: ``|TPR_g − TPR_r| ≤ b`` and ``|FPR_g − FPR_r| ≤ b`` the same way, on
  pairs of labelled outcomes.

The pair tests step once per hourly block, on the block's pooled counts (a draw of pairs costs
~1 µs per group and metric; hourly, the per-boundary cost stays far below a millisecond, and a
detector that steps hourly gets a threshold ``log(3600/bucket)`` nats lower for the same
budget). Change detectors step every bucket.

The baseline of a group is its pooled counts over ``[now − baseline, now − guard)`` in hourly
blocks kept here (the engine's ring may be shorter); until the model has run ``3·guard`` the
guard is a third of its age, so detection starts early and a change stays out of the baseline
for half as long as it took to come. A change detector starts once both g and r have ``min_baseline``
decisions (labelled outcomes) in it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from monitor.alerts import evidence_step as es
from monitor.alerts import selective
from monitor.config.evidence import EvidenceSpec
from monitor.config.spec import ModelSpec
from monitor.metrics import sequential as sq
from monitor.state.view import CountsView
from monitor.state.windows import FAV, FN, FP, TN, TP, N

DETECTORS = ("selection_rate", "tpr", "fpr", "four_fifths", "equalized_odds")
J = 16  # arms: change 2 directions × 4 bets; four-fifths 2 × 4; equalized odds 2 rates × 2 × 4
BLOCK = 3600  # seconds per baseline block
STATE = ("log_r", "rec", "arm", "frozen", "since", "pool", "withheld")  # group axis 1
HISTORY = ("blocks", "recent")  # per block / bucket; group axis 2
DECIDED, LABELLED = np.array([FAV, N]), np.array([TP, FN, FP, TN])  # observe's cells (made once)


class ModelEvidence:
    """The detectors of one model: evidence ``log_r[set, group, detector, arm]`` and what it
    needs (baseline blocks, the trailing hour, the reference per set)."""

    def __init__(
        self, spec: ModelSpec, sets: list[str], ev: EvidenceSpec, bounds: tuple[float, float]
    ):
        self.spec, self.set_names, self.ev = spec, sets, ev
        self.labels: list[list[str]] = [[] for _ in sets]  # per set, in the order first seen
        self.refs = np.full(len(sets), -1)
        self.block = max(BLOCK, spec.bucket)
        self.nb = -(-ev.baseline // self.block) + 1
        self.nr = max(1, 3600 // spec.bucket)
        self.first = -1  # first block seen
        self.pool_block = -1  # the block whose counts "pool" holds (pair tests)
        self.bounds, (self.ff, self.eo) = bounds, sq.pair_z(*bounds)  # (ratio, gap)
        self.ff_arms, self.eo_arms = sq.arms(self.ff), sq.arms(self.eo)
        self.ff_rev, self.eo_rev = sq.reverse_arms(self.ff), sq.reverse_arms(self.eo)
        w = np.full((5, J), -np.inf)
        w[:4, :8] = w[4] = 0
        self.logw = w - np.log(np.isfinite(w).sum(axis=1, keepdims=True))
        self.arrays: dict[str, np.ndarray] = {}
        self._slots: tuple[int, np.ndarray] | None = None
        self._order = np.zeros((2, 0), np.int64)  # (set, slot) in label order
        self.grow(0)
        self._cache: tuple[int, np.ndarray, np.ndarray] | None = None
        # kept between buckets (evidence_step.py): per references and groups, per baseline
        self._layout: tuple[tuple[Any, ...], es.Layout] | None = None
        self._base: tuple[np.ndarray, es.Layout, es.Baseline, selective.Held] | None = None
        self._log_c: tuple[tuple[Any, ...], np.ndarray] | None = None
        self._draws = es.KeyedDraws()

    def grow(self, g: int) -> None:
        """Room for ``g`` groups per set (new slots: no evidence, no history)."""
        s, a = len(self.set_names), self.arrays
        fill = {"log_r": -np.inf, "arm": -1, "frozen": np.nan, "since": np.nan}
        shapes = {"log_r": (s, g, 5, J), "rec": (s, g, 5), "arm": (s, g, 5), "frozen": (s, g, 3)}
        shapes |= {
            "since": (s, g, 5),
            "pool": (s, g, 3, 2),
            "withheld": (s, g, 3, 2),  # selective.py: a run of one predicted class, held back
            "blocks": (self.nb, s, g, 3, 2),
            "recent": (self.nr, s, g, 3, 2),
        }
        for name, shape in shapes.items():
            dtype = np.int64 if name in ("arm", "pool", "withheld", *HISTORY) else np.float64
            new = np.full(shape, fill.get(name, 0), dtype=dtype)
            old = a.get(name)
            if old is not None:
                ax = 1 if name in STATE else 2
                new[(slice(None),) * ax + (slice(0, old.shape[ax]),)] = old
            a[name] = new
        a.setdefault("block_ids", np.full(self.nb, -1))
        a.setdefault("recent_ids", np.full(self.nr, -1))
        self._cache = None

    def slots(self, reg: Any) -> np.ndarray:
        """Engine group index per (set, slot); -1 where a set has fewer groups (cached while
        the registry does not grow)."""
        if self._slots is not None and self._slots[0] == len(reg):
            return self._slots[1]
        found = [reg.groups_of_set(s) for s in range(len(self.set_names))]
        for s, (_, labels) in enumerate(found):
            known = set(self.labels[s])
            self.labels[s] += [lab for lab in labels if lab not in known]
        g = max(len(x) for x in self.labels)
        if g > self.arrays["log_r"].shape[1]:
            self.grow(g)
        idx = np.full((len(self.set_names), g), -1)
        for s, (gidx, labels) in enumerate(found):
            pos = dict(zip(labels, gidx.tolist(), strict=True))
            idx[s, : len(self.labels[s])] = [pos.get(lab, -1) for lab in self.labels[s]]
        by_label = [
            (s, g)
            for s, x in enumerate(self.labels)
            for g in sorted(range(len(x)), key=x.__getitem__)
        ]
        self._order = np.array(by_label, np.int64).reshape(-1, 2).T
        self._slots = (len(reg), idx)
        return idx

    def log_c(self, budget: Any) -> np.ndarray:
        """``log c`` per detector kind for the K detectors there are now (3 for a reference,
        5 for the others): a change detector steps per bucket, a pair test per block."""
        k = sum(5 * len(x) - 2 for x in self.labels if x)
        if self._log_c is None or self._log_c[0] != (k, budget.per, budget.pages):
            steps = [self.spec.bucket] * 3 + [self.block] * 2
            c = np.log([sq.threshold(k, budget.per, budget.pages, b) for b in steps])
            c.flags.writeable = False  # kept while K and the budget stay: shared by the steps
            self._log_c = ((k, budget.per, budget.pages), c)
        return self._log_c[1]

    def baseline(self, cur: int) -> tuple[np.ndarray, np.ndarray]:
        """(baseline sums, all held blocks' sums) ``[set, group, metric, (x, n)]``."""
        if self._cache is not None and self._cache[0] == cur:
            return self._cache[1], self._cache[2]
        ids, blocks = self.arrays["block_ids"], self.arrays["blocks"]
        guard = max(1, min(self.ev.guard // self.block, (cur - self.first) // 3))
        sel = (ids >= cur - self.ev.baseline // self.block) & (ids < cur - guard) & (ids >= 0)
        base, held = blocks[sel].sum(axis=0), blocks[ids >= 0].sum(axis=0)
        self._cache = (cur, base, held)
        return base, held

    def observe(self, m: int, engine: CountsView, k: int) -> np.ndarray:
        """``(x, n)`` of selection, TPR, FPR per (set, slot) for bucket ``k − 1``: decisions as
        of ``k``; labelled outcomes whose label became known at ``k``: [S, G, 3, 2]."""
        idx = self.slots(engine.registries[m])
        cb = engine.counts_between(m, k - 1, k, as_of=k)
        arr = engine.label_arrivals(m, k)[: len(cb)]
        c = np.zeros((cb.shape[0] + 1, 6), np.int64)  # the last row: "no such group"
        c[:-1, :2], c[:-1, 2:] = cb[:, DECIDED], arr[:, LABELLED]
        c[:-1, 3] += c[:-1, 2]  # TP + FN: labelled positives
        c[:-1, 5] += c[:-1, 4]  # FP + TN: labelled negatives
        out: np.ndarray = c[idx].reshape(*idx.shape, 3, 2)
        return out

    def step(self, obs: np.ndarray, k: int, budget: Any) -> dict[str, Any]:
        """Feed one bucket; returns what the alerts need (``fired``/``resolved`` masks, the
        rates and counts behind them, the mixed evidence ``tot``, ``log_c``, and ``alive``:
        the detectors that could fire now, with a baseline, a reference and a measured rate)."""
        a, (S, G) = self.arrays, obs.shape[:2]
        cur = ((k - 1) * self.spec.bucket) // self.block
        self.first = cur if self.first < 0 else self.first
        base, held = self.baseline(cur)
        self._choose_refs(base)
        lay, b, known = self._kept(base, held, G)
        obs, blind = selective.hold_runs(a["withheld"], obs, held, self.spec.favourable, known)
        r, s_, is_ref3, any_blind = lay.r, lay.s_, lay.is_ref3, blind.any()
        hour = a["recent"].sum(axis=0)  # stale slots are zeroed by _store
        hr = hour[s_, r]  # the reference's trailing hour [S, 3, 2]
        firing, frozen = a["arm"] >= 0, a["frozen"]
        any_firing, frozen_now = firing.any(), frozen == frozen  # a firing change's baseline
        any_frozen = frozen_now.any()
        with np.errstate(divide="ignore", invalid="ignore"):
            pr_now = (hr[..., 0] + es.KAPPA * b.pr_base) / (hr[..., 1] + es.KAPPA)
            rho = np.where(frozen_now, frozen, b.rho) if any_frozen else b.rho
            p0 = np.where(is_ref3, rho, rho * pr_now[:, None, :])
        change = (p0 > 0) & (p0 < 1)  # finite, a rate that can change
        change &= (b.ready | frozen_now) if any_frozen else b.ready
        if any_blind:
            change[..., 1:] &= ~blind[..., None]
        if any_firing:  # the reference's own rate changed: reported once, as its own; others pause
            ref_busy = firing[s_, r, :3] & lay.has_ref[:, None]
            change &= ~(ref_busy[:, None, :] & ~is_ref3)
        change &= lay.live_ref[..., None]
        alive = np.empty((S, G, 5), bool)
        alive[..., :3], alive[..., 3] = change, lay.others
        alive[..., 4] = lay.others & ~blind & ~blind[s_, r][:, None] if any_blind else lay.others
        p0c = np.where(p0 == p0, p0, 0.5)
        p0c = np.minimum(np.maximum(p0c, 1e-6, out=p0c), 1 - 1e-6, out=p0c)
        x, n = obs[..., 0], obs[..., 1]
        se = es.standard_error(p0c, b, lay, hr[..., 1], pr_now)
        pairs = np.zeros((S, G, 3, 4), np.int64)
        step = np.zeros((S, G, 5), bool)  # the pair tests': set once a block is complete
        np.logical_and(alive[..., :3], n > 0, out=step[..., :3])
        lr, e = a["log_r"], sq.change_arms(x, n, p0c, se, self.ev.baseline_z)
        before = lr[..., :3, :8].copy() if any_firing and firing[..., :3].any() else None
        sq.sr_step_into(lr[..., :3, :8], e, step[..., :3, None])
        if cur != self.pool_block:  # a block is complete: its pair tests
            # blind by what the block's outcomes hold (runs of one class wait outside it): a
            # run going on now must not void the file of outcomes released in the block
            seen = ~selective.blind_held(a["pool"]) & lay.live_ref
            alive[..., 4] = ~lay.is_ref & seen & seen[s_, r][:, None]
            pairs = self._pairs(a["pool"], r, lay.others, cur)
            a["pool"][:] = 0
            self.pool_block = cur
            log_e = np.full((S, G, 2, J), -np.inf)
            log_e[..., 0, :8] = sq.log_betting(pairs[:, :, 0], self.ff_arms)
            log_e[..., 1, :8] = sq.log_betting(pairs[:, :, 1], self.eo_arms)
            log_e[..., 1, 8:] = sq.log_betting(pairs[:, :, 2], self.eo_arms)
            step[..., 3] = alive[..., 3] & (pairs[:, :, 0].sum(-1) > 0)
            step[..., 4] = alive[..., 4] & (pairs[:, :, 1:].sum((-1, -2)) > 0)
            lr[..., 3:, :] = sq.sr_step(lr[..., 3:, :], log_e, step[..., 3:, None])
        a["pool"] += obs
        log_c, tot = self.log_c(budget), es.mixture(a["log_r"], self.logw)
        cap = log_c + self.ev.margin
        resolved = np.zeros((S, G, 5), bool)
        if any_firing:  # else none resolves, none is over its cap: nothing to do
            if before is not None:  # a firing change's bet, re-sized while its evidence is
                capped = sq.log_mixture(before, w := self.logw[:3, :8]) >= cap[:3] - 1e-9
                hold = ~capped | (a["rec"][..., :3] > 0)  # at its cap, no recovery evidence
                a["arm"][..., :3] = sq.sized_arms(a["arm"][..., :3], before + w, hold)
            rec_e = self._recovery(x, n, p0c, se, pairs, a["arm"])
            a["rec"] = np.where(firing & step, np.maximum(0.0, a["rec"] + rec_e), a["rec"])
            resolved = firing & (a["rec"] >= math.log(self.ev.resolve_odds))
            over = np.where(firing & ~resolved & (tot > cap), tot - cap, 0.0)
            a["log_r"] -= over[..., None]
            tot = tot - over
        if (gone := selective.ended(held, obs, blind)).any():  # blind from the start, now whole
            a["blocks"][:, gone, 1:], a["recent"][:, gone, 1:], self._cache = 0, 0, None
        self._store(cur, obs, k)
        fired = ~firing & alive & (tot >= log_c)
        out = {"fired": fired, "resolved": resolved, "tot": tot, "log_c": log_c, "base": base}
        out |= {"p_base": b.p_base, "p0": p0, "held": held, "alive": alive, "blind": blind}
        # the hour the pages quote ends at the boundary: this bucket's counts in it (the
        # detectors' p_r,t is the hour before the bucket, one bucket older: a review)
        return out | {"hour": a["recent"].sum(axis=0)}

    def fire(self, s: int, g: int, det: int, at: float, p_base: np.ndarray) -> None:
        """Start firing: note the arm with the most evidence; freeze a change's baseline."""
        a = self.arrays
        a["arm"][s, g, det] = int(np.argmax(a["log_r"][s, g, det] + self.logw[det]))
        a["since"][s, g, det], a["rec"][s, g, det] = at, 0.0
        if det < 3:
            r = self.refs[s]
            a["frozen"][s, g, det] = p_base[s, g, det] / (1.0 if r == g else p_base[s, r, det])

    def restart(self, s: int, g: int, det: int) -> None:
        """After resolving: no evidence; a change detector forgets the blocks from its guard
        before the change on (they hold the change). The reference's forgets them for every
        group of its set: a ratio of baselines over different hours is no ratio (the others,
        paused meanwhile, kept the change, and a group equal to the reference throughout
        paged as "rose relative to" it: found by a review)."""
        a = self.arrays
        since = a["since"][s, g, det]
        a["log_r"][s, g, det], a["arm"][s, g, det], a["rec"][s, g, det] = -np.inf, -1, 0.0
        a["since"][s, g, det] = np.nan
        if det < 3:
            a["frozen"][s, g, det] = np.nan
            fired = int((since - self.spec.bucket) // self.block)  # the block of the bucket
            cut = fired - max(1, min(self.ev.guard // self.block, (fired - self.first) // 3))
            groups = slice(None) if g == self.refs[s] else g
            a["blocks"][a["block_ids"] >= cut, s, groups, det] = 0
            self._cache = None

    def _store(self, cur: int, obs: np.ndarray, k: int) -> None:
        a, slot = self.arrays, cur % self.nb
        if a["block_ids"][slot] != cur:
            a["blocks"][slot], a["block_ids"][slot] = 0, cur
        a["blocks"][slot] += obs
        stale = (a["recent_ids"] >= 0) & (a["recent_ids"] <= k - 1 - self.nr)
        stale[(k - 1) % self.nr] = False  # written below
        if stale.any():
            a["recent"][stale], a["recent_ids"][stale] = 0, -1
        a["recent"][(k - 1) % self.nr], a["recent_ids"][(k - 1) % self.nr] = obs, k - 1

    def _choose_refs(self, base: np.ndarray) -> None:
        for s, name in enumerate(self.set_names):
            labels = self.labels[s]
            if self.refs[s] >= 0 or not labels:
                continue
            want = self.spec.reference_groups.get(name)
            if want is not None:
                self.refs[s] = labels.index(want) if want in labels else -1
                continue
            n = base[s, : len(labels), 0, 1]
            if n.max() >= self.ev.min_baseline:  # most decisions; a tie: the first label
                self.refs[s] = min(np.flatnonzero(n == n.max()), key=lambda i: labels[i])

    def _kept(self, base: np.ndarray, held: np.ndarray, g: int) -> tuple[Any, ...]:
        """The step's :class:`~es.Layout`, :class:`~es.Baseline` and :class:`~selective.Held`,
        computed afresh only when the references, the groups or the baseline changed."""
        key = (tuple(self.refs.tolist()), tuple(len(x) for x in self.labels), g)
        if self._layout is None or self._layout[0] != key:
            self._layout = (key, es.layout(self.refs, [len(x) for x in self.labels], g))
        lay = self._layout[1]
        if self._base is None or self._base[0] is not base or self._base[1] is not lay:
            b = es.baseline(base, lay, self.ev.min_baseline)
            self._base = (base, lay, b, selective.held_classes(held, self.spec.favourable))
        return lay, self._base[2], self._base[3]

    def _pairs(self, obs: np.ndarray, r: np.ndarray, use: np.ndarray, k: int) -> np.ndarray:
        """Pair-type counts of g with its reference (selection, TPR, FPR): [S, G, 3, 4].
        Drawn in (set, label) order, only where pairs are formed, from a generator keyed by
        (model, block): a replay draws the same pairs as the live monitor."""
        S, G = use.shape
        ss, gg = self._order
        keep = use[ss, gg]
        ss, gg = ss[keep], gg[keep]
        out = np.zeros((S, G, 3, 4), np.int64)
        if len(ss):
            rng = self._draws(self.spec.name, k)
            o, rf = obs[ss, gg], obs[ss, r[ss]]  # g's counts, its reference's
            got = sq.pair_counts(o[..., 0], o[..., 1], rf[..., 0], rf[..., 1], rng)
            out[ss, gg] = np.stack(got, axis=-1)
        return out

    def _recovery(
        self, x: Any, n: Any, p0: Any, se: Any, pairs: np.ndarray, arm: np.ndarray
    ) -> Any:
        """Per-bucket log e-value of "back to normal" for the arm that fired: [S, G, 5]."""
        a = np.maximum(arm, 0)
        out = np.zeros(arm.shape)
        out[..., :3] = sq.reverse_change(x, n, p0, se, a[..., :3], self.ev.baseline_z)
        out[..., 3] = sq.reverse_betting(pairs[:, :, 0], self.ff_rev[a[..., 3] // 4])
        which = np.where((a[..., 4] < 8)[..., None], pairs[:, :, 1], pairs[:, :, 2])
        out[..., 4] = sq.reverse_betting(which, self.eo_rev[(a[..., 4] // 4) % 2])
        return np.where(arm >= 0, out, 0.0)
