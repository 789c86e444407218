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
* where each goes (:meth:`choose_target`, from a read-only
  :class:`instanceha.engine.placement.PlacementView`).

The values a strategy is handed are named here too (``base.InstanceTask``,
``base.TaskState``): they are part of the strategy interface that
doc/driver-authors.md describes.
"""

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

    def choose_target(self, task: InstanceTask,
                      view: placement.PlacementView) -> str | None:
        """Where the next evacuate call of ``task`` asks Nova to rebuild it.

        None lets Nova's scheduler choose; a host named here is a request
        Nova's scheduler still validates (never forced). ``view`` is a
        read-only picture of the other hosts (room, failure domains, the
        reserved spare), never the environment. The default keeps the
        engine's proposal, ``task.target``: the reserved spare when
        instances are to be rebuilt on it, after repeated failures on one
        host another one (``[evacuation] same_target_retries``), else
        None -- what the built-in strategies always chose.
        """
        return task.target

    def begin(self, host: str, servers: list[model.Server], *,
              target: str | None = None,
              since=None) -> evacuation_job.EvacuationJob:
        """Start (or, after a restart, resume) evacuating ``host``.

        :param servers: the host's eligible instances as Nova lists them
            now (instances whose status Nova cannot evacuate are skipped).
        :param target: a spare to rebuild on; None lets Nova choose.
        :param since: migration records older than this are not ours
            (the time the host was fenced).
        """
        return evacuation_job.EvacuationJob(self, host, servers, target,
                                            since)
