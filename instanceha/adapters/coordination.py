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

"""Leader election and per-host locks through tooz.

Leadership is a tooz lock with a time to live (the *lease*): redis and
etcd expire it when its holder stops refreshing it, so a leader that is
``kill -9``'d or cut off loses it after ``lease_time`` and a follower
takes it. tooz's group leader election is not used: its etcd driver does
not implement it and it relies on watchers run by the caller.

Two leaders must never overlap, so leadership is *proven*, not assumed:
``is_leader()`` is True only until ``heartbeat_interval`` seconds before
the lease could have expired, counted from the moment the last successful
refresh was *sent*. A refresh that fails, or that comes back after the
lease could already have expired, ends leadership here; the copy then
competes again like any follower. ``is_leader()`` only compares two
numbers, so the engine can ask it before every destructive step.
"""

from collections.abc import Callable, Iterator
import contextlib
import dataclasses
import importlib.metadata
import math
import os
import socket
import threading
import time
import urllib.parse

from oslo_config import cfg
from oslo_log import log as logging

from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

_SECRET_KEYS = ('password', 'passwd', 'secret', 'token', 'key')


def redact_url(url: str) -> str:
    """The URL with its password (and secret-looking query values) hidden."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return '<unparsable URL>'
    netloc = parts.netloc
    if '@' in netloc:
        userinfo, _, hostport = netloc.rpartition('@')
        user = userinfo.split(':', 1)[0]
        netloc = '%s%s@%s' % (user, ':***' if ':' in userinfo else '',
                              hostport)
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = '&'.join(
            '%s=%s' % (k, '***' if any(s in k.lower() for s in _SECRET_KEYS)
                       else v) for k, v in pairs)
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, query, parts.fragment))


def default_member_id() -> str:
    return '%s-%d' % (socket.gethostname(), os.getpid())


@dataclasses.dataclass(frozen=True)
class Status:
    """What this copy knows about coordination, for health and metrics."""

    member_id: str
    #: The backend URL without secrets.
    backend: str
    #: The backend answered the last heartbeat.
    connected: bool
    leader: bool
    #: Why the backend is unreachable (None while it answers).
    error: str | None
    #: Why leadership was last lost (None if never).
    last_loss: str | None
    #: Copies in the group at the last heartbeat (None if unknown).
    members: int | None
    #: How many times this copy became leader.
    elections_won: int
    stopping: bool


class ToozCoordinator(ports.Coordinator):
    """The production coordinator: one tooz driver, one heartbeat thread.

    :param clock: monotonic seconds; replaceable for tests.
    """

    def __init__(self, backend_url: str, *, member_id: str | None = None,
                 lease_time: int = 15, heartbeat_interval: float = 3.0,
                 group: str = 'instanceha',
                 takeover_wait: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if heartbeat_interval * 3 > lease_time:
            raise exceptions.ConfigurationError(
                'heartbeat_interval (%s) must be at most a third of '
                'lease_time (%s)' % (heartbeat_interval, lease_time))
        self._url = backend_url
        self._redacted = redact_url(backend_url)
        self.member_id = member_id or default_member_id()
        self.lease_time = lease_time
        self.heartbeat_interval = heartbeat_interval
        self.group = group
        #: How long a follower's heartbeat waits for a held leader lock
        #: to be released, so a clean stop hands over in well under a
        #: heartbeat (the lease is unaffected: it counts from before).
        self.takeover_wait = (0.8 * heartbeat_interval
                              if takeover_wait is None else takeover_wait)
        self._clock = clock
        self._leader_name = ('%s-leader' % group).encode()
        self._group_id = group.encode()
        self._scheme = urllib.parse.urlsplit(backend_url).scheme
        self._check_backend()

        self._driver = None
        self._leader_lock = None
        # Monotonic time until which is_leader() may say True; 0 = never.
        self._valid_until = 0.0
        # Monotonic time before which the backend cannot have expired our
        # lease (refresh send time + lease_time).
        self._lease_end = 0.0
        self._connected = False
        self._error: str | None = None
        self._last_loss: str | None = None
        self._members: int | None = None
        #: Monotonic time of the beat that last read the members.
        self._membership_read = 0.0
        self._elections_won = 0
        self._stopping = False
        self._state_lock = threading.RLock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> 'ToozCoordinator':
        group = conf.coordination
        return cls(group.backend_url, member_id=group.member_id,
                   lease_time=group.lease_time,
                   heartbeat_interval=group.heartbeat_interval,
                   group=group.group)

    # -- set-up ----------------------------------------------------------

    def _check_backend(self) -> None:
        found = {ep.name: ep for ep in
                 importlib.metadata.entry_points(group='tooz.backends')}
        if self._scheme not in found:
            raise exceptions.ConfigurationError(
                'option [coordination] backend_url = %s: unknown backend '
                '%r; choose one of %s' % (self._redacted, self._scheme,
                                          ', '.join(sorted(found))))
        try:
            found[self._scheme].load()
        except ImportError as exc:
            raise exceptions.ConfigurationError(
                'option [coordination] backend_url = %s: the %s backend '
                'needs a Python package that is not installed (%s)'
                % (self._redacted, self._scheme, exc)) from None
        if self._scheme == 'file':
            path = urllib.parse.urlsplit(self._url).path
            if not path:
                raise exceptions.ConfigurationError(
                    'option [coordination] backend_url = %s: a file:// URL '
                    'needs a directory, e.g. file:///var/lib/instanceha/'
                    'coordination' % self._redacted)

    def _probe_directory(self) -> None:
        """file://: the directory is writable, or can be created, by us."""
        path = urllib.parse.urlsplit(self._url).path
        existing = path
        while not os.path.exists(existing):
            existing = os.path.dirname(existing.rstrip('/')) or '/'
        if not os.path.isdir(existing):
            raise exceptions.CoordinationError(
                'coordination backend %s: %s is not a directory'
                % (self._redacted, existing))
        if not os.access(existing, os.W_OK | os.X_OK):
            raise exceptions.CoordinationError(
                'coordination backend %s: %s is not writable by this user%s'
                % (self._redacted, existing, '' if existing == path else
                   ' (the service creates %s in it)' % path))

    def _options(self) -> dict[str, str]:
        """Timeouts derived from ours, unless the URL sets them itself."""
        given = urllib.parse.parse_qs(urllib.parse.urlsplit(self._url).query)
        # A backend call must not outlast a heartbeat by much: leadership
        # is judged by the clock, but a stuck call delays the next beat.
        call_timeout = max(1, math.ceil(self.heartbeat_interval))
        wanted = {
            'lock_timeout': str(self.lease_time),
            'membership_timeout': str(self.lease_time),
        }
        if self._scheme == 'redis':
            wanted['timeout'] = str(call_timeout)
            wanted['socket_timeout'] = str(float(call_timeout))
            wanted['socket_connect_timeout'] = str(float(call_timeout))
        elif self._scheme.startswith('etcd3'):
            wanted['timeout'] = str(call_timeout)
        return {k: v for k, v in wanted.items() if k not in given}

    def probe(self) -> None:
        """Connect, make one call, disconnect: is the backend usable?

        For ``instanceha-status``: never joins the group nor competes
        for leadership, so a check cannot take the lead from a service.

        :raises CoordinationError: naming the backend (without its
            password) and what failed.
        """
        from tooz import coordination as tooz_coordination

        if self._scheme == 'file':
            # tooz's file driver creates its directory: look instead.
            self._probe_directory()
            return
        driver = None
        try:
            driver = tooz_coordination.get_coordinator(
                self._url, ('%s-probe' % self.member_id).encode(),
                **self._options())
            if self._scheme == 'redis':
                _no_redis_retries(driver)
            driver.start(start_heart=False)
            driver.get_groups().get(timeout=self.lease_time)
        except Exception as exc:  # noqa: any driver, any client library
            raise exceptions.CoordinationError(
                'coordination backend %s: %s'
                % (self._redacted, _describe(exc))) from None
        finally:
            if driver is not None:
                try:
                    driver.stop()
                except Exception:  # noqa: best effort on the way out
                    pass

    def start(self) -> None:
        """Connect (in the background) and start competing for leadership.

        Never raises for an unreachable backend: the service starts, says
        so in its log and health, and keeps trying.
        """
        LOG.info('Coordination: member %s, backend %s, lease %ss, heartbeat '
                 'every %ss', self.member_id, self._redacted,
                 self.lease_time, self.heartbeat_interval)
        self._thread = threading.Thread(
            target=self._run, name='coordination-heartbeat', daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            self.beat_once()
            self._wake.wait(self.heartbeat_interval)
            self._wake.clear()

    def _connect(self) -> bool:
        if self._driver is not None:
            return True
        from tooz import coordination as tooz_coordination

        try:
            driver = tooz_coordination.get_coordinator(
                self._url, self.member_id.encode(), **self._options())
            if self._scheme == 'redis':
                _no_redis_retries(driver)
            driver.start(start_heart=False)
        except Exception as exc:  # noqa: any driver, any client library
            self._set_unreachable(exc)
            return False
        self._driver = driver
        return True

    # -- the heartbeat ---------------------------------------------------

    def beat_once(self) -> None:
        """One heartbeat: refresh or compete for leadership, stay a member.

        Run by the heartbeat thread every ``heartbeat_interval``; public so
        tests can drive it step by step.
        """
        with self._state_lock:
            if self._stopping or not self._connect():
                return
            sent = self._clock()
            try:
                # Membership and every lock we hold (host locks included).
                self._driver.heartbeat()
                if self._leader_lock is not None:
                    self._refresh_leadership(sent)
                if self._leader_lock is None and not self._stopping:
                    self._compete(sent)
                if self._membership_due(sent):
                    self._keep_membership()
                    self._membership_read = sent
            except Exception as exc:  # noqa: any driver, any client library
                self._set_unreachable(exc)
                return
            self._set_reachable()

    def _refresh_leadership(self, sent: float) -> None:
        if sent >= self._lease_end:
            self._lose('the lease may have expired: no refresh succeeded '
                       'for %.1f s' % (sent - self._lease_end
                                       + self.lease_time))
            return
        beat = getattr(self._leader_lock, 'heartbeat', None)
        try:
            if beat is not None:
                beat()
        except Exception as exc:  # noqa: any driver, any client library
            # Lost or unreachable alike: stop leading. If the backend is
            # unreachable, competing again fails and says so.
            self._lose('refreshing the lease failed: %s' % _describe(exc))
            return
        if self._clock() >= self._lease_end:
            self._lose('the lease refresh came back too late')
            return
        if not self._valid_until:
            LOG.info('Coordination: %s leads again: the lease was refreshed '
                     'in time', self.member_id)
        self._extend(sent)

    def _compete(self, sent: float) -> None:
        lock = self._driver.get_lock(self._leader_name)
        got = _acquire(lock, 0)
        if not got and self.takeover_wait > 0 and not self._stopping:
            got = _acquire(lock, self.takeover_wait)
        if not got:
            return
        if self._stopping:
            _release_quietly(lock)
            return
        self._leader_lock = lock
        self._extend(sent)
        self._elections_won += 1
        LOG.info('Coordination: %s is now the leader (backend %s)',
                 self.member_id, self._redacted)

    def _extend(self, sent: float) -> None:
        self._lease_end = sent + self.lease_time
        self._valid_until = self._lease_end - self.heartbeat_interval

    def _lose(self, reason: str) -> None:
        self._valid_until = 0.0
        lock, self._leader_lock = self._leader_lock, None
        self._last_loss = reason
        LOG.warning('Coordination: %s is no longer the leader: %s',
                    self.member_id, reason)
        if lock is not None:
            # Token-checked: never removes a lock another copy now holds.
            _release_quietly(lock)

    def _membership_due(self, now: float) -> bool:
        """Whether this beat reads the group's members (and rejoins).

        Membership is not leadership: that is the lock, refreshed every
        beat. The members are read for the status (how many copies run)
        and to join again if the backend forgot this copy, which it does
        only after ``lease_time`` without a heartbeat from it. So they are
        read at the first beat, at the first beat after a failed one, and
        otherwise every half lease, not every beat (a read is a listing
        of the group in the backend, the costlier half of a beat).
        """
        return (self._members is None or not self._connected or
                now - self._membership_read >= self.lease_time / 2.0)

    def _keep_membership(self) -> None:
        from tooz import coordination as tooz_coordination

        try:
            members = self._driver.get_members(self._group_id).get()
        except tooz_coordination.GroupNotCreated:
            members = set()
            try:
                self._driver.create_group(self._group_id).get()
            except tooz_coordination.GroupAlreadyExist:
                pass
        if self.member_id.encode() not in members:
            # First beat, or the backend forgot us (etcd lease expired).
            try:
                self._driver.join_group(self._group_id).get()
            except tooz_coordination.MemberAlreadyExist:
                pass
            members = set(members) | {self.member_id.encode()}
        self._members = len(members)

    def _set_unreachable(self, exc: BaseException) -> None:
        message = 'backend %s unreachable: %s' % (self._redacted,
                                                  _describe(exc))
        # Stop acting now, not when the lease could end: leadership can no
        # longer be proven. The lock is kept: a refresh that succeeds
        # before the lease ends resumes leadership without an election.
        self._valid_until = 0.0
        if self._connected or self._error != message:
            LOG.error('Coordination: %s; this copy will not act until it '
                      'is back%s', message,
                      ' (leadership suspended; lost if not refreshed '
                      'within %.1f s)' % max(0.0, self._lease_end -
                                             self._clock())
                      if self._leader_lock is not None else '')
        self._connected = False
        self._error = message

    def _set_reachable(self) -> None:
        if not self._connected:
            LOG.info('Coordination: backend %s reachable; %s is %s',
                     self._redacted, self.member_id,
                     'the leader' if self.is_leader() else 'a follower')
        self._connected = True
        self._error = None

    # -- the port --------------------------------------------------------

    def is_leader(self) -> bool:
        return not self._stopping and self._clock() < self._valid_until

    def proven_for(self) -> float:
        """Seconds until leadership could lapse (0 when not leader).

        Side effects are bounded by it, so none can outlive the lease.
        """
        if self._stopping:
            return 0.0
        return max(0.0, self._valid_until - self._clock())

    @contextlib.contextmanager
    def host_lock(self, host: str, timeout: float | None = None
                  ) -> Iterator[None]:
        """Hold the backend's lock for ``host`` (refreshed by heartbeats).

        :raises CoordinationError: when the backend is unreachable or
            another worker holds the lock for longer than ``timeout``
            (default one heartbeat interval).
        """
        driver = self._driver
        if driver is None or not self._connected:
            raise exceptions.CoordinationError(
                'cannot lock host %s: coordination %s'
                % (host, self._error or 'not connected yet'))
        lock = driver.get_lock(('%s-host-%s' % (self.group, host)).encode())
        wait = self.heartbeat_interval if timeout is None else timeout
        try:
            got = _acquire(lock, wait)
        except Exception as exc:  # noqa: any driver, any client library
            raise exceptions.CoordinationError(
                'cannot lock host %s: coordination backend %s: %s'
                % (host, self._redacted, _describe(exc))) from None
        if not got:
            raise exceptions.CoordinationError(
                'host %s is locked by another worker' % host)
        try:
            yield
        finally:
            _release_quietly(lock)

    # -- health and shutdown ---------------------------------------------

    def status(self) -> Status:
        return Status(member_id=self.member_id, backend=self._redacted,
                      connected=self._connected, leader=self.is_leader(),
                      error=self._error, last_loss=self._last_loss,
                      members=self._members,
                      elections_won=self._elections_won,
                      stopping=self._stopping)

    def stop(self, timeout: float | None = None) -> None:
        """Give up leadership at once and leave the group.

        ``is_leader()`` is False when this is called; the lock is released
        (not left to expire), so a follower takes over at its next
        heartbeat.
        """
        self._stopping = True
        self._valid_until = 0.0
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.heartbeat_interval * 2
                              if timeout is None else timeout)
        with self._state_lock:
            lock, self._leader_lock = self._leader_lock, None
            if lock is not None:
                _release_quietly(lock)
                LOG.info('Coordination: %s released leadership',
                         self.member_id)
            driver, self._driver = self._driver, None
            if driver is not None:
                try:
                    driver.stop()
                except Exception as exc:  # noqa: best effort on the way out
                    LOG.warning('Coordination: leaving backend %s: %s',
                                self._redacted, _describe(exc))
            self._connected = False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return '%s: %s' % (name, text) if text else name


