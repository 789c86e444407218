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

"""The isolation response, applied through the local hypervisor.

An isolated agent cannot reach Nova, so it acts on libvirt directly,
through ``virsh`` (libvirt's own client: the agent stays on the standard
library, and virsh speaks to whichever libvirt daemon the host runs).
Nova names a guest's libvirt domain with the instance's UUID, so the
protected instances the service sent are domain UUIDs.

* ``poweroff``: ``virsh destroy`` every protected running guest;
* ``shutdown``: ``virsh shutdown`` them, wait up to the policy's
  ``shutdown_wait``, then ``virsh destroy`` what still runs.

Nothing is ever started here. When the isolation ends the work stops
(guests not yet reached keep running) and the guests powered off stay
off: Nova sees them stopped and the service decides (see
doc/host-side.md).
"""

from collections.abc import Callable, Iterable
import logging
import shlex
import subprocess
import threading
import time

from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

#: Seconds between two looks at guests shutting down.
POLL = 1.0


class VirshError(Exception):
    pass


class Virsh:
    """The local hypervisor through the ``virsh`` command.

    :param uri: the libvirt connection URI (None: virsh's default).
    """

    def __init__(self, uri: str | None = None, command: str = 'virsh',
                 timeout: float = 30.0):
        self.base = shlex.split(command) + (['-c', uri] if uri else [])
        self.timeout = timeout

    def _run(self, *args: str) -> str:
        try:
            done = subprocess.run(self.base + list(args), capture_output=True,
                                  text=True, timeout=self.timeout,
                                  check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise VirshError('virsh %s: %s' % (args[0], exc)) from None
        if done.returncode:
            raise VirshError('virsh %s: %s' % (
                args[0], (done.stderr or done.stdout).strip()[:300]))
        return done.stdout

    def running(self) -> set[str]:
        """UUIDs of the running guests."""
        return {line.strip().lower() for line in
                self._run('list', '--uuid').splitlines() if line.strip()}

    def destroy(self, uuid: str) -> None:
        self._run('destroy', uuid)

    def shutdown(self, uuid: str) -> None:
        self._run('shutdown', uuid)


class Response:
    """Applies one isolation episode's response, in a thread of its own.

    :param still_isolated: asked between steps; False stops the work.
    :param spawn: runs :meth:`run` apart from the caller (default: a
        thread of its own; the simulator runs it as a job in simulated
        time, with its ``clock`` and ``sleep``).
    """

    def __init__(self, hypervisor: Virsh, policy: protocol.Policy,
                 still_isolated: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 spawn: Callable[[Callable[[], None]], object] | None = None):
        self.hv = hypervisor
        self.policy = policy
        self._still = still_isolated
        self._clock = clock
        self._sleep = sleep
        self._spawn = spawn
        #: UUIDs of the guests powered off or shut down by this response.
        self.stopped: list[str] = []
        self.thread: threading.Thread | None = None
        self.started = self.finished = False

    @property
    def alive(self) -> bool:
        """Started and not finished: a new episode must not start another."""
        return self.started and not self.finished

    def start(self) -> None:
        self.started = True
        if self._spawn is not None:
            self._spawn(self.run)
            return
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name='isolation-response')
        self.thread.start()

    def _targets(self) -> list[str]:
        protected = {u.lower() for u in self.policy.protected}
        return sorted(protected & self.hv.running())

    def _each(self, action: str, uuids: Iterable[str]) -> list[str]:
        done = []
        for uuid in uuids:
            if not self._still():
                LOG.warning('isolation ended: isolation response stopped; '
                            'the other guests keep running')
                break
            try:
                getattr(self.hv, action)(uuid)
            except VirshError as exc:
                LOG.error('isolation response: %s', exc)
                continue
            LOG.warning('isolation response: %s of guest %s', action, uuid)
            done.append(uuid)
        return done

    def run(self) -> None:
        try:
            self._run()
        except VirshError as exc:
            LOG.error('isolation response: cannot list the guests: %s', exc)
        finally:
            self.finished = True

    def _run(self) -> None:
        pol = self.policy
        targets = self._targets()
        LOG.warning('host isolated: isolation response %s for %d protected '
                    'running guest(s)', pol.response, len(targets))
        if pol.response == protocol.RESPONSE_POWEROFF:
            self.stopped = self._each('destroy', targets)
            return
        asked = self._each('shutdown', targets)
        deadline = self._clock() + pol.shutdown_wait
        left = set(asked)
        while left and self._clock() < deadline and self._still():
            self._sleep(POLL)
            left &= self.hv.running()
        if left:
            LOG.warning('isolation response: %d guest(s) still running '
                        'after %d s: powering them off', len(left),
                        pol.shutdown_wait)
            self._each('destroy', sorted(left))
        self.stopped = asked
