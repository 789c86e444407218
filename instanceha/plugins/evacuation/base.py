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

"""Evacuation strategies: the policy for moving a fenced host's instances.

The mechanism (migration-record reconciliation, unanswered calls, locks,
progress) is the engine's (:mod:`instanceha.engine.evacuation_job`); a
strategy says only:

* when a host counts as done (``tracks``: accepted call vs. rebuild done),
* how often a failed rebuild is retried (``retries``),
* which pending instances may start now (:meth:`ready`), in which order
  (:meth:`priority`), and
* how to rank the hosts each instance may go to (:meth:`rank`, from a
  read-only :class:`instanceha.engine.placement.PlacementView`); the
  rules every strategy shares (the reserved spare first, not again on a
  host an instance failed on too often) are the engine's
  (:func:`instanceha.engine.placement.decide`).

The values a strategy is handed are named here too (``base.InstanceTask``,
``base.TaskState``): they are part of the strategy interface that
doc/driver-authors.md describes.
"""

from collections.abc import Sequence

from instanceha.conf import evacuation as evac_conf
from instanceha.engine import evacuation_job
from instanceha.engine import evacuation_tasks
from instanceha.engine import model
from instanceha.engine import placement
from instanceha.plugins import base

# The strategy interface's value types: ``ready(tasks)`` is handed
# InstanceTasks and compares their TaskState (doc/driver-authors.md).
InstanceTask = evacuation_tasks.InstanceTask
TaskState = evacuation_tasks.TaskState


class EvacuationStrategy(base.Driver):
    """Policy for moving the eligible instances of one fenced host."""

    #: True: an instance counts as evacuated once its rebuild is done;
    #: False: once Nova accepted the call (fire-and-forget).
    tracks: bool = True
    #: True for a policy weighing every host's load (its instances): the
    #: engine then lists every server, not only the failed hosts'.
    needs_all_servers: bool = False

    @property
    def stop_on_failure(self) -> bool:
        """Start nothing more on a host once one instance is given up.

        ``[evacuation] on_instance_failure = stop_host`` (default);
        ``continue`` evacuates the rest (the host still ends FAILED).
        """
        return self.conf.evacuation.on_instance_failure == 'stop_host'

    @property
    def retries(self) -> int:
        return self.conf.evacuation.retries

    @property
    def same_target_retries(self) -> int:
        return self.conf.evacuation.same_target_retries

    def retry_delay(self, attempts: int) -> int:
        """Back-off before retrying an instance that failed ``attempts``."""
        return evac_conf.retry_delay(self.conf, attempts)

    @property
    def timeout(self) -> int:
        return self.conf.evacuation.timeout

    @property
    def lock_instances(self) -> bool:
        return self.conf.evacuation.lock_instances

    def priority(self, server: model.Server) -> int:
        """Restart priority of a server (only orchestrated uses it)."""
        return 0

    def ready(self, tasks: list[InstanceTask]) -> list[InstanceTask]:
        """The pending tasks that may start now, in order."""
        return [t for t in tasks if t.state is TaskState.PENDING]

    #: True: :meth:`rank` orders the hosts an instance may go to (their
    #: room looked at); False: the engine's proposal stands (the reserved
    #: spare, the host asked before, another after repeated failures on
    #: one, else Nova's scheduler) -- see
    #: :func:`instanceha.engine.placement.decide`, which owns the rules
    #: every strategy shares.
    places: bool = False

    def rank(self, request: placement.PlacementRequest,
             candidates: tuple[placement.HostRoom, ...],
             view: placement.PlacementView
             ) -> Sequence[placement.HostRoom]:
        """The hosts ``request``'s instance may go to, best first.

        Asked only when :attr:`places`. ``candidates`` are the eligible
        hosts with room for it that the retry-elsewhere rule allows, by
        name (never empty); ``view`` is a read-only picture of the other
        hosts (room, failure domains), never the environment. Empty lets
        Nova's scheduler choose; the first is a request Nova's scheduler
        still validates (never forced). The default keeps their order.
        """
        return candidates

    def choose_target(self, task: placement.PlacementRequest,
                      view: placement.PlacementView) -> str | None:
        """The last word on where ``task``'s next evacuate call goes.

        ``task.target`` is what :func:`instanceha.engine.placement.decide`
        chose (None: Nova's scheduler); the default keeps it. For
        strategies written before :meth:`rank`: a new one ranks instead,
        and leaves the spare and the retry-elsewhere rule to the engine.
        """
        return task.target

    def begin(self, host: str, servers: list[model.Server], *,
              spare: str | None = None,
              since=None) -> evacuation_job.EvacuationJob:
        """Start (or, after a restart, resume) evacuating ``host``.

        :param servers: the host's eligible instances as Nova lists them
            now (instances whose status Nova cannot evacuate are skipped).
        :param spare: the reserved spare to rebuild them on first; None
            lets the placement decision choose.
        :param since: migration records older than this are not ours
            (the time the host was fenced).
        """
        return evacuation_job.EvacuationJob(self, host, servers, spare,
                                            since)
