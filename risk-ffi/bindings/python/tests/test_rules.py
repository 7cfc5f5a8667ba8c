"""The rule tier from Python: versions and rollback, shadow hits, warnings, explain."""

import pytest

import risk
from _util import load_config

RELOAD = 12  # RISK_ERR_RELOAD

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
    with risk.RiskEngine.from_toml(toml, base_dir=tmp_path) as e:
        d = e.decide(amount=500.0, currency="USD")
        assert d.rule_score == pytest.approx(0.5)
        assert d.action != "decline" and not d.hard_rule  # the shadow decline never decides
        rep = e.rules_report()
        assert rep["version"] == "v1"
        assert rep["backend"] in ("native", "interpreter")
        assert rep["shadow"] == [{"id": "WATCH", "hits": 1}]
        assert len(rep["warnings"]) == 1 and "NEVER" in rep["warnings"][0]
        assert "r.rules:4:6: warning" in rep["warnings"][0]

        (tmp_path / "r.rules").write_text(rules("v2", 1000))
        e.reload_rules()
        assert e.decide(amount=500.0, currency="USD").rule_score == 0.0
        assert [v["version"] for v in e.rules_report()["versions"]] == ["v1", "v2"]
        e.rollback_rules("v1")
        assert e.decide(amount=500.0, currency="USD").rule_score == pytest.approx(0.5)
        assert e.rules_report()["version"] == "v1"
        with pytest.raises(risk.RiskError) as err:
            e.rollback_rules("nope")
        assert err.value.code == RELOAD and "nope" in err.value.message
        assert e.rules_report()["version"] == "v1"

        x = e.explain_rules(amount=50.0, currency="USD")
        big = next(r for r in x["rules"] if r["id"] == "BIG")
        assert big["fired"] is False
        assert big["decided_by"]["condition"] == "amount > 100"
        assert big["decided_by"]["values"] == [["amount", {"num": 50.0}]]
        assert (big["decided_by"]["line"], big["decided_by"]["col"]) == (2, 17)


def test_rollback_without_history_is_refused(tmp_path):
    (tmp_path / "r.rules").write_text(rules("v1", 100))
    with risk.RiskEngine.from_toml(ENGINE, base_dir=tmp_path) as e:
        with pytest.raises(risk.RiskError) as err:
            e.rollback_rules("v1")
        assert err.value.code == RELOAD and "history" in err.value.message
