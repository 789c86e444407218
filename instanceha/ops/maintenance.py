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

"""Planned maintenance of a compute host: a path apart from failure.

A failure is detected; maintenance is announced. ``maintenance start``
disables the host's nova-compute with a reason of our own (not a
recovery marker), so the running service treats it like any host an
operator disabled: the ``enabled`` filter leaves it out of scope, and if
the host then goes down nothing is fenced or evacuated. Its instances
leave by *live* migration (Nova's scheduler picks each destination);
each one's home is recorded in its metadata (:data:`HOME_KEY`) so
``maintenance end --return`` can bring it back.

Everything goes through the engine's ports: Nova through the
:class:`~instanceha.engine.ports.CloudPort` (live and cold migration,
metadata, instance actions are port methods), time through a
:class:`~instanceha.engine.ports.Clock`; so ``instanceha-simulate`` runs
this same code against its simulated Nova, in simulated time.

The reason reads ``instanceha-maintenance <UTC time> [note]``
(:class:`instanceha.engine.reasons.Maintenance`): never a recovery
marker (that needs ``instanceha:<state>``), which is what keeps the
engine from "resuming" it as a recovery.
"""

from collections.abc import Callable, Iterable
import concurrent.futures
import dataclasses
import datetime
import threading

from instanceha.adapters import clock as clock_mod
from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha import exceptions

#: Server metadata key holding the host a server left for maintenance.
HOME_KEY = 'instanceha:home'
#: Server states Nova live-migrates.
LIVE_STATES = frozenset({'ACTIVE', 'PAUSED'})
#: What to do with SHUTOFF servers: leave them, or cold-migrate them.
SHUTOFF_CHOICES = ('leave', 'cold')
#: Task states of a migration under way.
MIGRATING = frozenset({'migrating', 'resize_migrating', 'resize_prep'})
#: Live-migration record states that are over and failed.
_MIGRATION_FAILED = frozenset({'error', 'failed', 'cancelled'})


def _in_maintenance(service: model.Service) -> bool:
    return reasons.of_disabled(service).maintenance is not None


def settling(server: model.Server) -> str | None:
    """Why ``server`` is not to be moved until it has settled (None: it is).

    A task under way other than a migration: a start, a stop, a reboot
    (instance HA restarting a crashed instance, its user, Nova), which
    ends on its own.
    """
    if server.task_state and server.task_state not in MIGRATING:
        return 'task %s under way: moved once it has ended' % (
            server.task_state)
    return None


@dataclasses.dataclass
class Outcome:
    """What happened to one server: moved, failed, left or running."""

    server: model.Server
    result: str
    detail: str = ''

    def line(self) -> str:
        text = '%s (%s): %s' % (self.server.name, self.server.id,
                                self.result)
        return '%s: %s' % (text, self.detail) if self.detail else text


