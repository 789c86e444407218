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

"""Nova's API as the engine sees it, backed by the simulated world.

:class:`SimCloud` is the simulator's ``CloudPort``: each call is counted
(``api_calls``, what a real Nova would have been asked, pages included),
may be failed by a fault a scenario injected (``nova fail``, ``nova
down``), and is answered from, or carried out in, the
:class:`~instanceha.sim.world.World`. The world keeps the truth and Nova's
records; this module only turns them into what the API would answer.
Planned moves (live and cold migration) are in :mod:`instanceha.sim.moves`,
starting a guest in :mod:`instanceha.sim.guests`.
"""

from collections.abc import Callable
import datetime
import itertools
import math

from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.sim import guests
from instanceha.sim import moves
from instanceha.sim import world as sim_world

#: Nova servers list page size (``[api] max_limit``).
PAGE = 1000

_HTTP_TEXT = {500: 'Unexpected API Error.', 503: 'Service Unavailable',
              409: 'Conflict: the request is refused in the current state'}


class SimCloud(ports.CloudPort):
    """Nova as the engine sees it, backed by a world."""

    def __init__(self, world: sim_world.World):
        self.world = world
        self.api_calls = 0
        self._fault_ids = itertools.count(1)

    def _call(self, n: int = 1) -> None:
        self.api_calls += n

    def _faults(self, kind: str, what: str,
                action: Callable[[], object] | None = None,
                any_too: bool = True):
        """Fail the call if a fault was injected; else run ``action``.

        A ``timeout`` lets Nova carry the call out and loses the answer:
        the caller cannot tell whether it happened.
        """
        w = self.world
        if w.nova_down:
            w.say('nova', 'api_unreachable', None, call=kind)
            raise exceptions.CloudError(
                '%s: cannot connect (nova at http://nova.sim:8774): '
                'ConnectFailure' % what)
        for fault in w.nova_faults:
            if fault.kind == kind or (any_too and fault.kind == 'any'):
                if fault.skip > 0:
                    fault.skip -= 1
                    break
                fault.count -= 1
                if fault.count <= 0:
                    w.nova_faults.remove(fault)
                w.say('nova', 'api_fault', None, call=kind,
                      error=fault.error)
                if fault.error == 'timeout':
                    if action is not None:
                        action()
                    raise exceptions.CloudError(
                        '%s: connection failed (nova at '
                        'http://nova.sim:8774): ReadTimeout: read timed '
                        'out' % what)
                code = int(fault.error)
                raise exceptions.CloudError(
                    '%s: HTTP %d from Nova: %s' % (
                        what, code, _HTTP_TEXT[code]),
                    request_id='req-sim-fault-%d' % next(self._fault_ids),
                    status=code)
        return action() if action is not None else None

    def snapshot(self, *, images: bool = False,
                 migrations_since: datetime.datetime | None = None,
                 hosts: model.HostSelector | None = None,
                 aggregates: bool = True,
                 services: model.Snapshot | None = None) -> model.Snapshot:
        w = self.world
        # A fault of kind snapshot fails the full read, also one that
        # lists nothing itself (its services read just now).
        self._faults('snapshot', 'list compute services')
        taken_at, skew = w.local(w.clock.t), w.clock_skew
        if services is not None:
            taken_at, skew = services.taken_at, services.clock_skew
            listed = services.services
        else:
            self._call()  # the services
            listed = tuple(w.service_model(h) for h in w.hosts.values()
                           if h.name not in w.deleted_services)
        every = tuple(w.server_model(s) for s in w.servers.values()
                      if s.host is not None)
        read = None
        if hosts is None:
            servers = every
            self._call(max(1, math.ceil(len(w.servers) / PAGE)))
        else:
            # Nova's servers?host=X: one listing (of pages) per host.
            read = model.select_hosts(hosts, listed)
            servers = tuple(s for s in every if s.host in read)
            for host in read:
                on = sum(1 for s in servers if s.host == host)
                self._call(max(1, math.ceil(on / PAGE)))
        if aggregates:
            self._call()
        imgs = {}
        if images:
            self._call()
            # Nova's adapter lists every image, not only those read here.
            used = {s.image_id for s in every if s.image_id}
            imgs = {i: w.images[i] for i in used if i in w.images}
        migs: tuple = ()
        if migrations_since is not None:
            self._call()
            migs = tuple(self._migrations(since=migrations_since))
        # Taken at by our clock (when the services were read); the skew as
        # Nova's Date header tells it.
        return model.Snapshot(
            taken_at=taken_at,
            services=listed, servers=servers,
            aggregates=tuple(w.aggregates.values()) if aggregates else (),
            images=imgs, migrations=migs, clock_skew=skew,
            servers_read=read)

    def read_services(self) -> model.Snapshot:
        """The compute services alone: one call.

        Only ``nova down`` and faults of kind ``services`` hit it, so a
        timeline's ``snapshot`` and ``any`` faults still fail the calls
        they failed before this read existed.
        """
        w = self.world
        self._call()
        self._faults('services', 'list compute services', any_too=False)
        # Taken at by our clock, like a full read (not Nova's).
        return model.Snapshot(
            taken_at=w.local(w.clock.t),
            services=tuple(w.service_model(h) for h in w.hosts.values()
                           if h.name not in w.deleted_services),
            clock_skew=w.clock_skew)

    def update_service(self, service: model.Service, *,
                       status: str | None = None,
                       disabled_reason: str | None = None,
                       forced_down: bool | None = None) -> model.Service:
        self._call()
        return self._faults(
            'update_service', 'update compute service of %s' % service.host,
            lambda: self.world.api_update_service(
                service.host, status, disabled_reason, forced_down))

    def evacuate(self, server_id: str, *, host: str | None = None) -> None:
        self._call()
        w = self.world

        def call():
            w.api_evacuate(server_id, host)
            # Nova records the action in the call itself.
            moves.record_action(w, w.servers[server_id], 'evacuate')
        self._faults('evacuate', 'evacuate %s' % server_id, call)

    def host_vcpus(self) -> dict[str, model.HostVcpus]:
        """What placement would say: each host's vCPUs and their use.

        One call; the scheduler's claims of evacuations under way count
        (as placement allocations do), instances merely asked for do not.
        """
        self._call()
        self._faults('capacity', 'read host capacity', any_too=False)
        w = self.world
        return {name: model.HostVcpus(capacity=h.vcpus,
                                      used=h.vcpus - w.free(name))
                for name, h in w.hosts.items()
                if name not in w.deleted_services}

    def host_resources(self) -> dict[str, model.HostResources]:
        """What Placement would say, as :meth:`host_vcpus` reads it.

        The simulated world counts vCPUs only (no memory or disk), so a
        host's reading has a VCPU inventory alone; the failover estimate
        then counts vCPUs only. One call.
        """
        return {name: model.HostResources(name, {'VCPU': model.Inventory(
                    capacity=v.capacity, used=v.used)})
                for name, v in self.host_vcpus().items()}

    def _server(self, server_id: str) -> sim_world.Server:
        srv = self.world.servers.get(server_id)
        if srv is None:
            raise exceptions.CloudError('instance %s not found (HTTP 404)'
                                        % server_id, status=404)
        return srv

    def get_server(self, server_id: str) -> model.Server:
        self._call()
        self._faults('get_server', 'show server %s' % server_id)
        return self.world.server_model(self._server(server_id))

    def changed_servers(self, since: datetime.datetime
                        ) -> tuple[model.Server, ...]:
        """Nova's servers?changes-since: one listing (of pages)."""
        self._call()
        self._faults('get_server', 'list servers changed since %s'
                     % since.isoformat())
        found = self._changes(since)
        self._call(max(1, math.ceil(len(found) / PAGE)) - 1)
        return found

    def _changes(self, since: datetime.datetime, deleted=()
                 ) -> tuple[model.Server, ...]:
        """The servers (and ``deleted``) changed since ``since``.

        ``since`` is on our clock; Nova compares it with its own.
        """
        w = self.world
        since -= datetime.timedelta(seconds=w.clock_skew)
        return tuple(w.server_model(s) for s in itertools.chain(
            w.servers.values(), deleted)
            if w.clock.at(s.changed_at) >= since)

    def _migrations(self, server_id=None, source_host=None, since=None,
                    kind='evacuation'):
        w = self.world
        out = []
        if since is not None:
            # changes-since is given in our clock; Nova filters by its own
            # (the Nova adapter translates it with the Date header's skew).
            since -= datetime.timedelta(seconds=w.clock_skew)
        for mig in reversed(w.migrations):
            if mig.kind != kind:
                continue
            if server_id and mig.server_id != server_id:
                continue
            if source_host and mig.source_host != source_host:
                continue
            if since and w.clock.at(mig.updated_at) < since:
                continue
            if mig.visible_at > w.clock.t:
                continue
            out.append(w.migration_model(mig))
        return out

    def migrations(self, *, server_id: str | None = None,
                   source_host: str | None = None,
                   since: datetime.datetime | None = None,
                   migration_type: str = 'evacuation'
                   ) -> list[model.Migration]:
        self._call()
        self._faults('migrations', 'list migrations')
        return self._migrations(server_id, source_host, since,
                                migration_type)

    def set_server_lock(self, server_id: str, locked: bool,
                        reason: str | None = None) -> None:
        self._call()
        srv = self._server(server_id)

        def lock():
            self.world.check_actor('lock' if locked else 'unlock', srv.host)
            srv.locked = locked
            srv.locked_reason = reason if locked else None
            self.world._changed(srv)
        self._faults('lock', '%s server %s' % (
            'lock' if locked else 'unlock', server_id), lock)

    def stop_server(self, server_id: str) -> None:
        self._call()
        self._faults('stop', 'stop server %s' % server_id)
        srv = self._server(server_id)
        w = self.world
        w.check_actor('stop', srv.host)
        if srv.status != 'ACTIVE' or srv.task_state:
            raise exceptions.CloudError(
                "stop %s: Cannot 'stop' instance while it is in vm_state "
                "%s (HTTP 409)" % (srv.name, srv.status.lower()), status=409)
        srv.status = 'SHUTOFF'
        srv.running_on.clear()
        w._changed(srv)
        moves.record_action(w, srv, 'stop')

    def start_server(self, server_id: str) -> None:
        self._call()
        self._faults('start', 'start server %s' % server_id,
                     lambda: guests.api_start(self.world, server_id),
                     any_too=False)

    def server_actions(self, server_id: str
                       ) -> list[model.InstanceAction]:
        self._call()
        srv = self._server(server_id)
        self._faults('actions', 'list actions of server %s' % server_id,
                     any_too=False)
        w = self.world
        return [model.InstanceAction(
            action=a.action, request_id=a.request_id, user_id=a.user_id,
            start_time=w.clock.at(a.start_time),
            message='Error' if a.errors else None)
            for a in reversed(w.instance_actions.get(srv.id, []))]

    def stopped_servers(self, since: datetime.datetime | None = None
                        ) -> tuple[model.Server, ...]:
        """``status=SHUTOFF&status=VERIFY_RESIZE``, or ``changes-since``.

        As Nova answers: pages of :data:`PAGE` servers; a changes-since
        listing has every server changed since then whatever its status,
        the deleted ones too (status DELETED).
        """
        w = self.world
        self._call()
        self._faults('stopped', 'list stopped servers', any_too=False)
        if since is None:
            found = tuple(w.server_model(s) for s in w.servers.values()
                          if s.host is not None and
                          s.status in ('SHUTOFF', 'VERIFY_RESIZE'))
        else:
            found = self._changes(since, w.deleted_servers.values())
        self._call(max(1, math.ceil(len(found) / PAGE)) - 1)
        return found

    def locked_servers(self) -> tuple[model.Server, ...]:
        w = self.world
        self._call()  # one listing: locked=true
        self._faults('locked', 'list locked servers', any_too=False)
        found = tuple(w.server_model(s) for s in w.servers.values()
                      if s.locked)
        self._call(max(1, math.ceil(len(found) / PAGE)) - 1)
        return found

    def reset_server_state(self, server_id: str, state: str) -> None:
        self._call()
        self._faults('reset_state', 'reset-state %s' % server_id)
        srv = self._server(server_id)
        self.world.check_actor('reset-state', srv.host)
        if state not in ('error', 'active'):
            raise exceptions.CloudError('reset-state %s: invalid state %r '
                                        '(HTTP 400)' % (srv.name, state),
                                        status=400)
        srv.status = state.upper()
        srv.task_state = None
        self.world._changed(srv)

    # -- planned moves (maintenance; the world's side is in sim.moves) ----

    def live_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        return self._move('live', moves.live_migrate, server_id, host)

    def cold_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        return self._move('cold', moves.cold_migrate, server_id, host)

    def _move(self, kind: str, move: Callable, server_id: str,
              host: str | None) -> str | None:
        """One planned move (``kind``: live or cold), as Nova answers it."""
        self._call()
        return self._faults(
            kind + '_migrate', '%s-migrate server %s' % (kind, server_id),
            lambda: move(self.world, server_id, host))

    def confirm_resize(self, server_id: str) -> None:
        self._call()
        self._faults('confirm_resize', 'confirm migration of server %s'
                     % server_id,
                     lambda: moves.confirm_resize(self.world, server_id))

    def action_errors(self, server_id: str, action: str,
                      request_id: str | None = None
                      ) -> tuple[str | None, list[str]]:
        self._call()
        self._faults('get_server', 'list actions of server %s' % server_id)
        return moves.action_errors(self.world, self._server(server_id),
                                   action, request_id)

    def set_server_metadata(self, server_id: str, key: str,
                            value: str) -> None:
        self._call()
        srv = self._server(server_id)
        self._faults('metadata', 'set metadata %s on server %s' % (
            key, server_id), lambda: srv.metadata.__setitem__(key, value))
        self.world._changed(srv)

    def delete_server_metadata(self, server_id: str, key: str) -> None:
        self._call()
        srv = self._server(server_id)
        self._faults('metadata', 'delete metadata %s of server %s' % (
            key, server_id), lambda: srv.metadata.pop(key, None))
        self.world._changed(srv)
