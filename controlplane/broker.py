"""The embedded stack's Celery broker: kombu's SQLAlchemy transport on a SQLite file in var/.

Nothing to install or run beside the processes themselves, and a message is a row written in
one transaction: a consumer never sees half of one (kombu's filesystem transport could hand a
worker an empty file, kombu issue #1551). Two changes to kombu's transport:
- it keeps every delivered message (visible = 0) forever; here a trigger deletes it as it is
  taken, so the file stays small however long the stack runs;
- it passes every transport option to `create_engine`, so its poll interval (1 s) cannot be
  set there; a worker or beat idle between messages polls every `polling_interval` instead.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import sqlalchemy
from sqlalchemy import text

DELETE_DELIVERED = """
CREATE TRIGGER IF NOT EXISTS kombu_message_delete_delivered
AFTER UPDATE OF visible ON kombu_message WHEN NEW.visible = 0
BEGIN DELETE FROM kombu_message WHERE id = NEW.id; END
"""


class Channel(sqlalchemy.Channel):
    def _open(self) -> Any:
        # Once a channel (kombu opens it for the channel's first session), after kombu has
        # created the tables.
        engine, session = super()._open()
        with engine.begin() as connection:
            connection.execute(text(DELETE_DELIVERED))
        return engine, session


class Transport(sqlalchemy.Transport):
    Channel = Channel
    polling_interval = 0.2