def threaded_map(fn: Callable, items: list, workers: int) -> list:
    """``fn`` over ``items`` on ``workers`` threads, results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def serial_map(fn: Callable, items: Iterable, workers: int) -> list:
    """One item after the other (the simulator: a reproducible order)."""
    return [fn(item) for item in items]


class Maintenance:
    """The operator's maintenance commands on one cloud.

    ``out`` receives one progress line per event (the CLI prints it);
    ``poll`` is how often a waited migration is looked at, on ``clock``
    (default the wall clock); ``run_all(fn, items, workers)`` runs the
    moves (default on threads).
    """

    def __init__(self, cloud: ports.CloudPort,
                 out: Callable[[str], None] = print, poll: float = 1.0,
                 clock: ports.Clock | None = None,
                 run_all: Callable[[Callable, list, int], list] =
                 threaded_map):
        self.cloud = cloud
        self._out = out
        self._out_lock = threading.Lock()
        self.poll = poll
        self.clock = clock or clock_mod.SystemClock()
        self._run_all = run_all

    def say(self, text: str) -> None:
        with self._out_lock:
            self._out(text)

    def _service(self, snapshot: model.Snapshot,
                 host: str) -> model.Service:
        service = snapshot.service(host)
        if service is None:
            raise exceptions.InstanceHAError(
                'no nova-compute service on host %r (known: %s)' % (
                    host, ', '.join(sorted(s.host for s in
                                           snapshot.services)) or 'none'))
        return service

    # -- start ------------------------------------------------------------

    def check_startable(self, service: model.Service) -> None:
        """Refuse a host instanceha recovers, a down or foreign-disabled one."""
        host = service.host
        parsed = reasons.of_service(service).marker
        if service.disabled and parsed:
            raise exceptions.InstanceHAError(
                'host %s is being recovered by instanceha (marker %s since '
                '%s): maintenance is for a healthy host; let the recovery '
                'finish (see "instanceha-manage hosts list")' % (
                    host, parsed.state.value, marker.format_ts(parsed.when)))
        if service.forced_down or service.state != model.UP:
            raise exceptions.InstanceHAError(
                'host %s is down (Nova state %s%s): its instances cannot be '
                'live-migrated; a down host needs the failure path '
                '(fencing and evacuation), not maintenance' % (
                    host, service.state or 'unknown',
                    ', forced down' if service.forced_down else ''))
        if service.disabled and not _in_maintenance(service):
            raise exceptions.InstanceHAError(
                'host %s is already disabled by an operator (reason: %s); '
                'enable it first if it should go into maintenance' % (
                    host, service.disabled_reason or 'none given'))

    def start(self, host: str, now: datetime.datetime, *, note: str = '',
              wait: bool = False, timeout: float = 600,
              concurrency: int = 2, shutoff: str = 'leave',
              settle: bool = False) -> list[Outcome]:
        """Disable ``host`` for maintenance and move its instances away.

        ``settle``: an instance something else acts on now (a task under
        way, see :func:`settling`) is awaited (``running``) instead of
        left: the drain of an announced shutdown asks again until it has
        settled.
        """
        if shutoff not in SHUTOFF_CHOICES:
            raise ValueError('shutoff must be one of %s' % (SHUTOFF_CHOICES,))
        snapshot = self.cloud.snapshot()
        service = self._service(snapshot, host)
        self.check_startable(service)
        if _in_maintenance(service):
            self.say('host %s: already in maintenance (%s); moving what is '
                     'left' % (host, service.disabled_reason))
        else:
            self.cloud.update_service(
                service, status=model.DISABLED,
                disabled_reason=reasons.Maintenance(now, note).render())
            self.say('host %s: disabled for maintenance' % host)
        servers = sorted(snapshot.servers_on(host), key=lambda s: s.name)
        todo, outcomes = [], []
        for server in servers:
            busy = settle and settling(server)
            if busy:
                outcomes.append(Outcome(server, 'running', busy))
            elif server.status in LIVE_STATES and not server.task_state:
                todo.append((server, 'live'))
            elif server.status == 'SHUTOFF' and not server.task_state:
                if shutoff == 'cold':
                    todo.append((server, 'cold'))
                else:
                    outcomes.append(Outcome(
                        server, 'left', 'SHUTOFF, left on the host '
                        '(--shutoff cold moves it)'))
            elif server.task_state in MIGRATING:
                outcomes.append(Outcome(
                    server, 'running', 'a migration is already under way '
                    '(task %s); see "instanceha-manage maintenance status"'
                    % server.task_state))
            else:
                outcomes.append(Outcome(
                    server, 'left', 'status %s%s cannot be live-migrated; '
                    'move or stop it by hand' % (
                        server.status, ', task %s' % server.task_state
                        if server.task_state else '')))
        for o in outcomes:
            self.say(o.line())
        self.say('host %s: %d instance(s) to move, %d not' % (
            host, len(todo), len(outcomes)))
        outcomes += self._run(todo, None, wait, timeout, concurrency)
        return outcomes

    # -- moving -----------------------------------------------------------

    def _run(self, todo, dest: str | None, wait: bool, timeout: float,
             concurrency: int) -> list[Outcome]:
        """Move (server, how) items; at most ``concurrency`` followed."""
        total = len(todo)
        counter = iter(range(1, total + 1))
        lock = threading.Lock()

        def one(item):
            with lock:
                n = next(counter)
            return self._move(item[0], item[1], item[0].host, dest, wait,
                              timeout, '[%d/%d]' % (n, total))

        if not todo:
            return []
        return self._run_all(one, todo, max(1, concurrency) if wait else 4)

    def _moved_since(self, server: model.Server,
                     source: str) -> Outcome | None:
        """Read ``server`` again: not where it was listed, it stays.

        Someone (instance HA restarting a crashed instance, its user,
        Nova) may have moved, stopped or started it since the listing:
        only an instance still on ``source``, in the same status and
        with no task under way is moved. The outcome of one that is not.
        """
        try:
            now = self.cloud.get_server(server.id)
        except exceptions.CloudError as exc:
            return Outcome(server, 'unknown', 'not moved: it could not be '
                           'read again: %s' % exc)
        if now.host != source:
            return Outcome(server, 'left', 'not moved: it is on %s now, '
                           'not on %s' % (now.host, source))
        if now.task_state or now.status != server.status:
            return Outcome(server, 'running', 'not moved: %s %s now (was '
                           '%s)' % (now.status, 'task %s' % now.task_state
                                    if now.task_state else 'no task',
                                    server.status))
        return None

    def _move(self, server: model.Server, how: str, source: str,
              dest: str | None, wait: bool, timeout: float,
              tag: str) -> Outcome:
        kind = 'live migration' if how == 'live' else 'cold migration'
        where = ' to %s' % dest if dest else ''
        changed = self._moved_since(server, source)
        if changed is not None:
            self.say('%s %s' % (tag, changed.line()))
            return changed
        try:
            if dest is None:
                self.cloud.set_server_metadata(server.id, HOME_KEY, source)
            if how == 'live':
                rid = self.cloud.live_migrate(server.id, dest)
            else:
                rid = self.cloud.cold_migrate(server.id, dest)
        except exceptions.CloudError as exc:
            out = Outcome(server, 'failed', 'Nova refused the %s%s, it is '
                          'still on %s: %s' % (kind, where, source, exc))
            self.say('%s %s' % (tag, out.line()))
            return out
        self.say('%s %s (%s): %s%s started (request id %s)' % (
            tag, server.name, server.id, kind, where, rid or 'unknown'))
        if not wait:
            return Outcome(server, 'running', '%s%s started' % (kind, where))
        out = self._follow(server, how, source, dest, timeout,
                           self.clock.monotonic(), rid)
        self.say('%s %s' % (tag, out.line()))
        return out

    def _follow(self, server: model.Server, how: str, source: str,
                dest: str | None, timeout: float, started: float,
                rid: str | None = None) -> Outcome:
        """Poll the server until it left ``source`` (or failed)."""
        while True:
            try:
                now = self.cloud.get_server(server.id)
            except exceptions.CloudError as exc:
                return Outcome(server, 'unknown', 'lost track of it while '
                               'migrating: %s' % exc)
            elapsed = self.clock.monotonic() - started
            if how == 'cold' and now.status == 'VERIFY_RESIZE':
                try:
                    self.cloud.confirm_resize(server.id)
                except exceptions.CloudError as exc:
                    # Nova shows VERIFY_RESIZE a moment before the
                    # migration record is "finished" and refuses (400),
                    # or before the instance's vm_state is "resized"
                    # (409): both pass within a poll or two.
                    if exc.status in (400, 409) and elapsed <= timeout:
                        self.clock.sleep(self.poll)
                        continue
                    return Outcome(server, 'failed', 'moved to %s but '
                                   'confirming failed (it waits in '
                                   'VERIFY_RESIZE): %s' % (now.host, exc))
                continue
            if not now.task_state and now.status != 'VERIFY_RESIZE':
                if now.status == 'ERROR':
                    return Outcome(server, 'failed', 'in ERROR on %s after '
                                   'the migration%s' % (
                                       now.host, self._why(server.id, how,
                                                           rid)))
                if now.host != source and (dest is None or
                                           now.host == dest):
                    return Outcome(server, 'moved', '%s -> %s, %s (%.1f s)'
                                   % (source, now.host, now.status, elapsed))
                if elapsed > self.poll:  # rolled back, or never started
                    return Outcome(server, 'failed', 'still on %s, %s%s' % (
                        now.host, now.status, self._why(server.id, how,
                                                        rid)))
            if elapsed > timeout:
                return Outcome(server, 'running', 'still migrating after '
                               '%d s (task %s, on %s); Nova carries on: '
                               'check "instanceha-manage maintenance '
                               'status"' % (timeout, now.task_state,
                                            now.host))
            self.clock.sleep(self.poll)

    def _why(self, server_id: str, how: str,
             rid: str | None = None) -> str:
        """Nova's error and the newest migration record, for a message."""
        kind = 'live-migration' if how == 'live' else 'migration'
        bits = []
        action = 'live-migration' if how == 'live' else 'migrate'
        try:
            arid, errors = self.cloud.action_errors(server_id, action, rid)
            bits.append('Nova: %s (instance action request id %s)' % (
                '; '.join(errors) or 'no error event recorded',
                arid or rid or 'unknown'))
        except exceptions.CloudError as exc:
            bits.append('instance actions unreadable: %s' % exc)
        try:
            records = self.cloud.migrations(server_id=server_id,
                                            migration_type=kind)
        except exceptions.CloudError as exc:
            records = None
            bits.append('migration records unreadable: %s' % exc)
        if records:
            rec = records[0]
            bits.append('%s %s: status %s, %s -> %s' % (
                kind, rec.id, rec.status, rec.source_host,
                rec.dest_host or '?'))
        elif records is not None:
            bits.append('Nova recorded no %s' % kind)
        return ' (%s)' % '; '.join(bits)

    # -- status and end ---------------------------------------------------

    def status(self, host: str) -> dict:
        """The host's maintenance state, what is left and where homes are."""
        snapshot = self.cloud.snapshot()
        service = self._service(snapshot, host)
        parsed = reasons.of_service(service).maintenance
        active = [m for m in self.cloud.migrations(
            source_host=host, migration_type='live-migration')
            if m.status not in _MIGRATION_FAILED | {'completed', 'done'}]
        return {
            'host': host,
            'maintenance': _in_maintenance(service),
            'since': marker.format_ts(parsed.since) if parsed else None,
            'note': parsed.note if parsed else '',
            'status': service.status, 'state': service.state,
            'disabled_reason': service.disabled_reason,
            'on_host': [{'id': s.id, 'name': s.name, 'status': s.status,
                         'task_state': s.task_state}
                        for s in sorted(snapshot.servers_on(host),
                                        key=lambda s: s.name)],
            'away': [{'id': s.id, 'name': s.name, 'host': s.host,
                      'status': s.status}
                     for s in sorted(snapshot.servers, key=lambda s: s.name)
                     if s.metadata.get(HOME_KEY) == host and s.host != host],
            'migrating': [{'id': m.id, 'server': m.server_id,
                           'status': m.status, 'dest': m.dest_host}
                          for m in active],
        }

    def end(self, host: str, *, back: bool = False, wait: bool = False,
            timeout: float = 600, concurrency: int = 2) -> list[Outcome]:
        """Enable ``host`` again; with ``back``, bring its instances home."""
        snapshot = self.cloud.snapshot()
        service = self._service(snapshot, host)
        if not _in_maintenance(service):
            raise exceptions.InstanceHAError(
                'host %s is not in maintenance (status %s, disabled_reason '
                '%r); nothing to end' % (host, service.status,
                                         service.disabled_reason))
        if back and (service.forced_down or service.state != model.UP):
            raise exceptions.InstanceHAError(
                'host %s is down (Nova state %s): its instances cannot be '
                'live-migrated back; start its nova-compute first, or end '
                'maintenance without --return' % (host, service.state))
        self.cloud.update_service(service, status=model.ENABLED)
        self.say('host %s: enabled, maintenance over' % host)
        homed = sorted((s for s in snapshot.servers
                        if s.metadata.get(HOME_KEY) == host),
                       key=lambda s: s.name)
        outcomes, todo = [], []
        for server in homed:
            if not back or server.host == host:
                self._forget(server, outcomes)
            elif server.status in LIVE_STATES and not server.task_state:
                todo.append((server, 'live'))
            else:
                out = Outcome(server, 'left', 'status %s on %s: not moved '
                              'back; its %s record is kept' % (
                                  server.status, server.host, HOME_KEY))
                self.say(out.line())
                outcomes.append(out)
        if not back:
            return outcomes
        self.say('host %s: %d instance(s) to bring back' % (host, len(todo)))
        returned = []
        for item, out in zip(todo, self._run(todo, host, wait, timeout,
                                             concurrency)):
            if out.result == 'moved':
                self._forget(item[0], returned)
            returned.append(out)
        return outcomes + returned

    def _forget(self, server: model.Server, outcomes: list) -> None:
        try:
            self.cloud.delete_server_metadata(server.id, HOME_KEY)
        except exceptions.CloudError as exc:
            outcomes.append(Outcome(server, 'failed', 'could not remove %s: '
                                    '%s' % (HOME_KEY, exc)))
