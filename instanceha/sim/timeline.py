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

"""The timeline's commands, as a simulation applies them.

Each command of a scenario's timeline changes the simulated world (a
host loses power, a BMC times out, Nova fails a call), the copies of the
service (started, stopped, reconfigured, reloaded) or runs an operator's
command (maintenance, manual fencing, a pause) through the production
code. :class:`Timeline` is mixed into
:class:`~instanceha.sim.runner.Simulation`, whose world, copies and
operator it acts on; what the commands are and what they take is in
:data:`instanceha.sim.scenario.COMMANDS`.
"""

import datetime
import os

from oslo_config import cfg

from instanceha.cmd import manage_hosts
from instanceha.cmd import manage_instances
from instanceha import conf as ha_conf
from instanceha.daemon import reloading
from instanceha.engine import model
from instanceha.engine import pause as pause_mod
from instanceha import exceptions
from instanceha.ops import maintenance
from instanceha.ops import manual_fencing
from instanceha.sim import announce as sim_announce
from instanceha.sim import clock as sim_clock
from instanceha.sim import guests
from instanceha.sim import scenario as sim_scenario
from instanceha.sim import world as sim_world


def _mutate(conf: cfg.ConfigOpts,
            pairs: list[tuple[str | None, str, str]]) -> reloading.Mutation:
    """Apply options as a reload would: only those that change live.

    :raises ConfigurationError: an unknown option or a bad value (then
        nothing changed).
    """
    known = {(None if group == 'DEFAULT' else group, opt.name): opt
             for group, opts in ha_conf.list_opts() for opt in opts}
    changed, restart, before = [], [], []
    try:
        for group, name, value in pairs:
            label = reloading.option_name(group, name)
            opt = known.get((group, name))
            if opt is None:
                raise exceptions.ConfigurationError('no option %s' % label)
            if not opt.mutable:
                restart.append(label)
                continue
            old = (conf[group] if group else conf)[opt.dest]
            try:
                conf.set_override(name, value, group)
            except ValueError as exc:
                raise exceptions.ConfigurationError(
                    'invalid value for option %s: %s' % (label, exc)
                ) from None
            before.append((group, name, old))
            changed.append(label)
        ha_conf.validate(conf)
    except exceptions.ConfigurationError:
        for group, name, value in reversed(before):
            conf.set_override(name, value, group)
        raise
    return changed, restart


def _conditions(where: str, words: tuple
                ) -> tuple[model.HardwareCondition, ...]:
    """``ok`` or ``KIND:HEALTH[:PART]`` words: what a device reports."""
    if tuple(words) == ('ok',):
        return ()
    found = []
    for word in words:
        parts = word.split(':')
        if len(parts) not in (2, 3) or not all(parts):
            raise sim_world.ScenarioError(
                '%s: %r is not KIND:HEALTH[:PART] (e.g. '
                'power_supply:Critical:PSU1) or ok' % (where, word))
        found.append(model.HardwareCondition(
            kind=parts[0], health=parts[1],
            part=parts[2] if len(parts) == 3 else 'sim'))
    return tuple(found)


#: Commands that may not be possible at their moment: a user stopping an
#: instance that is not running, an agent announcing a shutdown on a host
#: that is off, a command naming an instance its user deleted.
REFUSABLE = ('announce', 'stop-instance', 'start-instance',
             'delete-instance', 'crash-instance', 'rebuild-fail',
             'instances', 'agent')


