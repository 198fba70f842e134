"""A flood of malformed manifests: every one is answered 4xx naming a problem, never a 5xx,
and a refused one stores nothing but its own `workload.rejected` event."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.models import Event
from tests.support import deployment, job, row_counts, tpu_jobset

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI does not flake on a new one
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
VALID = [yaml.safe_load(text) for text in (job(), deployment(replicas=2), tpu_jobset())]
CONTENT_TYPES = ["application/yaml", "application/json"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a parsed manifest (keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*prefix, index))
    return found


def replaced(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = list(node) if isinstance(node, list) else dict(node)
    copy[path[0]] = replaced(node[path[0]], path[1:], value)
    return copy


@st.composite
def mutated_manifests(draw: st.DrawFn) -> tuple[str, str]:
    """A valid Job, Deployment or JobSet with one value somewhere replaced by anything."""
    manifest = draw(st.sampled_from(VALID))
    path = draw(st.sampled_from(paths(manifest)))
    body = replaced(manifest, path, draw(values))
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    if content_type == "application/json":
        return json.dumps(body, allow_nan=True), content_type
    return yaml.safe_dump(body, allow_unicode=True), content_type


@st.composite
def truncated_manifests(draw: st.DrawFn) -> tuple[str, str]:
    """A valid manifest's text cut short, or with a stretch of it garbled."""
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    manifest = draw(st.sampled_from(VALID))
    text = json.dumps(manifest) if content_type == "application/json" else yaml.safe_dump(manifest)
    start = draw(st.integers(0, len(text) - 1))
    end = draw(st.integers(start, len(text)))
    return text[:start] + draw(st.text(max_size=10)) + text[end:], content_type


def post(client: Any, text: str | bytes, content_type: str) -> Any:
    return client.post("/api/v1/workloads?namespace=llm", text, content_type=content_type)


def check_answer(response: Any, before: dict[str, int]) -> None:
    """4xx with a detail and nothing but the refusal stored; or an apply that was valid."""
    assert response.status_code < 500, response.content
    if response.status_code < 400:
        return  # the mutation happened to leave a valid manifest: applied as kubectl would
    assert response.json().get("detail"), response.content
    after = row_counts()
    rejected = after.pop("events.Event") - before.pop("events.Event")
    assert after == before
    assert rejected <= 1
    if rejected:
        assert Event.objects.latest("id").kind == "workload.rejected"


@FUZZ
@given(
    body=st.text(max_size=200) | st.binary(max_size=200),
    content_type=st.sampled_from(CONTENT_TYPES),
)
def test_random_text_and_bytes_are_refused(alice, body, content_type):
    before = row_counts()
    response = post(alice, body, content_type)
    assert 400 <= response.status_code < 500, response.content
    check_answer(response, before)


@FUZZ
@given(manifest=mutated_manifests() | truncated_manifests())
def test_damaged_manifests_are_refused_or_applied_never_a_500(alice, manifest):
    """A value replaced anywhere, or the text cut or garbled: a 4xx, or (when the damage
    left a valid manifest) an apply as kubectl would do it."""
    text, content_type = manifest
    before = row_counts()
    check_answer(post(alice, text, content_type), before)
