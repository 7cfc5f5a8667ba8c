"""Python values to the library's arguments: C strings and buffers, checked integers and
floats, and a transaction mapping to a ``risk_txn`` (with the buffers it points into)."""

from __future__ import annotations

import ctypes
import math
import numbers
import operator
import os
from collections.abc import Mapping
from typing import Any

from . import _ffi as F
from ._errors import RiskTypeError, RiskValueError

TXN_FIELDS = (
    "id",
    "entity",
    "timestamp_ms",
    "amount",
    "currency",
    "mcc",
    "country",
    "channel",
    "device",
    "merchant",
    "ip",
    "email",
    "features",
)

_U64_MAX = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_U32_MAX = (1 << 32) - 1


# ----- argument conversion -----


def _c_str(value: Any, what: str, *, path: bool = False) -> bytes:
    """A str as NUL-terminated UTF-8 for a ``const char *`` argument.

    Lone surrogates are passed through as the (invalid) bytes they stand for, so the
    library itself reports ``RISK_ERR_UTF8``; an embedded NUL would silently cut the
    string in C, so it is refused here."""
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        try:
            b = value.encode("utf-8")
        except UnicodeEncodeError:
            # Paths from os.fsdecode carry undecodable bytes as surrogateescape.
            try:
                b = value.encode("utf-8", "surrogateescape" if path else "surrogatepass")
            except UnicodeEncodeError:
                b = value.encode("utf-8", "surrogatepass")
    elif path and isinstance(value, bytes):
        b = value
    else:
        raise RiskTypeError(f"{what} must be a str, not {type(value).__name__}")
    if b"\0" in b:
        raise RiskValueError(f"{what} contains a NUL character")
    return b


def _c_buf(value: Any, what: str) -> bytes:
    """str or bytes-like for a ``(const uint8_t *, size_t)`` argument (no NUL needed)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise RiskTypeError(f"{what} must be str or bytes, not {type(value).__name__}")


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    # pandas.NA / NaT and numpy NaN, without importing pandas.
    try:
        return bool(v != v)
    except (TypeError, ValueError):
        return type(v).__name__ in ("NAType", "NaTType")


def _int(v: Any, what: str, lo: int, hi: int, *, lenient_float: bool = False) -> int:
    if isinstance(v, bool):
        raise RiskTypeError(f"{what} must be an integer, not bool")
    try:
        i = operator.index(v)
    except TypeError:
        if lenient_float and isinstance(v, numbers.Real) and float(v).is_integer():
            i = int(v)
        else:
            raise RiskTypeError(f"{what} must be an integer, not {type(v).__name__}") from None
    if not lo <= i <= hi:
        raise RiskValueError(f"{what} {i} is out of range [{lo}, {hi}]")
    return i


def _float(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise RiskTypeError(f"{what} must be a number, not {type(v).__name__}")
    return float(v)


class _TxnArgs:
    """A risk_txn and the Python objects its pointers borrow from (kept alive with it)."""

    __slots__ = ("txn", "keep")

    def __init__(self) -> None:
        self.txn = F.risk_txn()
        self.keep: list = []


def _fill_txn(t: F.risk_txn, keep: list, d: Mapping[str, Any], *, lenient: bool = False) -> None:
    """Fills ``t`` from the mapping ``d`` (fields of TXN_FIELDS). ``lenient`` (DataFrame
    rows): integral floats are accepted for integer fields and missing values mean unset."""
    for k in d:
        if k not in TXN_FIELDS:
            raise RiskValueError(
                f"unknown transaction field {k!r} (fields: {', '.join(TXN_FIELDS)}; "
                "schema features go in 'features')",
                code=F.RISK_ERR_TRANSACTION,
            )

    def get(k):
        v = d.get(k)
        return None if (lenient and v is not None and _is_missing(v)) else v

    v = get("id")
    t.id = 0 if v is None else _int(v, "id", 0, _U64_MAX, lenient_float=lenient)
    v = get("entity")
    t.entity = 0 if v is None else _int(v, "entity", 0, _U64_MAX, lenient_float=lenient)
    v = get("timestamp_ms")
    t.timestamp_ms = 0 if v is None else _int(v, "timestamp_ms", _I64_MIN, _I64_MAX, lenient_float=lenient)
    v = d.get("amount")  # NaN passes through: the library rejects it and names the field
    t.amount = math.nan if v is None else _float(v, "amount")
    v = get("currency")
    if v is not None:  # NULL: the library answers RISK_ERR_NULL
        b = _c_str(v, "currency")
        keep.append(b)
        t.currency = b
    v = get("mcc")
    t.mcc = 0 if v is None else _int(v, "mcc", 0, 0xFFFF, lenient_float=lenient)
    for k in ("country", "channel", "merchant", "ip", "email"):
        v = get(k)
        if v is not None:
            b = _c_str(v, k)
            keep.append(b)
            setattr(t, k, b)
    v = get("device")
    t.device = 0 if v is None else _int(v, "device", 0, _U64_MAX, lenient_float=lenient)
    feats = d.get("features")
    if feats is not None:
        if not isinstance(feats, Mapping):
            raise RiskTypeError(f"features must be a mapping name -> value, not {type(feats).__name__}")
        n = len(feats)
        if n:
            arr = (F.risk_feature * n)()
            for i, (name, val) in enumerate(feats.items()):
                nb = _c_str(name, f"feature name {name!r}")
                keep.append(nb)
                f = arr[i]
                f.name = nb
                if isinstance(val, str):
                    cb = _c_str(val, f"feature {name!r}")
                    keep.append(cb)
                    f.category = cb
                    f.value = math.nan
                elif _is_missing(val):
                    f.value = math.nan
                elif isinstance(val, numbers.Real) or type(val).__name__ == "bool_":
                    f.value = float(val)
                else:
                    raise RiskTypeError(
                        f"feature {name!r} must be a number, a str (categorical) or None "
                        f"(missing), not {type(val).__name__}"
                    )
            keep.append(arr)
            t.features = ctypes.cast(arr, ctypes.POINTER(F.risk_feature))
            t.n_features = n


def _txn_args(txn: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> _TxnArgs:
    if txn is None:
        d = kwargs
    elif isinstance(txn, Mapping):
        d = {**txn, **kwargs} if kwargs else txn
    else:
        raise RiskTypeError(f"a transaction is a mapping of {', '.join(TXN_FIELDS)}, not {type(txn).__name__}")
    a = _TxnArgs()
    _fill_txn(a.txn, a.keep, d)
    return a
