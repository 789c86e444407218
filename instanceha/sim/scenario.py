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

"""A scenario on disk: one directory per case.

=================  ======================================================
``README.md``      intent and expected outcome, for humans
``topology.yaml``  hosts, devices, aggregates, AZs, flavors, images,
                   instances, and a ``simulation:`` section (end time,
                   copies of the service, timings, ``nova_checks_unforce``:
                   Nova refuses to clear forced_down while a host's
                   evacuation records are done, as its API does;
                   ``nova_stamps_writes``: Nova stamps updated_at on
                   every write of a service, as it does; ``refusals``:
                   a command that cannot happen at its moment, such as
                   a stop of an instance not running, is refused and
                   logged instead of ending the run, for random
                   timelines)
``instanceha.conf`` the service's configuration, the same options as in
                   production; a relative ``[fencing] config_file`` is
                   read from the case directory
``fencing.yaml``   the fencing configuration (``driver: sim`` devices)
``state.yaml``     optional: state at time zero that differs from a
                   healthy cloud (markers, migrations in flight, hosts
                   already fenced), e.g. "the service restarted while
                   host3 was mid-evacuation"
``timeline``       one command per line: ``<seconds> <command> <args>``
``log.expect``     the golden event log
=================  ======================================================

The timeline commands (see :data:`COMMANDS`) are what the world and the
operators do; the service's own actions come only from the engine.
"""

import dataclasses
import os
import shlex

import yaml

from instanceha.engine import model
from instanceha.sim import hostside as sim_hostside
from instanceha.sim import watchdogs as sim_watchdogs
from instanceha.sim import world as sim_world

#: File options that a scenario's config gives relative to its directory.
RELATIVE_PATHS = (('fencing', 'config_file'), ('heartbeat', 'key_file'),
                  ('heartbeat', 'previous_key_file'), ('veto_hooks', 'hooks'))

