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

"""The isolation response's steps (the real virsh: functional tests)."""

import fixtures
import testtools

from instanceha.heartbeat import protocol as p
from instanceha.heartbeat import response


class Guests:
    """A hypervisor whose guests may ignore a shutdown request."""

    def __init__(self, running, stubborn=()):
        self.run = set(running)
        self.stubborn = set(stubborn)
        self.calls = []

    def running(self):
        return set(self.run)

    def destroy(self, uuid):
        self.calls.append(('destroy', uuid))
        self.run.discard(uuid)

    def shutdown(self, uuid):
        self.calls.append(('shutdown', uuid))
        if uuid not in self.stubborn:
            self.run.discard(uuid)


class TestResponse(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.t = 0.0

    def sleep(self, s):
        self.t += s

    def respond(self, guests, pol, still=lambda: True):
        r = response.Response(guests, pol, still, clock=lambda: self.t,
                              sleep=self.sleep)
        r.run()
        return r

    def test_poweroff_only_protected_running_guests(self):
        g = Guests({'a', 'b', 'c'})
        r = self.respond(g, p.Policy(p.RESPONSE_POWEROFF, 0, ('A', 'b', 'x')))
        self.assertEqual([('destroy', 'a'), ('destroy', 'b')], g.calls)
        self.assertEqual(['a', 'b'], r.stopped)
        self.assertEqual({'c'}, g.run)

    def test_shutdown_waits_bounded_then_powers_off(self):
        g = Guests({'a', 'b'}, stubborn={'b'})
        self.respond(g, p.Policy(p.RESPONSE_SHUTDOWN, 30, ('a', 'b')))
        self.assertEqual([('shutdown', 'a'), ('shutdown', 'b'),
                          ('destroy', 'b')], g.calls)
        self.assertEqual(30.0, self.t)

    def test_stops_when_the_isolation_ends(self):
        g = Guests({'a', 'b'})
        left = iter([True, False])
        self.respond(g, p.Policy(p.RESPONSE_POWEROFF, 0, ('a', 'b')),
                     still=lambda: next(left, False))
        self.assertEqual([('destroy', 'a')], g.calls)
        self.assertEqual({'b'}, g.run)

    def test_virsh_failure_is_logged_not_raised(self):
        hv = response.Virsh(command='false')
        r = response.Response(hv, p.Policy(p.RESPONSE_POWEROFF, 0, ('a',)),
                              lambda: True)
        r.run()
        self.assertEqual([], r.stopped)
