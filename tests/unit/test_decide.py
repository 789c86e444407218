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

"""make_plan on hand-built snapshots: the order of questions, the plan."""

import datetime
import json

import testtools

from instanceha.engine import decide
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import plan
from instanceha.engine import states
from instanceha.plugins.detectors import base as det_base
from instanceha.plugins import loader
from tests import conf_fixture

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0,
                        tzinfo=datetime.timezone.utc)
D = plan.Decision
TINY = model.Flavor('m1.tiny')


make_conf = conf_fixture.make_conf


def svc(host, state='up', status='enabled', age=5, reason=None,
        forced_down=False, raw=None):
    updated = None if age is None else NOW - datetime.timedelta(seconds=age)
    return model.Service(id='id-' + host, host=host, state=state,
                         status=status, forced_down=forced_down,
                         updated_at=updated, updated_at_raw=raw,
                         disabled_reason=reason)


def server(name, host, flavor=TINY, image_id='img-plain', status='ACTIVE'):
    return model.Server(id='srv-' + name, name=name, host=host,
                        status=status, flavor=flavor, image_id=image_id)


def snapshot(services, servers=(), aggregates=(), images=()):
    return model.Snapshot(taken_at=NOW, services=tuple(services),
                          servers=tuple(servers),
                          aggregates=tuple(aggregates),
                          images={i.id: i for i in images})


def cloud(n=4, down=(), per_host=2, **svc_kwargs):
    """n hosts host1..hostN with per_host servers each; `down` are down."""
    services = [svc('host%d' % i, state='down' if 'host%d' % i in down
                    else 'up', **svc_kwargs) for i in range(1, n + 1)]
    servers = [server('vm%d-%d' % (i, j), 'host%d' % i)
               for i in range(1, n + 1) for j in range(per_host)]
    return services, servers


def drivers(conf):
    from instanceha.conf import filters
    return loader.Drivers(
        detectors=loader.load('instanceha.detectors',
                              conf.detection.detectors, 'd', conf),
        filters=loader.load('instanceha.filters', filters.names(conf),
                            'f', conf),
        gates=loader.load('instanceha.gates', conf.gates.enabled, 'g',
                          conf),
        reservation=None, evacuation=None)


def run(snap, conf=None, recovering=None):
    conf = conf or make_conf()
    return decide.make_plan(snap, drivers(conf), conf, NOW, recovering)


class FakeDetector(det_base.Detector):
    """A second witness with fixed verdicts (stands in for heartbeat)."""

    name = 'fake'

    def __init__(self, conf, verdicts, failures_only=False):
        super().__init__(conf)
        self.verdicts = verdicts
        self.reports_failures_only = failures_only

    def detect(self, snapshot, now):
        return {h: det_base.Evidence(h, v, 'fake: %s' % v.value)
                for h, v in self.verdicts.items()}


