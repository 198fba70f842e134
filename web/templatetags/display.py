"""How the pages show quantities and times: one filter each, used by every template.

`{{ value|quantity:resource }}`: a Kubernetes quantity for people: at most three significant
digits, binary units for bytes, "unlimited" for byte quotas no cluster could have (the TPU
seed's `999999Pi` means "no limit"). `{{ value|clock }}`: a UTC time as HH:MM:SS when it is
today, with its date otherwise, the full time on hover; static/web/live.js does the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import SafeString

from workloads.quantities import QuantityError, is_byte_resource, parse_quantity

register = template.Library()

# An exbibyte is more memory than any cluster has: a quota at least this large is "no limit".
UNLIMITED_BYTES = 2**60
_BINARY_UNITS = (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
# Counts (CPUs, GPUs, chips) are exact below this; above, in SI units.
EXACT_COUNT_BELOW = 10_000
_SI_UNITS = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def _digits(number: Decimal) -> str:
    """At most three significant digits, but whole numbers up to 1023 as they are."""
    if number >= 100:
        return str(round(number))
    text = f"{number:.3g}"
    return format(Decimal(text).normalize(), "f")


def human_quantity(resource: str, value: str | int | None) -> str:
    """`value` (a Kubernetes quantity) of `resource` as people read it; "—" for none."""
    if value is None or value == "":
        return "—"
    try:
        amount = Decimal(parse_quantity(value, field=resource, bounded=False)).scaleb(-3)
    except QuantityError:
        return str(value)
    if is_byte_resource(resource):
        if amount >= UNLIMITED_BYTES:
            return "unlimited"
        return _in_units(amount, _BINARY_UNITS, 1024)
    if amount >= EXACT_COUNT_BELOW:
        return _in_units(amount, _SI_UNITS, 1000)
    return _digits(amount)


def _in_units(amount: Decimal, units: tuple[tuple[str, int], ...], base: int) -> str:
    """In the largest unit it reaches; units go from the largest down."""
    for index, (suffix, size) in enumerate(units):
        if amount >= size:
            # 999.9k rounds to 1000k: that is 1M.
            if round(amount / size) >= base and index > 0:
                suffix, size = units[index - 1]
            return f"{_digits(amount / size)}{suffix}"
    return _digits(amount)


@register.filter
def quantity(value: str | int | None, resource: str) -> str:
    return human_quantity(resource, value)


def clock_text(moment: datetime, today: datetime) -> tuple[str, str]:
    """(what the page shows, the full time for its title), both UTC."""
    moment = moment.astimezone(UTC)
    full = moment.strftime("%Y-%m-%d %H:%M:%S")
    shown = full[11:] if moment.date() == today.astimezone(UTC).date() else full
    return shown, f"{full} UTC"


@register.filter
def clock(value: datetime | str | None) -> SafeString | str:
    """A <time> element; an event's `at` is an ISO string, a row's a datetime."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    if moment is None:
        return "—"
    shown, full = clock_text(moment, timezone.now())
    iso = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, full, shown)


@register.filter
def duration(value: timedelta | None) -> str:
    """How long, to the two largest units: "45s", "3m 20s", "1h 02m", "2d 03h"; "—" for none."""
    if value is None:
        return "—"
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"
