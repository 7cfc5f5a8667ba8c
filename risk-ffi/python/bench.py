"""Benchmark of the risk Python package against the Rust engine and the ctypes binding it
replaced, in one run (issue [19]; figures in BENCHMARKS.md [19]).

    risk-ffi/python/.venv/bin/python risk-ffi/python/bench.py [--rows 1000000]

1. ``Engine.decide`` from Python on the example engine (rules + XGBoost with TreeSHAP),
   row by row, against ``Engine::decide`` called in Rust on the same rows (the engine's
   own time: transactions built before the clock starts): the difference is what Python
   adds to a call.
2. ``Engine.decide_batch`` of ``--rows`` raw synthetic rows through the example engine with
   entity state (velocity features computed in event order, one thread), against the Rust
   engine's ``decide_batch`` on the same prebuilt rows; each side with a fresh engine.
   Also the stateless engine on 2 threads. Peak RSS of the process.
3. The ctypes binding's ``RiskEngine.decide_frame`` (``risk-ffi/bindings/python``, over
   ``librisk_ffi.so``), taken from git at ``--ctypes-rev`` (the last commit that had it)
   and run in a subprocess with it first on ``sys.path`` (both packages are named
   ``risk``), on ``--ctypes-rows`` rows, against ``decide_batch`` on the same rows.

Each measurement is the best of ``--rounds`` rounds (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

import risk

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def state_toml() -> str:
    base = (EXAMPLES / "risk.toml").read_text()
    seq = (EXAMPLES / "risk_sequence.toml").read_text()
    return base + "\n" + seq[seq.index("[state]") : seq.index("[[state.sequences]]")]


def mappings(frame: pa.Table) -> list[dict]:
    cols = [c for c in frame.column_names if c not in ("is_fraud", "scenario", "time")]
    data = {c: frame.column(c).to_pylist() for c in cols}
    ms = frame.column("time").cast(pa.int64()).to_pylist()
    out = []
    for i in range(frame.num_rows):
        m = {c: data[c][i] for c in cols}
        m["time"] = ms[i]
        out.append({k: v for k, v in m.items() if not (isinstance(v, float) and math.isnan(v))})
    return out


def best(f, rounds: int) -> float:
    return min(f() for _ in range(rounds))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


CTYPES_SCRIPT = r"""
import sys, time, pandas as pd
sys.path.insert(0, sys.argv[1])
import risk
frame = pd.read_parquet(sys.argv[2])
best = None
with risk.RiskEngine.from_path(sys.argv[3]) as e:
    for _ in range(int(sys.argv[4])):
        t0 = time.perf_counter()
        out = e.decide_frame(frame)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
print(best)
"""


def ctypes_seconds(frame: pa.Table, rounds: int, rev: str) -> float | None:
    lib = REPO / "target/release/librisk_ffi.so"
    if not lib.exists():
        print(f"  ctypes binding: missing {lib} (cargo build --release -p risk-ffi)")
        return None
    df = frame.drop_columns(["is_fraud", "scenario"]).to_pandas()
    df["timestamp_ms"] = frame.column("time").cast(pa.int64()).to_numpy()
    df = df.drop(columns=["time"])
    for c in ("currency", "country", "channel"):
        df[c] = df[c].astype(str)
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "rows.parquet"
        df.to_parquet(path)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "risk-ffi/bindings/python/risk"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
        env = dict(os.environ, RISK_FFI_LIB_DIR=str(lib.parent))
        out = subprocess.run(
            [sys.executable, "-c", CTYPES_SCRIPT, str(pathlib.Path(d) / "risk-ffi/bindings/python"), str(path),
             str(EXAMPLES / "risk.toml"), str(rounds)],
            env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--decide-rows", type=int, default=20_000)
    ap.add_argument("--ctypes-rows", type=int, default=20_000)
    ap.add_argument("--ctypes-rev", default="8754f1a", help="a commit that has risk-ffi/bindings/python")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"risk {risk.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

    # 1. one decide at a time
    frame = risk.synth(a.decide_rows, seed=21)
    maps = mappings(frame)
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        for m in maps[:2000]:
            e.decide(m)  # warm-up

        def py_loop() -> float:
            t0 = time.perf_counter_ns()
            for m in maps:
                e.decide(m)
            return (time.perf_counter_ns() - t0) / len(maps)

        py_ns = best(py_loop, a.rounds)
        rust_ns = best(lambda: e._rust_time(frame, "decide") / frame.num_rows, a.rounds)
    print(f"1. decide, {a.decide_rows} rows, example engine: Python {py_ns / 1e3:.2f} µs/call, "
          f"Rust {rust_ns / 1e3:.2f} µs/call, Python adds {(py_ns - rust_ns) / 1e3:.2f} µs")

    # 2. a million rows with entity state
    t0 = time.perf_counter()
    raw = risk.synth(a.rows, seed=22, raw=True)
    gen_s = time.perf_counter() - t0
    rss_before = rss_mib()
    text = state_toml()

    def py_batch() -> float:
        with risk.Engine.from_toml(text, base_dir=EXAMPLES) as e:
            t0 = time.perf_counter_ns()
            out = e.decide_batch(raw)
            dt = time.perf_counter_ns() - t0
            assert out.num_rows == raw.num_rows
            return dt

    def rust_batch() -> float:
        with risk.Engine.from_toml(text, base_dir=EXAMPLES) as e:
            return e._rust_time(raw, "batch")

    py_b = best(py_batch, a.rounds)
    rust_b = best(rust_batch, a.rounds)
    rss_after = rss_mib()
    print(f"2. decide_batch, {a.rows} raw rows (synth {gen_s:.1f} s), rules + XGBoost + entity state: "
          f"Python {py_b / 1e9:.2f} s ({py_b / a.rows:.0f} ns/row), Rust decide_batch "
          f"{rust_b / 1e9:.2f} s ({rust_b / a.rows:.0f} ns/row): ratio {py_b / rust_b:.3f}")
    print(f"   peak RSS {rss_after:.0f} MiB (after synth {rss_before:.0f} MiB; "
          f"input {raw.nbytes / 2**20:.0f} MiB)")
    full = risk.synth(a.rows, seed=22)
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        for threads in (1, 2):
            s = best(lambda: _timed(lambda: e.decide_batch(full, threads=threads)), a.rounds)
            print(f"   stateless engine, features given, {threads} thread(s): {s:.2f} s "
                  f"({s * 1e9 / a.rows:.0f} ns/row)")

    # 3. against the ctypes binding
    small = risk.synth(a.ctypes_rows, seed=23)
    ct = ctypes_seconds(small, a.rounds, a.ctypes_rev)
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        nb = best(lambda: _timed(lambda: e.decide_batch(small, threads=1)), a.rounds)
    msg = f"3. {a.ctypes_rows} rows, example engine: decide_batch (1 thread) {nb * 1e6 / a.ctypes_rows:.2f} µs/row"
    if ct is not None:
        msg += f", ctypes decide_frame {ct * 1e6 / a.ctypes_rows:.1f} µs/row: {ct / nb:.0f}x faster"
    print(msg)


def _timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