class TestMakePlan(testtools.TestCase):

    def test_one_failed_host_is_recovered_others_healthy(self):
        services, servers = cloud(4, down={'host2'})
        p = run(snapshot(services, servers))
        self.assertEqual(['host2'], [d.host for d in p.to_recover()])
        self.assertEqual(D.HEALTHY, p.decision('host1').decision)
        rec = p.decision('host2')
        self.assertEqual(2, len(rec.servers))
        self.assertIn('nova: state down', rec.reasons[0])
        self.assertEqual((), p.blocked_by)

    def test_stale_heartbeat_fails_even_when_nova_says_up(self):
        services, servers = cloud(4)
        services[0] = svc('host1', age=31)
        p = run(snapshot(services, servers))
        self.assertEqual(D.RECOVER, p.decision('host1').decision)
        self.assertIn('> delta 30s', p.decision('host1').reasons[0])

    def test_heartbeat_at_delta_is_still_alive(self):
        services, servers = cloud(4)
        services[0] = svc('host1', age=30)
        p = run(snapshot(services, servers))
        self.assertEqual(D.HEALTHY, p.decision('host1').decision)

    def test_malformed_timestamp_is_unknown_not_failed(self):
        services, servers = cloud(4)
        services[0] = svc('host1', age=None, raw='yesterday-ish')
        p = run(snapshot(services, servers))
        d = p.decision('host1')
        self.assertEqual(D.UNKNOWN, d.decision)
        self.assertIn("malformed updated_at 'yesterday-ish'", d.reasons[0])
        self.assertEqual([], p.to_recover())

    def test_missing_timestamp_is_unknown(self):
        services, servers = cloud(4)
        services[0] = svc('host1', age=None)
        d = run(snapshot(services, servers)).decision('host1')
        self.assertEqual(D.UNKNOWN, d.decision)
        self.assertIn('no updated_at', d.reasons[0])

    def test_down_with_malformed_timestamp_is_failed_by_state(self):
        services, servers = cloud(4)
        services[0] = svc('host1', state='down', age=None, raw='garbage')
        d = run(snapshot(services, servers)).decision('host1')
        self.assertEqual(D.RECOVER, d.decision)
        self.assertIn('garbage', d.reasons[0])

    def test_operator_disabled_host_is_ignored_even_when_failed(self):
        services, servers = cloud(4, down={'host2'})
        services[1] = svc('host2', state='down', status='disabled',
                          reason='maintenance window')
        p = run(snapshot(services, servers))
        d = p.decision('host2')
        self.assertEqual(D.IGNORED, d.decision)
        self.assertIn('disabled by an operator (reason: maintenance '
                      'window)', d.reasons)
        self.assertEqual([], p.to_recover())

    def test_disabled_by_us_is_recovering_not_ignored(self):
        services, servers = cloud(4, down={'host2'})
        marker = marker_mod.Marker(states.HostState.EVACUATING, NOW, note='x').render()
        services[1] = svc('host2', state='down', status='disabled',
                          reason=marker, forced_down=True)
        d = run(snapshot(services, servers)).decision('host2')
        self.assertEqual(D.RECOVERING, d.decision)
        self.assertEqual(states.HostState.EVACUATING, d.recovery_state)
        self.assertEqual(2, len(d.servers))
        self.assertIn('marker evacuating since', d.reasons[0])

    def test_marker_on_enabled_service_is_not_trusted(self):
        services, servers = cloud(4)
        services[0] = svc('host1', reason=marker_mod.Marker(
            states.HostState.FENCING, NOW).render())
        d = run(snapshot(services, servers)).decision('host1')
        self.assertEqual(D.HEALTHY, d.decision)

    def test_callers_state_wins_and_healthy_state_is_not_recovering(self):
        services, servers = cloud(4, down={'host1'})
        p = run(snapshot(services, servers),
                recovering={'host1': states.HostState.FENCING,
                            'host2': states.HostState.HEALTHY})
        self.assertEqual(D.RECOVERING, p.decision('host1').decision)
        self.assertEqual(D.HEALTHY, p.decision('host2').decision)

    def test_recovering_host_without_instances_stays_recovering(self):
        services, servers = cloud(4)
        services[0] = svc('host1', state='down', status='disabled',
                          reason=marker_mod.Marker(states.HostState.WAITING_UP, NOW).render())
        servers = [s for s in servers if s.host != 'host1']
        d = run(snapshot(services, servers)).decision('host1')
        self.assertEqual(D.RECOVERING, d.decision)
        self.assertEqual((), d.servers)

    def test_failed_host_without_instances_is_ignored(self):
        services, servers = cloud(4, down={'host3'})
        servers = [s for s in servers if s.host != 'host3']
        d = run(snapshot(services, servers)).decision('host3')
        self.assertEqual(D.IGNORED, d.decision)
        self.assertIn('no instances', d.reasons)

    def test_empty_failed_host_recovered_without_has_instances(self):
        services, servers = cloud(4, down={'host3'})
        servers = [s for s in servers if s.host != 'host3']
        conf = make_conf(filters={'enabled': ['enabled']})
        d = run(snapshot(services, servers), conf).decision('host3')
        self.assertEqual(D.RECOVER, d.decision)

    def test_threshold_counts_hosts_in_recovery(self):
        # 2 hosts already in recovery + 1 new failure = 3 of 5 > 50%.
        services, servers = cloud(5, down={'host1', 'host2', 'host3'})
        for i in (0, 1):
            services[i] = svc('host%d' % (i + 1), state='down',
                              status='disabled', forced_down=True,
                              reason=marker_mod.Marker(states.HostState.EVACUATING, NOW).render())
        p = run(snapshot(services, servers))
        self.assertEqual(D.BLOCKED, p.decision('host3').decision)
        self.assertEqual(1, len(p.blocked_by))
        self.assertIn('threshold: 3 of 5 monitored hosts unhealthy '
                      '(1 failed + 2 still in recovery)', p.blocked_by[0])
        self.assertEqual(D.RECOVERING, p.decision('host1').decision)

    def test_hosts_kept_out_of_service_count_until_handed_back(self):
        # A slow cascade must not creep under the threshold: host1 left
        # disabled and host2 FAILED (both kept out by us) + host3 failing
        # now = 3 of 5 > 50%.
        services, servers = cloud(5, down={'host1', 'host2', 'host3'})
        for i, state in ((0, states.HostState.LEFT_DISABLED),
                         (1, states.HostState.FAILED)):
            services[i] = svc('host%d' % (i + 1), state='down',
                              status='disabled', forced_down=True,
                              reason=marker_mod.Marker(state, NOW).render())
        p = run(snapshot(services, servers))
        self.assertEqual(D.BLOCKED, p.decision('host3').decision)
        self.assertIn('threshold: 3 of 5 monitored hosts unhealthy (1 failed '
                      '+ 2 kept out of service until an operator hands them '
                      'back)', p.blocked_by[0])
        # Handed back (hosts clear: the marker says waiting_up, which
        # still counts until the host is up; --enable: healthy).
        services[0] = svc('host1')
        services[1] = svc('host2')
        p = run(snapshot(services, servers))
        self.assertEqual(D.RECOVER, p.decision('host3').decision)

    def test_operator_disabled_hosts_are_not_in_the_denominator(self):
        # 2 failed of 4 monitored = 50%, not > 50%: allowed. With the
        # two disabled hosts counted it would be 2 of 6.
        services, servers = cloud(6, down={'host1', 'host2'})
        services[4] = svc('host5', status='disabled', reason='spare')
        services[5] = svc('host6', status='disabled', reason='spare')
        p = run(snapshot(services, servers))
        self.assertEqual({'host1', 'host2'},
                         {d.host for d in p.to_recover()})
        conf = make_conf(DEFAULT={'threshold': 49})
        p = run(snapshot(services, servers), conf)
        self.assertEqual([], p.to_recover())
        self.assertIn('2 of 4 monitored', p.blocked_by[0])

    def test_lines_and_dicts(self):
        services, servers = cloud(3, down={'host2'})
        p = run(snapshot(services, servers))
        lines = p.lines()
        self.assertEqual(3, len(lines))
        self.assertTrue(lines[1].startswith('host2 recover: nova: state '
                                            'down'))
        self.assertTrue(lines[1].endswith('2 eligible instance(s)'))
        data = json.loads(json.dumps(p.as_dicts()))
        self.assertEqual(['host1', 'host2', 'host3'],
                         [d['host'] for d in data])
        self.assertEqual(('recover', 'failed'),
                         (data[1]['decision'], data[1]['verdict']))
        self.assertEqual('alive', data[0]['verdict'])
        self.assertEqual(2, len(data[1]['servers']))

    def test_snapshot_needs_images_only_for_image_filter(self):
        self.assertEqual({'images': False},
                         decide.snapshot_needs(drivers(make_conf())))
        conf = make_conf(tagging={'tagged_images': True})
        self.assertEqual({'images': True},
                         decide.snapshot_needs(drivers(conf)))


