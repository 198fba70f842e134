"""`manage.py createteam TEAM --namespace NS --user USER`: prints the user's API token last."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from teams import services
from teams.models import Membership


class Command(BaseCommand):
    help = "Create a team, its namespaces and members if missing; print a new API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("team")
        parser.add_argument("--namespace", action="append", default=[], dest="namespaces")
        parser.add_argument("--user", required=True)
        parser.add_argument(
            "--role", choices=Membership.Role.values, default=Membership.Role.SUBMITTER
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            team = services.ensure_team(
                options["team"],
                namespaces=options["namespaces"],
                members=[(options["user"], options["role"])],
            )
        except services.TeamError as error:
            raise CommandError(str(error)) from None
        user = User.objects.get(username=options["user"])
        _, token = services.issue_token(user, name=f"createteam {team.name}")
        namespaces = ", ".join(team.namespaces.values_list("name", flat=True)) or "none"
        self.stdout.write(
            f"team {team.name} (namespaces: {namespaces}); {user.username} is {options['role']}"
        )
        self.stdout.write(token)
