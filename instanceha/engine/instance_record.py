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

"""What instanceha keeps in a crashed instance's metadata.

The counters of the instance-failure path live in Nova, in the
instance's metadata (``KEY``), so a restarted service or a new leader
continues them; the error state is a second item (``ERROR_KEY``) that
only ``instanceha-manage instances clear`` removes.
"""

import dataclasses
import datetime

from instanceha.engine import marker as marker_mod

#: Metadata item holding the counters and the step under way.
KEY = 'instanceha:failure'
#: Metadata item of the error state; only an operator removes it.
ERROR_KEY = 'instanceha:error'

RESTARTING = 'restarting'
RELOCATING = 'relocating'
STARTING = 'starting'
RUNNING = 'running'
#: Its user stopped it while a step was under way: left alone.
STOPPED = 'stopped'
IN_PROGRESS = frozenset({RESTARTING, RELOCATING, STARTING})


@dataclasses.dataclass(frozen=True)
class Record(marker_mod.NovaClockTimes):
    """The ``KEY`` metadata item: counters and the step under way.

    Its time is on Nova's clock (``clock=nova``): it is compared with the
    time stamps of Nova's instance actions, and read back by copies whose
    clocks may differ from (or be stepped since) the writer's.
    """

    restarts: int = 0
    relocations: int = 0
    state: str = RUNNING
    #: When the state was entered (Nova's clock, see ``nova_clock``).
    at: datetime.datetime | None = None
    #: Request id of the stop that was handled (never handled twice).
    stop: str | None = None
    #: The host the instance crashed on (a relocation leaves it).
    source: str | None = None
    #: ``at`` is on Nova's clock; False: on the clock of the copy that
    #: wrote it (an earlier version's record), taken to be ours.
    nova_clock: bool = False

    def on_nova_clock(self, skew: float | None) -> 'Record':
        """This record with ``at`` on Nova's clock (``skew``: now's)."""
        if self.nova_clock:
            return self
        return dataclasses.replace(self, at=self.on_nova(self.at, skew),
                                   nova_clock=True)

    def render(self) -> str:
        parts = ['restarts=%d' % self.restarts,
                 'relocations=%d' % self.relocations, 'state=%s' % self.state]
        if self.at is not None:
            parts.append('at=%s' % marker_mod.format_ts(self.at))
        if self.stop:
            parts.append('stop=%s' % self.stop)
        if self.source:
            parts.append('from=%s' % self.source)
        if self.nova_clock:
            parts.append(marker_mod.NOVA_CLOCK_FIELD)
        return ' '.join(parts)[:255]

    @classmethod
    def parse(cls, text: str | None) -> 'Record | None':
        if not text:
            return None
        fields = dict(p.split('=', 1) for p in text.split() if '=' in p)
        try:
            return cls(restarts=int(fields.get('restarts', 0)),
                       relocations=int(fields.get('relocations', 0)),
                       state=fields.get('state', RUNNING),
                       at=marker_mod.parse_ts(fields.get('at', '')),
                       stop=fields.get('stop') or None,
                       source=fields.get('from') or None,
                       nova_clock=fields.get('clock') == 'nova')
        except ValueError:
            return None


def error_text(server: str, rec: Record, now: datetime.datetime) -> str:
    """The ``ERROR_KEY`` item: when, the counts, how to clear it."""
    return ('%s gave up after %d restart(s) and %d relocation(s); clear: '
            'instanceha-manage instances clear %s' % (
                marker_mod.format_ts(now), rec.restarts, rec.relocations,
                server))[:255]
