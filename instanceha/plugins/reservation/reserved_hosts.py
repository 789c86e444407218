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

"""Reserved hosts: spare computes kept disabled until needed.

A spare is a nova-compute service that is disabled and either listed in
``[reservation] reserved_hosts`` or carries a ``disabled_reason``
starting with ``[reservation] reserved_reason`` (``instanceha:reserved``
by default), e.g.::

    openstack compute service set --disable \\
        --disable-reason instanceha:reserved spare1 nova-compute

For each failed host one spare that is ``up`` is enabled, preferring the
failed host's failure domain: a spare sharing an aggregate with it, then
one in its availability zone, then (unless ``same_domain_only``) any.
The failed host's instances are rebuilt on it when ``evacuate_to_spare``
is set. If nothing landed on the spare it is disabled again with the
reserved reason once the evacuation is over.
"""

import threading

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.plugins.reservation import base


class ReservedHosts(base.ReservationStrategy):
    description = ('Enable one disabled spare host per failed host, '
                   'preferring its aggregate, then its availability zone.')

    def __init__(self, conf):
        super().__init__(conf)
        self._lock = threading.Lock()
        #: spare -> failed host, for claims this process made.
        self._claims: dict[str, str] = {}

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {
            '[reservation] reserved_hosts': 'spare hosts by name',
            '[reservation] reserved_reason': 'disabled_reason prefix of a '
                                             'spare',
            '[reservation] evacuate_to_spare': 'rebuild on the spare',
            '[reservation] same_domain_only': 'never leave the failure '
                                              'domain',
        }

    def is_spare(self, service: model.Service) -> bool:
        opts = self.conf.reservation
        return service.disabled and (
            service.host in opts.reserved_hosts or
            (service.disabled_reason or '').startswith(opts.reserved_reason))

    def candidates(self, failed_host: str,
                   snapshot: model.Snapshot) -> list[str]:
        """Usable spares for ``failed_host``, best first."""
        aggs = {a.id for a in snapshot.aggregates_of(failed_host)}
        zone = snapshot.zone_of(failed_host)
        ranked = []
        for svc in snapshot.services:
            if (svc.host == failed_host or not self.is_spare(svc) or
                    svc.state != model.UP or svc.forced_down or
                    svc.host in self._claims):
                continue
            if aggs & {a.id for a in snapshot.aggregates_of(svc.host)}:
                rank = 0
            elif zone is not None and snapshot.zone_of(svc.host) == zone:
                rank = 1
            elif self.conf.reservation.same_domain_only:
                continue
            else:
                rank = 2
            ranked.append((rank, svc.host))
        return [host for _, host in sorted(ranked)]

    def spares_for(self, failed_host: str,
                   snapshot: model.Snapshot) -> list[str]:
        return self.candidates(failed_host, snapshot)

    def claim(self, failed_host: str,
              snapshot: model.Snapshot) -> str | None:
        with self._lock:
            for spare, owner in self._claims.items():
                if owner == failed_host:
                    return spare
            found = self.candidates(failed_host, snapshot)
            if not found:
                return None
            self._claims[found[0]] = failed_host
            return found[0]

    def reserve(self, env: ports.Environment, failed_host: str,
                snapshot: model.Snapshot) -> str | None:
        spare = self.claim(failed_host, snapshot)
        if spare is None:
            return None
        svc = snapshot.service(spare)
        if svc is None or not self.is_spare(svc):
            return spare  # enabled already (by us, before a restart)
        try:
            env.cloud.update_service(snapshot.service(spare),
                                     status=model.ENABLED)
        except Exception:
            with self._lock:
                self._claims.pop(spare, None)
            raise
        return spare

    def adopt(self, failed_host: str, spare: str) -> None:
        """Remember a claim read back from a marker after a restart."""
        with self._lock:
            self._claims[spare] = failed_host

    def release(self, env: ports.Environment, failed_host: str,
                spare: str, snapshot: model.Snapshot) -> None:
        with self._lock:
            owner = self._claims.get(spare)
        if owner not in (None, failed_host):
            # Released before and claimed since by another failed host
            # (a release repeated after a Nova error): not ours to return.
            return
        if not snapshot.servers_known(spare):
            # Only the hosts being decided were listed: ask about it.
            snapshot = env.cloud.snapshot(hosts=(spare,), aggregates=False)
        svc = snapshot.service(spare)
        if svc is not None and not snapshot.servers_on(spare):
            env.cloud.update_service(
                svc, status=model.DISABLED,
                disabled_reason='%s (returned after recovering %s)'
                % (self.conf.reservation.reserved_reason, failed_host))
        with self._lock:
            if self._claims.get(spare) == failed_host:
                del self._claims[spare]

    def claimed(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._claims)

    def forget(self, spare: str) -> None:
        """Drop a claim without touching Nova (the spare keeps serving)."""
        with self._lock:
            self._claims.pop(spare, None)

    @property
    def rebuild_on_spare(self) -> bool:
        return self.conf.reservation.evacuate_to_spare
