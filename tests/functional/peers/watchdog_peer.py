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

"""WatchdogPeer: the stand-in watchdog device (see watchdog_device.py).

No test machine has a watchdog device or may load softdog, and a real
one would reset the machine running the tests: the stand-in keeps the
device's protocol on a FIFO and "resets the host" by killing the
processes the test names as the host's.
"""

import json
import os

from tests.functional.peers import base


class WatchdogPeer(base.Peer):

    def __init__(self, timeout):
        super().__init__()
        self.timeout = timeout

    def _setUp(self):
        super()._setUp()
        self.path = os.path.join(self.tmpdir, 'watchdog')
        self._events = os.path.join(self.tmpdir, 'events')
        self._pids = os.path.join(self.tmpdir, 'host-pids')
        self.proc = self.python_helper('watchdog', 'watchdog_device.py', [
            '--fifo', self.path, '--timeout', str(self.timeout),
            '--events', self._events, '--host-pids', self._pids])
        self.proc.wait_ready(lambda: os.path.exists(self.path),
                             self.start_timeout, 'watchdog FIFO')

    def host_pids(self, *pids):
        """The processes a reset kills (the simulated host)."""
        with open(self._pids, 'w') as f:
            f.write(' '.join(str(p) for p in pids))

    def _read(self):
        try:
            with open(self._events) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def events(self):
        """armed, disarmed, closed (no magic), reset: in order."""
        return [e['event'] for e in self._read()]

    def event_times(self, name):
        """When each ``name`` event happened (wall clock)."""
        return [e['at'] for e in self._read() if e['event'] == name]
