from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from workloads import scenarios


class Command(BaseCommand):
    help = "Run scenario files (shared/scenarios/FORMAT.md); exit 0 only if every expectation held."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", type=Path)
        parser.add_argument("--json", action="store_true", help="one JSON report per line")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0, interactive=False)
        failed = []
        for path in options["files"]:
            try:
                report = scenarios.run(path)
            except scenarios.ScenarioError as error:
                raise CommandError(str(error)) from error
            if options["json"]:
                self.stdout.write(json.dumps(report.as_json()))
            else:
                self._print(path, report)
            if not report.ok:
                failed.append(report.scenario)
        if failed:
            raise CommandError(f"failed: {', '.join(failed)}")

    def _print(self, path: Path, report: scenarios.Report) -> None:
        mark = self.style.SUCCESS("PASS") if report.ok else self.style.ERROR("FAIL")
        self.stdout.write(
            f"{mark} {report.scenario} ({path}): {len(report.steps)} steps, "
            f"{len(report.events)} events"
        )
        for step in report.steps:
            if step.get("error"):
                self.stdout.write(f"  step {step['index']} {step['action']}: {step['error']}")
            for failure in step["failures"]:
                self.stdout.write(
                    f"  step {step['index']} at {step['at']}: {failure['object']} "
                    f"{failure['field']}: expected {failure['expected']!r}, "
                    f"got {failure['actual']!r}"
                )
