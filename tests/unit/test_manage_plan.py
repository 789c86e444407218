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

import datetime
import os

import fixtures
import testtools

from instanceha.cmd import manage_plan
from instanceha.engine import plan as plan_mod
from tests import conf_fixture

D = plan_mod.Decision
NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)


class TestAnnotateFencing(testtools.TestCase):
    """The dry run says when a host to recover cannot be fenced (R9)."""

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.plan = plan_mod.Plan(NOW, decisions=(
            plan_mod.HostDecision('compute-1', D.RECOVER, ('nova: down',)),
            plan_mod.HostDecision('compute-2', D.RECOVER, ('nova: down',)),
            plan_mod.HostDecision('compute-3', D.HEALTHY, ('nova: up',)),
        ))

    def conf(self, fencing_text):
        path = os.path.join(self.tmp, 'fencing.yaml')
        if fencing_text is not None:
            with open(path, 'w') as f:
                f.write(fencing_text)
        return self.useFixture(conf_fixture.ConfFixture(fencing={
            'config_file': path, 'allow_noop': True})).conf

    def test_unfenceable_host_is_flagged(self):
        conf = self.conf('hosts:\n  compute-1:\n    driver: noop\n')
        plan = manage_plan.annotate_fencing(self.plan, conf)
        self.assertEqual(('nova: down',), plan.decision('compute-1').reasons)
        why = plan.decision('compute-2').reasons[-1]
        self.assertIn('cannot be fenced', why)
        self.assertIn('will not be evacuated', why)
        self.assertEqual(('nova: up',), plan.decision('compute-3').reasons)

    def test_missing_fencing_file_is_reported_not_fatal(self):
        plan = manage_plan.annotate_fencing(self.plan, self.conf(None))
        for host in ('compute-1', 'compute-2'):
            self.assertIn('fencing file unusable',
                          plan.decision(host).reasons[-1])
