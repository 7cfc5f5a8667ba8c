"""Bad inputs: each raises RiskError with the right code and a message."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

import risk
from _util import base_txn, load_config, no_deadline_toml


def raises(code: int, fn, *args, **kwargs) -> risk.RiskError:
    with pytest.raises(risk.RiskError) as ei:
        fn(*args, **kwargs)
    e = ei.value
    assert e.code == code, f"expected {risk.RESULT_NAMES[code]}, got {e}"
    assert e.name == risk.RESULT_NAMES[code]
    assert e.message and e.message.strip(), "no message"
    assert e.name in str(e) and e.message in str(e)
    return e


T, INVALID, JSON, NULL, UTF8 = 5, 3, 9, 1, 2


@pytest.mark.parametrize(
    "over, code, needle",
    [
        ({"amount": math.nan}, T, "amount"),
        ({"amount": -1.0}, T, "amount"),
        ({"currency": "ZZZZ"}, T, "ZZZZ"),
        ({"channel": "carrier-pigeon"}, T, "carrier-pigeon"),
        ({"features": {"no_such_field": 1.0}}, T, "no_such_field"),
        ({"features": {"no_such_field": None}}, T, "no_such_field"),
        ({"currency": None}, NULL, "currency"),
        ({"currency": "US\udcffD"}, UTF8, "currency"),  # lone surrogate: invalid UTF-8 in C
    ],
    ids=["nan-amount", "negative-amount", "bad-currency", "bad-channel", "unknown-feature",
         "unknown-missing-feature", "no-currency", "invalid-utf8"],
)
def test_library_rejects(shared_engine, over, code, needle):
    e = raises(code, shared_engine.decide, base_txn(2, **over))
    assert needle in e.message


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"currency": 840}, "currency"),
        ({"country": b"US"}, "country"),
        ({"amount": "42.5"}, "amount"),
        ({"id": 1.5}, "id"),
        ({"features": {"hour": [1]}}, "hour"),
        ({"features": [("hour", 1.0)]}, "features"),
    ],
)
def test_python_type_errors(shared_engine, over, needle):
    e = raises(INVALID, shared_engine.decide, base_txn(2, **over))
    assert isinstance(e, TypeError) and needle in e.message


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"mcc": 70000}, "mcc"),       # would wrap silently in a uint16_t
        ({"id": -1}, "id"),
        ({"device": 1 << 64}, "device"),
        ({"country": "U\0S"}, "NUL"),  # would be cut short in C
    ],
)
def test_python_range_errors(shared_engine, over, needle):
    e = raises(INVALID, shared_engine.decide, base_txn(2, **over))
    assert isinstance(e, ValueError) and needle in e.message


@pytest.mark.parametrize("value", [1e39, -3.5e38, 1.7976931348623157e308])
def test_feature_outside_f32_range(shared_engine, value):
    """Features are stored as f32: a finite value outside its range is refused, not made inf."""
    e = raises(T, shared_engine.decide, base_txn(2, features={"hour": value}))
    assert "hour" in e.message
    assert shared_engine.decide(base_txn(2, features={"hour": 3.4e38})).txn == 2


def test_too_many_features(shared_engine):
    feats = {f"f{i}": 1.0 for i in range(4097)}  # RISK_MAX_FEATURES + 1
    e = raises(INVALID, shared_engine.decide, base_txn(2, features=feats))
    assert "4096" in e.message


def test_unknown_top_level_field(shared_engine):
    e = raises(T, shared_engine.decide, base_txn(2), hour=3)
    assert "hour" in e.message


def test_decide_not_a_mapping(shared_engine):
    raises(INVALID, shared_engine.decide, [("amount", 1.0)])


@pytest.mark.parametrize(
    "text, code",
    [
        ("{", JSON),
        ("[]", JSON),
        ('{"amount": 1}', JSON),
        ('{"amount": 1, "currency": "USD", "bogus": 1}', JSON),
        ('{"amount": "x", "currency": "USD"}', JSON),
        ('{"amount": 1, "currency": "USD", "features": {"hour": [1]}}', JSON),
        ('{"amount": 1, "currency": "ZZZZ"}', T),
        ('{"amount": 1, "currency": "USD", "mcc": 70000}', T),
        (b'{"amount": 1, "currency": "\xff"}', UTF8),  # invalid UTF-8 reaches C as bytes
    ],
)
def test_bad_json(shared_engine, text, code):
    raises(code, shared_engine.decide_json, text)


def test_json_mapping_not_serialisable(shared_engine):
    raises(JSON, shared_engine.decide_json, {"amount": math.nan, "currency": "USD"})
    raises(JSON, shared_engine.decide_json, {"amount": 1, "currency": "USD", "features": {"x": object()}})


def test_json_wrong_type(shared_engine):
    e = raises(INVALID, shared_engine.decide_json, 42)
    assert isinstance(e, TypeError)


def test_oversized_json(shared_engine):
    limit = 1 << 24  # RISK_MAX_INPUT
    doc = '{"amount": 1, "currency": "USD"}'
    text = doc + " " * (limit + 1 - len(doc))
    assert len(text.encode()) == limit + 1
    e = raises(INVALID, shared_engine.decide_json, text)
    assert str(limit) in e.message
    # exactly at the limit is accepted (and valid JSON: trailing whitespace)
    assert shared_engine.decide_json(text[:-1]).txn == 0


def test_config_errors(tmp_path):
    e = raises(4, risk.RiskEngine.from_path, tmp_path / "nonexistent.toml")
    assert "nonexistent.toml" in e.message
    bad_band = load_config("rules_only.toml") + "[gray]\nband = [0.7, 0.3]\n"
    e = raises(4, risk.RiskEngine.from_toml, bad_band)
    assert "gray.band" in e.message
    raises(4, risk.RiskEngine.from_toml, "this is [not toml")
    raises(INVALID, risk.RiskEngine.from_toml, 12)
    raises(INVALID, risk.RiskEngine.from_path, 12)


def test_reload_without_rule_file():
    good = load_config("rules_only.toml")
    with risk.RiskEngine.from_toml(good) as e:
        assert e.decide(amount=1.0, currency="USD").score == pytest.approx(0.1)
        raises(12, e.reload_rules)


def test_from_toml_with_base_dir(example_toml):
    # (the 60 s fast deadline: the model loaded through base_dir is what decides, whatever
    # the machine's load, so the tier can be pinned)
    text = no_deadline_toml(example_toml)
    with risk.RiskEngine.from_toml(text, base_dir=example_toml.parent) as e:
        assert e.decide(base_txn(1)).tier == "fast"
    # With another base_dir the relative paths do not resolve. One relative path at a time,
    # so that the message must name that file (not whichever the library happens to load
    # first).
    repo = example_toml.parent.parent.resolve()
    rules_rel, model_rel = "../risk-rules/rules/default.rules", "../testdata/models/xgb_fraud.json"
    assert f'path = "{rules_rel}"' in text and f'path = "{model_rel}"' in text
    only_model_rel = text.replace(f'path = "{rules_rel}"', f'path = "{repo / rules_rel[3:]}"')
    e = raises(4, risk.RiskEngine.from_toml, only_model_rel, base_dir="/")
    assert "xgb_fraud.json" in e.message
    only_rules_rel = text.replace(f'path = "{model_rel}"', f'path = "{repo / model_rel[3:]}"')
    e = raises(4, risk.RiskEngine.from_toml, only_rules_rel, base_dir="/")
    assert "default.rules" in e.message
    # both relative: refused too
    raises(4, risk.RiskEngine.from_toml, text, base_dir="/")


def test_error_is_picklable_and_comparable():
    import pickle

    e = risk.RiskError(5, "bad")
    assert pickle.loads(pickle.dumps(e)) == e
    t = risk.RiskTypeError("x must be a str")
    t2 = pickle.loads(pickle.dumps(t))
    assert isinstance(t2, TypeError) and t2.code == 3 and t2.message == t.message


def test_missing_library_fails_loudly(tmp_path):
    """A library that is not there is an error at first use, naming the variable, and
    makes this test suite itself fail (never skip)."""
    env = {**os.environ, "RISK_FFI_LIB_DIR": str(tmp_path)}
    binding = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = "import risk\ntry:\n    risk.version()\nexcept risk.RiskLibraryNotFound as e:\n    print(e)\n    raise SystemExit(3)\n"
    p = subprocess.run([sys.executable, "-c", code], cwd=binding, env=env, capture_output=True, text=True)
    assert p.returncode == 3 and "RISK_FFI_LIB_DIR" in p.stdout, p.stdout + p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=binding, env=env, capture_output=True, text=True,
    )
    assert p.returncode != 0
    assert "does not exist" in p.stdout + p.stderr


SECRET = "Py-Secret-Value-Never-Shown-9"


@pytest.mark.parametrize(
    "extra",
    [
        # a password in a Redis URL, and in its own key (unreachable server: a config error)
        f'\n[state]\n[state.redis]\nurl = "redis://risk:{SECRET}@127.0.0.1:1/"\ntimeout_ms = 200\n',
        f'\n[state]\n[state.redis]\nurl = "redis://127.0.0.1:1/"\nusername = "risk"\n'
        f'password = "{SECRET}"\ntimeout_ms = 200\n',
        # a pseudonymisation key too short to be one
        f'\n[privacy]\nkey = "{SECRET[:12]}"\n',
    ],
)
def test_no_secret_reaches_an_exception(extra):
    """The RiskError of a failed build names the key or server, never the secret."""
    with pytest.raises(risk.RiskError) as ei:
        risk.RiskEngine.from_toml(load_config("rules_only.toml") + extra)
    text = str(ei.value) + repr(ei.value) + ei.value.message
    assert SECRET[:12] not in text, text
