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

"""The hosts' own witness: signed UDP heartbeats from each host.

Nova alone cannot tell a dead host from one cut off from the control
plane: both stop updating the service. The heartbeat agent on the host
reaches the service by another path; a fresh heartbeat proves the host
runs.

Verdicts, per compute host in the snapshot:

* heartbeat younger than [heartbeat] timeout -> ALIVE. If Nova says
  the service is down, it is logged as *isolated from the control plane*.
  Under [detection] combine = veto (or all) this ALIVE vetoes the
  nova detector's FAILED: the plan reports the host ISOLATED and never
  fences it.
* heartbeat older than the timeout -> FAILED.
* never heard -> HOLD while the listener (or the host, if it appeared
  in Nova later) is younger than one full timeout: a listener that just
  started cannot know who is alive, and it may be the witness that would
  show a host Nova reports down to be alive (isolated). HOLD keeps the
  host from being judged failed in every combine mode (the plan says
  unknown, held). After that, FAILED.
* mass-loss hold: when more than mass_loss_share percent of the hosts
  that were fresh in the previous cycle (and at least
  mass_loss_min_hosts) are stale in this one, the collector's network
  is blamed, not the hosts: those hosts are UNKNOWN, with the reason
  saying so, for mass_loss_hold_cycles cycles, then FAILED.

UNKNOWN has no vote. Under combine = veto the mass-loss hold therefore
only withdraws this witness (Nova's verdict stands, as without this
detector); under combine = all it holds the host UNKNOWN, so "dead"
needs both witnesses and nothing acts while either cannot tell. all is
the recommended mode with this detector. The warm-up holds in every mode.
In every mode the held hosts count as unhealthy for the gates
(``Evidence.mass_loss``): Nova sees a partition's hosts go down one by
one, as their last reports age, and the threshold must not let the
first of them be recovered while the heartbeats already show the mass
failure.

Shutdown announcements (see :mod:`instanceha.engine.shutdown`): a host
whose agent announced a clean reboot or power-off, and that has not
heartbeated from a new boot since, is judged by its shutdown policy
before anything else:

* freeze or migrate: HOLD (frozen) while it has been silent for at most
  ``[shutdown] return_timeout`` seconds, FAILED after that;
* failover: FAILED at once, marked ``announced`` (decisive over Nova,
  which still sees it up); the fencing port proves it off by reading.

Announced hosts going silent are expected: they never count towards a
mass loss. This detector is also the engine's announcement source.

Each call of :meth:`detect` is one cycle (the hold counts calls).
"""

import datetime
import logging

from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha import exceptions
from instanceha.heartbeat import keys
from instanceha.heartbeat import listener as listener_mod
from instanceha.heartbeat import udp
from instanceha.plugins.detectors import base

LOG = logging.getLogger(__name__)

V = base.Verdict


def endpoints(addresses, port: int, option: str) -> list[tuple[str, int]]:
    result = []
    for address in addresses:
        try:
            udp.normalize_address(address)
        except ValueError:
            raise exceptions.ConfigurationError(
                'option %s: %r is not an IP address' % (option, address)
            ) from None
        result.append((address, port))
    if not result:
        raise exceptions.ConfigurationError('option %s is empty' % option)
    return result


def start_listener(lst, option: str) -> None:
    """Start a listener, turning a bind failure into a ConfigurationError."""
    try:
        lst.start()
    except OSError as exc:
        raise exceptions.ConfigurationError(
            'option %s: %s' % (option, exc.strerror or exc)) from None


