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

"""Several instanceha-service processes sharing a real backend (R14).

Real nova (NovaPeer), real IPMI BMCs driven by the real ipmitool
(IpmiBmcPeer), a real redis or etcd (RedisPeer, EtcdPeer), and real
``instanceha-service`` processes, each with its own /healthz and
/metrics. The story, on each backend:

1. two copies: exactly one leads; a host dies; the leader fences it and
   starts evacuating; it is killed with SIGKILL mid-evacuation; the
   follower takes over, resumes from Nova's markers and finishes: one
   fencing, one evacuation per instance;
2. the backend is stopped: no copy is leader or ready, and a second host
   dying is left alone; the backend comes back: exactly one copy recovers
   that host;
3. SIGTERM: the leader exits cleanly and hands over at once.

Durations are printed, never asserted; waits are bounded so a broken
build fails instead of hanging.
"""

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

from prometheus_client import parser
import testtools

from tests.functional import peers
from tests.functional.peers import base as peer_base
from tests.functional import test_recovery
from tests.functional.test_recovery import Cloud

#: Generous bound of one recovery (detection, fence, rebuilds, power on).
RECOVERY_TIMEOUT = 180
#: Bound of a takeover or of a state change visible in /healthz.
SHORT = 60
LEASE = 3
BEAT = 0.5


def wait_for(predicate, timeout, what):
    return peer_base.wait_until(predicate,
                                timeout * peer_base.TIMEOUT_SCALE,
                                interval=0.2, what=what)


class Copy:
    """One instanceha-service process with its own health port."""

    def __init__(self, test, cloud, name, extra_config=()):
        self.name = name
        self.port = peer_base.free_port()
        extra = os.path.join(cloud.dir, '%s.conf' % name)
        with open(extra, 'w') as f:
            f.write('[coordination]\nmember_id = %s\n'
                    '[health]\nlisten = 127.0.0.1\nport = %d\n'
                    % (name, self.port))
        self.log_path = os.path.join(cloud.dir, '%s.log' % name)
        self.proc = test_recovery.start_service(
            test, cloud, name, [extra] + list(extra_config))

    def get(self, path):
        url = 'http://127.0.0.1:%d%s' % (self.port, path)
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def health(self):
        """(HTTP status, body); (None, None) while nothing answers."""
        try:
            code, body = self.get('/healthz')
        except OSError:
            return None, None
        return code, json.loads(body)

    def leading(self):
        code, body = self.health()
        return code == 200 and body['role'] == 'leader'

    def following(self):
        code, body = self.health()
        return (code == 200 and body['role'] == 'follower' and
                body['coordination']['connected'])

    def metrics(self):
        code, body = self.get('/metrics')
        assert code == 200, code
        return {s.name: s.value for family in
                parser.text_string_to_metric_families(body.decode())
                for s in family.samples if not s.labels}

    def events(self, host, pattern):
        """Event log lines of this copy about host matching pattern."""
        with open(self.log_path, errors='replace') as f:
            text = f.read()
        return re.findall(r'%s %s\b[^\n]*' % (pattern, host), text)

    def transitions(self, host, new):
        return [line for line in self.events(host, 'host_state')
                if re.search(r'\bnew=%s\b' % new, line)]


