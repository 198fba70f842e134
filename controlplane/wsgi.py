"""The WSGI application of the full stack's HTTP servers (granian, controlplane/run.py): every
page and the REST API, with no event loop to hand each request to a thread and back. The
WebSockets are the ASGI application's (controlplane/asgi.py), on servers of their own."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

application = get_wsgi_application()

from controlplane.heap import freeze_startup_objects  # noqa: E402  # once Django is set up

freeze_startup_objects()
