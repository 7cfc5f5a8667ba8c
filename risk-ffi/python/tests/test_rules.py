"""The rule tier from Python: versions and rollback, shadow hits, warnings, explain
(ported from the ctypes binding's test_rules.py)."""

import pytest

import risk
from _util import load_config

ENGINE = load_config("rules_file.toml", RULES_FILE="r.rules")


def rules(version: str, k: float) -> str:
    return (
        f'version "{version}"\n'
        f"rule BIG {{ when amount > {k} score 0.5 }}\n"
        "rule WATCH { when amount > 100 decline hard shadow }\n"
        "rule NEVER { when amount > 10 && amount < 5 score 0.1 }\n"
    )


def test_rollback_shadow_hits_warnings_and_explain(tmp_path):
    (tmp_path / "r.rules").write_text(rules("v1", 100))
    toml = ENGINE + 'history_dir = "hist"\nhistory_keep = 5\n'
    with risk.Engine.from_toml(toml, base_dir=tmp_path) as e:
        d = e.decide({"amount": 500.0, "currency": "USD"})
        assert d.rule_score == pytest.approx(0.5)
        assert d.action != "decline" and not d.hard_rule  # the shadow decline never decides
        assert d.rules_fired == ["BIG"] and d.rules_shadow == ["WATCH"]
        rep = e.rules_report()
        assert rep["version"] == "v1"
        assert rep["backend"] in ("native", "interpreter")
        assert rep["rules"] == 3
        assert rep["shadow"] == [{"id": "WATCH", "hits": 1}]
        assert len(rep["warnings"]) == 1 and "NEVER" in rep["warnings"][0]
        assert "r.rules:4:6: warning" in rep["warnings"][0]

        (tmp_path / "r.rules").write_text(rules("v2", 1000))
        e.reload_rules()
        assert e.decide({"amount": 500.0, "currency": "USD"}).rule_score == 0.0
        assert [v["version"] for v in e.rules_report()["versions"]] == ["v1", "v2"]
        e.rollback_rules("v1")
        assert e.decide({"amount": 500.0, "currency": "USD"}).rule_score == pytest.approx(0.5)
        assert e.rules_report()["version"] == "v1"
        with pytest.raises(risk.ConfigError) as err:
            e.rollback_rules("nope")
        assert isinstance(err.value, risk.RiskError) and "nope" in err.value.message
        assert e.rules_report()["version"] == "v1"

        x = e.explain_rules({"amount": 50.0, "currency": "USD"})
        assert x["version"] == "v1"
        big = next(r for r in x["rules"] if r["id"] == "BIG")
        assert big["fired"] is False
        assert big["decided_by"]["condition"] == "amount > 100"
        assert big["decided_by"]["values"] == [["amount", {"num": 50.0}]]
        assert (big["decided_by"]["line"], big["decided_by"]["col"]) == (2, 17)


def test_a_bad_reload_is_refused_and_the_serving_rules_stay(tmp_path):
    (tmp_path / "r.rules").write_text(rules("v1", 100))
    with risk.Engine.from_toml(ENGINE, base_dir=tmp_path) as e:
        (tmp_path / "r.rules").write_text("garbage\n")
        with pytest.raises(risk.ConfigError) as err:
            e.reload_rules()
        assert "r.rules:1:1" in err.value.message
        assert e.rules_report()["version"] == "v1"
        assert e.decide({"amount": 500.0, "currency": "USD"}).rule_score == pytest.approx(0.5)


def test_rollback_without_history_is_refused(tmp_path):
    (tmp_path / "r.rules").write_text(rules("v1", 100))
    with risk.Engine.from_toml(ENGINE, base_dir=tmp_path) as e:
        with pytest.raises(risk.ConfigError) as err:
            e.rollback_rules("v1")
        assert "history" in err.value.message
        assert e.rules_report()["version"] == "v1"


def test_rule_calls_without_a_rule_file_are_not_configured():
    with risk.Engine.from_toml(load_config("rules_only.toml")) as e:
        for call in (e.rules_report, lambda: e.rollback_rules("v1"),
                     lambda: e.explain_rules({"amount": 1.0})):
            with pytest.raises(risk.NotConfiguredError) as err:
                call()
            assert "rule file" in err.value.message
