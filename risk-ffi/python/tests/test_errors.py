"""Bad inputs: each raises the right risk exception, with the Rust error's code and a
message naming what is wrong (ported from the ctypes binding's test_errors.py)."""

from __future__ import annotations

import json
import math
import pickle

import pytest

import risk
from _util import EXAMPLES, base_txn, load_config, no_deadline_toml

# The Rust errors' stable codes (risk_core::error).
INVALID_FIELD, FEATURES = 201, 202  # DecideError::InvalidField, DecideError::Features
CONFIG_INVALID, CONFIG_IO, CONFIG_PARSE, CONFIG_SCORER = 401, 402, 403, 405


@pytest.fixture(scope="module")
def shared_engine():
    """One engine for these read-only tests: the example configuration with the largest
    fast-tier deadline the engine allows (60 s), so which tier decides does not depend on
    how loaded the machine is."""
    with risk.Engine.from_toml(no_deadline_toml(), base_dir=EXAMPLES) as e:
        yield e


def raises(cls: type, code: int | None, fn, *args, **kwargs) -> risk.RiskError:
    """``fn(*args, **kwargs)`` raises ``cls`` (a risk.RiskError) with ``code`` (None: any)
    and a message, which str() shows."""
    with pytest.raises(cls) as ei:
        fn(*args, **kwargs)
    e = ei.value
    assert isinstance(e, risk.RiskError)
    assert type(e) is cls, f"expected {cls.__name__}, got {type(e).__name__}: {e}"
    if code is not None:
        assert e.code == code, f"expected code {code}, got {e.code}: {e}"
    assert e.message and e.message.strip(), "no message"
    assert e.message in str(e)
    assert e.kind == cls.kind
    return e


@pytest.mark.parametrize(
    "over, code, needle",
    [
        ({"amount": math.nan}, INVALID_FIELD, "amount"),
        ({"amount": -1.0}, INVALID_FIELD, "amount"),
        ({"currency": "ZZZZ"}, INVALID_FIELD, "ZZZZ"),
        ({"channel": "carrier-pigeon"}, INVALID_FIELD, "carrier-pigeon"),
        ({"no_such_field": 1.0}, FEATURES, "no_such_field"),
        ({"no_such_field": None}, FEATURES, "no_such_field"),
        ({"timestamp_ms": -1}, INVALID_FIELD, "timestamp_ms"),
    ],
    ids=["nan-amount", "negative-amount", "bad-currency", "bad-channel", "unknown-feature",
         "unknown-missing-feature", "negative-timestamp"],
)
def test_engine_rejects(shared_engine, over, code, needle):
    e = raises(risk.DecideError, code, shared_engine.decide, base_txn(2, **over))
    assert isinstance(e, ValueError)
    assert needle in e.message


def test_a_missing_currency_is_usd(shared_engine):
    """The C ABI refused a transaction without a currency; the package takes USD (a
    currency column is never required), and None is the same as leaving it out."""
    usd = shared_engine.decide(base_txn(2))
    for t in (base_txn(2, currency=None), {k: v for k, v in base_txn(2).items() if k != "currency"}):
        d = shared_engine.decide(t)
        assert (d.txn, d.action, d.score, d.reasons) == (2, usd.action, usd.score, usd.reasons)


def test_text_that_is_not_unicode_is_an_input_error(shared_engine):
    """A lone surrogate cannot be UTF-8: refused as a risk.InputError naming the field
    (not a bare UnicodeEncodeError that does not say which key held it)."""
    e = raises(risk.InputError, 0, shared_engine.decide, base_txn(2, currency="US\udcffD"))
    assert isinstance(e, ValueError) and "currency" in e.message


def test_negative_keys_are_their_64_bit_twos_complement(shared_engine):
    # Spark's and the JVM's longs carry uint64 hashes so (decide_batch's columns alike)
    d = shared_engine.decide({"id": 1, "entity": -5, "device": -1, "amount": 1.0})
    assert d.entity == 2**64 - 5


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"currency": 840}, "currency"),
        ({"country": b"US"}, "country"),
        ({"amount": "42.5"}, "amount"),
        ({"id": 1.5}, "id"),
        ({"hour": [1]}, "hour"),
        ({"hour": object()}, "hour"),
        ({"mcc": "5411"}, "mcc"),
        ({"merchant": 77}, "merchant"),
        ({"text": "memo"}, "text"),
    ],
)
def test_python_type_errors(shared_engine, over, needle):
    e = raises(risk.RiskTypeError, 0, shared_engine.decide, base_txn(2, **over))
    assert isinstance(e, TypeError) and needle in e.message


