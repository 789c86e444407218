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

"""The event log of a simulated run, and its one-line-per-event format.

Every engine event, every timeline command and every world change worth
telling is recorded with its simulated time and its source. The text form
(:func:`format_line`) is what golden ``log.expect`` files hold, so it is
stable: details sorted by name, values rendered the same way every time.
"""

from collections.abc import Callable, Mapping
import dataclasses
import datetime
import enum
import json
import re

from instanceha.engine import ports
from instanceha.sim import clock as sim_clock


@dataclasses.dataclass(frozen=True)
class Event:
    t: float
    #: 'sim' for the simulator, the service copy's name for the engine.
    source: str
    event: str
    host: str | None
    details: Mapping[str, object]


def _value(v: object) -> str:
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.timezone.utc).strftime(
            '%Y-%m-%dT%H:%M:%SZ')
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return '%g' % v
    if isinstance(v, (set, frozenset)):
        v = sorted(v, key=str)
    if isinstance(v, (list, tuple)):
        return ','.join(_value(x) for x in v) or '-'
    if isinstance(v, Mapping):
        return ','.join('%s:%s' % (k, _value(v[k]))
                        for k in sorted(v, key=str)) or '-'
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _value({f.name: getattr(v, f.name)
                       for f in dataclasses.fields(v)})
    text = str(v)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def format_time(t: float) -> str:
    return ('%7d' % t) if t == int(t) else ('%7.1f' % t)


#: A recovery id in a marker (and so in a plan's reasons): random, so
#: left out of the printed log.
_RID = re.compile(r'( ?)rid=[0-9a-f]{8}-[0-9a-f-]{27}( ?)')


def _printed(value: object) -> str:
    return _RID.sub(lambda m: ' ' if m.group(1) and m.group(2) else '',
                    _value(value))


def format_line(ev: Event) -> str:
    # Recovery ids are random (UUIDs): a golden log leaves them out; the
    # events keep them for checks that want them.
    details = ' '.join('%s=%s' % (k, _printed(ev.details[k]))
                       for k in sorted(ev.details) if k != 'recovery_id')
    parts = [format_time(ev.t), ev.source, ev.host or '-', ev.event]
    if details:
        parts.append(details)
    return ' '.join(parts)


class EventLog:
    """Every event of one run, in the order they happened."""

    def __init__(self, clock: sim_clock.SimClock):
        self.clock = clock
        self.events: list[Event] = []
        #: Called with each event as it is recorded (live story, checks).
        self.listeners: list[Callable[[Event], None]] = []
        #: Text replaced in details (the case directory, so that a golden
        #: log does not depend on where the checkout is).
        self.aliases: dict[str, str] = {}

    def record(self, source: str, event: str, host: str | None = None,
               **details) -> Event:
        for path, alias in self.aliases.items():
            details = {k: v.replace(path, alias) if isinstance(v, str) else v
                       for k, v in details.items()}
        ev = Event(self.clock.t, source, event, host, details)
        self.events.append(ev)
        for listener in self.listeners:
            listener(ev)
        return ev

    def lines(self) -> list[str]:
        # Job-time events may be stamped later than world events recorded
        # after them; a stable sort keeps the log in time order.
        return [format_line(ev)
                for ev in sorted(self.events, key=lambda e: e.t)]


class RecordingSink(ports.EventSink):
    """The EventSink given to one copy of the service."""

    def __init__(self, log: EventLog, source: str):
        self.log = log
        self.source = source

    def emit(self, event: str, host: str | None = None, **details) -> None:
        self.log.record(self.source, event, host, **details)