class HeartbeatDetector(base.Detector, watchdogs_mod.WatchdogWatch):
    """Alive while the host's agent beats; failed once it stopped."""

    description = ('signed UDP heartbeats from instanceha-heartbeat-agent: '
                   'fresh -> alive (isolated if Nova says down), stale -> '
                   'failed')

    #: What :meth:`reload` re-reads (for the reload's messages).
    RELOADS = 'heartbeat keys'
    #: The options naming them: not changed live when the keys are refused.
    OPTIONS = ('[heartbeat] key_file', '[heartbeat] previous_key_file',
               '[heartbeat] key_mode')
    supports_reload = True
    supports_suspects = True
    supports_stats = True

    def __init__(self, conf, listener=None):
        super().__init__(conf)
        #: A HeartbeatListener; built by start() through the listener
        #: factory unless given (tests). What is used of it: started_at, now(), age(host),
        #: set_known_hosts(hosts), udp.running, stats(), stop(), and
        #: watchdog(host, min_deadline) for the watchdog fencing level.
        self.listener = listener
        self._own_listener = listener is None
        self._first_seen: dict[str, float] = {}
        #: Announcements read back from Nova (a failover record this copy
        #: did not hear: it started or became leader afterwards).
        self._recorded: dict[str, shutdown.Announcement] = {}
        self._prev_fresh: set[str] = set()
        self._isolated: set[str] = set()
        self._held: set[str] = set()
        self._hold_left = 0
        self._hold_cycle = 0

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {
            '[heartbeat] key_file': 'master key (per-host keys are '
                                    'derived from it)',
            '[heartbeat] previous_key_file': 'master key still accepted '
                                             'during a rotation',
            '[heartbeat] key_mode': 'per-host, shared or both',
            '[heartbeat] listen_addresses': 'addresses to listen on',
            '[heartbeat] port': 'UDP port to listen on',
            '[heartbeat] timeout': 'age after which a heartbeat is stale',
            '[heartbeat] max_clock_skew': 'time stamp tolerance',
            '[heartbeat] mass_loss_share': 'share of hosts lost at once '
                                           'that triggers a hold',
            '[heartbeat] mass_loss_min_hosts': 'smallest mass loss',
            '[heartbeat] mass_loss_hold_cycles': 'length of the hold',
        }

    def _keyring(self) -> keys.HostKeys:
        group = self.conf.heartbeat
        try:
            return keys.HostKeys(
                keys.KeyRing(group.key_file, group.previous_key_file),
                group.key_mode)
        except ValueError as exc:
            raise exceptions.ConfigurationError(str(exc)) from None

    def reload(self) -> str | None:
        """SIGHUP: the key files and key mode, re-read and checked.

        Returns what changed (None: nothing). The listener switches to
        the new keys at once; the current and previous master keys are
        both accepted while ``previous_key_file`` is set (a rotation).

        :raises ConfigurationError: a key file is missing, unreadable or
            too short (named, never its content); the keys loaded before
            stay in force.
        """
        group = self.conf.heartbeat
        lst = self.listener
        old = getattr(lst, '_host_ring', None) if lst is not None else None
        if lst is None or not hasattr(lst, 'set_keys'):
            return None
        ring = self._keyring()
        if old is not None and (old.ring.keys, old.mode) == (
                ring.ring.keys, ring.mode):
            return None
        stranded = lst.stranded_by(ring)
        lst.set_keys(ring)
        if stranded:
            armed = [h for h in stranded if lst.watchdog(h) is not None]
            LOG.error(
                'heartbeat keys: %d host(s) still sign with a key this '
                'reload retired: %s. Their heartbeats are refused from now '
                'on%s. Keep the old key as previous_key_file until every '
                'agent uses the new one.', len(stranded),
                ', '.join(stranded),
                ' and the armed ones (%s) reset when their watchdog '
                'deadline passes' % ', '.join(armed) if armed else '')
        return ('heartbeat keys reloaded: key_file %s, previous_key_file '
                '%s, key_mode %s%s' % (
                    group.key_file, group.previous_key_file or '(none)',
                    group.key_mode, '; %d host(s) still on a retired key: '
                    '%s' % (len(stranded), ', '.join(stranded))
                    if stranded else ''))

    def validate(self) -> None:
        self._keyring()
        endpoints(self.conf.heartbeat.listen_addresses, 0,
                  '[heartbeat] listen_addresses')

    def start(self) -> None:
        if self.listener is not None and not self._own_listener:
            return
        group = self.conf.heartbeat
        factory = self.listeners or listener_mod.UdpListeners()
        self.listener = factory.heartbeat(
            endpoints(group.listen_addresses, group.port,
                      '[heartbeat] listen_addresses'),
            self._keyring(), group.max_clock_skew, group.log_interval)
        start_listener(self.listener, '[heartbeat] listen_addresses/port')

    def stop(self) -> None:
        if self.listener is not None and self._own_listener:
            self.listener.stop()
            self.listener = None

    def stats(self) -> dict:
        """Listener counters (accepted, rejected by reason) for metrics."""
        return self.listener.stats() if self.listener is not None else {}

    def suspects(self, services, now) -> frozenset[str]:
        """Hosts not heard within the timeout, or never heard.

        Also hosts that announced a shutdown: a policy may fail them at
        once.
        """
        lst = self.listener
        if lst is None or lst.started_at is None or not lst.udp.running:
            return frozenset()  # blind: it says failed about nobody
        timeout = self.conf.heartbeat.timeout
        out = set()
        for svc in services:
            age = lst.age(svc.host)
            if (age is None or age > timeout or
                    self.announcement(svc.host) is not None):
                out.add(svc.host)
        return frozenset(out)

    # -- the engine's announcement source -------------------------------

    def announcement(self, host: str) -> shutdown.Announcement | None:
        """What the host announced: heard, else recorded in Nova."""
        lst = self.listener
        heard = lst.announcement(host) if lst is not None else None
        return heard if heard is not None else self._recorded.get(host)

    def returned(self, host: str) -> bool:
        lst = self.listener
        if lst is None:
            return False
        if lst.announcement(host) is not None or host not in self._recorded:
            return bool(lst.returned(host))
        # Recorded only: an agent stops beating when it announces, so any
        # heartbeat since the record means the host is back.
        age = lst.age(host)
        return age is not None and lst.now() - age > self._recorded[
            host].last

    def _read_records(self, snapshot: model.Snapshot,
                      now: datetime.datetime, mono: float) -> None:
        """Failover records in Nova (the announcement, made durable)."""
        recorded = {}
        for svc in snapshot.services:
            fr = reasons.of_disabled(svc).frozen
            if fr is None or not fr.failover:
                continue
            at = mono - max(0.0, (now - fr.since).total_seconds())
            old = self._recorded.get(svc.host)
            recorded[svc.host] = old if old is not None and (
                old.kind == fr.kind) else shutdown.Announcement(
                    host=svc.host, kind=fr.kind, boot_id=b'', first=at,
                    last=at)
        self._recorded = recorded

    def now(self) -> float:
        return self.listener.now()

    # -- the watchdog fencing level's source ----------------------------

    def watchdog_wait(self, host: str,
                      min_deadline: float) -> watchdogs_mod.WatchdogWait:
        """The host's watchdog as this copy may count on it now."""
        lst = self.listener
        view = lst.watchdog(host, min_deadline) if lst is not None else None
        if view is None:
            return watchdogs_mod.WatchdogWait(
                counted=False, left=None, detail='it never announced an '
                'armed watchdog to this copy')
        if not view.current:
            return watchdogs_mod.WatchdogWait(
                counted=False, left=None, detail='its watchdog (deadline '
                '%.0f s) is not one this copy may count on: released, '
                'shorter than [heartbeat] watchdog_min_deadline (%.0f s), '
                'or not announced and answered while this copy leads'
                % (view.deadline, min_deadline))
        now = lst.now()
        return watchdogs_mod.WatchdogWait(
            counted=True, left=view.reset_by - now,
            detail='armed with a deadline of %.0f s, last answered %.0f s '
            'ago' % (view.deadline, now - view.last_answer))

    @property
    def poweroff_grace(self) -> float:
        return float(self.conf.shutdown.poweroff_grace)

    def _pending(self, host: str) -> shutdown.Announcement | None:
        """The host's announcement, unless it has come back since."""
        ann = self.announcement(host)
        return None if ann is None or self.returned(host) else ann

    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, base.Evidence]:
        lst = self.listener
        hosts = [s.host for s in snapshot.services]
        if lst is None or lst.started_at is None or not lst.udp.running:
            if lst is not None and lst.started_at is not None:
                LOG.error('heartbeat: the listener thread is not running; '
                          'this witness is blind and has no vote')
            return {h: base.Evidence(h, V.UNKNOWN,
                                     'heartbeat: listener not running')
                    for h in hosts}
        lst.set_known_hosts(hosts)
        timeout = self.conf.heartbeat.timeout
        mono = lst.now()
        self._read_records(snapshot, now, mono)
        for host in set(self._first_seen) - set(hosts):
            del self._first_seen[host]
        self._isolated &= set(hosts)
        ages = {}
        for host in hosts:
            self._first_seen.setdefault(host, mono)
            ages[host] = lst.age(host)
        fresh = {h for h, a in ages.items() if a is not None and a <= timeout}
        announced = {h: a for h in hosts
                     for a in [self._pending(h)] if a is not None}
        # A host that announced its shutdown is expected to go silent.
        self._update_hold(fresh - set(announced),
                          set(hosts) - set(announced))
        result = {}
        nova_now = snapshot.nova_now(now)
        for host in hosts:
            if host in announced:
                result[host] = self._judge_announced(
                    snapshot, announced[host], mono)
                continue
            result[host] = self._judge(snapshot.service(host), ages[host],
                                       timeout, mono, nova_now)
        self._prev_fresh = fresh
        if self._hold_left:
            self._hold_left -= 1
            self._hold_cycle += 1
            if not self._hold_left:
                LOG.warning('heartbeat: mass-loss hold over; %d host(s) '
                            'still silent will be reported failed: %s',
                            len(self._held), ', '.join(sorted(self._held)))
                self._held = set()
        return result

    def _update_hold(self, fresh: set[str], hosts: set[str]) -> None:
        group = self.conf.heartbeat
        lost = (self._prev_fresh & hosts) - fresh
        self._held = (self._held & hosts) - fresh
        if self._hold_left:
            self._held |= lost
            if not self._held:
                LOG.warning('heartbeat: mass-loss hold ended early: every '
                            'held host is heartbeating again')
                self._hold_left = 0
            return
        previous = len(self._prev_fresh & hosts)
        if (group.mass_loss_hold_cycles and lost
                and len(lost) >= group.mass_loss_min_hosts
                and len(lost) * 100 > group.mass_loss_share * previous):
            self._held = set(lost)
            self._hold_left = group.mass_loss_hold_cycles
            self._hold_cycle = 0
            LOG.error('heartbeat: mass loss: %d of %d heartbeating hosts '
                      '(%d%%) stopped within one cycle; blaming the '
                      'collector\'s network, not the hosts: holding them '
                      'unknown for %d cycle(s): %s', len(lost), previous,
                      len(lost) * 100 // previous, self._hold_left,
                      ', '.join(sorted(lost)))

    def _judge_announced(self, snapshot: model.Snapshot,
                         ann: shutdown.Announcement,
                         mono: float) -> base.Evidence:
        """The shutdown policy's verdict on a host that announced one."""
        host = ann.host
        policy, source = shutdown.policy_of(self.conf, snapshot, host)
        action = shutdown.effective(policy, ann.kind)
        silent = max(0.0, mono - ann.last)
        said = 'heartbeat: announced a %s %ds ago; shutdown policy %s (%s)' % (
            ann.kind, silent, policy, source)
        if action == shutdown.FAILOVER:
            return base.Evidence(host, V.FAILED, said + ': failover, '
                                 'recovered elsewhere at once once its '
                                 'devices prove it off', announced=True)
        limit = self.conf.shutdown.return_timeout
        if silent <= limit:
            return base.Evidence(host, V.HOLD, said + ': frozen, expected '
                                 'back within %ds' % limit)
        return base.Evidence(host, V.FAILED, said + ': not back within '
                             '[shutdown] return_timeout (%ds), failed'
                             % limit)

    def _judge(self, service: model.Service | None, age: float | None,
               timeout: int, mono: float,
               nova_now: datetime.datetime) -> base.Evidence:
        host = service.host

        def ev(verdict, text):
            return base.Evidence(host, verdict, 'heartbeat: ' + text)

        if age is not None and age <= timeout:
            nova_down = service.forced_down or service.state == model.DOWN
            # Nova's own report is stale (the nova detector's delta rule,
            # on Nova's clock).
            nova_stale = service.updated_at is not None and (
                nova_now - service.updated_at).total_seconds() > (
                    self.conf.delta)
            if nova_down or nova_stale:
                if host not in self._isolated:
                    LOG.warning('host %s: Nova reports its compute service '
                                '%s but its heartbeat is %.1fs old: it is '
                                'isolated from the control plane, not dead; '
                                'not failing it', host,
                                'down' if nova_down else 'silent for more '
                                'than delta', age)
                self._isolated.add(host)
            elif host in self._isolated:
                LOG.info('host %s: no longer isolated (Nova reports it up)',
                         host)
                self._isolated.discard(host)
            if nova_down:
                return ev(V.ALIVE, 'last heartbeat %.1fs ago; Nova says '
                          'down: isolated from the control plane' % age)
            return ev(V.ALIVE, 'last heartbeat %.1fs ago' % age)
        self._isolated.discard(host)
        if host in self._held:
            return base.Evidence(
                host, V.UNKNOWN, 'heartbeat: %s; held: mass heartbeat loss '
                '(cycle %d of %d), blaming the collector\'s network' % (
                    'last heartbeat %.1fs ago' % age if age is not None
                    else 'never heard', self._hold_cycle + 1,
                    self.conf.heartbeat.mass_loss_hold_cycles),
                mass_loss=True)
        if age is not None:
            return ev(V.FAILED, 'last heartbeat %.1fs ago > timeout %ds'
                      % (age, timeout))
        since = mono - max(self.listener.started_at, self._first_seen[host])
        if since < timeout:
            return ev(V.HOLD, 'not heard yet; listening for %.1fs, '
                      'holding any failure until the %ds timeout'
                      % (since, timeout))
        return ev(V.FAILED, 'never heard in %.1fs (timeout %ds)'
                  % (since, timeout))
