"""The demo's console reads what the monitor published (no broker, no monitor internals)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from monitor.alerts.lifecycle import Alert, Transition
from monitor.app.demo import Console, demo_config
from monitor.ingest.events import RawRecord
from monitor.outputs.status import StatusState
from monitor.state.engine import Engine
from tests.helpers import run


def test_the_console_line_comes_from_the_published_status(tmp_path: Path) -> None:
    cfg = demo_config("localhost:1", checkpoint=str(tmp_path / "cp.sqlite"))
    engine = Engine(cfg)
    t0 = (time.time() // 3600 - 5) * 3600
    preds = [
        RawRecord(
            json.dumps(
                {
                    "prediction_id": f"p{i}",
                    "model_id": "lending",
                    "timestamp": t0 + 10 * i,
                    "attributes": {"group": "AB"[i % 2], "sex": "f"},
                    "prediction": int(i % 4 != 1),
                }
            ).encode()
        )
        for i in range(400)
    ]
    run(engine, preds)
    published = [StatusState(None, {}, [], [])]
    lines: list[str] = []
    console = Console(lambda: published[0], cfg.confidence, lines.append)
    assert console.line() is None  # nothing published yet
    firing = Alert("FourFifthsRule", {"model": "lending", "window": "3h"}, "firing", t0, t0, 0.5)
    published[0] = StatusState(engine.snapshot(), {}, [firing], [])
    line = console.line()
    print(line)
    assert line is not None
    assert "approvals (3h) A 1.00 B 0.50" in line and "DIR 0.50" in line
    assert "400 predictions" in line and "1 alert(s) firing" in line
    console.on_transition(Transition(firing, "pending"))
    assert lines[0].startswith("ALERT FIRING   FourFifthsRule [lending/3h]")