#: Timeline commands: name -> (arguments, what it does).
COMMANDS = {
    'power-off': ('HOST', 'the host loses power (not a fence)'),
    'power-on': ('HOST', 'the host gets power back and boots'),
    'crash': ('HOST', 'kernel panic: powered on, nothing runs'),
    'announce': ('HOST reboot|poweroff [hang]',
                 'a clean reboot or power-off of the host: its heartbeat '
                 'agent announces it (and waits for the answer, under the '
                 'migrate policy until the instances are moved away), then '
                 'nova-compute and the guests stop and the host reboots or '
                 'powers off; hang: the shutdown never completes (powered '
                 'on, nothing runs)'),
    'kdump': ('HOST [SECONDS]', 'crash into kdump; messages for SECONDS '
              '(default 120), then reboot'),
    'cut-network': ('HOST', 'cut the host\'s control-plane network'),
    'restore-network': ('HOST', 'restore it'),
    'isolate': ('HOST', 'cut only the link to Nova: nova-compute looks '
                'dead, the host\'s own heartbeat agent still gets through'),
    'unisolate': ('HOST', 'restore the link to Nova'),
    'watchdog': ('HOST answers-lost|answers-ok|hang|unhang',
                 'the host\'s heartbeat agent (topology: watchdog: '
                 'SECONDS) loses the service\'s answers one way (its '
                 'heartbeats still arrive), gets them again, hangs (no '
                 'heartbeat, no feeding of its watchdog) or runs again'),
    'partition': ('HOST', 'cut the host\'s link to the control plane (the '
                  'service and Nova) while its own network and isolation '
                  'addresses work (topology: isolation: SECONDS for its '
                  'agent to notice)'),
    'unpartition': ('HOST', 'restore that link'),
    'addresses': ('HOST down|up', 'the host\'s isolation addresses stop '
                  '(or start again) answering it'),
    'agent': ('HOST kill|start|answers-lost|answers-ok',
              'the host\'s heartbeat agent is killed (its watchdog stays '
              'armed), started again alone (a new agent run on the running '
              'host), loses the service\'s answers one way (its heartbeats '
              'still arrive) or gets them again'),
    'wire': ('HOST replay|forge|stale|key FILE',
             'with simulation: {wire: true}: an old datagram of the host\'s '
             'agent sent again, one signed with a wrong key, one 10 minutes '
             'old, or its agent signs with the key derived from the master '
             'in FILE from now on'),
    'stop-compute': ('HOST', 'stop nova-compute (guests keep running)'),
    'start-compute': ('HOST', 'start nova-compute again'),
    'crash-instance': ('SERVER [loop SECONDS] [times N]',
                       'the guest dies on a healthy host (nova-compute\'s '
                       'power sync then stops it, by no user); loop: it '
                       'dies again SECONDS after each later start (N more '
                       'times, default every start)'),
    'stop-instance': ('SERVER', 'the instance\'s user stops it'),
    'start-instance': ('SERVER', 'the instance\'s user starts it'),
    'delete-instance': ('SERVER', 'the instance\'s user deletes it'),
    'bmc': ('DEVICE BEHAVIOUR', 'make a fencing device behave: %s '
            '(lies-on: it powers as asked but always reads "on")'
            % ', '.join(sim_world.ALL_BEHAVIOURS)),
    'health': ('DEVICE ok|KIND:HEALTH[:PART]...',
               'the hardware conditions a fencing device reports from now '
               'on (e.g. power_supply:Critical:PSU1; ok: none), read by '
               'the proactive checks ([proactive] interval)'),
    'rebuild-fail': ('SERVER [on HOST] [times N]',
                     'make the next rebuild(s) of SERVER fail'),
    'disable': ('HOST [REASON...]', 'an operator disables the service'),
    'enable': ('HOST', 'an operator enables the service'),
    'capacity': ('HOST VCPUS', 'change a host\'s capacity'),
    'service': ('crash|restart|stop|start [COPY]',
                'crash, restart, stop or start a copy of instanceha'),
    'coordination': ('down|up', 'the coordination backend fails/returns'),
    'nova': ('fail CALL [N] [ERROR] [after M] | down | up | '
             'delay-migrations SECONDS | delete-service HOST',
             'Nova API faults: the next N (default 1) calls of CALL (%s) '
             'fail with ERROR (%s; default 500; timeout: Nova carries the '
             'call out, the answer is lost), after letting M through; '
             'down/up: the API is '
             'unreachable/back; delay-migrations: evacuation records '
             'requested from now on are listed only SECONDS later; '
             'delete-service: the host\'s compute service record is '
             'deleted' % (', '.join(sim_world.NOVA_CALLS),
                          ', '.join(sim_world.NOVA_ERRORS))),
    'clock': ('skew SECONDS', 'the clock of the machines instanceha runs '
              'on is SECONDS ahead of Nova\'s (negative: behind) from now '
              'on; Nova and the hosts keep the simulated time'),
    'maintenance': ('start HOST [wait] [cold] [reason WORDS...] | end HOST '
                    '[return] [wait]',
                    'an operator runs "instanceha-manage maintenance start" '
                    '(wait: --wait, cold: --shutoff cold, reason: --reason) '
                    'or "maintenance end" (return: --return) against the '
                    'simulated Nova'),
    'set': ('[GROUP.]OPTION VALUE', 'change an option of every copy (the '
            'copies are restarted to read it, like a config reload)'),
    'pause': ('SECONDS|indefinite [REASON...]', 'an operator pauses '
              'instance HA for SECONDS (or with no end), as '
              '"instanceha-manage pause" does: shared by every copy'),
    'resume': ('', 'an operator lifts the pause ("instanceha-manage '
               'resume")'),
    'reload': ('[[GROUP.]OPTION VALUE]...', 'an operator edits these '
               'options in the configuration file and sends SIGHUP to every '
               'running copy: options that change live change, the others '
               'are named as needing a restart (and apply at the next '
               'start); the fencing file and heartbeat keys are re-read, a '
               'bad new file is refused (e.g. "reload fencing.config_file '
               'fencing-new.yaml"; a relative file is in the case '
               'directory)'),
    'fencing': ('off|on HOST', 'an operator runs "instanceha-manage fencing '
                'off|on HOST --yes": refused while Nova\'s marker shows the '
                'host in a recovery, else through the host\'s fencing '
                'levels'),
    'hosts': ('clear HOST [enable]', 'an operator runs "instanceha-manage '
              'hosts clear HOST" (enable: --enable): a host marked failed '
              'or left disabled is handed back'),
    'instances': ('clear SERVER [start]', 'an operator runs '
                  '"instanceha-manage instances clear SERVER" (start: '
                  '--start): an instance instanceha gave up on is taken '
                  'out of its error state and its counters removed'),
    'end': ('', 'stop the simulation here'),
}


@dataclasses.dataclass(frozen=True)
class Command:
    t: float
    name: str
    args: tuple[str, ...]
    line: int


@dataclasses.dataclass
class Scenario:
    name: str
    path: str
    topology: dict
    state: dict
    config_file: str
    timeline: list[Command]

    @property
    def expect_file(self) -> str:
        return os.path.join(self.path, 'log.expect')

    @property
    def readme(self) -> str:
        try:
            with open(os.path.join(self.path, 'README.md')) as f:
                return f.read()
        except FileNotFoundError:
            return ''

    @property
    def settings(self) -> dict:
        return self.topology.get('simulation') or {}


