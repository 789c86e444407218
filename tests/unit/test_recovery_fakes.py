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

"""A small, deterministic in-memory cloud for the recovery unit tests.

Deliberately tiny: it models only what the workflow's decisions depend
on (service state, forced_down, markers, evacuate refusal while the
source is up, migration records, power state after a rebuild). The full
simulated cloud lives in instanceha/sim; the real thing is exercised by
tests/functional/test_recovery*.
"""

import contextlib
import dataclasses
import datetime
import itertools


from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins import loader
from tests import conf_fixture

T0 = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


class FakeClock(ports.Clock):
    def __init__(self):
        self.t = 0.0

    def now(self):
        return T0 + datetime.timedelta(seconds=self.t)

    def monotonic(self):
        return self.t

    def sleep(self, seconds):
        self.t += max(seconds, 0)


class FakeCloud(ports.CloudPort):
    """Hosts host1..hostN and what Nova says about them.

    A migration finishes on the migrations() call after the one that
    first listed it (about one tick of rebuild time).
    """

    def __init__(self, clock, hosts=3):
        self.clock = clock
        self.alive = {'host%d' % i: True for i in range(1, hosts + 1)}
        self.services = {
            h: model.Service(id='svc-%s' % h, host=h, state=model.UP,
                             status=model.ENABLED, zone='nova')
            for h in self.alive}
        self.servers: dict[str, model.Server] = {}
        self.migs: list[model.Migration] = []
        self.aggregates: list[model.Aggregate] = []
        self.calls: list[tuple] = []
        #: server id -> number of rebuilds that fail
        self.fail_rebuild: dict[str, int] = {}
        #: hosts on which every rebuild fails
        self.bad_dest: set[str] = set()
        self.refuse: dict[str, int] = {}
        self.locked: dict[str, bool] = {}
        #: Like Nova's service_down_time: a dead host still shows 'up'
        #: (with its last heartbeat) for this long.
        self.down_time = 0.0
        #: All records with one time stamp, listed oldest first: what
        #: Nova's second-precision created_at can look like.
        self.same_second = False
        self.last_beat = {h: 0.0 for h in self.alive}
        self._ids = itertools.count(1)
        self.api_calls = 0

    # -- seeding -------------------------------------------------------------
    def boot(self, host, n=1, status='ACTIVE', prefix=None, metadata=None):
        out = []
        for _ in range(n):
            i = next(self._ids)
            sid = '%s-%03d' % (prefix or 'vm', i)
            self.servers[sid] = model.Server(
                id=sid, name=sid, host=host, status=status,
                flavor=model.Flavor('m1'), image_id='img',
                metadata=dict(metadata or {}))
            out.append(sid)
        return out

    def kill(self, host):
        self.alive[host] = False

    def revive(self, host):
        """The host's compute starts: it cleans up evacuated guests."""
        self.alive[host] = True
        self.migs = [_replace(m, status='completed')
                     if m.source_host == host and m.status == 'done' else m
                     for m in self.migs]

    # -- CloudPort -----------------------------------------------------------
    def _svc(self, host):
        svc = self.services[host]
        if self.alive[host]:
            self.last_beat[host] = self.clock.t
        beat = self.last_beat[host]
        fresh = self.clock.t - beat <= self.down_time
        state = model.UP if fresh and not svc.forced_down else model.DOWN
        return model.Service(
            id=svc.id, host=host, state=state, status=svc.status,
            forced_down=svc.forced_down,
            updated_at=T0 + datetime.timedelta(seconds=beat),
            disabled_reason=svc.disabled_reason, zone=svc.zone)

    def snapshot(self, *, images=False, migrations_since=None):
        self.api_calls += 1
        return model.Snapshot(
            taken_at=self.clock.now(),
            services=tuple(self._svc(h) for h in sorted(self.services)),
            servers=tuple(self.servers[k] for k in sorted(self.servers)),
            aggregates=tuple(self.aggregates))

    def update_service(self, service, *, status=None, disabled_reason=None,
                       forced_down=None):
        self.calls.append(('update_service', service.host, status,
                           disabled_reason, forced_down))
        if status is None and forced_down is None:
            raise exceptions.CloudError(
                'HTTP 400: No updates were requested. Fields \'status\' or '
                '\'forced_down\' should be specified.', status=400)
        if disabled_reason is not None and status != model.DISABLED:
            raise exceptions.CloudError('HTTP 400: disabled_reason needs '
                                        'status disabled', status=400)
        if forced_down is False and any(
                m.source_host == service.host and m.status == 'done'
                for m in self.migs):
            raise exceptions.CloudError(
                'HTTP 400: Unable to force up host %s as `done` evacuation '
                'migration records remain' % service.host, status=400)
        svc = self.services[service.host]
        changes = {}
        if status is not None:
            changes['status'] = status
            if status == model.ENABLED:
                changes['disabled_reason'] = None
        if disabled_reason is not None:
            changes['disabled_reason'] = disabled_reason
        if forced_down is not None:
            changes['forced_down'] = forced_down
        self.services[service.host] = svc = _replace(svc, **changes)
        return self._svc(service.host)

    def _pick(self, src):
        for h in sorted(self.services):
            s = self._svc(h)
            if h != src and s.state == model.UP and s.status == 'enabled':
                return h
        return None

    def evacuate(self, server_id, *, host=None):
        self.calls.append(('evacuate', server_id, host))
        srv = self.servers[server_id]
        if self.refuse.get(server_id):
            self.refuse[server_id] -= 1
            raise exceptions.CloudError('refused', status=409)
        if self._svc(srv.host).state == model.UP:
            raise exceptions.CloudError(
                'Compute service of %s is still in use' % srv.host,
                status=400)
        dest = host or self._pick(srv.host)
        self.migs.insert(0, model.Migration(
            id=str(next(self._ids)), server_id=server_id,
            source_host=srv.host, dest_host=dest, status='accepted',
            created_at=T0 if self.same_second else self.clock.now()))
        self.servers[server_id] = _replace(srv, task_state='rebuilding')

    def _progress(self):
        for i, mig in enumerate(self.migs):
            if mig.status != 'accepted':
                continue
            srv = self.servers[mig.server_id]
            fails = self.fail_rebuild.get(srv.id, 0)
            if fails or mig.dest_host in self.bad_dest or not mig.dest_host:
                if fails:
                    self.fail_rebuild[srv.id] = fails - 1
                self.migs[i] = _replace(mig, status='failed')
                self.servers[srv.id] = _replace(srv, status='ERROR',
                                                task_state=None)
                continue
            status = 'SHUTOFF' if srv.status == 'SHUTOFF' else 'ACTIVE'
            self.migs[i] = _replace(mig, status='done')
            self.servers[srv.id] = _replace(srv, host=mig.dest_host,
                                            status=status, task_state=None)

    def migrations(self, *, server_id=None, source_host=None, since=None):
        self.api_calls += 1
        out = [m for m in self.migs
               if (server_id is None or m.server_id == server_id) and
               (source_host is None or m.source_host == source_host) and
               (since is None or m.created_at >= since)]
        self._progress()
        return out[::-1] if self.same_second else out

    def get_server(self, server_id):
        if server_id not in self.servers:
            raise exceptions.CloudError('no such server', status=404)
        return self.servers[server_id]

    def set_server_lock(self, server_id, locked, reason=None):
        self.calls.append(('lock' if locked else 'unlock', server_id))
        self.locked[server_id] = locked
        self.servers[server_id] = _replace(self.servers[server_id],
                                           locked=locked)

    def stop_server(self, server_id):
        self.calls.append(('stop', server_id))
        self.servers[server_id] = _replace(self.servers[server_id],
                                           status='SHUTOFF')

    def reset_server_state(self, server_id, state):
        self.calls.append(('reset', server_id, state))
        self.servers[server_id] = _replace(self.servers[server_id],
                                           status=state.upper())

    def _planned(self, *args, **kwargs):
        raise AssertionError('the recovery engine made a planned move '
                             '(maintenance only)')

    live_migrate = cold_migrate = confirm_resize = action_errors = \
        set_server_metadata = delete_server_metadata = _planned

    # -- helpers ---------------------------------------------------------------
    def evacuations(self, server_id):
        return [c for c in self.calls
                if c[0] == 'evacuate' and c[1] == server_id]


