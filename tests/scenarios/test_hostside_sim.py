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

"""The simulator's host side and its invariants catch what they must.

Each test breaks one piece of the host's side (the agent's probe, the
service's policy, the watchdog device) in a real scenario run and
checks that the world's invariants report it: the golden cases pass
because the code is right, not because nothing is checked.
"""

import os

import fixtures
import testtools

from instanceha.heartbeat import protocol
from instanceha.sim import hostside as sim_hostside
from instanceha.sim import runner

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases')


def run(case: str) -> list[str]:
    return runner.run_scenario(os.path.join(CASES, case)).violations


class TestHostSideInvariants(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())

    def test_the_cases_hold_as_they_are(self):
        for case in ('partitioned-host-left-alone',
                     'isolated-opted-out-instance-keeps-running'):
            self.assertEqual([], run(case), case)

    def test_a_response_on_a_partitioned_host_is_caught(self):
        # An agent whose probe never hears its gateway takes a merely
        # partitioned host for isolated and powers its guests off.
        orig = sim_hostside.SimProber.round

        def deaf(prober):
            orig(prober)
            prober.latest = (prober.latest[0], False)
            return False
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.sim.hostside.SimProber.round', deaf))
        found = run('partitioned-host-left-alone')
        self.assertTrue(any('partitioned, not isolated' in v
                            for v in found), found)

    def test_a_response_to_an_instance_excluded_from_ha_is_caught(self):
        # A service that protects every instance, filters or not.
        def everything(side, snapshot, hosts):
            wait = side.conf.heartbeat.isolation_shutdown_wait
            response = side.conf.heartbeat.isolation_response
            return {h: protocol.Policy(response, wait, tuple(sorted(
                s.id for s in snapshot.servers_on(h)))) for h in hosts}
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.daemon.hostside.HostSide._policies_from',
            everything))
        found = run('isolated-opted-out-instance-keeps-running')
        self.assertTrue(any('vm-1b, which is excluded from recovery' in v
                            for v in found), found)

    def test_a_watchdog_count_without_a_reset_is_caught(self):
        # A device that never fires: the host runs on while the
        # service's watchdog level counts it off.
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.sim.watchdogs.Watchdogs._expire',
            lambda self, host, heard, boot: None))
        found = run('isolated-poweroff-watchdog-recovered')
        self.assertTrue(any('counted off by its watchdog, but it runs' in v
                            for v in found), found)
        self.assertTrue(any('where its guest still runs' in v
                            or 'no fencing device confirmed off' in v
                            for v in found), found)

    def test_a_forged_datagram_accepted_is_caught(self):
        # A listener that also trusts the forger's key takes the forged
        # heartbeat.
        decode = protocol.decode

        def trusting(data, keys, **kwargs):
            if callable(keys):
                return decode(data, lambda host: tuple(keys(host)) + (
                    b'f' * 64,), **kwargs)
            return decode(data, keys, **kwargs)
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.heartbeat.protocol.decode', trusting))
        found = run('wire-forged-replayed-then-key-retired-early')
        self.assertTrue(any('forge datagram of compute-1 accepted' in v
                            for v in found), found)