class Timeline:
    """Applies timeline commands (mixed into the Simulation)."""

    def run_command(self, cmd: sim_scenario.Command) -> None:
        """Apply ``cmd``, refusing it if it cannot happen now.

        With ``simulation: refusals: true`` (random timelines) a command
        that cannot happen at its moment is refused, as Nova or the host
        would refuse it, and the run goes on.
        """
        if not (self.scenario.settings.get('refusals')
                and cmd.name in REFUSABLE):
            return self.apply(cmd)
        try:
            self.apply(cmd)
        except exceptions.InstanceHAError as exc:
            self.log.record('timeline', 'refused', None, command=cmd.name,
                            error=str(exc))

    def apply(self, cmd: sim_scenario.Command) -> None:
        w, a = self.world, cmd.args
        where = 'timeline line %d (%s)' % (cmd.line, cmd.name)

        def need(n: int) -> None:
            if len(a) < n:
                raise sim_world.ScenarioError(
                    '%s: needs %s' % (where, sim_scenario.COMMANDS[
                        cmd.name][0]))
        host = a[0] if a else None
        details: dict = {}
        name = cmd.name
        if name in ('power-off', 'power-on'):
            need(1)
            w.set_power(host, name == 'power-on')
        elif name == 'crash':
            need(1)
            w.crash(host)
        elif name == 'announce':
            need(2)
            if a[1] not in ('reboot', 'poweroff') or a[2:] not in (
                    (), ('hang',)):
                raise sim_world.ScenarioError(
                    '%s: expected %s' % (where, sim_scenario.COMMANDS[
                        'announce'][0]))
            details['kind'] = a[1]
            if a[2:]:
                details['hang'] = True
            self.log.record('timeline', name, host, **details)
            sim_announce.announce(w, host, a[1], hang=bool(a[2:]))
            return
        elif name == 'kdump':
            need(1)
            details['seconds'] = float(a[1]) if len(a) > 1 else 120.0
            w.start_kdump(host, details['seconds'])
        elif name in ('cut-network', 'restore-network'):
            need(1)
            w.set_network(host, name == 'restore-network')
        elif name in ('isolate', 'unisolate'):
            need(1)
            w.set_nova_link(host, name == 'unisolate')
        elif name == 'watchdog':
            need(2)
            self._watchdog(where, a)
            details['change'] = a[1]
        elif name == 'wire':
            need(2)
            self.log.record('timeline', name, host, change=' '.join(a[1:]))
            self._wire_command(where, a)
            return
        elif name in ('partition', 'unpartition'):
            need(1)
            w.set_partition(host, name == 'partition')
        elif name == 'addresses':
            need(2)
            if a[1] not in ('down', 'up') or len(a) != 2:
                raise sim_world.ScenarioError('%s: expected %s' % (
                    where, sim_scenario.COMMANDS[name][0]))
            w.set_addresses(host, a[1] == 'up')
            details['state'] = a[1]
        elif name == 'agent':
            need(2)
            if a[1] not in ('kill', 'start', 'answers-lost', 'answers-ok'
                            ) or len(a) != 2:
                raise sim_world.ScenarioError('%s: expected %s' % (
                    where, sim_scenario.COMMANDS[name][0]))
            if w.watchdogs is None or host not in w.watchdogs.dogs:
                raise sim_world.ScenarioError(
                    '%s: host %s runs no simulated agent (topology: '
                    'watchdog: SECONDS or isolation: SECONDS)'
                    % (where, host))
            if a[1].startswith('answers'):
                w.host(host).answers_ok = a[1] == 'answers-ok'
            else:
                w.set_agent(host, a[1])
            details['change'] = a[1]
        elif name in ('stop-compute', 'start-compute'):
            need(1)
            w.set_compute(host, name == 'start-compute')
        elif name in ('crash-instance', 'stop-instance', 'start-instance',
                      'delete-instance'):
            need(1)
            srv = w.server(a[0])
            host, details = srv.host, {'server': srv.name}
            if name == 'crash-instance':
                opts = dict(zip(a[1::2], a[2::2]))
                loop = float(opts['loop']) if 'loop' in opts else None
                times = int(opts['times']) if 'times' in opts else None
                if loop is not None:
                    details['loop'] = loop
                    details['times'] = times or 'always'
                guests.crash(w, srv.name, loop, times)
            elif name == 'delete-instance':
                guests.user_delete(w, srv.name)
            else:
                guests.user_power(w, srv.name, name == 'start-instance')
        elif name == 'bmc':
            need(2)
            if a[1] not in sim_world.ALL_BEHAVIOURS:
                raise sim_world.ScenarioError(
                    '%s: unknown behaviour %r; one of %s' % (
                        where, a[1], ', '.join(sim_world.ALL_BEHAVIOURS)))
            w.device(host).behaviour = a[1]
            host = w.devices[host].host
            details['device'], details['behaviour'] = a[0], a[1]
        elif name == 'health':
            need(2)
            w.device(host).conditions = _conditions(where, a[1:])
            host = w.devices[host].host
            details['device'], details['conditions'] = a[0], ' '.join(a[1:])
        elif name == 'rebuild-fail':
            need(1)
            opts = dict(zip(a[1::2], a[2::2]))
            srv = w.server(a[0])
            target = opts.get('on')
            times = int(opts['times']) if 'times' in opts else None
            w.rebuild_failures.append(sim_world.RebuildFailure(
                srv.id, target, times))
            host = srv.host
            details = {'server': srv.name, 'on': target or 'any',
                       'times': times or 'always'}
        elif name in ('disable', 'enable'):
            need(1)
            h = w.host(host)
            h.status = 'disabled' if name == 'disable' else 'enabled'
            h.disabled_reason = ' '.join(a[1:]) or None if (
                name == 'disable') else None
            w.stamp_write(h)
            if h.disabled_reason:
                details['reason'] = h.disabled_reason
        elif name == 'capacity':
            need(2)
            w.host(host).vcpus = int(a[1])
            w.capacity_changed(host)
            details['vcpus'] = int(a[1])
        elif name == 'service':
            need(1)
            host = None
            targets = a[1:] or [next(iter(self.copies))]
            for copy_name in targets:
                if copy_name not in self.copies:
                    raise sim_world.ScenarioError(
                        '%s: no copy %r; copies: %s' % (
                            where, copy_name, ', '.join(self.copies)))
            details['copy'] = ','.join(targets)
            self.log.record('timeline', 'service-' + a[0], None, **details)
            for copy_name in targets:
                if a[0] in ('crash', 'stop', 'restart'):
                    self.stop(copy_name, crashed=a[0] == 'crash')
                if a[0] in ('start', 'restart'):
                    self.start(copy_name)
                elif a[0] not in ('crash', 'stop'):
                    raise sim_world.ScenarioError(
                        '%s: expected crash, restart, stop or start'
                        % where)
            return
        elif name == 'coordination':
            need(1)
            self.election.backend_up = a[0] == 'up'
            host = None
            details['state'] = a[0]
        elif name == 'nova':
            need(1)
            host, details = self._nova(where, a)
        elif name == 'maintenance':
            need(2)
            self._maintenance(where, a)
            return
        elif name == 'set':
            need(2)
            group, _, opt = a[0].rpartition('.')
            self.overrides.append((group or None, opt, a[1]))
            self.log.record('timeline', 'set', None, option=a[0],
                            value=a[1])
            for copy_name, copy in self.copies.items():
                if copy.running:
                    self.stop(copy_name)
                    self.start(copy_name)
            return
        elif name == 'reload':
            self._reload(where, a)
            return
        elif name == 'fencing':
            need(2)
            self._fencing(where, a)
            return
        elif name in ('hosts', 'instances'):
            need(2)
            self._clear(where, name, a)
            return
        elif name == 'clock':
            if len(a) != 2 or a[0] != 'skew':
                raise sim_world.ScenarioError(
                    '%s: expected "clock skew SECONDS"' % where)
            try:
                w.clock_skew = float(a[1])
            except ValueError:
                raise sim_world.ScenarioError(
                    '%s: expected "clock skew SECONDS"; %r is not a '
                    'number of seconds' % (where, a[1]))
            host = None
            details['skew'] = w.clock_skew
        elif name == 'pause':
            need(1)
            host, details = None, self._pause(where, a)
        elif name == 'resume':
            host = None
            self.pause_store.pause = None
        elif name == 'end':
            self.end = cmd.t
            return
        self.log.record('timeline', name, host, **details)

    def _reload(self, where: str, a: tuple) -> None:
        """An operator edits the options and sends SIGHUP to every copy.

        The production reloader runs in each running copy: the options
        given change if they can change live (the others are named as
        needing a restart and take effect at the copy's next start), then
        the fencing file and heartbeat keys are re-read.
        """
        if len(a) % 2:
            raise sim_world.ScenarioError(
                '%s: expected %s' % (where, sim_scenario.COMMANDS[
                    'reload'][0]))
        pairs = []
        for name, value in zip(a[0::2], a[1::2]):
            group, _, opt = name.rpartition('.')
            group = group or None
            if (group, opt) in sim_scenario.RELATIVE_PATHS and value and \
                    not os.path.isabs(value):
                value = os.path.join(self.scenario.path, value)
            pairs.append((group, opt, value))
        self.log.record('timeline', 'reload', None, **{
            name: value for name, value in zip(a[0::2], a[1::2])})
        self.overrides.extend(pairs)
        for copy in self.copies.values():
            if copy.running:
                self.world.actor = copy.name
                copy.reloader.reload(
                    mutate=lambda conf=copy.conf: _mutate(conf, pairs))

    def _watchdog(self, where: str, a: tuple) -> None:
        """The host's agent loses its answers, or hangs (or recovers)."""
        dogs = self.world.watchdogs
        if dogs is None:
            raise sim_world.ScenarioError(
                '%s: no host has a watchdog (topology: watchdog: SECONDS)'
                % where)
        dogs.dog(a[0])
        if len(a) != 2 or a[1] not in ('answers-lost', 'answers-ok', 'hang',
                                       'unhang'):
            raise sim_world.ScenarioError(
                '%s: expected %s' % (where, sim_scenario.COMMANDS[
                    'watchdog'][0]))
        if a[1].startswith('answers'):
            self.world.host(a[0]).answers_ok = a[1] == 'answers-ok'
        else:
            self.world.set_agent_hung(a[0], a[1] == 'hang')

    def _wire_command(self, where: str, a: tuple) -> None:
        """A datagram made up, or the agent's key changed (sim.wire)."""
        from instanceha.heartbeat import keys
        w = self.world
        if w.wire is None or a[0] not in w.watchdogs.dogs:
            raise sim_world.ScenarioError(
                '%s: needs simulation: {wire: true} and a simulated agent '
                'on %s' % (where, a[0]))
        if a[1] == 'key' and len(a) == 3:
            path = a[2] if os.path.isabs(a[2]) else os.path.join(
                self.scenario.path, a[2])
            try:
                w.wire.set_key(a[0], keys.load_key(path))
            except (OSError, ValueError) as exc:
                raise sim_world.ScenarioError('%s: %s' % (where, exc))
        elif a[1] in ('replay', 'forge', 'stale') and len(a) == 2:
            w.wire.inject(a[0], a[1], list(w.answering.values()))
        else:
            raise sim_world.ScenarioError('%s: expected %s' % (
                where, sim_scenario.COMMANDS['wire'][0]))

    def _fencing(self, where: str, a: tuple) -> None:
        """An operator runs ``instanceha-manage fencing off|on HOST --yes``.

        The production code reads the marker from the simulated Nova and
        powers the host through a fencing topology of its own (the
        operator's machine reads the same files), in simulated time.
        """
        action, host = a[0], a[1]
        if action not in ('off', 'on') or len(a) != 2:
            raise sim_world.ScenarioError(
                '%s: expected %s' % (where, sim_scenario.COMMANDS[
                    'fencing'][0]))
        self.world.host(host)
        self.log.record('timeline', 'fencing-' + action, host)
        conf = self.make_conf()
        clock = sim_clock.ServiceClock(self.clock,
                                       lambda: self.world.clock_skew)

        def run() -> None:
            topo = self.make_fencer(conf, clock)
            try:
                note, names = manual_fencing.check_not_held(self.cloud,
                                                            host)
                topo.learn_hosts(names)
                result = manual_fencing.power(topo, host, action)
            except manual_fencing.Refused as exc:
                self.log.record('operator', 'fencing-refused', host,
                                reason=str(exc))
            except exceptions.InstanceHAError as exc:
                self.log.record('operator', 'fencing-failed', host,
                                reason=str(exc))
            else:
                self.log.record('operator', 'fencing-done', host,
                                action=action, level=result.level)
            finally:
                topo.stop()
        self.operator.submit(run)

    def _clear(self, where: str, name: str, a: tuple) -> None:
        """``instanceha-manage hosts|instances clear ... [--enable|--start]``.

        The production command runs against the simulated Nova from the
        operator's machine (on the copies' clock, skew included); a
        refusal is logged as the operator reads it.
        """
        flag = 'enable' if name == 'hosts' else 'start'
        if a[0] != 'clear' or a[2:] not in ((), (flag,)):
            raise sim_world.ScenarioError(
                '%s: expected %s' % (where, sim_scenario.COMMANDS[name][0]))
        target, on = a[1], bool(a[2:])
        if name == 'hosts':
            self.world.host(target)
            host = target
        else:
            host = self.world.server(target).host
        self.log.record('timeline', '%s-clear' % name, host, **(
            {'server': target} if name == 'instances' else {}),
            **({flag: True} if on else {}))
        clock = sim_clock.ServiceClock(self.clock,
                                       lambda: self.world.clock_skew)
        waited = [0.0]

        def sleep(seconds: float) -> None:
            # The command's own wait, counted in simulated seconds (its
            # deadline reads the real clock, which does not move here).
            waited[0] += seconds
            if waited[0] > manage_instances.WAIT:
                raise exceptions.InstanceHAError(
                    'instance %s: not done after %ds'
                    % (target, manage_instances.WAIT))
            self.clock.sleep(seconds)

        def run() -> None:
            try:
                if name == 'hosts':
                    said = manage_hosts.clear(self.cloud, target, on,
                                              clock.now())
                else:
                    said = manage_instances.clear(self.cloud, target, on,
                                                  sleep=sleep)
            except exceptions.InstanceHAError as exc:
                self.log.record('operator', 'refused', host, error=str(exc))
            else:
                self.log.record('operator', 'cleared', host, text=said)
        self.operator.submit(run)

    def _pause(self, where: str, a: tuple) -> dict:
        """An operator's pause, stored where every copy reads it.

        On Nova's clock, as ``instanceha-manage pause`` keeps it when it
        can read Nova's time.
        """
        now = self.clock.now()  # the world's: Nova's
        if a[0] == 'indefinite':
            until = None
        else:
            try:
                until = now + datetime.timedelta(seconds=float(a[0]))
            except ValueError:
                raise sim_world.ScenarioError(
                    '%s: expected SECONDS or "indefinite", got %r'
                    % (where, a[0])) from None
        reason = ' '.join(a[1:]) or 'maintenance'
        self.pause_store.pause = pause_mod.Pause(
            reason=reason, since=now, until=until, by='operator',
            nova_clock=True)
        return {'reason': reason,
                'until': 'for %s s' % a[0] if until else 'no end'}

    def _nova(self, where: str, a: tuple) -> tuple[str | None, dict]:
        """Apply a ``nova`` timeline command (Nova API faults)."""
        w, what = self.world, a[0]
        if what == 'fail':
            if len(a) < 2 or a[1] not in sim_world.NOVA_CALLS:
                raise sim_world.ScenarioError(
                    '%s: "nova fail" needs a call, one of %s'
                    % (where, ', '.join(sim_world.NOVA_CALLS)))
            count = int(a[2]) if len(a) > 2 else 1
            error = a[3] if len(a) > 3 else '500'
            skip = int(a[5]) if len(a) > 5 and a[4] == 'after' else 0
            if (error not in sim_world.NOVA_ERRORS or count < 1
                    or len(a) not in (2, 3, 4, 6) or skip < 0):
                raise sim_world.ScenarioError(
                    '%s: expected "nova fail CALL [N>=1] [ERROR] [after M]"'
                    ' with ERROR one of %s' % (
                        where, ', '.join(sim_world.NOVA_ERRORS)))
            w.nova_faults.append(sim_world.NovaFault(a[1], count, error,
                                                     skip))
            details = {'fail': a[1], 'times': count, 'error': error}
            if skip:
                details['after'] = skip
            return None, details
        if what in ('down', 'up'):
            w.nova_down = what == 'down'
            return None, {'api': what}
        if what == 'delay-migrations' and len(a) > 1:
            w.migration_delay = float(a[1])
            return None, {'migration_delay': w.migration_delay}
        if what == 'delete-service' and len(a) > 1:
            w.host(a[1])
            w.deleted_services.add(a[1])
            return a[1], {'deleted': 'service'}
        raise sim_world.ScenarioError(
            '%s: expected %s' % (where, sim_scenario.COMMANDS['nova'][0]))

    def _maintenance(self, where: str, a: tuple) -> None:
        """An operator runs ``instanceha-manage maintenance start|end``.

        The production maintenance code runs as a job of its own on the
        simulated Nova and clock; what it prints goes to the log.
        """
        action, host = a[0], a[1]
        words = list(a[2:])
        reason = ''
        if 'reason' in words:
            at = words.index('reason')
            reason, words = ' '.join(words[at + 1:]), words[:at]
        known = {'start': ('wait', 'cold'), 'end': ('wait', 'return')}
        if action not in known or any(w not in known[action]
                                      for w in words):
            raise sim_world.ScenarioError(
                '%s: expected %s' % (where, sim_scenario.COMMANDS[
                    'maintenance'][0]))
        self.world.host(host)
        details = {'options': ' '.join(words) or 'none'}
        if reason:
            details['reason'] = reason
        self.log.record('timeline', 'maintenance-' + action, host, **details)

        def say(text: str) -> None:
            self.log.record('operator', 'maintenance', host, text=text)

        maint = maintenance.Maintenance(
            self.cloud, out=say, poll=5.0, clock=self.clock,
            run_all=maintenance.serial_map)

        def run() -> None:
            wait = 'wait' in words
            try:
                if action == 'start':
                    outcomes = maint.start(
                        host, self.clock.now(), note=reason, wait=wait,
                        shutoff='cold' if 'cold' in words else 'leave')
                else:
                    outcomes = maint.end(host, back='return' in words,
                                         wait=wait)
            except exceptions.InstanceHAError as exc:
                self.log.record('operator', 'refused', host, error=str(exc))
                return
            counts: dict[str, int] = {}
            for o in outcomes:
                counts[o.result] = counts.get(o.result, 0) + 1
            self.log.record('operator', 'summary', host, command=action,
                            **counts)
        self.operator.submit(run)