def _replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


class FakeFencer(ports.Fencer):
    def __init__(self, cloud, configured=None):
        self.cloud = cloud
        self.configured_hosts = configured
        self.fail: dict[str, int] = {}
        self.fail_on: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []

    def configured(self, host):
        return self.configured_hosts is None or host in self.configured_hosts

    def power_state(self, host):
        # The fake's truth: a host that is not alive is powered off.
        off = not self.cloud.alive[host]
        return ports.PowerReading(host=host, off=off, on=not off,
                                  detail='ipmi %s' % ('off' if off else 'on'))

    def fence(self, host):
        self.calls.append(('off', host))
        if self.fail.get(host):
            self.fail[host] -= 1
            raise exceptions.FencingError('bmc of %s: timeout' % host)
        self.cloud.kill(host)
        return ports.FenceResult(host=host, level=1, devices=('ipmi',))

    def unfence(self, host):
        self.calls.append(('on', host))
        if self.fail_on.get(host):
            self.fail_on[host] -= 1
            raise exceptions.FencingError('bmc of %s: no answer' % host)
        self.cloud.revive(host)
        return ports.FenceResult(host=host, level=1, devices=('ipmi',))


class FakeCoordinator(ports.Coordinator):
    def __init__(self):
        self.leader = True
        self.locked: list[str] = []

    def is_leader(self):
        return self.leader

    @contextlib.contextmanager
    def host_lock(self, host):
        self.locked.append(host)
        yield


