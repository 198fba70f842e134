"""Property-based run of every operation in /api/schema/: no 500s, no response off its schema.

Bounded (a few examples per operation) so that it fits in CI; run it longer with
`SCHEMATHESIS_EXAMPLES=200 pytest tests/api/test_schemathesis.py`.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
import yaml
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.media_types import YAML_MEDIA_TYPES
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from teams import services as teams
from tests.support import deployment, job
from workloads import services


@schemathesis.deserializer(*YAML_MEDIA_TYPES)
def yaml_stream(ctx, response):
    """The Kueue export is a stream of documents, described in the schema as their array."""
    return list(yaml.safe_load_all(response.content))


EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "25"))


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """Django closes connections after each WSGI request; inside a test transaction that
    would lose the test's data, so detach it as Django's own test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(tenants):
    # Live time, as the API runs: a what-if settles the simulation up to now.
    services.apply(
        tenants,
        deployment() + "---\n" + job(),
        source="seed.yaml",
        namespace="llm",
        now=timezone.now(),
    )
    _, token = teams.issue_token(User.objects.create_user("fuzzer", is_staff=True))
    return token


def operations():
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    return [result.ok() for result in schema.get_all_operations()]


pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("operation", operations(), ids=lambda op: op.label)
def test_no_server_error_and_every_response_matches_the_schema(operation, admin_token):
    headers = {"Authorization": f"Bearer {admin_token}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def call(case):
        case.call_and_validate(
            headers=headers,
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        )

    call()
