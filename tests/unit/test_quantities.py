from decimal import Decimal

import pytest

from workloads.quantities import QuantityError, format_quantity, parse_quantity

GI = 2**30


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        ("30Gi", 30 * GI * 1000),
        ("288Gi", 288 * GI * 1000),
        ("1k", 1_000_000),
        ("1e3", 1_000_000),
        ("1.5", 1500),
        (".5", 500),
        ("0", 0),
        (72, 72_000),
        (8, 8000),
        (0.5, 500),
        (0.1, 100),
    ],
)
def test_parses_quantities_to_milli_units(value, milli):
    assert parse_quantity(value, field="f") == milli


def test_rounds_sub_milli_values_up_like_milli_value():
    assert parse_quantity("0.0001", field="f") == 1
    assert parse_quantity("1n", field="f") == 1


def test_uses_the_kubernetes_client_parser(monkeypatch):
    import workloads.quantities as quantities

    seen = []
    monkeypatch.setattr(quantities, "_k8s_parse_quantity", lambda t: seen.append(t) or Decimal(1))
    assert parse_quantity("3Gi", field="f") == 1000
    assert seen == ["3Gi"]


def test_invalid_quantity_error_names_the_field_and_the_value():
    field = "spec.template.spec.containers[0].resources.requests.cpu"
    with pytest.raises(QuantityError) as caught:
        parse_quantity("two", field=field)
    assert str(caught.value) == f"{field}: 'two' is not a valid quantity"
    assert caught.value.field == field
    assert caught.value.value == "two"


@pytest.mark.parametrize(
    "value",
    [
        "two",
        "",
        " 1",
        "1 ",
        "1_000",
        "NaN",
        "Infinity",
        "1K",
        "1ki",
        "2e",
        "1.2.3",
        "Gi",
        True,
        None,
        [1],
        float("nan"),
    ],
)
def test_rejects_what_kubernetes_does_not_accept_as_a_quantity(value):
    with pytest.raises(QuantityError, match="is not a valid quantity"):
        parse_quantity(value, field="f")


def test_rejects_negative_quantities():
    with pytest.raises(QuantityError, match="'-1' must not be negative"):
        parse_quantity("-1", field="f")


def test_quantity_error_is_a_value_error():
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize(
    ("resource", "milli", "text"),
    [
        ("cpu", 6000, "6"),
        ("cpu", 72_000, "72"),
        ("cpu", 500, "500m"),
        ("cpu", 0, "0"),
        ("nvidia.com/gpu", 6000, "6"),
        ("memory", 288 * GI * 1000, "288Gi"),
        ("memory", 1536 * 2**20 * 1000, "1536Mi"),
        ("memory", 1000 * 1000, "1000"),
        ("memory", 500, "500m"),
        ("ephemeral-storage", 200 * GI * 1000, "200Gi"),
        ("example.com/fast-storage", 2**40 * 1000, "1Ti"),
        ("hugepages-2Mi", 2**21 * 1000, "2Mi"),
        ("memory", 2**60 * 1000, "1Ei"),
    ],
)
def test_formats_canonical_kubernetes_strings(resource, milli, text):
    assert format_quantity(resource, milli) == text


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ("memory", "288Gi"),
        ("cpu", "6"),
        ("cpu", "500m"),
        ("google.com/tpu", "999999"),
        ("ephemeral-storage", "30Gi"),
        ("cpu", "220"),
    ],
)
def test_format_inverts_parse_for_canonical_forms(resource, text):
    assert format_quantity(resource, parse_quantity(text, field="f")) == text


def test_formats_non_canonical_input_canonically():
    assert format_quantity("memory", parse_quantity("1024Mi", field="f")) == "1Gi"
    assert format_quantity("cpu", parse_quantity("2000m", field="f")) == "2"


def test_binary_quantities_past_int64_are_capped_as_apimachinery_does():
    """GKE's TPU docs set a memory quota of 999999Pi to mean "no limit"; ParseQuantity caps
    binary-suffixed quantities at 2^63-1, and Kueue counts that."""
    assert parse_quantity("999999Pi", field="f") == (2**63 - 1) * 1000
    assert parse_quantity("999999999999999999999Ti", field="f") == (2**63 - 1) * 1000
    assert format_quantity("memory", parse_quantity("8Ei", field="f")) == str(2**63 - 1)


@pytest.mark.parametrize(
    "value", ["1e308", 1e308, "1e5000", "1e10000000", "9223372036854775808", "1" + "0" * 30 + "E"]
)
def test_rejects_decimal_quantities_nothing_could_count(value):
    with pytest.raises(QuantityError, match="is too large: at most 9223372036854775807"):
        parse_quantity(value, field="f")


def test_unbounded_parsing_reads_sums_past_int64():
    assert parse_quantity("1" + "0" * 30, field="f", bounded=False) == 10**33