@pytest.mark.parametrize("nested", [{"hour": 1.0}, [("hour", 1.0)]])
def test_a_nested_features_mapping_is_refused(shared_engine, nested):
    """Features are top-level keys now: a C-ABI-style ``features`` entry is refused as an
    unknown feature, by name, never read as a mapping or ignored."""
    e = raises(risk.DecideError, FEATURES, shared_engine.decide, base_txn(2, features=nested))
    assert "features" in e.message


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"mcc": 70000}, "mcc"),       # must not wrap silently into a u16
        ({"id": -1}, "id"),
        ({"entity": 1 << 64}, "entity"),
        ({"device": 1 << 64}, "device"),
    ],
)
def test_python_range_errors(shared_engine, over, needle):
    e = raises(risk.InputError, 0, shared_engine.decide, base_txn(2, **over))
    assert isinstance(e, ValueError) and needle in e.message and "out of range" in e.message


def test_a_nul_in_a_code_is_refused(shared_engine):
    """A NUL inside the country code: refused (not cut short to "U")."""
    e = raises(risk.DecideError, INVALID_FIELD, shared_engine.decide, base_txn(2, country="U\0S"))
    assert isinstance(e, ValueError) and "country" in e.message


@pytest.mark.parametrize("value", [1e39, -3.5e38, 1.7976931348623157e308])
def test_feature_outside_f32_range(shared_engine, value):
    """Features are stored as f32: a finite value outside its range is refused, not made inf."""
    e = raises(risk.DecideError, INVALID_FIELD, shared_engine.decide, base_txn(2, hour=value))
    assert "hour" in e.message
    assert shared_engine.decide(base_txn(2, hour=3.4e38)).txn == 2


def test_keyword_arguments_are_not_a_transaction(shared_engine):
    """decide takes one dict: the C binding's ``decide(**fields)`` form is a TypeError."""
    with pytest.raises(TypeError):
        shared_engine.decide(base_txn(2), hour=3)
    with pytest.raises(TypeError):
        shared_engine.decide(**base_txn(2))


@pytest.mark.parametrize("value", [[("amount", 1.0)], 42, '{"amount": 1}', None])
def test_decide_not_a_mapping(shared_engine, value):
    with pytest.raises(TypeError):
        shared_engine.decide(value)


def test_transaction_keys_must_be_str(shared_engine):
    e = raises(risk.RiskTypeError, 0, shared_engine.decide, {"amount": 1.0, 7: 1.0})
    assert "keys" in e.message


# Documents as json.loads gives them (decide_json is gone: decode, then decide).
@pytest.mark.parametrize(
    "text, cls, code, needle",
    [
        ("[]", TypeError, None, None),
        ('{"amount": 1, "currency": "USD", "bogus": 1}', risk.DecideError, FEATURES, "bogus"),
        ('{"amount": "x", "currency": "USD"}', risk.RiskTypeError, 0, "amount"),
        ('{"amount": 1, "currency": "USD", "hour": [1]}', risk.RiskTypeError, 0, "hour"),
        ('{"amount": 1, "currency": "USD", "hour": {"a": 1}}', risk.RiskTypeError, 0, "hour"),
        ('{"amount": 1, "currency": "ZZZZ"}', risk.DecideError, INVALID_FIELD, "ZZZZ"),
        ('{"amount": 1, "currency": "USD", "mcc": 70000}', risk.InputError, 0, "mcc"),
        ('{"currency": "USD"}', risk.InputError, 0, "amount"),
    ],
)
def test_bad_json_documents(shared_engine, text, cls, code, needle):
    doc = json.loads(text)
    if cls is TypeError:
        with pytest.raises(TypeError):
            shared_engine.decide(doc)
        return
    e = raises(cls, code, shared_engine.decide, doc)
    assert needle in e.message


def test_config_errors(tmp_path):
    e = raises(risk.ConfigError, CONFIG_IO, risk.Engine.from_toml, tmp_path / "nonexistent.toml")
    assert "nonexistent.toml" in e.message
    e = raises(risk.ConfigError, CONFIG_IO, risk.Engine.from_toml, str(tmp_path / "nonexistent.toml"))
    assert "nonexistent.toml" in e.message
    bad_band = load_config("rules_only.toml") + "[gray]\nband = [0.7, 0.3]\n"
    e = raises(risk.ConfigError, CONFIG_INVALID, risk.Engine.from_toml, bad_band)
    assert "gray.band" in e.message
    e = raises(risk.ConfigError, CONFIG_PARSE, risk.Engine.from_toml, "this is [not toml\n")
    assert "line 1" in e.message
    raises(risk.RiskTypeError, 0, risk.Engine.from_toml, 12)
    with pytest.raises(TypeError):
        risk.Engine.from_toml(load_config("rules_only.toml"), base_dir=12)