class _HaStory:
    """The story; subclasses choose the backend."""

    def make_backend(self):
        raise NotImplementedError

    def test_two_copies_one_acts_leader_killed_backend_lost(self):
        backend = self.make_backend()
        cloud = self.useFixture(Cloud(hosts=3, options={
            'coordination.backend_url': backend.url,
            'coordination.lease_time': LEASE,
            'coordination.heartbeat_interval': BEAT,
            'evacuation.strategy': 'smart',
            'evacuation.max_in_flight': 1,
            'shutdown_timeout': 10}))
        vms = cloud.boot('host1', 4)
        later, = cloud.boot('host2', 1, name='later')

        a = Copy(self, cloud, 'copy-a')
        wait_for(a.leading, SHORT, 'copy-a to lead and be ready')
        b = Copy(self, cloud, 'copy-b')
        wait_for(b.following, SHORT, 'copy-b to follow and be ready')
        self.assertTrue(a.leading())

        # 1. A host dies; the leader is killed mid-evacuation.
        cloud.power_off('host1')
        wait_for(lambda: any(cloud.evacuations(s) for s in vms),
                 RECOVERY_TIMEOUT, 'a first evacuation by copy-a')
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        killed = time.monotonic()
        begun = [s for s in vms if cloud.evacuations(s)]
        self.assertLess(len(begun), len(vms),
                        'copy-a evacuated everything before it was killed')
        wait_for(b.leading, SHORT, 'copy-b to take over')
        print('%s: copy-b ready as leader %.1f s after SIGKILL of copy-a '
              '(lease %d s, heartbeat %.1f s)'
              % (self.id(), time.monotonic() - killed, LEASE, BEAT))
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 recovered by copy-b')
        for sid in vms:
            self.assertEqual(1, len(cloud.evacuations(sid)), sid)
            self.assertNotEqual('host1', cloud.server(sid).host)
        fenced = a.transitions('host1', 'fenced') + b.transitions(
            'host1', 'fenced')
        self.assertEqual(1, len(fenced), fenced)
        self.assertEqual([], b.transitions('host1', 'fencing'))
        self.assertTrue(b.events('host1', 'host_resumed'))
        self.assertTrue(b.events('host1', 'evacuate_requested'))

        samples = b.metrics()
        self.assertEqual(1.0, samples['instanceha_leader'])
        self.assertEqual(1.0, samples['instanceha_coordination_backend_up'])
        self.assertGreater(samples['instanceha_cycle_duration_seconds_count'],
                           0)

        # 2. The backend goes: nobody acts, nobody is ready.
        c = Copy(self, cloud, 'copy-c')
        wait_for(c.following, SHORT, 'copy-c to follow')
        backend.stop()
        lost = time.monotonic()
        for copy in (b, c):
            wait_for(lambda: copy.health()[0] == 503 and
                     not copy.health()[1]['coordination']['leader'],
                     SHORT, '%s to report the backend lost' % copy.name)
        print('%s: no leader and not ready %.1f s after the backend stopped'
              % (self.id(), time.monotonic() - lost))
        code, body = b.health()
        self.assertTrue(any('coordination' in r for r in body['reasons']),
                        body)
        self.assertEqual(0.0, b.metrics()['instanceha_leader'])
        cloud.power_off('host2')
        # Long enough for a leader to detect (delta 8 s), poll (2 s) and
        # fence: nobody may.
        time.sleep(25)
        svc = cloud.service('host2')
        self.assertEqual(('enabled', False), (svc.status, svc.forced_down))
        self.assertEqual([], b.events('host2', 'host_state') +
                         c.events('host2', 'host_state'))

        # The backend returns: exactly one copy recovers host2.
        backend.start()
        back = time.monotonic()
        wait_for(lambda: b.leading() or c.leading(), SHORT, 'a new leader')
        print('%s: a leader again %.1f s after the backend came back'
              % (self.id(), time.monotonic() - back))
        wait_for(lambda: cloud.recovered('host2'), RECOVERY_TIMEOUT,
                 'host2 recovered')
        self.assertEqual(1, len(cloud.evacuations(later)))
        fencers = [x.name for x in (b, c) if x.transitions('host2', 'fenced')]
        self.assertEqual(1, len(fencers), fencers)

        # 3. SIGTERM: clean exit, immediate handover.
        leader, follower = (b, c) if b.leading() else (c, b)
        leader.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        self.assertEqual(0, leader.proc.wait(60))
        wait_for(follower.leading, SHORT, 'handover after SIGTERM')
        print('%s: %s leads %.1f s after SIGTERM of %s (exit included)'
              % (self.id(), follower.name, time.monotonic() - stopped,
                 leader.name))
        with open(leader.log_path) as f:
            self.assertIn('released leadership', f.read())


class RedisHaTest(_HaStory, testtools.TestCase):

    def make_backend(self):
        return self.useFixture(peers.RedisPeer())


class EtcdHaTest(_HaStory, testtools.TestCase):

    def make_backend(self):
        return self.useFixture(peers.EtcdPeer())
