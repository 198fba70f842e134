"""Kubernetes quantities ("500m", "30Gi", 72) as integer milli-units, and back."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal, Overflow

from kubernetes import utils as _k8s_utils

_k8s_parse_quantity: Callable[[str], Decimal] = _k8s_utils.parse_quantity

# apimachinery's quantity grammar (the pattern the CRDs carry). kubernetes.utils.parse_quantity
# alone is laxer: Decimal() also takes "NaN", " 1 ", "1_000" and the suffix "K".
_QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))?"
)
_BINARY_SUFFIXES = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
# Kueue counts a quantity in an int64 (resource.Quantity.Value()), and apimachinery's
# ParseQuantity caps binary-suffixed quantities there: GKE's TPU docs write `999999Pi` for
# "no limit". A larger decimal one (1e308 GPUs) is refused: nothing could count it, and the
# queue page once overflowed a float on it.
MAX_UNITS = 2**63 - 1


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; `field` is where it was read."""

    def __init__(self, field: str, value: object, reason: str = "is not a valid quantity") -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {value!r} {reason}")


def parse_quantity(value: str | int | float, *, field: str, bounded: bool = True) -> int:
    """Milli-units of a non-negative quantity, rounded up like apimachinery's MilliValue().

    Every quantity Accelplane reads (requests, limits, quotas) must be >= 0, as Kubernetes and
    Kueue validate, so a negative one is rejected here too; and at most MAX_UNITS (binary ones
    capped there) unless not `bounded` (sums Accelplane computed itself).
    """
    amount = _decimal(value, field)
    if amount < 0:
        raise QuantityError(field, value, "must not be negative")
    # Compared before scaling: 1e10000000 * 1000 overflows the decimal context.
    if bounded and amount > MAX_UNITS:
        if not str(value).endswith("i"):
            raise QuantityError(field, value, f"is too large: at most {MAX_UNITS}")
        amount = Decimal(MAX_UNITS)
    return math.ceil(amount.scaleb(3))


def parse_weight(value: str | int | float, *, field: str) -> float:
    """A non-negative quantity as a float, as Kueue reads weights (`AsApproximateFloat64`):
    "0.5", "500m" and 2 alike. At most MAX_UNITS, binary suffixes included."""
    amount = _decimal(value, field)
    if amount < 0:
        raise QuantityError(field, value, "must not be negative")
    if amount > MAX_UNITS:
        raise QuantityError(field, value, f"is too large: at most {MAX_UNITS}")
    return float(amount)


def format_weight(weight: float) -> str | int:
    """A weight as a manifest writes it: 1 stays an integer, 0.5 is "0.5"."""
    return int(weight) if weight.is_integer() else repr(weight)


def _decimal(value: object, field: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(field, value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(field, value)
        # repr() is the shortest exact spelling: 0.1 stays 0.1, not 0.1000000000000000055...
        value = repr(value)
    text = str(value)
    if not _QUANTITY.fullmatch(text):
        raise QuantityError(field, value)
    try:
        return _k8s_parse_quantity(text)
    except Overflow:  # 10**999999 with an E suffix: past even Decimal's exponents
        raise QuantityError(field, value, f"is too large: at most {MAX_UNITS}") from None
    except (ValueError, ArithmeticError):
        raise QuantityError(field, value) from None


def is_byte_resource(resource: str) -> bool:
    return (
        resource in _BYTE_RESOURCES
        or resource.endswith(("memory", "storage"))
        or resource.startswith("hugepages-")
    )


def format_quantity(resource: str, milli: int) -> str:
    """The canonical string: "6", "500m", and for byte resources the largest exact binary suffix."""
    if milli < 0:
        return "-" + format_quantity(resource, -milli)
    whole, fraction = divmod(milli, 1000)
    if fraction:
        return f"{milli}m"
    if is_byte_resource(resource) and whole:
        for suffix, size in _BINARY_SUFFIXES:
            if whole % size == 0:
                return f"{whole // size}{suffix}"
    return str(whole)
