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

"""The soak's machines: a BMC each (IPMI or Redfish) and a heartbeat agent.

A real machine's agent dies with it: when a BMC reads off, the host's
``instanceha-heartbeat-agent`` is SIGKILLed (a power cut announces
nothing), and when it reads on again a new agent starts (a new boot).
:class:`Machines` keeps that true with a thread that follows the BMCs,
and records what the audit needs: when each agent was beating, and every
power-off the soak made itself.

A host may be hung (its nova-compute and agent dead, power on: only
fencing brings it back), rebooting cleanly (its agent stopped with
SIGTERM announces it; the soak boots it again) or cut off in a partition
(its agent frozen with SIGSTOP): the thread leaves those agents alone.
"""

import os
import signal
import subprocess
import sys
import threading
import time

from instanceha.heartbeat import keys

#: Seconds between two looks at the BMCs.
FOLLOW_INTERVAL = 0.3


class Machines:
    """Power, BMC kind and agent of every host."""

    def __init__(self, cloud, redfish, redfish_hosts: list, key_file: str,
                 directory: str, log):
        self.cloud = cloud
        self.redfish = redfish
        self.redfish_hosts = set(redfish_hosts)
        self.key_file = key_file
        self.dir = directory
        self.log = log
        self.collectors: list[int] = []
        self.agents: dict[str, subprocess.Popen] = {}
        #: host -> [[start, end or None], ...]: when its agent beat.
        self.beating: dict[str, list] = {}
        #: (time, host) of every power-off the soak itself made.
        self.own_power_offs: list[tuple] = []
        #: Hosts whose agent the following thread must not start.
        self.hung: set = set()
        self.rebooting: set = set()
        self.frozen: set = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None

    # --- BMCs ------------------------------------------------------------

    def bmc_kind(self, host: str) -> str:
        return 'redfish' if host in self.redfish_hosts else 'ipmi'

    def powers(self) -> dict:
        """host -> 'on'/'off', as the BMCs' emulators hold it (truth)."""
        out = {h: b['power'] for h, b in self.cloud.bmc.bmcs().items()
               if h not in self.redfish_hosts}
        if self.redfish_hosts:
            histories = self.redfish.power_histories()
            for host in self.redfish_hosts:
                out[host] = (histories[host][-1][1] if histories.get(host)
                             else 'on')
        return out

    def power_history(self, host: str) -> list:
        if host in self.redfish_hosts:
            return self.redfish.power_history(host)
        return self.cloud.bmc.power_history(host)

    def power_off(self, host: str) -> None:
        """The soak cuts a host's power at its BMC."""
        self.own_power_offs.append((time.time(), host))
        if host in self.redfish_hosts:
            resp = self.redfish.reset(host, 'ForceOff')
            assert resp.status_code in (200, 202, 204), resp.text
            self.redfish.wait_for_power(host, 'Off')
            # The change lands (and is recorded) a moment after the
            # request: the soak's own power-off is the recorded one.
            self.own_power_offs.append((self.power_history(host)[-1][0],
                                        host))
        else:
            # The power is cut, whatever the BMC answers its clients (it
            # may be told to be silent, stuck or lying).
            self.cloud.bmc.set_power(host, 'off')
            self.cloud.nova.control.kill(host)

    def start_compute(self, host: str) -> None:
        """nova-compute starts again, if its host has power."""
        if self.powers()[host] == 'on':
            self.cloud.nova.control.revive(host)

    def power_on(self, host: str) -> None:
        if host in self.redfish_hosts:
            self.redfish.reset(host, 'On')
            self.redfish.wait_for_power(host, 'On')
        else:
            self.cloud.power_on(host)

    # --- agents ----------------------------------------------------------

    def host_key(self, host: str) -> str:
        path = os.path.join(self.dir, 'agent-%s.key' % host)
        if not os.path.exists(path):
            with open(path, 'w') as f:
                f.write(keys.derive_host_key(keys.load_key(self.key_file),
                                             host).decode() + '\n')
        return path

    def start_agent(self, host: str) -> None:
        """A new boot's agent: it announces a reboot when stopped."""
        with self._lock:
            if self.agent_running(host):
                return
            log = open(os.path.join(self.dir, 'agent-%s.log' % host), 'ab')
            args = [sys.executable, '-m', 'instanceha.cmd.heartbeat_agent',
                    '--host', host, '--key-file', self.host_key(host),
                    '--interval', '0.3', '--announce', 'reboot',
                    '--answer-timeout', '8']
            for port in self.collectors:
                args += ['--collector', '127.0.0.1:%d' % port]
            self.agents[host] = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
            log.close()
            self.beating.setdefault(host, []).append([time.time(), None])

    def agent_running(self, host: str) -> bool:
        proc = self.agents.get(host)
        return proc is not None and proc.poll() is None

    def _silenced(self, host: str) -> None:
        spans = self.beating.get(host)
        if spans and spans[-1][1] is None:
            spans[-1][1] = time.time()

    def kill_agent(self, host: str) -> None:
        """SIGKILL: the machine is gone, nothing is announced."""
        with self._lock:
            proc = self.agents.get(host)
            self._silenced(host)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)

    def stop_agent(self, host: str) -> subprocess.Popen | None:
        """SIGTERM, as systemd stops it on a reboot: it announces one."""
        with self._lock:
            proc = self.agents.get(host)
            self._silenced(host)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            return proc

    def freeze_agent(self, host: str) -> None:
        """SIGSTOP: cut off from the service, alive but silent."""
        with self._lock:
            self.frozen.add(host)
            self._silenced(host)
            proc = self.agents.get(host)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGSTOP)

    def thaw_agent(self, host: str) -> None:
        with self._lock:
            self.frozen.discard(host)
            proc = self.agents.get(host)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                self.beating.setdefault(host, []).append([time.time(),
                                                          None])

    # --- following the BMCs ----------------------------------------------

    def follow(self) -> None:
        """Start the thread that keeps every agent true to its power."""
        for host in self.cloud.nova.hosts:
            self.start_agent(host)
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name='soak-machines')
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(FOLLOW_INTERVAL):
            try:
                powers = self.powers()
            except Exception:  # noqa: BLE001 - an emulator restarting
                continue
            with self._lock:
                for host, power in powers.items():
                    if power == 'off':
                        self.hung.discard(host)
                        if self.agent_running(host) or host in self.frozen:
                            self.frozen.discard(host)
                            self.kill_agent(host)
                    elif not (host in self.hung or host in self.rebooting
                              or host in self.frozen):
                        self.start_agent(host)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for host in list(self.agents):
            self.kill_agent(host)
