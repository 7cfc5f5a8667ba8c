"""Shared fixtures. The library comes from RISK_FFI_LIB_DIR (default <repo>/target/release);
when it is missing the whole run stops with an error: these tests never skip."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BINDING = HERE.parent
REPO = BINDING.parents[2]
EXAMPLE_TOML = REPO / "examples" / "risk.toml"

sys.path.insert(0, str(BINDING))
os.environ.setdefault("RISK_FFI_LIB_DIR", str(REPO / "target" / "release"))
os.environ.setdefault("MPLBACKEND", "Agg")

LIB_DIR = Path(os.environ["RISK_FFI_LIB_DIR"])
LIB = LIB_DIR / "librisk_ffi.so"

def pytest_configure(config):
    if not LIB.is_file():
        raise pytest.UsageError(
            f"\n\n*** risk-ffi Python binding tests: {LIB} does not exist. ***\n"
            f"Build it (cargo build --release -p risk-ffi) or point RISK_FFI_LIB_DIR at the "
            f"directory holding librisk_ffi.so (now {os.environ['RISK_FFI_LIB_DIR']!r}).\n"
        )
    if not EXAMPLE_TOML.is_file():
        raise pytest.UsageError(f"example config {EXAMPLE_TOML} is missing")
    import matplotlib

    matplotlib.use("Agg")


@pytest.fixture(scope="session")
def example_toml() -> Path:
    return EXAMPLE_TOML


@pytest.fixture(scope="session")
def shared_engine(example_toml):
    """One engine for the read-only tests (never closed or shut down by them): the example
    config with the largest fast-tier deadline the library allows (60 s) instead of 15 ms,
    so that which tier decides does not depend on how loaded the machine is (relative
    paths resolve via base_dir)."""
    import risk

    from _util import no_deadline_toml

    e = risk.RiskEngine.from_toml(no_deadline_toml(example_toml), base_dir=example_toml.parent)
    yield e
    e.close()


@pytest.fixture
def engine(example_toml):
    """A fresh engine per test, for tests that close or shut it down."""
    import risk

    with risk.RiskEngine.from_path(example_toml) as e:
        yield e
