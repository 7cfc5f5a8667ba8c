"""RiskError and its subclasses, the library's error codes turned into them, and reading a
text the library writes into a caller's buffer."""

from __future__ import annotations

import ctypes

from . import _ffi as F

# ----- errors -----


class RiskError(Exception):
    """A failure reported by the library (or caught before calling it, with the code the
    library would use). ``code`` is the ``risk_result`` number, ``name`` its C name
    (``"RISK_ERR_TRANSACTION"``), ``message`` the text of ``risk_last_error()``."""

    def __init__(self, code: int, message: str = ""):
        self.code = int(code)
        self.name = F.RESULT_NAMES.get(self.code, f"RISK_ERR_UNKNOWN_{self.code}")
        self.message = message or F.RESULT_DESCRIPTIONS.get(self.code, "unknown error")
        super().__init__(self.code, self.message)

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RiskError)
            and (self.code, self.message) == (other.code, other.message)
        )

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class RiskTypeError(RiskError, TypeError):
    """An argument of the wrong Python type (code ``RISK_ERR_INVALID``); also a TypeError."""

    def __init__(self, message: str, code: int = F.RISK_ERR_INVALID):
        super().__init__(code, message)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class RiskValueError(RiskError, ValueError):
    """An argument out of range for its C type; also a ValueError."""

    def __init__(self, message: str, code: int = F.RISK_ERR_INVALID):
        super().__init__(code, message)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class AuditError(RiskError):
    """``RISK_ERR_AUDIT`` (14): the audit log failed: a flush timed out, the log is closed
    (the engine was shut down), or a write failed; ``message`` says which. A RiskError
    like any other (``except RiskError`` catches it too)."""

    def __init__(self, code: int = F.RISK_ERR_AUDIT, message: str = ""):
        super().__init__(code, message)


class DeployError(RiskError):
    """``RISK_ERR_DEPLOY`` (15): a deploy, promote or rollback was refused; ``message`` says
    why (the validation gate and which check, the candidate failed to load or warm up, a
    schema mismatch, a deploy of the target already in progress, nothing to promote or roll
    back to). What serves is unchanged: a refused candidate never serves. A RiskError like
    any other (``except RiskError`` catches it too)."""

    def __init__(self, code: int = F.RISK_ERR_DEPLOY, message: str = ""):
        super().__init__(code, message)


class StateError(RiskError):
    """``RISK_ERR_STATE`` (16): entity state refused the call; ``message`` says why (a
    label for an unknown or evicted transaction, or dated before it, or with no label
    feature; an unknown list or a value that cannot be one of its keys; a bad list file,
    named with its line; a snapshot that could not be written; an engine without a
    ``[state]`` section). A RiskError like any other (``except RiskError`` catches it too)."""

    def __init__(self, code: int = F.RISK_ERR_STATE, message: str = ""):
        super().__init__(code, message)


# Codes raised as a RiskError subclass (every other code is a plain RiskError).
_ERROR_CLASSES: dict[int, type] = {
    F.RISK_ERR_AUDIT: AuditError,
    F.RISK_ERR_DEPLOY: DeployError,
    F.RISK_ERR_STATE: StateError,
}


def _error(code: int, message: str = "") -> RiskError:
    """The exception for ``code``: its subclass where it has one, else RiskError."""
    return _ERROR_CLASSES.get(code, RiskError)(code, message)


def _last_error(code: int) -> RiskError:
    """The error for ``code`` with the calling thread's last message (read at once: it is
    valid only until this thread's next call into the library)."""
    raw = F.lib().risk_last_error()
    msg = raw.decode("utf-8", "replace") if raw else ""
    return _error(code, msg)


def _check(code: int) -> None:
    if code != F.RISK_OK:
        raise _last_error(code)


def _read_text(call, cap: int, what: str) -> bytes:
    """The text of a ``(buf, cap, *len)`` function, ``call(buf, cap, byref(len))``: tries
    ``cap`` bytes first, then what the library says it needs, with slack (the text can
    grow between two calls: counters move, a live engine appends to its log)."""
    n = ctypes.c_size_t(0)
    for _ in range(16):
        buf = ctypes.create_string_buffer(cap)
        r = call(buf, cap, ctypes.byref(n))
        if r == F.RISK_ERR_BUFFER_TOO_SMALL:
            cap = n.value + 1 + max(256, n.value // 8)
            continue
        _check(r)
        return buf.raw[: n.value]
    raise RiskError(F.RISK_ERR_BUFFER_TOO_SMALL, f"{what} kept growing while being read")
