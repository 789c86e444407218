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

"""Guests that stop on their own, and users who stop and start them.

A crashed guest, as nova-compute really handles it: the hypervisor
reports the guest stopped, and the compute service's power-state sync
stops the instance in Nova, recording an instance action ``stop`` made
by no user (an admin context without one). Only a running nova-compute
syncs: on a host whose nova-compute is down the instance stays ACTIVE in
Nova until the service is back. A user's own stop records the user.

A crash loop (``crash-instance SERVER loop SECONDS``) makes the guest die
again SECONDS after each later start, wherever it runs: a guest whose
fault travels with it (a broken image, a kernel that panics).
"""

import dataclasses

from instanceha.engine import model
from instanceha import exceptions
from instanceha.sim import moves

#: The project's own user, stopping and starting its instances.
USER = 'demo-user'


@dataclasses.dataclass
class CrashLoop:
    #: Seconds after each start the guest dies again.
    after: float
    #: Crashes left (None: every start).
    times: int | None = None


def crash(world, name: str, loop: float | None = None,
          times: int | None = None) -> None:
    """The guest of ``name`` dies now (its host and Nova are fine)."""
    srv = world.server(name)
    if loop is not None:
        world.crash_loops[srv.id] = CrashLoop(loop, times)
    _dies(world, srv)


def _dies(world, srv) -> None:
    stopped(world, srv, 'guest_crashed')


def stopped(world, srv, event: str, **details) -> None:
    """The guest of ``srv`` stops now (``event`` says how).

    Nova learns it from nova-compute's power-state sync, once that runs.
    """
    if not srv.running_on:
        return
    srv.running_on.clear()
    world._changed(srv)
    world.say('host', event, srv.host, server=srv.name, **details)
    world.at(world.clock.t + world.timing.power_sync_time,
             lambda: _power_sync(world, srv))


def _power_sync(world, srv) -> None:
    """nova-compute notices the dead guest and stops the instance."""
    if srv.running_on or srv.status != 'ACTIVE' or srv.task_state:
        return
    host = world.hosts.get(srv.host)
    if host is None or not host.beating:
        # No nova-compute to sync: Nova keeps showing ACTIVE; the sync
        # runs once the service is back.
        world.at(world.clock.t + world.timing.report_interval,
                 lambda: _power_sync(world, srv))
        return
    srv.status = 'SHUTOFF'
    world._changed(srv)
    moves.record_action(world, srv, 'stop', user_id=None)
    world.say('nova', 'power_synced', srv.host, server=srv.name,
              status='SHUTOFF')


def user_power(world, name: str, on: bool) -> None:
    """The instance's user stops (or starts) it through Nova's API."""
    srv = world.server(name)
    if on:
        _start(world, srv, USER)
        return
    if srv.status != 'ACTIVE' or srv.task_state:
        raise exceptions.ConfigurationError(
            'stop-instance %s: it is %s, not ACTIVE' % (srv.name,
                                                        srv.status))
    srv.status = 'SHUTOFF'
    srv.running_on.clear()
    world._changed(srv)
    moves.record_action(world, srv, 'stop', user_id=USER)


def user_delete(world, name: str) -> None:
    """The instance's user deletes it.

    Gone, but a ``changes-since`` listing still shows it (status DELETED).
    """
    srv = world.server(name)
    if srv.task_state:
        raise exceptions.ConfigurationError(
            'delete-instance %s: it is %s' % (srv.name, srv.task_state))
    moves.record_action(world, srv, 'delete', user_id=USER)
    if srv.host is not None:
        world.use(srv.host, -world.flavors[srv.flavor].vcpus)
    srv.running_on.clear()
    srv.status = 'DELETED'
    world.crash_loops.pop(srv.id, None)
    del world.servers[srv.id]
    world.deleted_servers[srv.id] = srv
    world._changed(srv)


def api_start(world, server_id: str) -> None:
    """Nova's ``os-start`` as the service calls it."""
    srv = world.servers.get(server_id)
    if srv is None:
        raise exceptions.CloudError('start %s: instance not found '
                                    '(HTTP 404)' % server_id, status=404)
    world.check_actor('start', srv.host)
    _start(world, srv, 'admin')


def _start(world, srv, user: str) -> None:
    what = 'start %s' % srv.name
    if srv.task_state or srv.status != 'SHUTOFF':
        raise exceptions.CloudError(
            "%s: Cannot 'start' instance while it is in %s (HTTP 409)" % (
                what, ('task_state %s' % srv.task_state) if srv.task_state
                else 'vm_state %s' % srv.status.lower()), status=409)
    if world.service_state(world.hosts[srv.host]) != model.UP:
        raise exceptions.CloudError(
            '%s: Compute service of %s is unavailable at this time. '
            '(HTTP 409)' % (what, srv.host), status=409)
    act = moves.record_action(world, srv, 'start', user_id=user)
    srv.task_state = 'powering-on'
    world._changed(srv)
    world.at(world.clock.t + world.timing.start_time,
             lambda: _started(world, srv, act))


def _started(world, srv, act) -> None:
    srv.task_state = None
    world._changed(srv)
    host = world.hosts[srv.host]
    if not host.beating:
        act.errors.append('compute_start_instance: compute %s stopped '
                          'answering' % host.name)
        return
    srv.status = 'ACTIVE'
    srv.running_on.add(host.name)
    world.check_guests(srv)
    world.say('nova', 'started', host.name, server=srv.name)
    loop = world.crash_loops.get(srv.id)
    if loop is None:
        return
    if loop.times is not None:
        loop.times -= 1
        if loop.times <= 0:
            del world.crash_loops[srv.id]
    world.at(world.clock.t + loop.after, lambda: _dies(world, srv))
