"""Query parameter values as kube-apiserver parses them; a value it cannot parse is a 400 naming the
parameter and what it takes."""

from __future__ import annotations

from sim.apiserver.errors import ApiError


def flag(query: dict[str, str], name: str) -> bool | None:
    """A boolean query parameter as Go's strconv.ParseBool reads it; None when absent."""
    if name not in query:
        return None
    value = query[name]
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False", ""):
        return False
    raise ApiError(400, f"{name}={value[:32]!r}: not a boolean (use true or false)")


def whole_number(name: str, value: str, unit: str = "") -> int:
    """A parameter that is a whole number >= 0 (of `unit`, as the message says)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        of = f" of {unit}" if unit else ""
        raise ApiError(400, f"{name}={value[:32]!r}: a whole number{of} >= 0")
    return number
