"""Alert lifecycle: pending → firing → resolved, deduplicated per (rule, model, window,
attribute), with the evidence that justifies it.

Time is *event time* (the end of the evaluated window), so a replay of recorded events gives the
same transitions at the same times as the live monitor did — that is what makes backtesting
meaningful.
"""

from __future__ import annotations

from collections.abc import Callable
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


Key = tuple[tuple[str, str], ...]
# annotations, or what writes them: an alert that stays pending or firing takes new numbers at
# every boundary, and its text is needed only when someone reads it (status, checkpoint) or it
# changes state, so it is written then (issue 14: the cost of a boundary)
Notes = dict[str, str] | Callable[[], dict[str, str]]


class AlertBook:
    """Current alerts by key; :meth:`observe` applies one evaluation and returns a transition."""

    def __init__(self) -> None:
        self._active: dict[Key, Alert] = {}
        # an alert kept as it was, with its newest value and notes (written when read): most
        # alerts that are on stay on, and making a new Alert at every boundary cost more than
        # judging them (issue 14: the cost of a boundary)
        self._unwritten: dict[Key, tuple[float, Notes]] = {}
        # what each alert is about (a window rule's compared pair), kept beside its unwritten
        # text so a rule can check it at every boundary without writing the text
        self._subjects: dict[Key, tuple[str, ...]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._active

    @property
    def active(self) -> dict[Key, Alert]:
        """Current alerts by key, every annotation written out."""
        for key in list(self._unwritten):
            self.get(key)
        return self._active

    def get(self, key: Key) -> Alert | None:
        """One current alert, its annotations written out."""
        cur = self._active.get(key)
        kept = self._unwritten.pop(key, None)
        if cur is not None and kept is not None:
            value, notes = kept
            written = _written(notes) or cur.annotations
            cur = self._active[key] = replace(cur, value=value, annotations=written)
        return cur

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
        annotations: Notes,
        key: Key | None = None,
        subject: tuple[str, ...] | None = None,
        since: float | None = None,
    ) -> Transition | None:
        """``key``: the labels' key, if the caller has it made (``Alert.key``); ``subject``:
        what the alert is about now (None: as before), read back with :meth:`subject`;
        ``since``: when a new alert was first detected, if before ``at`` (one raised again
        under a new severity keeps its detection time, ``retire.py``)."""
        key = tuple(sorted(labels.items())) if key is None else key
        if self.stays(key, breached, recovered, at, for_, value, annotations, subject):
            return None
        cur = self._active.get(key)
        if subject is not None and (cur is not None or breached):
            self._subjects[key] = subject
        if cur is None:
            if not breached:
                return None
            state: State = "firing" if for_ <= 0 else "pending"
            first = at if since is None else since
            new = Alert(name, dict(labels), state, first, at, value, _written(annotations))
            self._active[key] = new
            return Transition(new, None)
        if cur.state == "pending":
            if not breached:  # never fired: nothing to resolve, nothing to tell
                self.drop(key)
                return None
            self._unwritten.pop(key, None)  # breached for ``for_`` (else it stayed)
            new = replace(
                cur, state="firing", at=at, value=value, annotations=_written(annotations)
            )
            self._active[key] = new
            return Transition(new, "pending")
        # firing, and recovered (else it stayed)
        notes, last = _written(annotations), self.get(key)  # the last text, written
        self.drop(key)
        kept = last.annotations if last is not None else cur.annotations
        resolved = replace(cur, state="resolved", at=at, value=value, annotations=notes or kept)
        return Transition(resolved, "firing")

    def stays(
        self,
        key: Key,
        breached: bool,
        recovered: bool,
        at: float,
        for_: float,
        value: float,
        annotations: Notes,
        subject: tuple[str, ...] | None = None,
    ) -> bool:
        """:meth:`observe`'s step for an active alert that this evaluation leaves in its state
        (pending, not yet for ``for_``; firing, not recovered): kept with the new numbers and
        True. False (nothing done): the alert is not active, or it changes state. Positional,
        called first: most evaluations of an active alert keep it (issue 14)."""
        cur = self._active.get(key)
        if cur is None:
            return False
        if cur.state == "pending":
            if not breached or at - cur.since >= for_:
                return False
        elif recovered:
            return False
        if subject is not None:
            self._subjects[key] = subject
        self._keep(key, cur, value, annotations)
        return True

    def subject(self, key: Key) -> tuple[str, ...] | None:
        """What an active alert was last about (None: not told, e.g. restored)."""
        return self._subjects.get(key)

    def _keep(self, key: Key, cur: Alert, value: float, annotations: Notes) -> None:
        """The alert stays as it is with new numbers; its text is written when read. An empty
        text (a drift detector with no new signal) keeps the last one: a firing alert's page
        never loses its summary."""
        if not callable(annotations) and not annotations:
            kept = self._unwritten.get(key)  # the last text, or what writes it
            annotations = kept[1] if kept is not None else cur.annotations
        self._unwritten[key] = (value, annotations)

    def drop(self, key: Key) -> None:
        """Forget an alert without a transition (the caller tells what became of it)."""
        self._active.pop(key, None)
        self._unwritten.pop(key, None)
        self._subjects.pop(key, None)

    def firing(self) -> list[Alert]:
        return [a for a in self.active.values() if a.state == "firing"]


def _written(notes: Notes) -> dict[str, str]:
    return notes() if callable(notes) else notes
