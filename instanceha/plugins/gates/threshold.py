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

"""No action on a mass failure."""

from instanceha.plugins.gates import base


class ThresholdGate(base.Gate):
    """Block the plan when too large a share of the hosts is unhealthy.

    numerator: monitored hosts detected failed in this cycle (whether or
    not a filter keeps them: an empty or untagged host that fails is
    still evidence of a mass failure) plus every host in a recovery
    workflow: fencing, evacuating, powering on, waiting to come up, and
    the hosts instanceha keeps out of service (left_disabled after
    evacuation with ``leave_disabled``, FAILED awaiting an operator)
    until an operator hands them back (``instanceha-manage hosts
    clear``). A slow cascade therefore cannot creep under the threshold
    one host at a time.

    denominator: monitored hosts, i.e. every nova-compute service except
    those an operator disabled with a reason of their own (hosts disabled
    by instanceha count, in the numerator and the denominator).

    Blocked when numerator * 100 > threshold * denominator (strictly more
    than ``[DEFAULT] threshold`` percent: the limit must be exceeded).
    """

    pure = True
    description = ('block everything when more than [DEFAULT] threshold % '
                   'of the monitored hosts are unhealthy')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[DEFAULT] threshold': 'percentage of unhealthy hosts'}

    def check(self, ctx: base.GateContext) -> base.GateVerdict:
        unhealthy = ctx.unhealthy
        total = len(ctx.monitored)
        limit = self.conf.threshold
        if total and len(unhealthy) * 100 <= limit * total:
            return base.GateVerdict()
        share = 100.0 * len(unhealthy) / total if total else 100.0
        detail = '%d failed' % len(ctx.failed)
        active = len(ctx.recovering - ctx.held)
        if active:
            detail += ' + %d still in recovery' % active
        if ctx.held:
            detail += (' + %d kept out of service until an operator hands '
                       'them back' % len(ctx.held))
        return base.GateVerdict(block_all=(
            '%d of %d monitored hosts unhealthy (%s) = %.0f%% > threshold '
            '%d%%: looks like a mass failure (network or control plane), '
            'nothing is recovered' % (len(unhealthy), total, detail, share,
                                      limit)))