class FakeKdump(ports.KdumpWatch):
    def __init__(self):
        self.messages = {}

    def last_message(self, host):
        return self.messages.get(host)


def make_conf(**overrides):
    """The shared test configuration with the rigs' own defaults."""
    # Retries of a rebuild at once unless a test is about the back-off
    # (TestRetryBackoff): the fakes fail on command, not by load.
    base = {'poll': 1, 'delta': 5, 'fence_retry_interval': 10,
            'fence_retry_max_interval': 40, 'evacuation.retry_interval': 0}
    base.update(overrides)
    return conf_fixture.make_conf(**base)


class Rig:
    """An engine on the fakes, with the real configured drivers."""

    def __init__(self, hosts=3, configured=None, kdump=False, **overrides):
        from instanceha.engine import recovery
        self.clock = FakeClock()
        self.cloud = FakeCloud(self.clock, hosts)
        self.fencer = FakeFencer(self.cloud, configured)
        self.coordinator = FakeCoordinator()
        self.events = events.RecordingEventSink()
        self.kdump = FakeKdump() if kdump else None
        self.conf = make_conf(**overrides)
        self.drivers = loader.load_configured(self.conf)
        self.env = ports.Environment(
            cloud=self.cloud, clock=self.clock, fencer=self.fencer,
            coordinator=self.coordinator, events=self.events,
            executor=executor.InlineExecutor(), kdump=self.kdump)
        self.engine = recovery.Engine(self.conf, self.drivers, self.env)

    def run(self, seconds, step=1.0):
        end = self.clock.t + seconds
        while self.clock.t < end:
            self.engine.tick()
            self.clock.t += step

    def power_on_without_boot(self) -> list:
        """Make unfencing power hosts on while their compute stays down.

        Stands for a slow or failed boot; returns the list of the
        simulated times at which it happened.
        """
        booted = []
        unfence = self.fencer.unfence

        def unfence_without_boot(host):
            result = unfence(host)
            self.cloud.kill(host)
            booted.append(self.clock.t)
            return result

        self.fencer.unfence = unfence_without_boot
        return booted

    def run_until(self, condition, seconds):
        """Run second by second until ``condition()``, at most ``seconds``.

        Returns whether the condition was met.
        """
        for _ in range(seconds):
            self.run(1)
            if condition():
                return True
        return False

    def restart(self):
        """A new engine (and drivers) on the same cloud: a new process."""
        from instanceha.engine import recovery
        self.drivers = loader.load_configured(self.conf)
        self.engine = recovery.Engine(self.conf, self.drivers, self.env)

    def transitions(self, host):
        return [(d['old'], d['new'])
                for d in self.events.named(events.HOST_STATE, host)]


def failed_host_rig() -> Rig:
    """A rig whose host1 ended FAILED: its one rebuild failed (smart)."""
    rig = Rig(**{'evacuation.strategy': 'smart', 'evacuation.retries': 0})
    vm, = rig.cloud.boot('host1', 1)
    rig.cloud.fail_rebuild[vm] = 1
    rig.run(2)
    rig.cloud.kill('host1')
    rig.run(20)
    return rig
