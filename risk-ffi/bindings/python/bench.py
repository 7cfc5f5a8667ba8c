"""Per-call cost of ``RiskEngine.decide`` / ``decide_json`` through ctypes (a benchmark, not
a test): the transaction of the Rust criterion bench (``benches/ffi.rs``) on the engine of
``examples/risk.toml``, unchanged (15 ms fast-tier deadline).

    risk-ffi/bindings/python/.venv/bin/python risk-ffi/bindings/python/bench.py [calls]

Prints, per API, the wall time per call (µs) and the engine's own mean ``total_ns`` over
the same calls (``Decision.total_ns``); their difference is the binding's and the C ABI's
overhead. The library is found as by the package (``RISK_FFI_LIB_DIR``, ...).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import risk  # noqa: E402

TOML = HERE.parents[2] / "examples" / "risk.toml"

# Same values as benches/ffi.rs.
TXN = {
    "id": 7,
    "entity": 42,
    "timestamp_ms": 1767571200000,
    "amount": 42.5,
    "currency": "USD",
    "mcc": 5411,
    "country": "US",
    "channel": "pos",
    "device": 9,
    "features": {"txn_count_1h": 3.0, "hour": 14.0, "device_new": 0.0},
}
JSON = (
    '{"id": 7, "entity": 42, "timestamp_ms": 1767571200000, "amount": 42.5, "currency": "USD", '
    '"mcc": 5411, "country": "US", "channel": "pos", "device": 9, '
    '"features": {"txn_count_1h": 3, "hour": 14, "device_new": 0}}'
)


def run(label: str, call, n: int) -> None:
    for _ in range(min(n, 2000)):  # warm-up
        call()
    engine_ns = 0
    t0 = time.perf_counter_ns()
    for _ in range(n):
        engine_ns += call().total_ns
    wall = time.perf_counter_ns() - t0
    print(
        f"{label:<12} {wall / n / 1000:8.2f} µs/call   engine mean total_ns {engine_ns / n:8.0f}   "
        f"({n} calls)"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(f"risk {risk.version()}, {risk.library_path()}, engine {TOML}")
    with risk.RiskEngine.from_path(TOML) as engine:
        run("decide", lambda: engine.decide(TXN), n)
        run("decide_json", lambda: engine.decide_json(JSON), n)


if __name__ == "__main__":
    main()
