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

"""The periodic failover capacity check of the leading copy.

Every ``[capacity] check_interval`` seconds, while this copy leads, the
capacity is assessed (:mod:`instanceha.ops.capacity`: one Nova snapshot
with every server, Placement's cached reading) on a thread of its own,
never the tick's. The answer goes to the metrics, to the monitor (a
``degraded`` readiness while short of ``[capacity] minimum_tolerance``)
and, when it changes, to the events (``capacity_short``,
``capacity_met``). It reads only: a recovery is never held back by it.
"""

from collections.abc import Callable
import logging

from instanceha.daemon import periodic
from instanceha.engine import capacity
from instanceha.engine import events as ev
from instanceha.engine import ports
from instanceha.ops import capacity as ops_capacity

LOG = logging.getLogger(__name__)


def shortfall(report: capacity.Report, minimum: int) -> str | None:
    """What falls short of ``minimum`` (None: nothing, or no minimum)."""
    if not minimum:
        return None
    short = report.short_of(minimum)
    if not short:
        return None
    return 'below N+%d: %s' % (minimum, ', '.join(
        '%s N+%d%s' % (d.domain.name, d.tolerance, '' if d.exact else '+')
        for d in short))


class CapacityCheck(periodic.Periodic):
    """Assess, publish, and say when the answer crosses the minimum."""

    name = 'capacity-check'

    def __init__(self, conf, cloud: ports.CloudPort, drivers,
                 events: ports.EventSink, publish: Callable[
                     [capacity.Report | None, str | None], None],
                 leading: Callable[[], bool]):
        self.conf = conf
        self.cloud = cloud
        self.drivers = drivers
        self.events = events
        self.publish = publish
        self.leading = leading
        self._short: str | None = None
        super().__init__()

    def check(self) -> capacity.Report | None:
        """One check now (None: not leading, or the cloud unreadable)."""
        if not self.leading():
            return None
        try:
            report = ops_capacity.assess(self.cloud, self.drivers.filters,
                                         self.drivers.reservation)
        except Exception as exc:  # noqa: a check must never stop the service
            LOG.warning('capacity: cannot assess the failover capacity: %s',
                        exc)
            self.publish(None, None)
            return None
        short = shortfall(report, self.conf.capacity.minimum_tolerance)
        self.publish(report, short)
        if short != self._short:
            if short is not None:
                self.events.emit(ev.CAPACITY_SHORT, reason=short,
                                 minimum=self.conf.capacity.minimum_tolerance)
            elif self._short is not None:
                self.events.emit(ev.CAPACITY_MET)
            self._short = short
        return report

    def interval(self) -> float:
        return self.conf.capacity.check_interval
