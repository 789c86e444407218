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

"""Gates on hand-built snapshots."""

import testtools

from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import plan
from instanceha.engine import states
from instanceha.plugins.gates import failure_domain
from tests.unit import test_decide as h

D = plan.Decision


def agg(name, hosts, limit=None):
    meta = {} if limit is None else {'max_unhealthy': limit}
    return model.Aggregate(name, name, frozenset(hosts), meta)


class TestThreshold(testtools.TestCase):

    def test_exactly_at_threshold_is_allowed(self):
        services, servers = h.cloud(4, down={'host1', 'host2'})
        p = h.run(h.snapshot(services, servers))
        self.assertEqual(2, len(p.to_recover()))

    def test_over_threshold_blocks_everything(self):
        services, servers = h.cloud(4, down={'host1', 'host2', 'host3'})
        p = h.run(h.snapshot(services, servers))
        self.assertEqual([], p.to_recover())
        self.assertEqual(3, len(p.by_decision(D.BLOCKED)))
        self.assertEqual(['threshold: 3 of 4 monitored hosts unhealthy '
                          '(3 failed) = 75% > threshold 50%: looks like a '
                          'mass failure (network or control plane), '
                          'nothing is recovered'], list(p.blocked_by))
        self.assertIn('plan blocked by threshold: 3 of 4', p.lines()[-1])

    def test_failed_hosts_without_instances_count(self):
        # host2 and host3 are empty: ignored, but still evidence of a
        # mass failure.
        services, servers = h.cloud(4, down={'host1', 'host2', 'host3'})
        servers = [s for s in servers if s.host in ('host1', 'host4')]
        p = h.run(h.snapshot(services, servers))
        self.assertEqual(D.BLOCKED, p.decision('host1').decision)
        self.assertEqual(D.IGNORED, p.decision('host2').decision)

    def test_threshold_zero_blocks_any_failure(self):
        services, servers = h.cloud(4, down={'host1'})
        p = h.run(h.snapshot(services, servers),
                  h.make_conf(DEFAULT={'threshold': 0}))
        self.assertEqual([], p.to_recover())

    def test_threshold_100_never_blocks(self):
        services, servers = h.cloud(4, down={'host1', 'host2', 'host3',
                                             'host4'})
        p = h.run(h.snapshot(services, servers),
                  h.make_conf(DEFAULT={'threshold': 100}))
        self.assertEqual(4, len(p.to_recover()))


class TestDisabledGate(testtools.TestCase):

    def test_detect_only(self):
        services, servers = h.cloud(4, down={'host1'})
        marker = marker_mod.Marker(states.HostState.EVACUATING, h.NOW).render()
        services[1] = h.svc('host2', state='down', status='disabled',
                            reason=marker)
        p = h.run(h.snapshot(services, servers),
                  h.make_conf(DEFAULT={'disabled': True}))
        self.assertEqual(D.BLOCKED, p.decision('host1').decision)
        self.assertIn('gate disabled: detect-only mode ([DEFAULT] disabled '
                      '= true): would recover host1',
                      p.decision('host1').reasons)
        # Hosts already in a workflow are still reported as such; the
        # runner decides what detect-only means for them.
        self.assertEqual(D.RECOVERING, p.decision('host2').decision)


