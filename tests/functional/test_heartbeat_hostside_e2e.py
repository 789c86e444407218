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

"""The host's side against the production service wiring and real Nova.

The engine is the service's (``instanceha.service.build``, with its tick
observers: what the leading copy answers comes from there), Nova is
NovaPeer, the agents are real processes, the pause is set with the real
``instanceha-manage``. Watchdogs are the stand-in device (WatchdogPeer:
no test machine has one), with a timeout long enough never to fire here.
"""

from instanceha.heartbeat import protocol as p
from tests.functional import peers
from tests.functional import test_heartbeat_e2e as e2e
from tests.functional import test_recovery as rec


class TestHostSideEndToEnd(e2e.HeartbeatCloudTest):

    def test_policy_watchdog_and_pause_through_the_service(self):
        dogs = {h: self.useFixture(peers.WatchdogPeer(60))
                for h in ('host1', 'host2', 'host3')}

        def extra(host):
            return ['--watchdog-device', dogs[host].path,
                    '--watchdog-timeout', '60', '--watchdog-deadline', '120']

        cloud, vm, agents, eng = self.heartbeat_cloud(
            options={'heartbeat.isolation_response': 'poweroff'},
            agent_extra=extra)
        listener = eng.drivers.detectors[1].listener
        side = eng.service.hostside

        def report(host):
            rec_ = listener.record(host)
            return rec_.report if rec_ is not None else None

        # The leader's policy for host1 names its instance; the agent
        # holds it (its heartbeats name the policy's digest).
        rec.wait_for(lambda: side.policy('host1') is not None and
                     side.policy('host1').protected == (vm,), 60,
                     'host1 policy')
        self.assertEqual(p.RESPONSE_POWEROFF, side.policy('host1').response)
        rec.wait_for(lambda: report('host1') is not None and
                     report('host1').policy_digest ==
                     side.policy('host1').digest(), 60, 'policy held')
        # Armed where a protected instance runs, announced, current.
        rec.wait_for(lambda: 'armed' in dogs['host1'].events(), 60,
                     'host1 armed')
        rec.wait_for(lambda: listener.watchdog('host1').current, 60,
                     'armed announced')
        self.assertEqual(120.0, listener.watchdog('host1').deadline)
        # host2 runs nothing protected: idle, never armed (its report may
        # come a beat after host1's).
        rec.wait_for(lambda: report('host2') is not None, 60,
                     'host2 reported')
        self.assertEqual(p.WD_IDLE, report('host2').watchdog)
        self.assertEqual([], dogs['host2'].events())

        # instanceha-manage pause releases it; resume arms it again.
        rec.manage(cloud, 'pause', '--for', '10m', '--reason', 'e2e')
        rec.wait_for(lambda: dogs['host1'].events()[-1:] == ['disarmed'],
                     60, 'released for the pause')
        rec.wait_for(lambda: report('host1').watchdog == p.WD_PAUSED, 60,
                     'paused reported')
        self.assertFalse(listener.watchdog('host1').current)
        rec.manage(cloud, 'resume')
        rec.wait_for(lambda: dogs['host1'].events().count('armed') == 2, 60,
                     're-armed at the resume')
        rec.wait_for(lambda: listener.watchdog('host1').current, 60,
                     'armed announced again')
        self.assertNotIn('reset', dogs['host1'].events())
