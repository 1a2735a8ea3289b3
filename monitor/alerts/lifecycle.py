"""Alert lifecycle: pending → firing → resolved, deduplicated per (rule, model, window,
attribute), with the evidence that justifies it.

Time is *event time* (the end of the evaluated window), so a replay of recorded events gives the
same transitions at the same times as the live monitor did — that is what makes backtesting
meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

State = Literal["pending", "firing", "resolved"]


@dataclass(frozen=True)
class Alert:
    """One alert instance (immutable: every change makes a new value)."""

    name: str
    labels: dict[str, str]
    state: State
    since: float  # event time the condition started
    at: float  # event time of this state
    value: float
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))


@dataclass(frozen=True)
class Transition:
    alert: Alert
    previous: State | None


@dataclass
class AlertBook:
    """Current alerts by key; :meth:`observe` applies one evaluation and returns a transition."""

    active: dict[tuple[tuple[str, str], ...], Alert] = field(default_factory=dict)

    def observe(
        self,
        *,
        name: str,
        labels: dict[str, str],
        breached: bool,
        recovered: bool,
        at: float,
        for_: float,
        value: float,
        annotations: dict[str, str],
    ) -> Transition | None:
        key = tuple(sorted(labels.items()))
        cur = self.active.get(key)
        if cur is None:
            if not breached:
                return None
            state: State = "firing" if for_ <= 0 else "pending"
            new = Alert(name, labels, state, at, at, value, annotations)
            self.active[key] = new
            return Transition(new, None)
        if cur.state == "pending":
            if not breached:
                del self.active[key]  # never fired: nothing to resolve, nothing to tell
                return None
            if at - cur.since >= for_:
                new = replace(cur, state="firing", at=at, value=value, annotations=annotations)
                self.active[key] = new
                return Transition(new, "pending")
            self.active[key] = replace(cur, value=value, annotations=annotations)
            return None
        # firing
        if recovered:
            del self.active[key]
            resolved = replace(
                cur,
                state="resolved",
                at=at,
                value=value,
                annotations=annotations or cur.annotations,
            )
            return Transition(resolved, "firing")
        self.active[key] = replace(cur, value=value, annotations=annotations)
        return None

    def firing(self) -> list[Alert]:
        return [a for a in self.active.values() if a.state == "firing"]
