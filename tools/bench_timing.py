"""Timing shared by the Python peers of the criterion benches (`tools/bench_*.py`)."""
import statistics
import time


def per_call(f, calls, repeats):
    """Median over `repeats` of the mean time of `calls` calls `f(i)`, in nanoseconds."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        for i in range(calls):
            f(i)
        out.append((time.perf_counter_ns() - t) / calls)
    return statistics.median(out)
