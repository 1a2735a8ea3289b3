"""What the global view (``global_view.py``) knows of one (model, partition): where its data
starts, the boundary its partials have reached, the partials waiting to be read, a silence its
owner skipped, partials let go unread; saved with the view's progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from monitor.alerts.partials import BoundaryPartial
from monitor.state.windows import I64

NEVER = -(2**62)


@dataclass
class ViewPartition:
    first: int
    reached: int  # every boundary up to this one is here (or was read)
    # boundary -> the partial and its groups' indices in the view (registered on arrival, so
    # the evaluator knows every group before it reads the boundary), and its offset
    waiting: dict[int, tuple[BoundaryPartial, I64, int]] = field(default_factory=dict)
    labels: tuple[str, ...] = ()  # the owner's groups the remap below was built for
    remap: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    skipped: int = NEVER  # through here the owner said it has nothing more (a silence)
    dropped: int = NEVER  # through here partials were let go unread (too many waited)

    def settle(self) -> None:
        """Move ``reached`` over the consecutive boundaries that are here, and over a silence
        the owner skipped once the boundary after it is here (the owner publishes them
        together, as one instance's head jumps over the silence at once: judged on the way,
        the boundaries of the silence would be judged here and not there)."""
        while True:
            if self.reached + 1 in self.waiting:
                self.reached += 1
            elif self.reached < self.skipped and self.skipped + 1 in self.waiting:
                self.reached = self.skipped + 1
            else:
                return

    def let_go(self, keep: int) -> int:
        """Let the oldest partials that are here (up to ``reached``) go unread while more than
        ``keep`` wait; how many went."""
        if len(self.waiting) <= keep:
            return 0
        over = sorted(b for b in self.waiting if b <= self.reached)[: len(self.waiting) - keep]
        for b in over:
            del self.waiting[b]
        if over:
            self.dropped = max(self.dropped, over[-1])
        return len(over)

    def saved(self, done: int | None) -> list[int]:
        """``[first, reached, skipped, dropped]``, reached as far as the evaluator read
        (``done``): a silence's marker and the partials let go may lie before the offset a
        restarted view reads from."""
        reached = self.first if done is None else max(self.first, min(self.reached, done))
        return [self.first, reached, self.skipped, self.dropped]

    @staticmethod
    def restored(saved: list[int]) -> ViewPartition:
        """The inverse of :meth:`saved`; older saves have two or three numbers."""
        st = ViewPartition(int(saved[0]), int(saved[1]))
        if len(saved) > 2:
            st.skipped = int(saved[2])
        if len(saved) > 3:
            st.dropped = int(saved[3])
        return st
