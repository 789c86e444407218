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

"""Process failure: our own write is not a report of nova-compute.

Real Nova stamps a service's ``updated_at`` on every write, our disable
too, so right after it the host's heartbeat in Nova looks fresh although
nova-compute is still down. The simulator's Nova (like the functional
peer, whose stopped compute shows no time stamp at all) does not do
that, so the rule is pinned here on a cloud that records the writes it
is asked for (the engine's port; nothing else of Nova is needed).
"""

import dataclasses
import datetime
import types

import testtools

from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import process_failure as pf
from instanceha.engine import runtime_loop
from instanceha.engine.states import HostState

NOW = datetime.datetime(2026, 1, 1, 0, 2, tzinfo=datetime.timezone.utc)


class _Cloud:
    def __init__(self, broken=False, services=()):
        self.writes = []
        self.broken = broken
        #: What Nova shows when the write reads the service again.
        self.services = services

    def read_services(self):
        return model.Snapshot(taken_at=NOW, services=tuple(self.services))

    def update_service(self, svc, **changes):
        self.writes.append((svc.host, changes))
        if self.broken:
            raise RuntimeError('a bug in the port')
        return svc


class TestOwnWrite(testtools.TestCase):

    def cycle(self, updated_at, broken=False, now_reason=None):
        mark = marker_mod.Marker(state=HostState.SERVICE_DOWN,
                                 when=NOW - datetime.timedelta(seconds=2),
                                 note=pf.NOTE)
        svc = model.Service(id='1', host='h1', state=model.UP,
                            status=model.DISABLED, updated_at=updated_at,
                            disabled_reason=mark.render())
        snap = model.Snapshot(taken_at=NOW, services=(svc,))
        plan = plan_mod.Plan(taken_at=NOW, decisions=(
            plan_mod.HostDecision('h1', plan_mod.Decision.HEALTHY, (),
                                  (), svc, verdict='alive'),))
        current = dataclasses.replace(
            svc, disabled_reason=now_reason or svc.disabled_reason)
        cloud = _Cloud(broken, (current,))
        sink = events.RecordingEventSink()
        env = types.SimpleNamespace(
            cloud=cloud, events=sink, executor=executor.InlineExecutor(),
            clock=types.SimpleNamespace(monotonic=lambda: 0.0))
        conf = types.SimpleNamespace(process_failure=types.SimpleNamespace(
            enabled=True, threshold=30, max_per_cycle=5))
        workflows = runtime_loop.Runtime(env, leading=lambda: True)
        pf.ProcessFailures(conf, env, workflows).cycle(snap, plan, NOW)
        self.left = workflows.records(pf.KIND)
        self.events = sink.events
        return cloud.writes

    def test_our_disable_stamp_does_not_enable_it(self):
        self.assertEqual([], self.cycle(NOW - datetime.timedelta(seconds=1)))

    def test_a_report_after_our_disable_enables_it(self):
        self.assertEqual([('h1', {'status': model.ENABLED})],
                         self.cycle(NOW + datetime.timedelta(seconds=8)))

    def test_a_write_that_breaks_is_not_replayed(self):
        # One attempt, no event, no workflow left to retry it later: the
        # next poll judges the host afresh.
        self.assertEqual([('h1', {'status': model.ENABLED})],
                         self.cycle(NOW + datetime.timedelta(seconds=8),
                                    broken=True))
        self.assertEqual([], self.left)
        self.assertEqual([], self.events)

    def test_an_operator_reason_written_meanwhile_is_kept(self):
        # The write reads the service again: an operator replaced our
        # marker after the read the enable was decided on.
        self.assertEqual([], self.cycle(NOW + datetime.timedelta(seconds=8),
                                        now_reason='operator took it'))
        self.assertEqual([], self.left)
        self.assertEqual([], self.events)
