"""Helpers shared by the tests (ported from the ctypes binding's tests/_util.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"

# The engine configurations shared with the Rust, Go and Java tests (testdata/configs of
# the repository; see its README.md).
CONFIGS = REPO / "testdata" / "configs"


def load_config(name: str, **values: str) -> str:
    """``testdata/configs/<name>`` with each ``{{KEY}}`` placeholder replaced by
    ``values[KEY]``. Raises (failing the test, or its module's import) when the file is
    missing, a value names no placeholder or a placeholder is left without a value."""
    text = (CONFIGS / name).read_text(encoding="utf-8")
    for key, value in values.items():
        mark = "{{" + key + "}}"
        if mark not in text:
            raise ValueError(f"{name} has no placeholder {mark}")
        text = text.replace(mark, value)
    if "{{" in text:
        raise ValueError(f"{name}: a placeholder is left without a value:\n{text}")
    return text


# An hour in milliseconds: a poll with this timeout can only end early (a verdict,
# risk.ClosedError), never by its timeout within a test run.
HOUR_MS = 3_600_000

# How long a call that must return at once, or as soon as another thread releases it, may
# take before the test fails it as hung. A hang detector, not a performance limit: no
# assertion depends on how fast the machine is.
HANG_S = 60.0


def no_hang(fn, what: str, timeout: float = HANG_S):
    """``fn()`` on another thread: its result, or its exception re-raised here. The test
    fails as hung when ``fn`` has not returned after ``timeout`` seconds (a hang detector:
    ``fn`` must return at once, or once something the test does releases it)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=run, name=f"no_hang: {what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"{what}: hung (still running after {timeout:.0f} s)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def join_or_hang(threads, what: str, timeout: float = HANG_S) -> None:
    """Joins every thread; fails the test as hung if one is still running after ``timeout``."""
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            pytest.fail(f"{what}: thread {t.name} hung (still running after {timeout:.0f} s)")


def no_deadline_toml(path: Path = EXAMPLES / "risk.toml") -> str:
    """The configuration at ``path`` (default examples/risk.toml) with ``[fast]
    deadline_ms = 60000`` (the most the engine allows) instead of 15: which tier decides
    does not depend on how loaded the machine is (a decision would have to be stalled for
    a minute to fall back). Build it with ``base_dir=path.parent``."""
    text = Path(path).read_text()
    assert text.count("deadline_ms = 15\n") == 1
    return text.replace("deadline_ms = 15\n", "deadline_ms = 60000\n")


def base_txn(i: int = 1, **over) -> dict:
    """Transaction ``i`` for the example schema (features as top-level keys), with the
    keys of ``over`` replaced or added."""
    t = {
        "id": i,
        "entity": 1000 + i % 97,
        "timestamp_ms": 1767571200000 + i * 1000,
        "amount": 42.5,
        "currency": "USD",
        "mcc": 5411,
        "country": "US",
        "channel": "pos",
        "device": 7,
        "txn_count_1h": 3.0,
        "hour": 23.0,
        "device_new": 1.0,
    }
    t.update(over)
    return t


# ----- the deep tier -----

# Constant scorers with a deep tier: every decision lands in the gray zone and is enqueued.
# Nothing here depends on how fast the machine is: the fast tier's deadline is the largest
# allowed (60 s; an inline answer past the deadline would fall back to the rule score 0.1,
# outside the band, and not be enqueued), and the deep budget is an hour (no verdict falls
# back to a timeout: the source is always "model").
DEEP_TOML = load_config(
    "gray_deep_batches.toml", DEEP="budget_ms = 3600000\nmax_batch = 4\nmax_wait_ms = 1\n"
)


def stuck_deep_toml(max_batch: int = 64) -> str:
    """DEEP_TOML, but the deep dispatcher never takes a batch during a test: it waits for
    ``max_batch`` items or max_wait (one hour) after the oldest's enqueue, whichever comes
    first. So fewer than ``max_batch`` queued items stay queued until shutdown,
    deterministically."""
    # budget 2 h > max_wait
    deep = f"budget_ms = 7200000\nmax_batch = {max_batch}\nmax_wait_ms = 3600000\n"
    return load_config("gray_deep_batches.toml", DEEP=deep)


def verdicts(gray: dict) -> int:
    """Every deep verdict an engine has produced (its ``metrics()["gray"]``; the deep
    tier's circuit-open fallbacks too, where the engine reports them)."""
    return (gray["completed"] + gray["timed_out"] + gray["failed"] + gray["saturated"]
            + gray.get("circuit_open", 0))


# ----- the audit trail -----

# Rules that fire on the transactions of AUDIT_TXNS: a scored pair, and two hard rules that
# set the action, so the decisions get known, different actions.
AUDIT_RULES = '''version "audit-test-1"
rule BIG_AMOUNT { when amount > 500 score 0.5 reason "BIG" }
rule NIGHT { when hour < 5 score 0.2 reason "NIGHT" }
rule BLOCK {
  when amount > 5000
  decline
  hard
  reason "BLOCKED"
}
rule HOLD {
  when segment == "a"
  review
  hard
  reason "HELD"
}
'''

# A rule tier from audit.rules (written next to it), a constant fast tier (0.2: approve)
# with the largest deadline the engine allows (which tier decides never depends on how
# loaded the machine is), and the audit log in audit/ under the base directory.
AUDIT_TOML = load_config("audit.toml")

# txn 1: approve (BIG_AMOUNT and NIGHT fire); 2: approve (nothing fires, hour missing);
# 3: decline (hard rule BLOCK, BIG_AMOUNT too); 4: review (hard rule HOLD).
# Features are top-level keys (decide's mappings).
AUDIT_TXNS = [
    {"id": 1, "entity": 7, "timestamp_ms": 1767571200000, "amount": 1000.0, "currency": "USD",
     "hour": 3.0, "segment": "b"},
    {"id": 2, "entity": 8, "amount": 10.0, "currency": "EUR", "hour": None},
    {"id": 3, "entity": 7, "amount": 9000.0, "currency": "USD", "hour": 12.0},
    {"id": 4, "entity": 9, "amount": 20.0, "currency": "USD", "segment": "a"},
]
AUDIT_ACTIONS = {1: "approve", 2: "approve", 3: "decline", 4: "review"}

# Flush timeout: a hang detector, never reached by a passing run.
AUDIT_FLUSH_MS = 60_000


def audit_engine(base_dir):
    """An engine (risk.Engine, to be closed) logging to ``base_dir/audit``."""
    import risk

    (base_dir / "audit.rules").write_text(AUDIT_RULES)
    return risk.Engine.from_toml(AUDIT_TOML, base_dir=base_dir)


def segments(log_dir) -> list:
    """The segment files of a log directory, in order."""
    return sorted(p for p in log_dir.iterdir() if p.name.startswith("seg-") and p.name.endswith(".log"))