def test_reload_without_rule_file():
    with risk.Engine.from_toml(load_config("rules_only.toml")) as e:
        assert e.decide({"amount": 1.0, "currency": "USD"}).score == pytest.approx(0.1)
        err = raises(risk.NotConfiguredError, 0, e.reload_rules)
        assert isinstance(err, LookupError) and "rule file" in err.message


def test_from_toml_with_base_dir():
    # (the 60 s fast deadline: the model loaded through base_dir is what decides, whatever
    # the machine's load, so the tier can be pinned)
    text = no_deadline_toml()
    with risk.Engine.from_toml(text, base_dir=EXAMPLES) as e:
        assert e.decide(base_txn(1)).tier == "fast"
    # With another base_dir the relative paths do not resolve. One relative path at a time,
    # so that the message must name that file (not whichever the engine happens to load
    # first).
    repo = EXAMPLES.parent.resolve()
    rules_rel, model_rel = "../risk-rules/rules/default.rules", "../testdata/models/xgb_fraud.json"
    assert f'path = "{rules_rel}"' in text and f'path = "{model_rel}"' in text
    only_model_rel = text.replace(f'path = "{rules_rel}"', f'path = "{repo / rules_rel[3:]}"')
    e = raises(risk.ConfigError, CONFIG_SCORER, risk.Engine.from_toml, only_model_rel, base_dir="/")
    assert "xgb_fraud.json" in e.message
    only_rules_rel = text.replace(f'path = "{model_rel}"', f'path = "{repo / model_rel[3:]}"')
    e = raises(risk.ConfigError, CONFIG_SCORER, risk.Engine.from_toml, only_rules_rel, base_dir="/")
    assert "default.rules" in e.message
    # both relative: refused too
    raises(risk.ConfigError, None, risk.Engine.from_toml, text, base_dir="/")


ALL_ERRORS = [risk.RiskError, risk.ConfigError, risk.DecideError, risk.InputError,
              risk.RiskTypeError, risk.ClosedError, risk.StateError, risk.DeployError,
              risk.AuditError, risk.NotConfiguredError]


def test_error_is_picklable_and_comparable():
    t = risk.RiskTypeError("x must be a str")
    t2 = pickle.loads(pickle.dumps(t))
    assert isinstance(t2, TypeError) and t2.code == 0 and t2.message == t.message
    for cls in ALL_ERRORS:
        x = pickle.loads(pickle.dumps(cls("why", 7)))
        assert type(x) is cls and (x.message, x.code, str(x)) == ("why", 7, "why")
    # Equal when of one class with one message and code (as the C binding's were).
    e = risk.RiskError("bad", 5)
    assert pickle.loads(pickle.dumps(e)) == e
    assert risk.DecideError("bad", 201) == risk.DecideError("bad", 201)
    assert risk.DecideError("bad", 201) != risk.DecideError("bad", 202)
    assert risk.DecideError("bad", 201) != risk.InputError("bad", 201)


SECRET = "Py-Secret-Value-Never-Shown-9"


@pytest.mark.parametrize(
    "extra, key",
    [
        # a password in a Redis URL, and in its own key (unreachable server: a config error)
        (f'\n[state]\n[state.redis]\nurl = "redis://risk:{SECRET}@127.0.0.1:1/"\ntimeout_ms = 200\n',
         "state.redis"),
        (f'\n[state]\n[state.redis]\nurl = "redis://127.0.0.1:1/"\nusername = "risk"\n'
         f'password = "{SECRET}"\ntimeout_ms = 200\n', "state.redis"),
        # a pseudonymisation key too short to be one
        (f'\n[privacy]\nkey = "{SECRET[:12]}"\n', "privacy.key"),
    ],
)
def test_no_secret_reaches_an_exception(extra, key):
    """The ConfigError of a failed build names the key or server, never the secret."""
    with pytest.raises(risk.ConfigError) as ei:
        risk.Engine.from_toml(load_config("rules_only.toml") + extra)
    text = str(ei.value) + repr(ei.value) + ei.value.message + repr(ei.value.args)
    assert SECRET[:12] not in text, text
    assert key in ei.value.message
