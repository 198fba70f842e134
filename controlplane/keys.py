"""Secret keys: checked when given, generated once into var/ on one machine.

`make run` (and every `manage.py` command of the embedded mode) needs no key: the first
process writes a random one to var/secret-key and var/encryption-key, readable by their owner
only, and every later process on the machine reads the same. `make stack` asks for them with
`python -m controlplane.keys secret-key` (or `encryption-key`), which prints the key.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet

# Django's own criteria for a key it does not warn about (check --deploy, security.W009).
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_CHARACTERS = 5
# Keys published in this repository's history, its compose file and Django's templates.
PUBLIC_SECRET_KEYS = frozenset(
    {"insecure-embedded-key-set-SECRET_KEY-in-production", "change-me", "changeme", "secret"}
)


def new_secret_key() -> str:
    return secrets.token_urlsafe(MIN_SECRET_KEY_LENGTH)


def new_encryption_key() -> str:
    return Fernet.generate_key().decode()


def secret_key_problem(key: str) -> str:
    """Why `key` must not sign anything in production, or "" when it may."""
    if not key:
        return "is not set"
    if key in PUBLIC_SECRET_KEYS or key.startswith("django-insecure-"):
        return "is a published value: anyone can sign sessions and checkpoint tokens with it"
    if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < MIN_SECRET_KEY_CHARACTERS:
        return (
            f"is too short: at least {MIN_SECRET_KEY_LENGTH} random characters "
            f"of {MIN_SECRET_KEY_CHARACTERS} or more kinds"
        )
    return ""


def local_key(path: Path, generate: Callable[[], str]) -> str:
    """The key in `path`; the first process to ask writes a new one there, owner-only."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # mkstemp creates the file with mode 0600; a link publishes it whole, and only if no
        # other process (make run starts four at once) published one first.
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(descriptor, "w") as file:
                file.write(generate())
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    return path.read_text().strip()


def main(argv: list[str]) -> int:
    generators = {"secret-key": new_secret_key, "encryption-key": new_encryption_key}
    if len(argv) != 1 or argv[0] not in generators:
        print(f"usage: python -m controlplane.keys {{{','.join(generators)}}}", file=sys.stderr)  # noqa: T201
        return 2
    var_dir = Path(os.environ.get("ACCELPLANE_VAR_DIR", Path(__file__).parents[1] / "var"))
    print(local_key(var_dir / argv[0], generators[argv[0]]))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