def _yaml(path: str, required: bool = True) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        if required:
            raise sim_world.ScenarioError('scenario file missing: %s' % path)
        return {}
    except yaml.YAMLError as exc:
        raise sim_world.ScenarioError('%s: not valid YAML: %s' % (path, exc))
    if not isinstance(data, dict):
        raise sim_world.ScenarioError('%s: must hold a mapping' % path)
    return data


def parse_timeline(text: str, where: str = 'timeline') -> list[Command]:
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        try:
            t = float(words[0])
        except ValueError:
            raise sim_world.ScenarioError(
                '%s line %d: expected "<seconds> <command> ...", got %r'
                % (where, no, raw))
        if len(words) < 2 or words[1] not in COMMANDS:
            raise sim_world.ScenarioError(
                '%s line %d: unknown command %r; commands: %s'
                % (where, no, ' '.join(words[1:2]), ', '.join(COMMANDS)))
        if out and t < out[-1].t:
            raise sim_world.ScenarioError(
                '%s line %d: time %g is before the previous line\'s %g'
                % (where, no, t, out[-1].t))
        out.append(Command(t, words[1], tuple(words[2:]), no))
    return out


def load(path: str) -> Scenario:
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise sim_world.ScenarioError('no scenario directory %s' % path)
    timeline_path = os.path.join(path, 'timeline')
    try:
        with open(timeline_path) as f:
            timeline = parse_timeline(f.read(), timeline_path)
    except FileNotFoundError:
        timeline = []
    config = os.path.join(path, 'instanceha.conf')
    if not os.path.exists(config):
        raise sim_world.ScenarioError('scenario file missing: %s' % config)
    return Scenario(
        name=os.path.basename(path), path=path,
        topology=_yaml(os.path.join(path, 'topology.yaml')),
        state=_yaml(os.path.join(path, 'state.yaml'), required=False),
        config_file=config, timeline=timeline)


# --- building the world -----------------------------------------------------

def _merge(base: dict, over: dict) -> dict:
    out = {k: dict(v or {}) for k, v in (base or {}).items()}
    for k, v in (over or {}).items():
        out.setdefault(k, {}).update(v or {})
    return out


def _expand_instances(topo: dict) -> dict:
    out = dict(topo.get('instances') or {})
    for group in topo.get('instance_groups') or []:
        hosts = group['hosts']
        for i in range(group['count']):
            spec = {k: v for k, v in group.items()
                    if k not in ('prefix', 'count', 'hosts')}
            spec['host'] = hosts[i % len(hosts)]
            out['%s%d' % (group['prefix'], i + 1)] = spec
    return out


def _expand_hosts(topo: dict) -> dict:
    out = dict(topo.get('hosts') or {})
    for group in topo.get('host_groups') or []:
        for i in range(group['count']):
            spec = {k: v for k, v in group.items()
                    if k not in ('prefix', 'count')}
            out['%s%d' % (group['prefix'], i + 1)] = spec
    return out


