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

"""A resumed copy holds the durable record the running copy holds.

Whenever a marker the running copy wrote is what Nova shows, a copy that
adopts it (a restart, a new leader) holds exactly the running copy's
durable record: the spare, kdump, the fence time, what was given up.
"""

import testtools

from instanceha.engine import reasons
from instanceha.engine import recovery
from instanceha.engine import workflow
from instanceha.plugins import loader
from tests.unit import test_recovery_fakes as fakes

SPARE = 'instanceha:reserved'


def resumed(rig: fakes.Rig, host: str):
    """``host``'s workflow as a copy starting now adopts it (or None)."""
    copy = recovery.Engine(rig.conf, loader.load_configured(rig.conf),
                           rig.env)
    copy._adopt(copy._take_snapshot(None))
    return copy._workflows.get(host)


class TestResumedHoldsTheSame(testtools.TestCase):

    def compare(self, rig: fakes.Rig, seconds: int = 60,
                host: str = 'host1') -> list[str]:
        """Run; at every marker of ours in Nova, compare; the states."""
        compared = []
        for _ in range(seconds):
            rig.run(1)
            wf = rig.engine._workflows.get(host)
            if wf is None or rig.engine._running(host):
                continue  # a job's draft is applied at its harvest
            svc = rig.cloud.read_services().service(host)
            if not svc.disabled or svc.disabled_reason != wf.durable.marked:
                continue
            other = resumed(rig, host)
            if other is None:
                continue
            self.assertEqual(wf.durable, other.durable, svc.disabled_reason)
            compared.append(reasons.read(
                svc.disabled_reason).marker.state.value)
        return sorted(set(compared))

    def test_recovered_host(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        rig.cloud.boot('host1', 3)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.power_on_without_boot()
        # Straight on to the power-on: no evacuated marker in between.
        self.assertEqual(['evacuating'], self.compare(rig))

    def test_left_disabled(self):
        rig = fakes.Rig(leave_disabled=True,
                        **{'evacuation.strategy': 'smart'})
        rig.cloud.boot('host1', 2)
        rig.run(2)
        rig.cloud.kill('host1')
        # (evacuated: left disabled in the same tick)
        self.assertEqual(['evacuating', 'left_disabled'], self.compare(rig))

    def test_given_up_while_others_rebuild_then_failed(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 0})
        vms = rig.cloud.boot('host1', 3)
        rig.cloud.fail_rebuild(vms[0], 1)
        rig.run(2)
        rig.cloud.kill('host1')
        self.assertEqual(['evacuating', 'failed'], self.compare(rig))
        wf = rig.engine._workflows['host1']
        self.assertEqual(('failed', ()), (wf.state.value, wf.durable.gave_up))

    def test_spare(self):
        rig = fakes.Rig(hosts=2, **{'evacuation.strategy': 'smart',
                                    'reservation.strategy': 'reserved-hosts'})
        rig.cloud.add_host('spare1', status='disabled',
                           disabled_reason=SPARE)
        rig.cloud.boot('host1', 2)
        rig.run(2)
        rig.cloud.kill('host1')
        self.assertIn('evacuating', self.compare(rig))


class TestStateLocal(testtools.TestCase):
    """A state's own data does not outlive it."""

    def test_cleared_on_every_transition_but_what_is_handed_on(self):
        rig = fakes.Rig()
        wf = workflow.HostWorkflow(host='host1', state=workflow.S.FENCING,
                                   entered=fakes.T0, detected=fakes.T0)
        rig.engine._begin_record(wf)
        wf.local.attempts, wf.local.reason = 2, 'no answer'
        wf.local.kdump_deadline = 5.0
        rig.engine._transition(wf, workflow.S.FENCE_FAILED)
        self.assertEqual(workflow.StateLocal(), wf.local)
        wf.local.attempts, wf.local.reason = 3, 'no answer'
        rig.engine._transition(wf, workflow.S.FENCING, keep=('attempts',))
        self.assertEqual(workflow.StateLocal(attempts=3), wf.local)
