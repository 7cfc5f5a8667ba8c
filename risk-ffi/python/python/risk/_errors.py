"""The exceptions of ``risk``: one base class, one subclass per kind of failure.

Every exception the package raises for a refused configuration, transaction or input is a
:class:`RiskError`; each carries ``kind`` (the class's short name) and ``code`` (the Rust
error's stable numeric code, 0 when there is none). Where Python code would expect a
built-in class, the exception is one too: an :class:`InputError` is a ``ValueError``, a
:class:`RiskTypeError` a ``TypeError``.

>>> try:
...     engine.decide({"amount": -1.0})
... except risk.DecideError as e:
...     print(e.kind, e.code, e)
"""

from __future__ import annotations


class RiskError(Exception):
    """Base class of every error ``risk`` raises."""

    kind = "risk"

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __reduce__(self):
        return (type(self), (self.message, self.code))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, RiskError)
        return (self.message, self.code) == (other.message, other.code)

    def __hash__(self) -> int:
        return hash((type(self), self.message, self.code))


class ConfigError(RiskError, ValueError):
    """A configuration (``risk.toml``, a model, a rule file) refused at load."""

    kind = "config"


class DecideError(RiskError, ValueError):
    """A transaction the engine refused: a bad field, a missing required feature."""

    kind = "decide"


class InputError(RiskError, ValueError):
    """Input data refused before deciding: a missing column, a bad argument."""

    kind = "input"


class RiskTypeError(RiskError, TypeError):
    """A value or column of the wrong type."""

    kind = "type"


class ClosedError(RiskError):
    """The engine was closed, or was created in the parent of a ``fork``."""

    kind = "closed"


class StateError(RiskError):
    """Entity state refused an operation (labels, lists, snapshots)."""

    kind = "state"


class DeployError(RiskError):
    """A deploy refused: the validation gate, a candidate that does not load, a deploy of
    the same target in progress, nothing to promote or roll back. What serves is unchanged."""

    kind = "deploy"


class AuditError(RiskError):
    """The audit log failed: a flush that did not become durable, a log that cannot be read."""

    kind = "audit"


class NotConfiguredError(RiskError, LookupError):
    """The engine has no such part: no ``[audit]`` log, no ``[monitor]``, no ``[state]``,
    no rule file."""

    kind = "not_configured"


__all__ = [
    "RiskError",
    "ConfigError",
    "DecideError",
    "InputError",
    "RiskTypeError",
    "ClosedError",
    "StateError",
    "DeployError",
    "AuditError",
    "NotConfiguredError",
]
