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

"""Spread: a failed host's instances over the least loaded hosts nearby.

Nova's scheduler, left to itself, puts each evacuated instance on the
host its weighers like best at that moment, often the same one for a
whole host's worth of instances, and anywhere in the cloud. This strategy
chooses each target itself: among the hosts Nova would accept (up,
enabled, room for the flavor's vCPUs), the failed host's own failure
domain first (a host aggregate it shares, then its availability zone, as
``[evacuation] spread_domains`` says), and in it the least loaded host,
counting the instances this evacuation already sent there. A reserved
spare the operator wants instances rebuilt on (``[reservation]
evacuate_to_spare``) is filled first while it has room (the engine's
rule, :func:`instanceha.engine.placement.decide`).

The target is a request Nova's scheduler still checks; a refused one is
a failed attempt like any other (``[evacuation] same_target_retries``),
and the next attempt is placed again from a fresh view. Tracking and
retries are those of the smart strategy.
"""

from instanceha.engine import placement
from instanceha import exceptions
from instanceha.plugins.evacuation import smart


class SpreadEvacuation(smart.SmartEvacuation):
    description = ('Place each instance on the least loaded host with room '
                   'in the failed host\'s failure domain first; tracked '
                   'like smart.')
    #: It weighs every host by the instances Nova lists there: a full
    #: read lists every server, not only the failed hosts'.
    needs_all_servers = True
    places = True

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {
            '[evacuation] spread_domains': 'what counts as the failed '
                                           'host\'s failure domain',
            '[evacuation] same_target_retries': 'tries on one target '
                                                'before another is chosen',
            '[reservation] evacuate_to_spare': 'fill the reserved spare '
                                               'first',
        }

    def validate(self) -> None:
        domains = list(self.conf.evacuation.spread_domains)
        twice = sorted({d for d in domains if domains.count(d) > 1})
        if twice:
            raise exceptions.ConfigurationError(
                'option [evacuation] spread_domains lists %s more than once'
                % ', '.join(twice))

    def _distance(self, room: placement.HostRoom,
                  view: placement.PlacementView) -> int:
        """Index of the first failure domain the host shares (else last)."""
        domains = list(self.conf.evacuation.spread_domains)
        for index, kind in enumerate(domains):
            if kind == 'aggregate' and room.aggregates & (
                    view.failed_aggregates):
                return index
            if (kind == 'zone' and view.failed_zone is not None
                    and room.zone == view.failed_zone):
                return index
        return len(domains)

    def rank(self, request: placement.PlacementRequest,
             candidates: tuple[placement.HostRoom, ...],
             view: placement.PlacementView
             ) -> list[placement.HostRoom]:
        """The failed host's failure domain first, the least loaded first."""
        return sorted(candidates, key=lambda room: (
            self._distance(room, view), room.load is None,
            room.load or 0.0, room.host))
