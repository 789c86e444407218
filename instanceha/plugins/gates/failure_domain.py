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

"""Per-failure-domain unhealthy limits (maxUnhealthy)."""

import re

from instanceha.engine import model
from instanceha.plugins.gates import base

_LIMIT_RE = re.compile(r'^\s*(\d{1,9})\s*(%?)\s*$')


def parse_limit(text: str, members: int) -> int | None:
    """Hosts allowed to be unhealthy: "2" or "40%" of members; None if bad.

    A percentage is rounded down: "50%" of 3 hosts allows 1.
    """
    m = _LIMIT_RE.match(text or '')
    if not m:
        return None
    value = int(m.group(1))
    if m.group(2):
        return None if value > 100 else members * value // 100
    return value


class FailureDomainGate(base.Gate):
    """Block the hosts of an aggregate that has too many unhealthy hosts.

    An aggregate sets its limit in its metadata (key
    ``[gates] max_unhealthy_key``). Unhealthy members are those failed in
    this cycle or still in recovery, counted like the threshold gate. A
    host in several limited aggregates must pass every one.
    """

    pure = True
    description = ('block recovery in an aggregate whose metadata '
                   'max_unhealthy is exceeded')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[gates] max_unhealthy_key': 'aggregate metadata key'}

    def _judge(self, agg: model.Aggregate,
               ctx: base.GateContext) -> str | None:
        key = self.conf.gates.max_unhealthy_key
        if key not in agg.metadata:
            return None
        members = agg.hosts & ctx.monitored
        unhealthy = agg.hosts & ctx.unhealthy
        limit = parse_limit(agg.metadata[key], len(members))
        if limit is None:
            return ('aggregate %s metadata %s=%r is neither a count nor a '
                    'percentage (0-100%%)' % (agg.name, key,
                                              agg.metadata[key]))
        if len(unhealthy) > limit:
            return ('aggregate %s has %d of %d hosts unhealthy (%s) > %s=%s'
                    % (agg.name, len(unhealthy), len(members),
                       ', '.join(sorted(unhealthy)), key,
                       agg.metadata[key].strip()))
        return None

    def check(self, ctx: base.GateContext) -> base.GateVerdict:
        blocked: dict[str, str] = {}
        for agg in sorted(ctx.snapshot.aggregates, key=lambda a: a.name):
            touched = agg.hosts & ctx.candidates
            why = self._judge(agg, ctx) if touched else None
            for host in touched:
                if why and host not in blocked:
                    blocked[host] = why
        return base.GateVerdict(blocked_hosts=blocked)
