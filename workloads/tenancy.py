"""What a team may submit: workloads into the namespaces it writes to, nothing else."""

from __future__ import annotations

from collections.abc import Callable

from teams.services import Scope
from workloads.manifests import CLUSTER_SCOPED, QUEUE_KINDS, Document


class SubmissionRefused(PermissionError):
    """A document the caller may not apply (403), with the reason they can act on."""


def submission_check(caller: Scope) -> Callable[[Document], None]:
    """Teams apply workloads into their own namespaces; Kueue objects are for admins."""

    def authorize(doc: Document) -> None:
        if caller.everything:
            return
        if doc.kind in CLUSTER_SCOPED or doc.kind in QUEUE_KINDS:
            raise SubmissionRefused(
                f"{doc.kind} {doc.name}: Kueue and cluster-scoped objects are managed by "
                "platform admins"
            )
        if not caller.can_write(doc.namespace or ""):
            raise SubmissionRefused(
                f"{doc.kind} {doc.name}: you may not submit to namespace {doc.namespace!r}"
            )

    return authorize