class TestFailureDomain(testtools.TestCase):

    def plan(self, down, aggregates, threshold=100):
        services, servers = h.cloud(6, down=set(down))
        return h.run(h.snapshot(services, servers, aggregates),
                     h.make_conf(DEFAULT={'threshold': threshold}))

    def test_count_limit(self):
        aggs = [agg('rack1', ['host1', 'host2', 'host3'], '1'),
                agg('rack2', ['host4', 'host5', 'host6'])]
        p = self.plan({'host1', 'host2', 'host4', 'host5'}, aggs)
        self.assertEqual({'host4', 'host5'},
                         {d.host for d in p.to_recover()})
        self.assertIn('gate failure-domain: aggregate rack1 has 2 of 3 '
                      'hosts unhealthy (host1, host2) > max_unhealthy=1',
                      p.decision('host1').reasons)

    def test_percentage_limit_rounds_down(self):
        aggs = [agg('rack1', ['host1', 'host2', 'host3'], '50%')]
        p = self.plan({'host1'}, aggs)
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        p = self.plan({'host1', 'host2'}, aggs)
        self.assertEqual([], p.to_recover())

    def test_hosts_in_recovery_count(self):
        services, servers = h.cloud(6, down={'host1', 'host2'})
        services[0] = h.svc('host1', state='down', status='disabled',
                            reason=marker_mod.Marker(states.HostState.FENCING, h.NOW).render())
        aggs = [agg('rack1', ['host1', 'host2', 'host3'], '1')]
        p = h.run(h.snapshot(services, servers, aggs))
        self.assertEqual(D.BLOCKED, p.decision('host2').decision)

    def test_malformed_limit_blocks_and_names_it(self):
        aggs = [agg('rack1', ['host1', 'host2'], 'two')]
        p = self.plan({'host1'}, aggs)
        self.assertEqual(D.BLOCKED, p.decision('host1').decision)
        self.assertIn("aggregate rack1 metadata max_unhealthy='two' is "
                      "neither a count nor a percentage",
                      p.decision('host1').reasons[-1])

    def test_parse_limit(self):
        self.assertEqual(2, failure_domain.parse_limit(' 2 ', 10))
        self.assertEqual(3, failure_domain.parse_limit('30%', 10))
        self.assertEqual(0, failure_domain.parse_limit('0', 10))
        self.assertIsNone(failure_domain.parse_limit('120%', 10))
        self.assertIsNone(failure_domain.parse_limit('-1', 10))
        self.assertIsNone(failure_domain.parse_limit('', 10))


class TestPerCycle(testtools.TestCase):

    def test_cap_in_name_order(self):
        services, servers = h.cloud(6, down={'host5', 'host2', 'host3'})
        conf = h.make_conf(DEFAULT={'threshold': 100},
                           gates={'max_hosts_per_cycle': 2})
        p = h.run(h.snapshot(services, servers), conf)
        self.assertEqual(['host2', 'host3'],
                         [d.host for d in p.to_recover()])
        self.assertIn('gate per-cycle: cap of 2 host(s) per cycle reached '
                      'by host2, host3; waits for the next cycle',
                      p.decision('host5').reasons)
        self.assertEqual((), p.blocked_by)

    def test_retried_host_does_not_use_up_the_cap(self):
        # host1 could not be fenced and is retried (fence_failed): it is
        # judged again but is no new start, so host2 gets the slot.
        services, servers = h.cloud(6, down={'host1', 'host2', 'host3'})
        conf = h.make_conf(DEFAULT={'threshold': 100},
                           gates={'max_hosts_per_cycle': 1})
        p = h.run(h.snapshot(services, servers), conf,
                  {'host1': states.HostState.FENCE_FAILED})
        self.assertEqual(['host1', 'host2'],
                         [d.host for d in p.to_recover()])
        self.assertIn('gate per-cycle: cap of 1 host(s) per cycle reached '
                      'by host2; waits for the next cycle',
                      p.decision('host3').reasons)

    def test_started_hosts_are_never_blocked_by_the_cap(self):
        # Waiting for a worker (suspect) or retrying: blocking them would
        # end their workflow; they passed the cap when they started.
        services, servers = h.cloud(6, down={'host1', 'host2', 'host3'})
        conf = h.make_conf(DEFAULT={'threshold': 100},
                           gates={'max_hosts_per_cycle': 1})
        p = h.run(h.snapshot(services, servers), conf,
                  {'host1': states.HostState.SUSPECT,
                   'host2': states.HostState.FENCE_FAILED,
                   'host3': states.HostState.FENCE_FAILED})
        self.assertEqual(['host1', 'host2', 'host3'],
                         [d.host for d in p.to_recover()])

    def test_started_hosts_still_count_for_the_threshold(self):
        services, servers = h.cloud(4, down={'host1', 'host2', 'host3'})
        p = h.run(h.snapshot(services, servers), None,
                  {'host1': states.HostState.FENCE_FAILED})
        self.assertEqual([], p.to_recover())
        self.assertIn('3 of 4 monitored hosts unhealthy', p.blocked_by[0])

    def test_zero_is_no_cap(self):
        services, servers = h.cloud(6, down={'host1', 'host2', 'host3'})
        p = h.run(h.snapshot(services, servers),
                  h.make_conf(DEFAULT={'threshold': 100}))
        self.assertEqual(3, len(p.to_recover()))
