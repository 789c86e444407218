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

"""The faults a soak run injects, each with its own end.

:class:`Faults` is mixed into :class:`tests.soak.harness.Soak`: every
method injects one fault into the running cloud and returns a
:class:`Fault` whose ``done()`` says (and, for windows, brings about) its
end; :data:`FAULTS` names them for the generator and the command line.
What each does is listed in doc/testing.md (the chaos soak).
"""

import dataclasses
import signal
import time

from tests.functional import test_recovery


@dataclasses.dataclass
class Fault:
    """One injected fault and, once seen, its recovery."""

    kind: str
    target: str
    at: float
    recovered_at: float | None = None
    done: object = None  # () -> bool, checked until it holds

    def line(self, t0: float) -> str:
        end = ('recovered after %.1fs' % (self.recovered_at - self.at)
               if self.recovered_at else 'not recovered')
        return '+%7.1fs %-20s %-24s %s' % (self.at - t0, self.kind,
                                           self.target, end)


class Faults:
    """Fault injection; the Soak provides the cloud and the records."""

    def _hosts_down(self) -> set:
        """Hosts out by an unfinished failure (a window's too: ``+off``)."""
        return {f.target.split(':')[0] for f in self.faults
                if f.recovered_at is None and (
                    f.kind in HOST_FAULTS or f.kind.endswith('+off'))}

    def _busy(self) -> set:
        """Hosts an unfinished fault is about (none is chosen again)."""
        return {h for f in self.faults if f.recovered_at is None
                for h in f.target.split(':')[0].split(',')} | set(
            self.held) | {h for p in self.partitions if p[1] is None
                          for h in p[2]}

    def _healthy_host(self, ipmi: bool = False) -> str | None:
        free = [h for h in self.nova.hosts if h not in self._busy() and (
            not ipmi or self.machines.bmc_kind(h) == 'ipmi')]
        return self.rng.choice(free) if free else None

    def _host_back(self, host: str, servers: list | None = None):
        """Whether ``host``'s failure is over.

        Seen failed, then enabled and up again, not forced down, and every
        instance that was on it ACTIVE (there or elsewhere).
        """
        seen = {'failed': False}
        if servers is None:
            servers = [s.id for s in self.reader.list_servers(host)]

        def done():
            svc = self.reader.read_services().service(host)
            healthy = (svc.status == 'enabled' and svc.state == 'up'
                       and not svc.forced_down)
            if not healthy:
                seen['failed'] = True
                # Nothing on it to recover: the service rightly leaves it
                # down (the soak repairs it once the faults stop).
                return not servers and svc.state == 'down'
            return seen['failed'] and all(
                self.reader.get_server(i).status == 'ACTIVE'
                for i in servers)
        return done

    def _later(self, seconds: float, action, then):
        """A done() that acts once after ``seconds``, then asks ``then``.

        ``action()`` runs once when the time comes; from then on the
        fault is over when ``then()`` holds.
        """
        state = {'at': time.time() + seconds, 'done': False}

        def done():
            if not state['done']:
                if time.time() < state['at']:
                    return False
                action()
                state['done'] = True
            return then()
        return done

    def power_off(self, host: str) -> Fault:
        back = self._host_back(host)
        self.machines.power_off(host)
        return Fault('power_off', host, time.time(), done=back)

    def hang(self, host: str) -> Fault:
        """nova-compute and agent dead, power on: only fencing helps."""
        back = self._host_back(host)
        self.machines.hung.add(host)
        self.machines.kill_agent(host)
        self.nova.control.kill(host)
        return Fault('host_hang', host, time.time(), done=back)

    def kill_compute(self, host: str) -> Fault:
        """nova-compute dies; the host and its agent live on.

        systemd starts nova-compute again 15-40 s later.
        """
        back = self._host_back(host)
        self.nova.control.kill(host)
        return Fault('compute_death', host, time.time(), done=self._later(
            self.rng.uniform(15, 40),
            lambda: self.machines.start_compute(host), back))

    def clean_reboot(self, host: str) -> Fault:
        """A reboot, announced by the agent (SIGTERM).

        The host goes down and boots again 5-20 s later (power stays on).
        """
        back = self._host_back(host)
        self.machines.rebooting.add(host)
        agent = self.machines.stop_agent(host)
        state = {'phase': 'announcing', 'at': time.time() + 10}

        def done():
            if state['phase'] == 'announcing':
                if (agent is not None and agent.poll() is None
                        and time.time() < state['at']):
                    return False
                self.nova.control.kill(host)
                state.update(phase='down',
                             at=time.time() + self.rng.uniform(5, 20))
            if state['phase'] == 'down':
                if time.time() < state['at']:
                    return False
                self.machines.start_compute(host)
                self.machines.rebooting.discard(host)
                state['phase'] = 'up'
            return back()
        return Fault('clean_reboot', host, time.time(), done=done)

    def crash_guest(self, _host: str) -> Fault | None:
        servers = [s for s in self.reader.list_servers()
                   if s.status == 'ACTIVE' and s.host not in
                   self._busy() and not self._crashed_lately(s.id)]
        if not servers:
            return None
        srv = self.rng.choice(servers)
        self.nova.control.crash(srv.id)

        def done():
            return self.reader.get_server(srv.id).status == 'ACTIVE'
        return Fault('guest_crash', srv.id, time.time(), done=done)

    def _crashed_lately(self, server_id: str) -> bool:
        """Crashed within the stable time: a second crash is a loop."""
        return any(f.kind == 'guest_crash' and f.target == server_id and
                   time.time() - f.at < 2 * self.options[
                       'instance_failure.stable_time']
                   for f in self.faults)

    def kill_copy(self, leader: bool) -> Fault | None:
        lead = self.leader()
        names = [n for n, c in self.copies.items()
                 if c.proc.poll() is None and (n == lead) == leader]
        if not names:
            return None
        name = names[0]
        self.copies[name].proc.send_signal(signal.SIGKILL)
        self.copies[name].proc.wait(10)
        self._start_copy(name)
        return Fault('kill_leader' if leader else 'kill_follower', name,
                     time.time(), done=lambda: self.leader() is not None)

    def restart_backend(self, _host: str) -> Fault:
        self.backend.stop()
        time.sleep(self.rng.uniform(1, 5))
        self.backend.start()
        return Fault('backend_restart', self.backend_name, time.time(),
                     done=lambda: self.leader() is not None)

    def nova_fault(self, _host: str) -> Fault:
        kind = self.rng.choice(('status', 'status', 'slow', 'timeout',
                                'reset'))
        status = self.rng.choice((500, 503, 409))
        seconds = self.rng.uniform(5, 20)
        self.proxy.inject(kind, status=status, duration=seconds,
                          seconds=(self.rng.uniform(1, 4) if kind == 'slow'
                                   else 12.0))
        end = time.time() + seconds
        return Fault('nova_api_%s' % kind, '%.0fs' % seconds, time.time(),
                     done=lambda: time.time() >= end)

    def _window(self, host: str, seconds: float, begin, end, why=None,
                fail: bool = False):
        """A BMC fault on a healthy ``host`` for ``seconds``.

        ``why``: the BMC proves nothing meanwhile (the audit then allows
        no evacuation of the host). ``fail``: the host also fails during
        the window (powered off a few seconds into it), so the service
        meets the fault while recovering.
        """
        back = self._host_back(host) if fail else (lambda: True)
        begin()
        start = time.time()
        if why:
            self.unprovable[host].append([start, None, why])
        state = {'open': True, 'failed': not fail,
                 'fail_at': start + self.rng.uniform(1, 4)}

        def done():
            if not state['failed'] and time.time() >= state['fail_at']:
                self.machines.power_off(host)
                state['failed'] = True
            if state['open'] and time.time() >= start + seconds:
                end()
                if why:
                    self.unprovable[host][-1][1] = time.time()
                state['open'] = False
            return state['failed'] and not state['open'] and back()
        return done

    def bmc_fault(self, _host: str) -> Fault | None:
        host = self._healthy_host(ipmi=True)
        if host is None:
            return None
        mode = self.rng.choice(('silent', 'error', 'stuck', 'lying'))
        seconds = self.rng.uniform(10, 30)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        done = self._window(
            host, seconds, lambda: self.cloud.bmc.set_mode(host, mode),
            lambda: self.cloud.bmc.set_mode(host, 'ok'),
            why=mode if mode in ('silent', 'lying') else None, fail=fail)
        return Fault('bmc_' + mode + ('+off' if fail else ''),
                     '%s:%.0fs' % (host, seconds), time.time(), done=done)

    def wrong_password(self, host: str) -> Fault:
        """An operator's reload brings a wrong BMC password for a while."""
        seconds = self.rng.uniform(15, 40)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        right = self._read_password(host)

        def begin():
            self._set_password(host, 'wrong-%s' % right[::-1])
            self._reload_copies()

        def end():
            self._set_password(host, right)
            self._reload_copies()
        done = self._window(host, seconds, begin, end, why='wrong password',
                            fail=fail)
        return Fault('bmc_password' + ('+off' if fail else ''),
                     '%s:%.0fs' % (host, seconds), time.time(), done=done)

    def _read_password(self, host: str) -> str:
        with open(self._password_file(host)) as f:
            return f.read()

    def _room_for_a_failure(self) -> bool:
        return len(self._hosts_down()) < max(1, self.host_count // 4)

    def partition(self, _host: str) -> Fault | None:
        """More than the threshold of the hosts cut off at once.

        Their nova-compute stops and their agents freeze (the control
        plane cannot reach them) for 20-40 s: a mass failure, on which
        nothing may be fenced or evacuated.
        """
        free = [h for h in self.nova.hosts if h not in self._busy()]
        count = self.host_count * self.options['threshold'] // 100 + 1
        if len(free) < count:
            return None
        cut = sorted(self.rng.sample(free, count))
        # All at once: every agent silent first (signals, instant), then
        # their nova-computes stop (one call each). Nova still sees them
        # go down one by one, as their last reports age.
        for host in cut:
            self.machines.freeze_agent(host)
        window = [time.time(), None, cut]
        self.partitions.append(window)
        for host in cut:
            self.nova.control.kill(host)

        def heal():
            # From the first host back, it is no longer a mass failure:
            # those still out are failed hosts like any other.
            window[1] = time.time()
            for host in cut:
                self.machines.thaw_agent(host)
            for host in cut:
                self.machines.start_compute(host)

        def healed():
            services = self.reader.read_services()
            return all(services.service(h).state == 'up' and
                       services.service(h).status == 'enabled' for h in cut)
        return Fault('partition', ','.join(cut), window[0],
                     done=self._later(self.rng.uniform(20, 40), heal,
                                      healed))

    def operator_pause(self, _host: str) -> Fault:
        seconds = self.rng.uniform(5, 20)
        test_recovery.manage(self.cloud, 'pause', '--for', '%ds' % seconds,
                             '--reason', 'soak')
        self.pauses.append([time.time(), time.time() + seconds])
        end = time.time() + seconds
        return Fault('operator_pause', '%.0fs' % seconds, time.time(),
                     done=lambda: time.time() >= end)

    def _hold(self, host: str, reason: str) -> None:
        self.held[host] = reason
        self.holds[host].append([time.time(), None, reason])

    def _release(self, host: str) -> None:
        self.held.pop(host, None)
        self.holds[host][-1][1] = time.time()

    def operator_disable(self, host: str) -> Fault:
        """An operator disables a host, which may then fail while held.

        Half the time it is powered off: nothing may be done to it until
        the operator enables it again.
        """
        reason = 'soak operator %d' % self.rng.randrange(10 ** 6)
        svc = self.reader.read_services().service(host)
        self.reader.update_service(svc, status='disabled',
                                   disabled_reason=reason)
        self._hold(host, reason)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        seconds = self.rng.uniform(10, 30)
        back = self._host_back(host) if fail else (lambda: True)
        if fail:
            self.machines.power_off(host)

        def enable():
            self._release(host)
            self.reader.update_service(
                self.reader.read_services().service(host), status='enabled')
        return Fault('operator_disable' + ('+off' if fail else ''), host,
                     time.time(), done=self._later(seconds, enable, back))

    def maintenance(self, host: str) -> Fault | None:
        """An operator's maintenance while other recoveries run.

        Instances are live-migrated away; it ends 20-40 s later.
        """
        try:
            test_recovery.manage(self.cloud, 'maintenance', 'start', host,
                                 '--reason', 'soak')
        except AssertionError as exc:  # refused: the host is not healthy
            self.log('maintenance start %s refused: %s' % (host, exc))
            return None
        self._hold(host, self.reader.read_services().service(
            host).disabled_reason)

        def end():
            test_recovery.manage(self.cloud, 'maintenance', 'end', host)
            self._release(host)
        return Fault('maintenance', host, time.time(), done=self._later(
            self.rng.uniform(20, 40), end, lambda: self.reader.read_services(
            ).service(host).status == 'enabled'))


#: Faults that take a host out (at most a quarter of the hosts at once).
HOST_FAULTS = frozenset({'power_off', 'host_hang', 'compute_death',
                         'clean_reboot'})
#: Faults aimed at one healthy host.
NEEDS_HOST = HOST_FAULTS | {'operator_disable', 'maintenance',
                            'wrong_password'}
#: Every fault kind the soak injects: name -> Soak method(host).
FAULTS = {
    'power_off': Faults.power_off,
    'host_hang': Faults.hang,
    'compute_death': Faults.kill_compute,
    'clean_reboot': Faults.clean_reboot,
    'guest_crash': Faults.crash_guest,
    'kill_leader': lambda s, _h: s.kill_copy(leader=True),
    'kill_follower': lambda s, _h: s.kill_copy(leader=False),
    'backend_restart': Faults.restart_backend,
    'nova_api': Faults.nova_fault,
    'bmc_fault': Faults.bmc_fault,
    'wrong_password': Faults.wrong_password,
    'partition': Faults.partition,
    'operator_pause': Faults.operator_pause,
    'operator_disable': Faults.operator_disable,
    'maintenance': Faults.maintenance,
}
