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

"""Tell a simulated run in plain words, one sentence per event.

The golden logs are for machines and reviewers; this is for someone who
wants to see what instanceha does: detection, gates, fencing, evacuation
with a progress line per host, recovery. Unknown events are still shown,
in their raw form, so nothing is hidden.
"""

from collections.abc import Callable
import dataclasses

from instanceha.sim import events as sim_events

_COMMANDS = {
    'power-off': '{host} loses power',
    'power-on': 'power is back on {host}; it boots',
    'crash': '{host} crashes (kernel panic); its BMC still says on',
    'kdump': '{host} crashes into kdump and writes a crash dump '
             '({seconds:g} s)',
    'cut-network': '{host} is cut off from the control plane network',
    'restore-network': '{host} is reachable again',
    'isolate': '{host} loses its link to Nova (its own heartbeat still '
               'gets through)',
    'unisolate': '{host} reaches Nova again',
    'watchdog': 'the heartbeat agent of {host}: {change}',
    'partition': '{host} loses its link to the control plane (the service '
                 'and Nova); its own network and gateway still work',
    'unpartition': '{host} reaches the control plane again',
    'addresses': 'the isolation addresses of {host} go {state}',
    'agent': 'the heartbeat agent of {host}: {change}',
    'wire': 'a datagram for {host}\'s heartbeats: {change}',
    'stop-compute': 'nova-compute stops on {host} (its instances keep '
                    'running)',
    'start-compute': 'nova-compute starts again on {host}',
    'bmc': 'fencing device {device} of {host} starts to misbehave: '
           '{behaviour}',
    'rebuild-fail': 'rebuilds of {server} will fail (target {on}, '
                    '{times} time(s))',
    'disable': 'an operator disables {host}',
    'enable': 'an operator enables {host}',
    'capacity': '{host} now has room for {vcpus} vCPUs',
    'coordination': 'the coordination backend goes {state}',
    'set': 'an operator sets {option} = {value} and restarts instanceha',
    'maintenance-start': 'an operator starts maintenance of {host} '
                         '(options: {options})',
    'maintenance-end': 'an operator ends maintenance of {host} (options: '
                       '{options})',
    'pause': 'an operator pauses instance HA ({until}): {reason}',
    'resume': 'an operator resumes instance HA',
    'reload': 'an operator edits the configuration and sends SIGHUP to '
              'instanceha',
    'fencing-off': 'an operator powers {host} off by hand ("fencing off")',
    'fencing-on': 'an operator powers {host} on by hand ("fencing on")',
    'service-crash': 'instanceha ({copy}) crashes',
    'service-restart': 'instanceha ({copy}) is restarted',
    'service-stop': 'instanceha ({copy}) is stopped',
    'service-start': 'instanceha ({copy}) starts',
}

#: What a host's own side does (instanceha.sim.hostside).
_HOST = {
    'link_partitioned': '{host}\'s agent hears no answer but its '
                        'isolation address does: partitioned, no '
                        'isolation response',
    'link_isolated': '{host}\'s agent hears no answer and no isolation '
                     'address: isolated',
    'link_connected': '{host}\'s agent hears the service again',
    'guest_destroyed': '{host}: isolation response: guest {server} '
                       'powered off',
    'guest_shutdown_asked': '{host}: isolation response: guest {server} '
                            'asked to shut down',
    'guest_shut_down': '{host}: guest {server} has shut down',
}

_STATES = {
    'suspect': '{host} looks failed: {reason}',
    'fencing': 'fencing {host}: asking its fencing devices to power it off',
    'fence_failed': 'could not fence {host}: {reason}. Nothing is '
                    'evacuated from a host that is not proven off; '
                    'retrying in {retry_in} s',
    'evacuating': '{host} is forced down and disabled in Nova; evacuating '
                  'its instances',
    'evacuated': '{host}: evacuation finished ({evacuated} rebuilt '
                 'elsewhere, {failed} failed)',
    'powering_on': 'powering {host} back on through its fencing device',
    'waiting_up': '{host} is powered on (still forced down); waiting for '
                  'its nova-compute to report',
    'enabling': '{host} reports again; enabling it in Nova (forced_down '
                'cleared with it)',
    'left_disabled': '{host} stays disabled and forced down '
                     '(leave_disabled)',
    'failed': '{host} is marked FAILED; an operator must act: {action}',
}


@dataclasses.dataclass
class _Progress:
    requested: set = dataclasses.field(default_factory=set)
    done: set = dataclasses.field(default_factory=set)


