# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Notifier drivers tell the outside world what the engine does.

Every engine event becomes a :class:`Notification` (see
:mod:`instanceha.plugins.notifiers.catalogue`) that the dispatcher offers
to each configured driver. A driver runs in a thread of its own, behind a
bounded queue: however slow or dead its receiver, recovery never waits
for it. A third party adds a notifier as it adds a fencing driver: a
class derived from :class:`NotifierDriver`, registered under the
``instanceha.notifiers`` entry-point namespace and named in
``[notifications] drivers``.
"""

import abc
import dataclasses
import threading
from typing import Any

import requests

from instanceha.plugins import base

#: Priorities, as OpenStack notifications name them.
INFO = 'INFO'
WARN = 'WARN'
ERROR = 'ERROR'


@dataclasses.dataclass(frozen=True)
class Notification:
    """One engine event, in the form receivers outside the service read.

    ``payload`` is versioned like Nova's versioned notifications: a
    ``instanceha_object.name``, ``.namespace``, ``.version`` and
    ``.data`` (the fields the payload's schema documents).
    """

    event_type: str
    priority: str
    payload: dict[str, Any]
    publisher_id: str
    message_id: str
    #: UTC, ISO 8601 with microseconds (when the event was emitted).
    timestamp: str
    #: The engine event behind it, and its raw fields (the log line).
    event: str
    host: str | None
    details: dict[str, Any]

    @property
    def recovery_id(self) -> str | None:
        return self.payload['instanceha_object.data'].get('recovery_id')

    def envelope(self) -> dict[str, Any]:
        """The whole notification as one JSON-ready document."""
        return {'event_type': self.event_type, 'priority': self.priority,
                'publisher_id': self.publisher_id,
                'message_id': self.message_id, 'timestamp': self.timestamp,
                'payload': self.payload}


class NotifierDriver(base.Driver):
    """Delivers notifications to one kind of receiver."""

    #: True for a driver cheap and local enough to run in the engine's own
    #: thread, in order and never dropped (the log); False: a queue and a
    #: thread of its own.
    inline: bool = False

    def __init__(self, conf):
        super().__init__(conf)
        #: Set when the service stops: a driver waiting to retry gives up.
        self.stopping = threading.Event()

    @abc.abstractmethod
    def notify(self, notification: Notification) -> None:
        """Deliver one notification (retrying as the driver sees fit).

        Runs in the driver's own thread (or the engine's when
        ``inline``). Raise :class:`instanceha.exceptions.NotifierError`
        when it could not be delivered: the dispatcher counts and logs it
        and goes on with the next one. Messages must not contain secrets.
        """


class HttpNotifierDriver(NotifierDriver):
    """A notifier that POSTs over HTTP: one connection pool while started.

    Between ``start`` and ``stop`` every request reuses one
    ``requests.Session`` (kept-alive connections to the receiver);
    ``session`` still answers before ``start`` (a fresh session), so a
    driver can be used without the dispatcher, as in tests.
    """

    def __init__(self, conf):
        super().__init__(conf)
        self._session: requests.Session | None = None

    def start(self) -> None:
        self._session = requests.Session()

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    @property
    def session(self) -> requests.Session:
        return self._session or requests.Session()