def build_world(sc: Scenario, clock, log) -> sim_world.World:
    """Make the world of a scenario at time zero."""
    topo, state = sc.topology, sc.state
    timing = sim_world.Timing(**(sc.settings.get('timing') or {}))
    w = sim_world.World(clock, log, timing)
    w.unforce_checked = bool(sc.settings.get('nova_checks_unforce', False))
    w.stamps_writes = bool(sc.settings.get('nova_stamps_writes', False))
    defaults = topo.get('defaults') or {}
    hosts = _merge(_expand_hosts(topo), state.get('hosts'))
    if not hosts:
        raise sim_world.ScenarioError('%s: topology has no hosts' % sc.name)
    for n, (name, spec) in enumerate(sorted(hosts.items()), 1):
        h = sim_world.Host(
            name=name, id=str(n), zone=spec.get('zone', 'nova'),
            vcpus=int(spec.get('vcpus', defaults.get('vcpus', 64))),
            status=spec.get('status', model.ENABLED),
            disabled_reason=spec.get('disabled_reason'),
            forced_down=bool(spec.get('forced_down', False)))
        if spec.get('power', 'on') == 'off':
            h.chassis_on = h.os_running = False
            h.hb_since, h.last_hb = None, spec.get('last_heartbeat', -120)
            # Its heartbeat agent went silent with it.
            h.agent_since, h.agent_last = None, h.last_hb
        if spec.get('compute', 'running') != 'running':
            h.compute_running = False
            h.hb_since, h.last_hb = None, spec.get('last_heartbeat', -120)
        h.fence_proof = bool(spec.get('fenced', False))
        if spec.get('watchdog') is not None:
            if w.watchdogs is None:
                w.watchdogs = sim_watchdogs.Watchdogs(w)
            w.watchdogs.add(name, float(spec['watchdog']))
        if spec.get('isolation') is not None:
            if w.watchdogs is None:
                w.watchdogs = sim_watchdogs.Watchdogs(w)
            if w.watchdogs.sides is None:
                w.watchdogs.sides = sim_hostside.HostSides(w)
            w.watchdogs.add(name, None)
            w.watchdogs.sides.add(name, float(spec['isolation']),
                                  int(spec.get('isolation_addresses', 1)))
        if timing.heartbeat_spread and h.hb_since is not None:
            h.hb_since = -timing.report_interval * (n - 1) / len(hosts)
        w.add_host(h)
    for name, spec in (topo.get('devices') or {}).items():
        dev = sim_world.Device(name=name, host=spec['host'],
                               kind=spec.get('kind', 'outlet'),
                               behaviour=spec.get('behaviour', 'ok'))
        w.host(dev.host)
        if dev.kind == 'outlet':
            w.hosts[dev.host].outlets[name] = True
        w.devices[name] = dev
    for name, spec in (state.get('devices') or {}).items():
        w.device(name).behaviour = spec.get('behaviour', 'ok')
    for name, spec in (topo.get('aggregates') or {}).items():
        for h in spec.get('hosts', []):
            w.host(h)
        zone = spec.get('zone')
        w.aggregates[name] = model.Aggregate(
            id=name, name=name, hosts=frozenset(spec.get('hosts', [])),
            metadata={str(k): str(v) for k, v in
                      (spec.get('metadata') or {}).items()},
            availability_zone=zone)
        if zone:
            for h in spec.get('hosts', []):
                w.hosts[h].zone = zone
    flavors = topo.get('flavors') or {'m1.small': {'vcpus': 1}}
    for name, spec in flavors.items():
        spec = spec or {}
        w.flavors[name] = sim_world.Flavor(
            name=name, vcpus=int(spec.get('vcpus', 1)),
            extra_specs={str(k): str(v) for k, v in
                         (spec.get('extra_specs') or {}).items()})
    for name, spec in (topo.get('images') or {}).items():
        spec = spec or {}
        w.images[name] = model.Image(
            id=name, name=name, tags=tuple(spec.get('tags', ())),
            properties={str(k): str(v) for k, v in
                        (spec.get('properties') or {}).items()})
    default_flavor = sorted(w.flavors)[0]
    instances = _merge(_expand_instances(topo), state.get('instances'))
    for name, spec in sorted(instances.items()):
        host = spec.get('host')
        if host is not None:
            w.host(host)
        flavor = spec.get('flavor', default_flavor)
        if flavor not in w.flavors:
            raise sim_world.ScenarioError('instance %s: unknown flavor %r'
                                          % (name, flavor))
        image = spec.get('image')
        if image is not None and image not in w.images:
            raise sim_world.ScenarioError('instance %s: unknown image %r'
                                          % (name, image))
        w.add_server(sim_world.Server(
            id=name, name=name, host=host,
            status=spec.get('status', 'ACTIVE'), flavor=flavor,
            image_id=image, task_state=spec.get('task_state'),
            metadata={str(k): str(v) for k, v in
                      (spec.get('metadata') or {}).items()},
            locked=bool(spec.get('locked', False)),
            locked_reason=(str(spec['locked_reason'])
                           if spec.get('locked_reason') else None)))
    for spec in state.get('migrations') or []:
        _add_migration(w, spec)
    return w


def _add_migration(w: sim_world.World, spec: dict) -> None:
    srv = w.server(spec['server'])
    age = float(spec.get('age', 0))
    mig = sim_world.Migration(
        id=str(next(w._mig_ids)), server_id=srv.id,
        source_host=spec['source'], dest_host=spec.get('dest'),
        status=spec.get('status', 'done'), created_at=-age,
        updated_at=-age, episode=w.host(spec['source']).episode)
    w.migrations.append(mig)
    if mig.status in ('accepted', 'pre-migrating'):
        # A rebuild in flight when the simulation starts.
        srv.task_state = 'rebuilding'
        finish = float(spec.get('finishes_in', w.timing.rebuild_time))
        if mig.dest_host:
            w.use(mig.dest_host, w.flavors[srv.flavor].vcpus)
            w.at(finish, lambda: w._rebuilt(mig))
        else:
            w.at(finish, lambda: w._schedule(mig))
