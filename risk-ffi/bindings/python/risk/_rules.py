"""The rule tier: versions and rollback, shadow hits, static-check warnings and explain:
the ``RiskEngine`` methods over ``risk_engine_rules_json``, ``risk_engine_rules_rollback``
and ``risk_engine_rules_explain`` (a mixin, so that ``_engine.py`` stays readable).

They need the engine's ``[rules.scorer]`` to be ``kind = "rules"`` (a rule file);
rollback needs ``history_dir`` there too. Every refusal raises :class:`risk.RiskError`
with ``RISK_ERR_RELOAD`` and the library's reason; the serving rules never change on one.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any, Mapping

from . import _ffi as F
from ._engine import _c_str, _check, _read_text, _txn_args, _Use

__all__ = ["RulesMixin"]

# First buffers: the rule report (a line per shadow rule, warning and version) and an
# explanation (a few hundred bytes per rule); both grow on RISK_ERR_BUFFER_TOO_SMALL.
_REPORT_CAP = 4096
_EXPLAIN_CAP = 1 << 16


class RulesMixin:
    """The rule tier of a live engine: report, rollback, explain."""

    def rules_report(self) -> dict:
        """The rule tier (``risk_engine_rules_json``) as a dict: the serving set's
        ``file``, ``version``, ``hash``, ``backend`` (``native`` or ``interpreter``) and
        ``rules`` count; ``shadow`` ([{``id``, ``hits``}] since the set was loaded);
        ``warnings`` (the static checks', ``file:line:col: warning: ...``); ``versions``
        (the recorded history, oldest first: ``seq``, ``version``, ``hash``, ``file``,
        ``loaded_at_ms``); reload ``stats``."""
        with _Use(self) as h:
            L = F.lib()
            return json.loads(_read_text(lambda buf, cap, n: L.risk_engine_rules_json(h, buf, cap, n),
                                         _REPORT_CAP, "rules report"))

    def rollback_rules(self, to: str) -> None:
        """Serves a recorded rule version again, atomically: ``to`` is a ``version`` name
        (the newest with it), a 16-digit hex content hash, or ``"previous"``. The rule file
        on disk is not touched (a later :meth:`reload_rules` serves it again)."""
        t = _c_str(to, "to")
        with _Use(self) as h:
            _check(F.lib().risk_engine_rules_rollback(h, t))

    def explain_rules(self, txn: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict:
        """Why each rule did or did not fire on a transaction (given as to :meth:`decide`),
        as a dict: ``version``, ``hash`` and ``rules``, in evaluation order, each with
        ``id``, ``fired``, ``counted``, ``disabled``, ``shadow``, ``hard``, ``decided_by``
        (the sub-condition that decided it: ``condition``, ``line``, ``col``, ``holds``,
        ``values`` as [name, value] pairs) and every ``steps`` evaluated. The features are
        the transaction's as given (entity state does not fill them here)."""
        a = _txn_args(txn, kwargs)
        with _Use(self) as h:
            L = F.lib()
            text = _read_text(
                lambda buf, cap, n: L.risk_engine_rules_explain(h, ctypes.byref(a.txn), buf, cap, n),
                _EXPLAIN_CAP, "rule explanation")
        return json.loads(text)
