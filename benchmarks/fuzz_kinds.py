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

"""The randomized scenarios' fourth stream: every workflow kind.

Mixed into benchmarks/scenario_fuzz.py's Case (see there): announced
shutdowns under each policy, instance crashes and their users' actions,
nova-compute deaths on live hosts, reloads, maintenance, the operator's
other commands and restarts at random moments of those stories, drawn
from ``self.kr`` after the three streams before it.
"""

import random

#: Seconds a generated run lasts.
END = 900.0
#: Workflow kinds and operator commands, from a fourth stream (seeds
#: found before still build the same stories when none of these is
#: drawn, and always with ``--mix`` limited to the kinds above):
#: shutdown: a host's agent announces a clean reboot or power-off (a
#: policy of conditional, freeze, failover or migrate, sometimes set by
#: an aggregate, sometimes a hang); instance: guests crash (sometimes in
#: a loop), their users stop, start or delete them; process: nova-compute
#: dies on a host that lives on (with the heartbeat detector); reload:
#: an operator edits options and sends SIGHUP; maint: maintenance start
#: and end; opcmd: the operator's other commands (pause and resume,
#: fencing by hand, hosts clear, instances clear, disable and enable);
#: restarts: copies crash, restart or lose the coordination backend at
#: random moments of the stories above.
KINDS_MIX = ('shutdown', 'instance', 'process', 'reload', 'maint',
             'opcmd', 'restarts')
#: A fifth stream, drawn after the fourth (seeds found before still
#: build the same stories when it is not drawn): watchdog: some hosts'
#: agents arm a watchdog (the hosts' fencing files end with a watchdog
#: level); one of them is cut off with its BMC unreachable, loses the
#: service's answers one way, or its agent hangs.
WATCHDOG_MIX = ('watchdog',)
#: The armed hosts' deadline and the shortest one the service counts:
#: longer than any leader change or backend outage of the other streams
#: (up to 60 s plus a 15 s lease), so those reset nobody.
WATCHDOG_DEADLINE = 120
WATCHDOG_MIN = 90
#: What an operator's reload may change (besides nothing: a plain SIGHUP).
RELOADS = (
    (),
    ('threshold', '100'),
    ('threshold', '34'),
    ('evacuation.max_in_flight', '1'),
    ('shutdown.policy', 'freeze'),
    ('shutdown.policy', 'failover'),
    ('shutdown.policy', 'migrate'),
    ('instance_failure.enabled', 'false'),
    ('process_failure.enabled', 'false'),
    ('instance_failure.max_restart', '0'),
)
#: [shutdown] policy's values.
SHUTDOWN_POLICIES = ('conditional', 'freeze', 'failover', 'migrate')


