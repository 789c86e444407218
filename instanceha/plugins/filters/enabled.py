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

"""Hosts an operator disabled are out of scope."""

from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.plugins.filters import base


class EnabledFilter(base.Filter):
    """Ignore compute services an operator disabled (maintenance, spares).

    A service disabled by instanceha itself carries our marker in
    disabled_reason: that host is in recovery, not in maintenance,
    and is kept (the plan shows it recovering). One frozen by its
    announced shutdown (instanceha.engine.reasons.Frozen) is left out too: it
    is expected back.
    """

    description = 'ignore hosts whose nova-compute an operator disabled'
    out_of_scope = True

    def host_reason(self, host: str,
                    snapshot: model.Snapshot) -> str | None:
        svc = snapshot.service(host)
        if svc is None or not svc.disabled:
            return None
        reading = reasons.of_service(svc)
        if reading.marker is not None:
            return None
        frozen = reading.frozen
        if frozen is not None and frozen.failover:
            return None  # recovered: failover of an announced shutdown
        if frozen is not None:
            return ('frozen by its announced %s until %s (shutdown policy)'
                    % (frozen.kind, frozen.until.isoformat()))
        if reading.kind is not reasons.Kind.NOBODY:
            return 'disabled by an operator (reason: %s)' % (reading.text,)
        return 'disabled by an operator'
