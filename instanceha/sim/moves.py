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

"""Planned moves in the simulated Nova: live and cold migration.

What ``instanceha-manage maintenance`` asks of Nova, the way Nova answers:
the request is checked at once (a server busy with another task, in a
state that cannot move, or on a host whose compute is down is refused
with Nova's HTTP status); an accepted one is scheduled later and may
still fail asynchronously -- no valid host, or a compute that stopped
answering mid-way -- which only its migration record and the instance
action's error events show. A live migration needs both computes up for
its whole length; the guest keeps running and moves with it. A cold
migration ends in VERIFY_RESIZE, holding the source's capacity, until it
is confirmed.
"""

import dataclasses

from instanceha.engine import model
from instanceha import exceptions
from instanceha.sim import world as sim_world

#: Server states Nova live-migrates; cold-migrates.
LIVE_STATES = ('ACTIVE', 'PAUSED')
COLD_STATES = ('ACTIVE', 'SHUTOFF')
NO_VALID_HOST = 'NoValidHost: No valid host was found.'


@dataclasses.dataclass
class Action:
    """One instance action, as ``os-instance-actions`` lists it."""

    request_id: str
    action: str
    errors: list[str] = dataclasses.field(default_factory=list)
    #: The server's status before a cold migration (restored on confirm).
    prior: str | None = None
    #: Who asked (None: nobody; Nova's power-state sync).
    user_id: str | None = 'admin'
    #: World time it was recorded.
    start_time: float = 0.0


def _refuse(what: str, text: str, status: int) -> exceptions.CloudError:
    return exceptions.CloudError('%s: %s (HTTP %d)' % (what, text, status),
                                 status=status)


def record_action(world: 'sim_world.World', srv: 'sim_world.Server',
                  action: str, user_id: str | None = 'admin') -> Action:
    actions = world.instance_actions.setdefault(srv.id, [])
    act = Action('req-sim-%s-%d' % (srv.name, len(actions) + 1), action,
                 user_id=user_id, start_time=world.clock.t)
    actions.append(act)
    return act


def _check(world: 'sim_world.World', server_id: str, host: str | None,
           what: str, states: tuple[str, ...]) -> 'sim_world.Server':
    """Nova's synchronous checks of a migration request."""
    srv = world.servers.get(server_id)
    if srv is None:
        raise _refuse(what, 'instance not found', 404)
    if srv.task_state:
        raise _refuse(what, "Cannot '%s' instance while it is in task_state "
                      '%s' % (what.split()[0], srv.task_state), 409)
    if srv.status not in states:
        raise _refuse(what, "Cannot '%s' instance while it is in vm_state "
                      '%s' % (what.split()[0], srv.status.lower()), 409)
    source = world.hosts[srv.host]
    if world.service_state(source) != model.UP:
        raise _refuse(what, 'Compute service of %s is unavailable at this '
                      'time.' % source.name, 400)
    if host is not None and host not in world.hosts:
        raise _refuse(what, 'Compute host %s could not be found.' % host,
                      400)
    if host == source.name:
        raise _refuse(what, "The target host can't be the same one.", 400)
    return srv


def _start(world: 'sim_world.World', srv: 'sim_world.Server',
           host: str | None, kind: str, task: str,
           action: str) -> tuple['sim_world.Migration', Action]:
    now = world.clock.t
    source = world.hosts[srv.host]
    mig = sim_world.Migration(
        id=str(next(world._mig_ids)), server_id=srv.id,
        source_host=source.name, dest_host=None, status='queued',
        created_at=now, updated_at=now, episode=source.episode,
        requested_dest=host, kind=kind)
    world.migrations.append(mig)
    act = record_action(world, srv, action)
    srv.task_state = task
    world._changed(srv)
    return mig, act


def _fail(world: 'sim_world.World', srv: 'sim_world.Server',
          mig: 'sim_world.Migration', act: Action, error: str) -> None:
    """An accepted migration fails: the server stays where it was."""
    mig.status = 'error'
    mig.updated_at = world.clock.t
    act.errors.append(error)
    srv.task_state = None
    world._changed(srv)
    world.say('nova', '%s_error' % mig.kind.replace('-', '_'),
              mig.source_host, server=srv.name, reason=error)


def _scheduled(world: 'sim_world.World', srv: 'sim_world.Server',
               mig: 'sim_world.Migration', act: Action,
               event: str) -> str | None:
    """Nova's scheduler picks the destination (or fails the move)."""
    dest = world._pick(srv, mig)
    if dest is None:
        _fail(world, srv, mig, act, '%s: %s' % (event, NO_VALID_HOST))
        return None
    mig.dest_host = dest
    mig.status = 'running' if mig.kind == 'live-migration' else 'migrating'
    mig.updated_at = world.clock.t
    world.use(dest, world.flavors[srv.flavor].vcpus)
    return dest


