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

"""Nova's own witness: the nova-compute service state and heartbeat."""

import datetime
import logging

from instanceha.engine import model
from instanceha.plugins.detectors import base

LOG = logging.getLogger(__name__)


def skew_message(skew: float, bound: int) -> str:
    """The operator's words for a clock difference beyond the bound."""
    return ('clock: this machine\'s clock is %.0fs %s Nova\'s (more than '
            '[detection] max_clock_skew = %ds); heartbeats are judged by '
            'Nova\'s clock, but fix NTP on both' % (
                abs(skew), 'ahead of' if skew > 0 else 'behind', bound))


class NovaDetector(base.Detector):
    """Failed when Nova says ``down`` or the heartbeat is older than delta.

    Nova itself declares a service down only after its
    ``service_down_time`` (60 s by default); ``[DEFAULT] delta`` lets
    instanceha notice a stale ``updated_at`` sooner. Its verdict on each
    host is the contract's rule for a compute service,
    :meth:`~instanceha.plugins.detectors.base.Detector.judge_service`
    (on Nova's clock; a missing or malformed time stamp gives no vote),
    the same rule the engine's fast path reads the services by.
    """

    description = ('nova-compute state down, or updated_at older than '
                   '[DEFAULT] delta (by Nova\'s clock)')
    judges_services_only = True
    supports_suspects = True

    def __init__(self, conf):
        super().__init__(conf)
        self._skew_reported: float | None = None

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[DEFAULT] delta': 'seconds after which a heartbeat is '
                                   'stale'}

    def suspects(self, services, now) -> frozenset[str]:
        # Its failures are hosts Nova reports down or stale: the engine
        # reads those anyway.
        return frozenset()

    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, base.Evidence]:
        self._report_skew(snapshot.clock_skew)
        # updated_at is written by Nova's clock: judge it by Nova's clock.
        nova_now = snapshot.nova_now(now)
        out = {}
        for svc in snapshot.services:
            view = self.judge_service(svc, nova_now, self.conf.delta)
            out[svc.host] = base.Evidence(svc.host, view.verdict,
                                          'nova: ' + view.seen,
                                          control_plane=True)
        return out

    def _report_skew(self, skew: float | None) -> None:
        """Warn when our clock and Nova's differ by more than the bound.

        Once when it starts, again when it grows by another bound, and
        once when it is back within the bound: not every poll.
        """
        bound = self.conf.detection.max_clock_skew
        if skew is None:
            return
        if abs(skew) <= bound:
            if self._skew_reported is not None:
                LOG.info('clock: this machine and Nova agree again (%+.1fs)',
                         skew)
                self._skew_reported = None
            return
        last = self._skew_reported
        if last is None or abs(skew - last) > bound:
            LOG.warning(skew_message(skew, bound))
            self._skew_reported = skew