def clock(t: float) -> str:
    t = int(t)
    return '%02d:%02d' % divmod(t, 60) if t < 3600 else '%d:%02d:%02d' % (
        t // 3600, t % 3600 // 60, t % 60)


class Story:
    """Turns events into sentences; call it with each event."""

    def __init__(self, write: Callable[[str], None] = print,
                 multi: bool = False, speed: float | None = None,
                 sleep: Callable[[float], None] | None = None):
        self.write = write
        self.multi = multi
        #: Simulated seconds per wall second (None: as fast as possible).
        self.speed = speed
        self._sleep = sleep
        self._last_t = 0.0
        self.progress: dict[str, _Progress] = {}
        self.plan: dict[str, str] = {}
        self.unchanged = 0
        self._told: set = set()

    def _say(self, ev: sim_events.Event, text: str) -> None:
        who = '%s: ' % ev.source if self.multi and ev.source.startswith(
            'ha') else ''
        self.write('[%s] %s%s' % (clock(ev.t), who, text))

    def __call__(self, ev: sim_events.Event) -> None:
        if self.speed and ev.t > self._last_t and ev.source != 'final':
            self._sleep((ev.t - self._last_t) / self.speed)
        self._last_t = max(self._last_t, ev.t)
        text = self.sentence(ev)
        if text:
            self._say(ev, text)
        if ev.event in ('rebuilt', 'evacuation_error', 'rebuild_failed'):
            self._progress(ev)

    def _progress(self, ev: sim_events.Event) -> None:
        p = self.progress.get(ev.host)
        if not p or not p.requested:
            return
        if ev.event == 'rebuilt':
            p.done.add(ev.details['server'])
        n, total = len(p.done), len(p.requested)
        bar = '#' * round(20 * n / total)
        self.write('         %-12s [%-20s] %d/%d instances rebuilt'
                   % (ev.host, bar, n, total))

    def sentence(self, ev: sim_events.Event) -> str | None:
        d = dict(ev.details)
        d.setdefault('host', ev.host)
        e = ev.event
        if ev.source == 'timeline' and e == 'nova':
            return '*** ' + self._nova_command(d)
        if ev.source == 'timeline':
            return '*** ' + _COMMANDS.get(e, e).format(**d)
        if ev.source == 'sim' and e == 'start':
            return ('a simulated cloud with {hosts} compute hosts and '
                    '{instances} instances; instanceha is watching it'
                    .format(**d))
        if ev.source == 'plan':
            return self._plan(ev, d)
        if ev.source == 'coord':
            return 'leader election: %s leads' % d['copy']
        if ev.source == 'bmc':
            if e.startswith('now_'):
                return 'fencing device %s: %s is now powered %s' % (
                    d.get('device'), ev.host, e[4:])
            return 'fencing device %s: power %s requested' % (
                d.get('device'), e.split('_', 1)[-1])
        if ev.source == 'host' and e == 'booted':
            return '%s has booted; nova-compute starts' % ev.host
        if ev.source == 'listener':
            return 'the heartbeat listener of %s %s %s%s%s' % (
                d.get('copy'), e, 'a made-up (%s) datagram of ' % d[
                    'injected'] if 'injected' in d else 'the heartbeats of ',
                ev.host, ': %s' % d['reason'] if 'reason' in d else '')
        if ev.source == 'host' and e in _HOST:
            return _HOST[e].format(**d)
        if ev.source == 'host':
            return '%s: %s' % (ev.host, e.replace('_', ' '))
        if ev.source == 'nova':
            return self._nova(ev, d)
        if ev.source == 'operator':
            return '  operator sees: %s' % d.get('text', d.get('error', e))
        if ev.source == 'CHECK':
            return 'INVARIANT BROKEN: %s' % d['what']
        if ev.source == 'final':
            return self._final(ev, d)
        return self._engine(ev, d)

    def _plan(self, ev, d) -> str | None:
        decision, why = ev.event, d.get('reasons', '')
        before = self.plan.get(ev.host, 'healthy')
        self.plan[ev.host] = decision
        if decision in ('recover', 'recovering') or (
                decision == 'healthy' and before in ('recover',
                                                     'recovering')):
            # The workflow's own events tell these.
            return None
        text = {
            'healthy': '{host} is healthy again',
            'ignored': '{host} is out of scope, left alone: {why}',
            'blocked': 'recovery of {host} is BLOCKED: {why}',
            'isolated': '{host} is isolated, not dead (its witnesses '
                        'disagree): no action. {why}',
            'disputed': '{host} is disputed: a witness says failed but Nova '
                        'still sees it alive; no action yet. {why}',
            'unknown': 'cannot tell whether {host} is alive: {why}',
            'recover': 'plan: recover {host}',
            'recovering': 'plan: {host} is being recovered',
        }.get(decision, '{host}: {decision} {why}')
        return text.format(host=ev.host, decision=decision, why=why)

    def _nova(self, ev, d) -> str:
        if ev.event == 'rebuilt':
            return '  Nova: %s is %s on %s' % (d['server'], d['status'],
                                               d['dest'])
        if ev.event == 'rebuild_failed':
            return '  Nova: rebuild of %s on %s failed' % (
                d['server'], d['dest'])
        if ev.event == 'evacuation_error':
            return '  Nova: cannot place %s: %s' % (
                d['server'], d['reason'])
        if ev.event == 'power_synced':
            return '  Nova: %s on %s is %s (its guest did not survive)' % (
                d['server'], ev.host, d['status'])
        if ev.event == 'service_recreated':
            return ('  Nova: nova-compute on %s registers a new service '
                    'record (enabled)' % ev.host)
        if ev.event in ('live_migrated', 'cold_migrated'):
            return '  Nova: %s %s to %s' % (
                d['server'], ev.event.replace('_', ' '), d['dest'])
        if ev.event in ('live_migration_error', 'migration_error'):
            return '  Nova: moving %s failed: %s' % (d['server'],
                                                     d['reason'])
        if ev.event == 'api_fault':
            return '  Nova API: %s call fails (%s)' % (d['call'], d['error'])
        if ev.event == 'api_unreachable':
            return '  Nova API: %s call cannot connect' % d['call']
        return '  Nova: %s %s' % (ev.event, d)

    @staticmethod
    def _nova_command(d) -> str:
        if 'fail' in d:
            later = (' after {} more succeed'.format(d['after'])
                     if d.get('after') else '')
            return ('the next {times} Nova {fail} call(s){later} will fail '
                    '({error})'.format(later=later, **d))
        if 'api' in d:
            return ('Nova\'s API becomes unreachable' if d['api'] == 'down'
                    else 'Nova\'s API is reachable again')
        if 'migration_delay' in d:
            return ('Nova lists new evacuation records only {:g} s after '
                    'the call'.format(d['migration_delay']))
        return ('the compute service record of {host} is deleted from '
                'Nova'.format(**d))

    def _engine(self, ev, d) -> str | None:
        e, host = ev.event, ev.host
        if e == 'host_state':
            new = d.get('new')
            if new == 'fenced':
                if d.get('kdump'):
                    return ('%s is crash-dumping (kdump): it runs nothing, '
                            'so it counts as fenced and is not power-'
                            'cycled' % host)
                return ('%s is fenced: level %s (%s) confirmed it is off'
                        % (host, d.get('level'), sim_events._value(
                            d.get('devices'))))
            if new == 'healthy':
                if d.get('old') == 'enabling':
                    return '%s is enabled and back in service' % host
                return '%s is fine again: %s' % (host, d.get('reason', ''))
            if new == 'evacuating':
                self.progress[host] = _Progress()
                if d.get('spare'):
                    return ('%s is forced down and disabled in Nova; spare '
                            'host %s enabled for its instances'
                            % (host, d['spare']))
            template = _STATES.get(new)
            if template:
                d.setdefault('reason', '')
                return template.format_map(_Missing(d))
            return '%s: %s -> %s' % (host, d.get('old'), new)
        if e == 'evacuate_requested':
            self.progress.setdefault(host, _Progress()).requested.add(
                d['server'])
            where = ('on %s' % d['target'] if d.get('target') else
                     "Nova's scheduler picks the host")
            if d.get('confirmed'):
                where += '; %s' % d['confirmed']
            return '  evacuating %s (attempt %s, %s)' % (
                d['server'], d.get('attempt'), where)
        if e in ('evacuate_done', 'server_locked', 'server_unlocked',
                 'leader', 'fence_pending', 'kdump_wait'):
            if e == 'leader' and self.multi:
                return 'this copy is now the leader'
            if e == 'kdump_wait':
                return ('%s: waiting up to %s s for a kdump message before '
                        'fencing' % (host, d['timeout']))
            return None
        if e == 'evacuate_failed':
            return '  %s failed on %s (attempt %s): %s' % (
                d['server'], d.get('dest'), d.get('attempt'), d.get('reason'))
        if e == 'evacuate_unanswered':
            return ('  Nova failed the call to evacuate %s (%s); '
                    'checking on Nova whether it was carried out before '
                    'trying again'
                    % (d['server'], d.get('reason')))
        if e == 'evacuate_refused':
            return '  Nova refused to evacuate %s: %s' % (d['server'],
                                                          d.get('reason'))
        if e == 'evacuate_gave_up':
            return '  gave up on %s after %s attempt(s): %s' % (
                d['server'], d.get('attempts'), d.get('reason'))
        if e == 'spare_claimed':
            return '%s: spare host %s enabled' % (host, d['spare'])
        if e == 'spare_released':
            return '%s: spare host %s returned to the pool' % (host,
                                                               d['spare'])
        if e == 'host_resumed':
            return ('%s: resuming its recovery from the marker in Nova '
                    '(%s)' % (host, d['state']))
        if e == 'host_failed_pending':
            return '%s is still FAILED; waiting for an operator' % host
        if e == 'not_leader':
            return 'this copy is not the leader; it only watches'
        if e == 'paused':
            return ('instance HA is paused (%s): still watching and '
                    'planning, but nothing new is fenced or evacuated'
                    % d.get('reason'))
        if e in ('resumed', 'pause_expired'):
            return 'instance HA is no longer paused (%s)' % (
                'lifted by an operator' if e == 'resumed'
                else 'its end has passed')
        if e == 'evacuate_skipped':
            return ('  %s stays on %s: Nova cannot evacuate an instance '
                    'that is %s' % (d['server'], host, d.get('status')))
        if e in ('recovery_held', 'up_overdue', 'host_failed_pending'):
            # Repeated every poll by the engine; once is enough here.
            key = (e, host, d.get('note'))
            if key in self._told:
                return None
            self._told.add(key)
        if e == 'recovery_held':
            return '%s: %s (said every poll)' % (
                host, d.get('note') or 'recovery held')
        if e == 'up_overdue':
            return ('%s has not come back up after %s s; check: %s'
                    % (host, d.get('waited'), d.get('check')))
        if e == 'snapshot_failed':
            text = 'cannot read Nova this cycle: %s' % d.get('reason')
            if d.get('held'):
                text += ('; not fencing %s until Nova can be read again'
                         % ', '.join(d['held']))
            return text
        if e == 'step_error':
            return '%s: a step failed in state %s (retried in %s s): %s' % (
                host, d.get('state'), d.get('retry_in', '?'), d.get('reason'))
        if e == 'fence_pending':
            return None
        if e == 'forced_down_cleared':
            return '%s: forced_down cleared in Nova' % host
        if e == 'power_state_restored':
            return '  %s set back to %s' % (d['server'], d['status'])
        if e == 'shutdown':
            return 'instanceha stops (work in flight: %s)' % (
                sim_events._value(d.get('in_flight')))
        details = ' '.join('%s=%s' % (k, sim_events._value(v))
                           for k, v in sorted(d.items()) if k != 'host')
        return '%s %s %s' % (e, host or '', details)

    def _final(self, ev, d) -> str | None:
        if ev.event == 'invariants':
            if self.unchanged:
                self._say(ev, 'end: %d other instance(s) where and as they '
                              'were' % self.unchanged)
            if d['violations']:
                return ('%d invariant(s) BROKEN (see above)'
                        % d['violations'])
            return ('all invariants held: no instance ran on two hosts, '
                    'nothing was evacuated from a host not proven off or '
                    'twice, nothing moved while a gate blocked it, only '
                    'the leader acted')
        if ev.event == 'host':
            state = '%s/%s' % (d['status'], d['state'])
            extra = ', forced down' if d['forced_down'] else ''
            if d.get('reason'):
                extra += ', reason "%s"' % d['reason']
            return 'end: host %-12s %s, power %s%s' % (ev.host, state,
                                                       d['power'], extra)
        if 'was' not in d:
            self.unchanged += 1
            return None
        was_status, _, was_host = d['was'].partition('@')
        change = ('moved from %s' % was_host if was_host != ev.host
                  else 'was %s' % was_status)
        return 'end: %-10s on %-12s %-8s (%s)%s' % (
            d['server'], ev.host, d['status'], change,
            ' (locked)' if d.get('locked') else '')


class _Missing(dict):
    def __missing__(self, key):
        return '?'