class KindsStream:
    """Options and timeline of the fourth stream (a Case mixin)."""

    # -- the fourth stream: every workflow kind, every operator command -----

    def _heartbeat(self) -> None:
        """Shutdowns and process failures need the heartbeat detector."""
        opts = self.options
        detectors = opts['detection.detectors'].split(',')
        if 'heartbeat' not in detectors:
            detectors.insert(1, 'heartbeat')
            opts['detection.detectors'] = ','.join(detectors)
            opts['heartbeat.key_file'] = 'heartbeat.key'
            opts['detection.combine'] = self.kr.choice(['veto', 'all'])

    def _kind_options(self) -> None:
        kr, opts = self.kr, self.options
        if 'shutdown' in self.kinds:
            self._heartbeat()
            opts['shutdown.policy'] = kr.choice(SHUTDOWN_POLICIES)
            # Short enough for a frozen host that never returns to be
            # recovered within the run.
            opts['shutdown.return_timeout'] = str(kr.choice([60, 120, 300]))
            opts['shutdown.poweroff_grace'] = str(kr.choice([0, 30, 120]))
            opts['shutdown.drain_timeout'] = str(kr.choice([30, 120, 300]))
            if kr.random() < 0.3:
                self.policy_override = kr.choice(SHUTDOWN_POLICIES)
        if 'process' in self.kinds:
            self._heartbeat()
            if kr.random() < 0.3:
                opts['process_failure.threshold'] = str(kr.choice([0, 50]))
        if 'instance' in self.kinds:
            opts['instance_failure.stable_time'] = str(kr.choice(
                [30, 120, 600]))
            opts['instance_failure.max_restart'] = str(kr.choice([0, 1, 2]))
            opts['instance_failure.max_relocate'] = str(kr.choice([0, 1]))
            if kr.random() < 0.3:
                opts['instance_failure.storm_size'] = str(kr.choice([1, 3]))

    def _focus(self) -> tuple[str, float]:
        """A host and a moment: half the time near what befalls a host.

        Two workflow kinds on one host at about the same time (an
        instance crash on a host that fails, a second announcement,
        nova-compute dying on a frozen host) are where they meet.
        """
        kr = self.kr
        touched = sorted((t, a) for t, _, args in self.timeline
                         for a in args if a in self.hosts)
        if touched and kr.random() < 0.5:
            t, host = kr.choice(touched)
            t = min(max(t + kr.uniform(-20, 120), 5), END - 150)
        else:
            host, t = kr.choice(self.hosts), kr.uniform(20, END - 300)
        self.moments.append(t)
        return host, t

    def _servers(self) -> list[str]:
        return sorted(self.topology()['instances'])

    def _kind_events(self) -> None:
        kr = self.kr
        #: When the stories of this stream happen (for 'restarts').
        self.moments: list[float] = []
        if 'shutdown' in self.kinds:
            for _ in range(kr.randint(1, 2)):
                host, t = self._focus()
                self._shutdown(t, host)
        if 'instance' in self.kinds:
            for _ in range(kr.randint(1, 3)):
                self._instance(*self._focus())
        if 'process' in self.kinds:
            host, t = self._focus()
            self._at(t, 'stop-compute', host)
            if kr.random() < 0.7:
                self._at(t + kr.uniform(20, 300), 'start-compute', host)
        if 'reload' in self.kinds:
            for _ in range(kr.randint(1, 2)):
                self._at(self._focus()[1], 'reload', *kr.choice(RELOADS))
        if 'maint' in self.kinds:
            host, t = self._focus()
            start = [w for w in ('wait', 'cold') if kr.random() < 0.4]
            self._at(t, 'maintenance', 'start', host, *start, 'reason',
                     'fuzz', str(kr.randint(1, 99)))
            if kr.random() < 0.7:
                end = [w for w in ('return', 'wait') if kr.random() < 0.5]
                self._at(t + kr.uniform(30, 300), 'maintenance', 'end', host,
                         *end)
        if 'opcmd' in self.kinds:
            for _ in range(kr.randint(1, 3)):
                self._command(*self._focus())
        if 'restarts' in self.kinds:
            for _ in range(kr.randint(1, 3)):
                t = (kr.choice(self.moments) + kr.uniform(0, 200)
                     if self.moments and kr.random() < 0.8
                     else kr.uniform(20, END - 100))
                self._leadership(min(t, END - 100), kr)

    # -- the fifth stream: the hosts' watchdogs -----------------------------

    def _watchdog_stream(self, seed: int) -> None:
        """Armed hosts and what befalls one of them (``self.wr``)."""
        wr = self.wr = random.Random(seed * 49979687 + 61)
        if 'watchdog' not in self.mix or wr.random() >= 0.3:
            return
        self.kinds += ('watchdog',)
        self._heartbeat()
        self.options['heartbeat.watchdog_min_deadline'] = str(WATCHDOG_MIN)
        self.watchdogs = {h: WATCHDOG_DEADLINE for h in self.hosts
                          if wr.random() < 0.6} or {
                              wr.choice(self.hosts): WATCHDOG_DEADLINE}
        host = wr.choice(sorted(self.watchdogs))
        t = wr.uniform(20, END - 400)
        what = wr.choice(['cut', 'cut', 'answers-lost', 'hang'])
        if what == 'cut':
            # No BMC to prove it off: the watchdog is the proof.
            self._at(t - 5, 'bmc', host, 'unreachable')
            self._at(t, 'cut-network', host)
            if wr.random() < 0.6:
                self._at(t + wr.uniform(60, 300), 'restore-network', host)
        else:
            self._at(t, 'watchdog', host, what)
            if wr.random() < 0.5:
                self._at(t + wr.uniform(10, 200), 'watchdog', host,
                         'answers-ok' if what == 'answers-lost'
                         else 'unhang')

    def _shutdown(self, t: float, host: str) -> None:
        """A clean reboot or power-off, sometimes hung, sometimes back."""
        kr = self.kr
        kind = kr.choice(['reboot', 'poweroff'])
        hang = ('hang',) if kr.random() < 0.15 else ()
        self._at(t, 'announce', host, kind, *hang)
        if not hang and kr.random() < 0.2:
            # It announces again after (or during) its first shutdown.
            self._at(t + kr.uniform(20, 300), 'announce', host,
                     kr.choice(['reboot', 'poweroff']))
        if (kind == 'poweroff' or hang) and kr.random() < 0.5:
            # Someone powers it on again (a hung one: off, then on).
            back = t + kr.uniform(40, 400)
            if hang:
                self._at(back, 'power-off', host)
            self._at(back + 5, 'power-on', host)

    def _instance(self, focus: str, t: float) -> None:
        """A guest crashes (sometimes in a loop), or its user acts."""
        kr = self.kr
        servers = self._servers()
        if not servers:
            return
        placed = self.topology()['instances']
        on_focus = [name for name in servers
                    if placed[name]['host'] == focus]
        srv = kr.choice(on_focus or servers)
        roll = kr.random()
        if roll < 0.5:
            self._at(t, 'crash-instance', srv)
        elif roll < 0.75:
            loop = ('loop', str(kr.choice([5, 20, 60])))
            times = ('times', str(kr.randint(1, 3))) if kr.random() < 0.6 \
                else ()
            self._at(t, 'crash-instance', srv, *loop, *times)
        elif roll < 0.9:
            self._at(t, 'stop-instance', srv)
            if kr.random() < 0.5:
                self._at(t + kr.uniform(10, 200), 'start-instance', srv)
        else:
            self._at(t, 'delete-instance', srv)

    def _command(self, host: str, t: float) -> None:
        """One of the operator's commands, at any moment."""
        kr = self.kr
        what = kr.choice(['pause', 'fencing', 'hosts-clear',
                          'instances-clear', 'disable'])
        if what == 'pause':
            self._at(t, 'pause', kr.choice(['30', '120', '400',
                                            'indefinite']))
            if kr.random() < 0.6:
                self._at(t + kr.uniform(5, 200), 'resume')
        elif what == 'fencing':
            self._at(t, 'fencing', 'off', host)
            if kr.random() < 0.7:
                self._at(t + kr.uniform(20, 200), 'fencing', 'on', host)
        elif what == 'hosts-clear':
            self._at(t, 'hosts', 'clear', host,
                     *(('enable',) if kr.random() < 0.3 else ()))
        elif what == 'instances-clear' and self._servers():
            self._at(t, 'instances', 'clear', kr.choice(self._servers()),
                     *(('start',) if kr.random() < 0.5 else ()))
        else:
            self._at(t, 'disable', host, 'operator', 'holds', 'it',
                     str(kr.randint(1, 99)))
            if kr.random() < 0.6:
                self._at(t + kr.uniform(10, 300), 'enable', host)

    def _leadership(self, t: float, r: random.Random) -> None:
        """A copy crashes, restarts, stops, or the backend fails."""
        if r.random() < 0.2:
            self._at(t, 'coordination', 'down')
            self._at(t + r.uniform(2, 60), 'coordination', 'up')
            return
        copy = r.choice(self.copies)
        what = r.choice(['crash', 'crash', 'restart', 'stop'])
        self._at(t, 'service', what, copy)
        if what != 'restart':
            self._at(t + r.uniform(1, 60), 'service', 'start', copy)