def _acquire(lock, wait: float) -> bool:
    """Take a tooz lock, waiting up to ``wait`` seconds (0: not at all)."""
    import tenacity

    if wait <= 0:
        return bool(lock.acquire(blocking=False))
    try:
        return bool(lock.acquire(blocking=wait))
    except tenacity.RetryError:
        # tooz's etcd3 driver says "timed out" this way.
        return False


def _release_quietly(lock) -> None:
    try:
        lock.release()
    except Exception as exc:  # noqa: the lease expires on its own
        LOG.warning('Coordination: could not release lock %s (it expires '
                    'with its lease): %s', lock.name, _describe(exc))


def _no_redis_retries(driver) -> None:
    """Make a failing redis call fail fast.

    redis-py 5+ retries a failed connection with exponential back-off and
    tooz retries that 15 times: about a minute per call to a stopped
    server, during which a follower cannot notice the backend is back.
    Leadership is judged by the clock, so the retries buy nothing. tooz
    has no option for it: this replaces its driver's client factory, the
    only reach into tooz internals (RedisRetriesPinTest pins it).
    """
    from redis import backoff
    from redis import retry

    make_client = getattr(driver, '_make_client', None)
    if make_client is None:  # another tooz: keep its own behaviour
        return

    def _make_client(*args, **kwargs):
        client = make_client(*args, **kwargs)
        client.set_retry(retry.Retry(backoff.NoBackoff(), 0))
        return client

    driver._make_client = _make_client
