"""No test sleeps to wait: a guard that reads tests/ with ``ast``.

A test that sleeps "until something happened" passes on an idle machine and fails under load
(issue 13: a 3 s sleep stopped a monitor before it had restored anything). Waiting is done on the
thing itself — a log line, an offset, a metric, a file — with a timeout
(``tests.helpers.wait_for``, ``MonitorProcess.wait_log``, ...).

What this allows without asking: a sleep inside a *bounded poll loop* — a ``while`` loop whose
condition or body reads a clock (``time.monotonic()``/``time.time()``) or a ``deadline`` /
``timeout`` name — the short pause between two checks of a condition. Any other ``time.sleep``
(also ``from time import sleep``) or Playwright ``wait_for_timeout`` must be listed in
``ALLOWED`` with the reason it is not a wait; an entry that no longer matches a sleep fails too,
so the list stays true.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (file under tests/, enclosing function) -> why this sleep does not stand for a wait
ALLOWED: dict[tuple[str, str], str] = {
    ("alerts/test_sinks.py", "do_POST"): (
        "the fake receiver simulates a server that hangs before answering: the delay is the "
        "behaviour under test (the sink's timeout), not a wait for something"
    ),
    ("app/test_demo.py", "stop"): (
        "an impatient Ctrl-C Ctrl-C: the second signal must land while the first is being "
        "handled, a human's double key press, not a wait for something"
    ),
    ("app/test_kafka_service.py", "test_crash_at_random_moments_loses_and_doubles_nothing"): (
        "a random jitter of the kill moment after the progress mark was reached: it picks when "
        "to crash the monitor, it does not wait for anything"
    ),
}


def _is_sleep(call: ast.Call, sleep_names: set[str]) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute):
        if f.attr == "wait_for_timeout":  # Playwright's sleep
            return True
        return f.attr == "sleep" and isinstance(f.value, ast.Name) and f.value.id == "time"
    return isinstance(f, ast.Name) and f.id in sleep_names


def _reads_clock(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and ("deadline" in n.id or "timeout" in n.id):
            return True
        if (
            isinstance(n, ast.Attribute)
            and n.attr in ("monotonic", "time", "perf_counter")
            and isinstance(n.value, ast.Name)
            and n.value.id == "time"
        ):
            return True
    return False


def sleeps(path: Path) -> Iterator[tuple[str, int, bool]]:
    """(enclosing function, line, inside a bounded poll loop) for each sleep call."""
    tree = ast.parse(path.read_text(), str(path))
    sleep_names = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "time"
        for a in n.names
        if a.name == "sleep"
    }

    def visit(node: ast.AST, func: str, bounded: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            f, b = func, bounded
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                f, b = child.name, False
            elif isinstance(child, ast.While):
                b = bounded or _reads_clock(child)
            if isinstance(child, ast.Call) and _is_sleep(child, sleep_names):
                yield func, child.lineno, bounded
            yield from visit(child, f, b)

    yield from visit(tree, "<module>", False)


def all_sleeps() -> list[tuple[str, str, int, bool]]:
    out = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        out += [(rel, func, line, bounded) for func, line, bounded in sleeps(path)]
    return out


def test_no_sleep_stands_for_a_wait() -> None:
    found = all_sleeps()
    bad = [
        f"tests/{rel}:{line} in {func}()"
        for rel, func, line, bounded in found
        if not bounded and (rel, func) not in ALLOWED
    ]
    assert bad == [], (
        "these sleep instead of waiting for what they wait for (use tests.helpers.wait_for, "
        "MonitorProcess.wait_log, ...; or list a sleep that is not a wait in ALLOWED, with why):"
        f" {bad}"
    )
    unbounded = {(rel, func) for rel, func, _, bounded in found if not bounded}
    stale = sorted(set(ALLOWED) - unbounded)
    assert stale == [], f"ALLOWED entries that match no sleep any more: remove them: {stale}"


def test_the_guard_sees_sleeps_and_poll_loops(tmp_path: Path) -> None:
    """The guard itself: a bare sleep is found (also as ``from time import sleep`` and
    Playwright's ``wait_for_timeout``); a pause inside a deadline loop is not a wait."""
    src = tmp_path / "t.py"
    src.write_text(
        "import time\n"
        "from time import sleep as nap\n"
        "def bare():\n"
        "    time.sleep(3)\n"
        "def renamed():\n"
        "    nap(1)\n"
        "def browser(page):\n"
        "    page.wait_for_timeout(2500)\n"
        "def poll(cond):\n"
        "    deadline = time.monotonic() + 5\n"
        "    while time.monotonic() < deadline:\n"
        "        if cond():\n"
        "            return\n"
        "        time.sleep(0.1)\n"
        "def forever(cond):\n"
        "    while not cond():\n"
        "        time.sleep(0.1)\n"
        "def fake_sleep(sleep):\n"
        "    sleep(1)\n"
    )
    assert list(sleeps(src)) == [
        ("bare", 4, False),
        ("renamed", 6, False),
        ("browser", 8, False),
        ("poll", 14, True),
        ("forever", 17, False),  # a loop with no timeout is no excuse
    ]
