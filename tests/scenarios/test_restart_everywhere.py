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

"""A restart at any instant of any state changes nothing in the outcome.

Everything a resumed copy needs is in Nova (markers, lock reasons,
migration records). For each base scenario, the uninterrupted run gives
the expected outcome; then the service is crashed (or stopped cleanly)
at every instant the engine did something (and half a second later, in
the middle of the job), and started again a little later (or restarted
cleanly at once). Each such run
must break no invariant and end as the uninterrupted one: the same
hosts enabled or not, powered or not, in the same final engine state,
the same instances moved, in the same status, none left locked. Every
workflow kind has bases here: host recovery, clean shutdown under each
policy, process failure, instance failure, maintenance (and a drain
meeting instance failure on one instance), the lock sweep, aftercare
(the operator bases: rebuilds of a host an operator took, watched to
their end) and the operator's commands (clear, the pause, its end on
Nova's clock also when our clock steps).
"""

import os
import re
import shutil

import fixtures
import testtools

from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases')

#: Recoveries with retries, spares, give-ups, kept-disabled hosts and
#: instances in every evacuable state.
BASES = (
    'rebuild-fails-then-other-target',
    'r07-reserved-host',
    'r10-evacuable-states',
    'r13-without-force-enable',
    'nova-evacuate-timeout',
    'on-instance-failure-stop-host',
    # A dump that ends mid-evacuation: counted as fenced by the dump,
    # then fenced again through the BMC (the marker's kdump flag).
    'kdump-ends-mid-throttled-evacuation',
    # A dead nova-compute: disabled with its own marker, never fenced.
    'process-failure-stop-compute',
    # Our clock skewed from Nova's, or stepped mid-recovery: the markers'
    # times name the same moment for the copy that reads them back.
    'clock-skew-ahead',
    'clock-skew-behind',
    'clock-stepped-back-mid-evacuation',
    'clock-stepped-back-waiting-up',
    # Nothing is written between the evacuating marker and the enable: a
    # copy resuming from it while the host boots (or runs again) powers
    # it on again and evacuates nothing more, also an instance Nova
    # refused (force_enable: given up in that marker).
    'restart-while-waiting-up',
    'r13-force-enable',
    # A rebuild's time-out counts from when Nova was asked (its migration
    # record), whichever copy watches it to the end.
    'rebuild-timeout-across-restart',
)

#: Every state of each shutdown policy (freeze, failover, migrate, a
#: hung power-off, an operator's reason) and of a process failure: the
#: announcement, the freeze, the failover record and the drain are in
#: Nova, and an agent repeats its announcement until it is answered.
#: (shutdown-failover-host-returns and shutdown-failover-bmc-says-on are
#: left out: their outcome depends on when the host goes down relative to
#: fixed timeline commands, which a restart delays.)
SHUTDOWN_BASES = (
    'shutdown-conditional-reboot',
    'shutdown-conditional-poweroff',
    'shutdown-freeze-poweroff',
    'shutdown-migrate',
    'shutdown-migrate-paused',
    'shutdown-reboot-never-returns',
    'shutdown-poweroff-hangs',
    'shutdown-aggregate-override',
    'shutdown-freeze-operator-takes-over',
    'shutdown-operator-disabled',
    'process-failure-operator-enables',
)

#: An operator takes the host at every state of its recovery: a copy
#: started after that finds no marker of ours to adopt, only our lock
#: reasons on the instances (their rebuilds may still run). Left out:
#: operator-disables-during-marker-retry and the lock-answer-lost and
#: evacuate-unanswered cases, whose outcome depends on whether the
#: operator acts before or after a step a restart delays.
OPERATOR_BASES = (
    'operator-disables-mid-fencing',
    'operator-disables-as-fence-ends',
    'operator-disables-mid-evacuation',
    'operator-disables-while-retry-waits',
    'operator-disables-as-rebuilds-end',
    'operator-takes-host-then-crash',
    'operator-takes-host-then-crash-fire-and-forget',
    'operator-takes-host-then-crash-restores-status',
    'operator-takes-host-rebuild-fails-while-down',
    'stale-lock-of-ours-at-start',
    'shutdown-failover-operator-takes-host-then-crash',
)

#: The other workflow kinds: an instance crash restarted, relocated or
#: given up on (its counters in the instance's metadata), a user's stop
#: or delete left alone, maintenance (the operator's own command runs
#: on, restarted at each of its steps too; the engine leaves the host
#: be), a failover of announced power-offs held by the mass-failure gate,
#: freezes and drains an operator ends, reboots that never return, a
#: process failure followed by the host's own failure or in a partition,
#: and the operator's clear commands. (shutdown-failover-host-returns
#: and shutdown-failover-bmc-says-on stay out, as above: whether the host
#: is read off depends on when the restarted copy reads it.)
KIND_BASES = (
    'instance-crash-restart',
    'instance-crash-loop-counters',
    'instance-crash-on-process-failure',
    'instance-error-cleared-by-operator',
    'maintenance-start-end',
    'maintenance-host-fails',
    'shutdown-failover-mass-poweroff',
    'process-failure-then-host-fails',
    'hosts-clear-left-disabled',
    'maintenance-migration-refused',
    'instance-crash-leader-lost-mid-relocation',
    'instance-deleted-by-its-user',
    'instance-user-stop-left-alone',
    'process-failure-partition',
    'shutdown-freeze-operator-enables',
    'shutdown-migrate-operator-enables',
    'shutdown-mass-reboots-never-return',
    # Instance failure mid-chain (its counters read back from Nova) and
    # an instance left in ERROR while another is mid-task.
    'instance-crash-restart-mid-loop',
    'instance-error-and-mid-task',
    # A drain and instance failure meet on one instance: the drain waits
    # for the restart under way, then moves it too.
    'shutdown-migrate-instance-restarting',
    # The operator's pause, its end on Nova's clock: a copy restarted
    # (or whose clock stepped) ends it at the same moment.
    'pause-expires',
    'pause-clock-stepped',
)