def _move_guest(world: 'sim_world.World', srv: 'sim_world.Server',
                source: str, dest: str) -> None:
    srv.host = dest
    srv.task_state = None
    if source in srv.running_on:
        srv.running_on.discard(source)
        srv.running_on.add(dest)
        world.check_guests(srv)
    world._changed(srv)


# -- live migration -----------------------------------------------------------

def live_migrate(world: 'sim_world.World', server_id: str,
                 host: str | None) -> str:
    srv = _check(world, server_id, host, 'os-migrateLive server %s'
                 % server_id, LIVE_STATES)
    mig, act = _start(world, srv, host, 'live-migration', 'migrating',
                      'live-migration')
    world.at(world.clock.t + world.timing.schedule_time,
             lambda: _live_scheduled(world, srv, mig, act))
    return act.request_id


def _live_scheduled(world, srv, mig, act) -> None:
    if world.service_state(world.hosts[mig.source_host]) != model.UP:
        _fail(world, srv, mig, act, 'conductor_live_migrate_instance: '
              'MigrationPreCheckError: compute service of %s is down'
              % mig.source_host)
        return
    dest = _scheduled(world, srv, mig, act, 'conductor_live_migrate_instance')
    if dest is not None:
        world.at(world.clock.t + world.timing.live_migration_time,
                 lambda: _live_done(world, srv, mig, act))


def _live_done(world, srv, mig, act) -> None:
    source, dest = world.hosts[mig.source_host], world.hosts[mig.dest_host]
    need = world.flavors[srv.flavor].vcpus
    if not (source.beating and dest.beating):
        world.use(dest.name, -need)
        lost = source if not source.beating else dest
        _fail(world, srv, mig, act, 'compute_live_migration: '
              'MigrationError: compute %s stopped answering mid-way'
              % lost.name)
        return
    mig.status = 'completed'
    mig.updated_at = world.clock.t
    world.use(source.name, -need)
    _move_guest(world, srv, source.name, dest.name)
    world.say('nova', 'live_migrated', source.name, server=srv.name,
              dest=dest.name)


# -- cold migration -----------------------------------------------------------

def cold_migrate(world: 'sim_world.World', server_id: str,
                 host: str | None) -> str:
    srv = _check(world, server_id, host, 'migrate server %s' % server_id,
                 COLD_STATES)
    mig, act = _start(world, srv, host, 'migration', 'resize_prep',
                      'migrate')
    act.prior = srv.status
    world.at(world.clock.t + world.timing.schedule_time,
             lambda: _cold_scheduled(world, srv, mig, act))
    return act.request_id


def _cold_scheduled(world, srv, mig, act) -> None:
    if _scheduled(world, srv, mig, act, 'conductor_migrate_server'):
        srv.task_state = 'resize_migrating'
        world._changed(srv)
        world.at(world.clock.t + world.timing.rebuild_time,
                 lambda: _cold_done(world, srv, mig, act))


def _cold_done(world, srv, mig, act) -> None:
    if not world.hosts[mig.dest_host].beating:
        world.use(mig.dest_host, -world.flavors[srv.flavor].vcpus)
        _fail(world, srv, mig, act, 'compute_finish_resize: compute %s '
              'stopped answering' % mig.dest_host)
        return
    mig.status = 'finished'
    mig.updated_at = world.clock.t
    _move_guest(world, srv, mig.source_host, mig.dest_host)
    srv.status = 'VERIFY_RESIZE'
    world.say('nova', 'cold_migrated', mig.source_host, server=srv.name,
              dest=mig.dest_host)


def confirm_resize(world: 'sim_world.World', server_id: str) -> None:
    srv = world.servers.get(server_id)
    what = 'confirmResize server %s' % server_id
    if srv is None:
        raise _refuse(what, 'instance not found', 404)
    if srv.status != 'VERIFY_RESIZE':
        raise _refuse(what, 'Instance has not been resized.', 400)
    mig = next(m for m in reversed(world.migrations)
               if m.server_id == srv.id and m.kind == 'migration'
               and m.status == 'finished')
    cold = next(a for a in reversed(world.instance_actions[srv.id])
                if a.action == 'migrate')
    record_action(world, srv, 'confirmResize')
    mig.status = 'confirmed'
    mig.updated_at = world.clock.t
    world.use(mig.source_host, -world.flavors[srv.flavor].vcpus)
    srv.status = cold.prior or 'ACTIVE'
    world._changed(srv)


def action_errors(world: 'sim_world.World', srv: 'sim_world.Server',
                  action: str, request_id: str | None
                  ) -> tuple[str | None, list[str]]:
    actions = world.instance_actions.get(srv.id, [])
    chosen = next((a for a in actions if request_id
                   and a.request_id == request_id), None) or next(
        (a for a in reversed(actions) if a.action == action), None)
    if chosen is None:
        return None, []
    return chosen.request_id, list(chosen.errors)
