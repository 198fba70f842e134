"""Who may see and change what: team scopes, API tokens, and creating teams."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Prefetch, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from controlplane.prepared import Param, Prepared
from events.audit import json_time, record_audit
from teams.models import ApiToken, Membership, Team, TeamNamespace

TOKEN_PREFIX = "apl_"
# Writing last_used_at on every request would turn each read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# Where `prefetch_members` puts a listed team's members (with their users).
MEMBERS_PREFETCHED = "prefetched_members"


class TeamError(ValueError):
    """A tenancy change refused, with the reason a person can act on."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The namespaces a user may read and write; platform admins see every namespace."""

    everything: bool
    readable: frozenset[str]
    writable: frozenset[str]

    def can_read(self, namespace: str) -> bool:
        return self.everything or namespace in self.readable

    def can_write(self, namespace: str) -> bool:
        return self.everything or namespace in self.writable

    def filter(self, queryset: QuerySet, field: str = "namespace") -> QuerySet:  # type: ignore[type-arg]
        if self.everything:
            return queryset
        return queryset.filter(Q(**{f"{field}__in": self.readable}))


def scope_of(user: User | AnonymousUser) -> Scope:
    if not user.is_authenticated:
        return Scope(False, frozenset(), frozenset())
    if user.is_staff:
        return Scope(True, frozenset(), frozenset())
    read_with_token: Scope | None = getattr(user, _SCOPE_READ_WITH_TOKEN, None)
    if read_with_token is not None:
        return read_with_token
    return _scope(_NAMESPACES_OF.rows(user=user.pk))


def _scope(rows: Iterable[tuple[str | None, str | None]]) -> Scope:
    """A team member's scope from (namespace, role) rows; a row without a namespace (a team
    that has none, a user in no team) gives nothing."""
    readable, writable = set(), set()
    for name, role in rows:
        if name is not None:
            readable.add(name)
            if role == Membership.Role.SUBMITTER:
                writable.add(name)
    return Scope(False, frozenset(readable), frozenset(writable))


# Built once (controlplane/prepared.py), as the token's look-up below: every request of a team
# member asks them, and the ORM took longer to build them than the database to answer.
_NAMESPACES_OF = Prepared(
    lambda: (
        TeamNamespace.objects.filter(team__memberships__user_id=Param("user"))
        .order_by()  # sets: the model's ordering would sort for nothing
        .values_list("name", "team__memberships__role")
    )
)


def request_scope(request: HttpRequest) -> Scope:
    """`scope_of` the request's user, worked out once per request."""
    cached: Scope | None = getattr(request, "_accelplane_scope", None)
    if cached is None:
        cached = scope_of(request.user)
        request._accelplane_scope = cached  # type: ignore[attr-defined]
    return cached


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@transaction.atomic
def issue_token(
    user: User, name: str = "api", *, actor: User | None = None
) -> tuple[ApiToken, str]:
    """A new token for `user`: the row, and the token itself, which is never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        user=user, name=name, prefix=token[: len(TOKEN_PREFIX) + 6], digest=_digest(token)
    )
    record_audit(actor, "created", f"ApiToken/{row.prefix}", after={"name": row.name})
    return row, token


_TOKEN_FIELDS = [field.attname for field in ApiToken._meta.concrete_fields]
_USER_FIELDS = [field.attname for field in User._meta.concrete_fields]
_USER_END = len(_TOKEN_FIELDS) + len(_USER_FIELDS)
# Set on a user read with its token: its scope, read in the same statement.
_SCOPE_READ_WITH_TOKEN = "_accelplane_scope"
# The token's row and its user's, as `select_related("user")` reads them, on each row of the
# user's namespaces and roles (outer joins: one row of NULLs for a user in no team), which
# every request of a team member asks next (`scope_of`): one round trip, not two. Unordered
# (the digest is unique, and the model's ordering would sort for nothing).
_LIVE_TOKEN = Prepared(
    lambda: (
        ApiToken.objects.filter(digest=Param("digest"), revoked_at__isnull=True)
        .order_by()
        .values_list(
            *_TOKEN_FIELDS,
            *(f"user__{name}" for name in _USER_FIELDS),
            "user__memberships__team__namespaces__name",
            "user__memberships__role",
        )
    )
)


def authenticate(token: str, now: datetime | None = None) -> ApiToken | None:
    """The live token row for `token`, or None (unknown, revoked, or its user deactivated)."""
    found = _LIVE_TOKEN.rows(digest=_digest(token))
    if not found:
        return None
    row = ApiToken.from_db(DEFAULT_DB_ALIAS, _TOKEN_FIELDS, found[0][: len(_TOKEN_FIELDS)])
    row.user = User.from_db(
        DEFAULT_DB_ALIAS, _USER_FIELDS, found[0][len(_TOKEN_FIELDS) : _USER_END]
    )
    if not row.user.is_active:
        return None
    setattr(row.user, _SCOPE_READ_WITH_TOKEN, _scope(r[_USER_END:] for r in found))
    now = now or timezone.now()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row


@transaction.atomic
def revoke(row: ApiToken, now: datetime | None = None, *, actor: User | None = None) -> None:
    if row.revoked_at is None:
        row.revoked_at = now or timezone.now()
        row.save(update_fields=["revoked_at"])
    record_audit(actor, "revoked", f"ApiToken/{row.prefix}", before={"name": row.name})


@transaction.atomic
def ensure_team(
    name: str,
    *,
    namespaces: list[str],
    members: Sequence[tuple[str, str]] = (),
    actor: User | None = None,
) -> Team:
    """Create what is missing: the team, its namespaces, its members (username, role).

    A namespace already owned by another team is refused: a namespace has one owner."""
    team, created = Team.objects.get_or_create(name=name)
    before = None if created else audited_team(team)
    for namespace in namespaces:
        owner = TeamNamespace.objects.filter(name=namespace).select_related("team").first()
        if owner is None:
            TeamNamespace.objects.create(team=team, name=namespace)
        elif owner.team_id != team.pk:
            raise TeamError(f"namespace {namespace!r} already belongs to team {owner.team.name!r}")
    for username, role in members:
        if role not in Membership.Role.values:
            raise TeamError(f"role {role!r} is not one of {', '.join(Membership.Role.values)}")
        user, _ = User.objects.get_or_create(username=username)
        Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    action = "created" if created else "configured"
    record_audit(actor, action, f"Team/{team.name}", before=before, after=audited_team(team))
    return team


@transaction.atomic
def delete_team(team: Team, *, actor: User | None = None) -> None:
    """The team, its namespaces and memberships go; its namespaces' workloads stay."""
    before = audited_team(team)
    team.delete()
    record_audit(actor, "deleted", f"Team/{before['name']}", before=before)


def prefetch_members() -> Prefetch[str, QuerySet[Membership], str]:
    """For a list of teams shown with `audited_team`: their members in one query."""
    queryset = Membership.objects.select_related("user")
    return Prefetch("memberships", queryset=queryset, to_attr=MEMBERS_PREFETCHED)


def audited_team(team: Team) -> dict[str, Any]:
    """A team as the API and its audit events show it."""
    members = getattr(team, MEMBERS_PREFETCHED, None)
    if members is None:
        members = team.memberships.select_related("user")
    return {
        "id": team.pk,
        "name": team.name,
        "namespaces": [n.name for n in team.namespaces.all()],
        "members": [{"username": m.user.username, "role": m.role} for m in members],
        "created_at": json_time(team.created_at),
    }