#: The lock sweep on its own (besides the operator bases above): a
#: lock a leader that crashed left on a host left disabled, and one a
#: leader left behind when an operator had taken the host; the listing
#: and the unlocks are jobs of the runtime, restarted at each of them.
LOCK_SWEEP_BASES = (
    'rebuild-fails-then-leader-crash-left-disabled',
    'operator-takes-host-then-leader-crash',
)

#: Bases run again with instances locked only when their status must be
#: restored (the default): the lock's reason is then the only record
#: of that status across a restart.
DEFAULT_LOCKING = ('r10-evacuable-states', 'nova-evacuate-timeout',
                   'operator-disables-as-rebuilds-end')

#: Seconds between the crash (or stop) and the start.
DOWN_FOR = 5.0

_TIME = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ')
_FINAL = re.compile(r'^\s*[\d.]+ final (\S+) (host|instance) (.*)$')


def outcome(lines: list[str]) -> list[str]:
    """The end state, without what timing alone may change."""
    out = []
    for line in lines:
        m = _FINAL.match(line)
        if not m:
            continue
        where, kind, details = m.groups()
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', details))
        if kind == 'host':
            reason = fields.get('reason', '')
            marker = re.match(r'"?instanceha:(\w+)', reason)
            out.append('host %s status=%s forced_down=%s power=%s '
                       'engine=%s marker=%s' % (
                           where, fields['status'], fields['forced_down'],
                           fields['power'], fields.get('engine', '-'),
                           # A shutdown record's times move with when
                           # it was written: its kind and action do not.
                           marker.group(1) if marker else _TIME.sub(
                               'T', reason)))
        else:
            moved = 'was' in fields and not fields['was'].endswith(
                '@' + where)
            out.append('instance %s status=%s locked=%s task=%s moved=%s'
                       % (fields['server'], fields['status'],
                          fields['locked'], fields['task_state'], moved))
    return sorted(out)


def run(path: str, extra=()) -> runner.Result:
    sc = sim_scenario.load(path)
    sc.timeline = sorted(list(sc.timeline) + list(extra),
                         key=lambda c: (c.t, c.line))
    return runner.Simulation(sc).run()


def action_times(lines: list[str]) -> list[float]:
    """When the engine, or an operator's command, did something."""
    times = set()
    for line in lines:
        parts = line.split()
        # The engine's actions, and each step of an operator's command
        # (maintenance, fencing or clearing by hand).
        if len(parts) > 2 and parts[1] in ('ha', 'operator') \
                and parts[2] != '-':
            times.add(float(parts[0]))
    return sorted(times)


class TestRestartEverywhere(testtools.TestCase):
    """Generated below: one test per base scenario and kind of stop."""


def default_locking(test: testtools.TestCase, base: str) -> str:
    """A copy of the case ``base`` with ``lock_instances`` at its default."""
    path = os.path.join(test.useFixture(fixtures.TempDir()).path, base)
    shutil.copytree(os.path.join(CASES, base), path)
    conf = os.path.join(path, 'instanceha.conf')
    with open(conf) as f:
        text = f.read()
    with open(conf, 'w') as f:
        f.write(text.replace('lock_instances = true\n', ''))
    return path


def _make_test(base: str, how: str, locking: bool = False):
    def test(self):
        path = (default_locking(self, base) if locking
                else os.path.join(CASES, base))
        expected = run(path)
        self.assertEqual([], expected.violations)
        want = outcome(expected.lines)
        failures = []
        end = expected.sim.end
        for t in action_times(expected.lines):
            # A crash may also come in the middle of a job.
            for at in ((t, t + 0.5) if how == 'crash' else (t,)):
                if at + DOWN_FOR >= end:
                    continue
                if how == 'crash':
                    extra = [sim_scenario.Command(at, 'service', ('crash',),
                                                  10000),
                             sim_scenario.Command(at + DOWN_FOR, 'service',
                                                  ('start',), 10001)]
                else:
                    extra = [sim_scenario.Command(at, 'service',
                                                  ('restart',), 10000)]
                got = run(path, extra)
                if got.violations:
                    failures.append('%s at %g: %s' % (
                        how, at, '; '.join(got.violations)))
                    continue
                have = outcome(got.lines)
                if have != want:
                    diff = sorted(set(have) ^ set(want))
                    failures.append('%s at %g: outcome differs: %s' % (
                        how, at, ' | '.join(diff)))
        if failures:
            self.fail('%d restart(s) changed the outcome of %s:\n%s' % (
                len(failures), base, '\n'.join(failures)))
    test.__doc__ = 'restart (%s) at every state of %s' % (how, base)
    return test


for _base in (BASES + SHUTDOWN_BASES + OPERATOR_BASES + KIND_BASES +
              LOCK_SWEEP_BASES):
    for _how in ('crash', 'restart'):
        setattr(TestRestartEverywhere, 'test_%s_%s' % (
            _how, _base.replace('-', '_')), _make_test(_base, _how))
for _base in DEFAULT_LOCKING:
    setattr(TestRestartEverywhere, 'test_crash_%s_default_locking' % (
        _base.replace('-', '_')), _make_test(_base, 'crash', locking=True))