class TestCombine(testtools.TestCase):
    """[detection] combine with a second witness (R15)."""

    def plan(self, mode, fake, down=('host1',), failures_only=False):
        conf = make_conf(detection={'combine': mode})
        services, servers = cloud(4, down=set(down))
        drv = drivers(conf)
        drv.detectors.append(FakeDetector(conf, fake, failures_only))
        return decide.make_plan(snapshot(services, servers), drv, conf,
                                NOW)

    def test_veto_alive_heartbeat_makes_host_isolated(self):
        p = self.plan('veto', {'host1': det_base.Verdict.ALIVE})
        d = p.decision('host1')
        self.assertEqual((D.ISOLATED, 'isolated'), (d.decision, d.verdict))
        self.assertEqual(('nova: state down (last heartbeat 5s ago)',
                          'fake: alive'), d.reasons)
        self.assertEqual([], p.to_recover())

    def test_veto_unknown_does_not_vote(self):
        p = self.plan('veto', {'host1': det_base.Verdict.UNKNOWN})
        self.assertEqual(D.RECOVER, p.decision('host1').decision)

    def test_all_needs_every_witness(self):
        p = self.plan('all', {'host1': det_base.Verdict.UNKNOWN})
        self.assertEqual(D.UNKNOWN, p.decision('host1').decision)
        p = self.plan('all', {'host1': det_base.Verdict.FAILED})
        self.assertEqual(D.RECOVER, p.decision('host1').decision)
        p = self.plan('all', {})
        self.assertEqual(D.UNKNOWN, p.decision('host1').decision)

    def test_all_does_not_wait_for_a_failures_only_witness(self):
        # kdump is silent about hosts that are not dumping: under ``all``
        # its silence must not turn an ordinary failure into unknown.
        p = self.plan('all', {}, failures_only=True)
        self.assertEqual(D.RECOVER, p.decision('host1').decision)
        p = self.plan('all', {'host1': det_base.Verdict.FAILED},
                      failures_only=True)
        self.assertEqual(D.RECOVER, p.decision('host1').decision)

    def test_any_acts_on_one_witness(self):
        p = self.plan('any', {'host2': det_base.Verdict.FAILED}, down=())
        self.assertEqual(D.RECOVER, p.decision('host2').decision)
        p = self.plan('any', {'host1': det_base.Verdict.ALIVE})
        self.assertEqual(D.RECOVER, p.decision('host1').decision)

    def test_nova_alive_other_failed_is_disputed_not_isolated(self):
        for mode in ('veto', 'all'):
            p = self.plan(mode, {'host2': det_base.Verdict.FAILED}, down=())
            d = p.decision('host2')
            self.assertEqual((D.DISPUTED, 'disputed'),
                             (d.decision, d.verdict), mode)
            self.assertEqual(decide.DISPUTED_REASON, d.reasons[-1])
            self.assertEqual([], p.to_recover())
            self.assertEqual('disputed', d.as_dict()['decision'])

    def test_nova_failed_other_alive_is_isolated_under_all(self):
        p = self.plan('all', {'host1': det_base.Verdict.ALIVE})
        self.assertEqual(D.ISOLATED, p.decision('host1').decision)

    def test_a_witness_warming_up_holds_a_failure_in_every_mode(self):
        nova_down = det_base.Evidence('h', det_base.Verdict.FAILED,
                                      'nova: down', control_plane=True)
        nova_up = det_base.Evidence('h', det_base.Verdict.ALIVE, 'nova: up',
                                    control_plane=True)
        hold = det_base.Evidence('h', det_base.Verdict.HOLD, 'hb: not yet')
        for mode in ('veto', 'all', 'any'):
            verdict, reasons = decide.combine([nova_down, hold], mode, 2)
            self.assertEqual(decide.UNKNOWN, verdict, mode)
            self.assertEqual(('nova: down', 'hb: not yet',
                              decide.HELD_REASON), reasons)
            # Nothing to hold when the others say alive.
            self.assertEqual(decide.ALIVE,
                             decide.combine([nova_up, hold], mode, 2)[0],
                             mode)

    def test_combine_direction_needs_the_control_plane(self):
        nova_down = det_base.Evidence('h', det_base.Verdict.FAILED,
                                      'nova: down', control_plane=True)
        nova_up = det_base.Evidence('h', det_base.Verdict.ALIVE, 'nova: up',
                                    control_plane=True)
        beat = det_base.Evidence('h', det_base.Verdict.ALIVE, 'hb: alive')
        dump = det_base.Evidence('h', det_base.Verdict.FAILED, 'kdump')
        for mode in ('veto', 'all'):
            self.assertEqual(decide.ISOLATED,
                             decide.combine([nova_down, beat], mode)[0])
            self.assertEqual(decide.ISOLATED, decide.combine(
                [nova_down, beat, dump], mode)[0])
            self.assertEqual(decide.DISPUTED,
                             decide.combine([nova_up, dump], mode)[0])
            # No witness speaks for Nova: not a partition from it.
            verdict, reasons = decide.combine([beat, dump], mode)
            self.assertEqual((decide.DISPUTED,
                              decide.DISPUTED_NO_NOVA_REASON),
                             (verdict, reasons[-1]))
        self.assertEqual(decide.FAILED,
                         decide.combine([nova_up, dump], 'any')[0])
