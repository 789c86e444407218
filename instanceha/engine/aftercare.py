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

"""Aftercare: an evacuation's rebuilds watched once its host moved on.

Fire-and-forget moves a host on as soon as its evacuate calls are
accepted; a host an operator took, or one whose evacuation a restart
left behind, has rebuilds still running too. Their instances stay locked
by us until the rebuilds end, and their power state is restored then: a
workflow of kind ``aftercare`` of the runtime
(:mod:`instanceha.engine.runtime`) steps the evacuation job, without
budget and without the host's lock (the host's own workflow holds it),
until nothing is left to watch.

The runtime runs it at its own point of the tick
(:attr:`instanceha.engine.runtime.Kind.named_only`): its results are
applied with the host workflows' (those finished before the services
read), and it is stepped after them, on the tick's listing of evacuation
records. A lost leadership keeps it: nothing in Nova would let this copy
rebuild it, and the next leader's lock sweep looks after the locks of a
copy that stopped for good.
"""

import dataclasses
import datetime
import enum

from instanceha.engine import evacuation_job
from instanceha.engine import events
from instanceha.engine import migration_records
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import retry
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha.engine.states import HostState
from instanceha.engine import workflow
from instanceha import exceptions

#: The workflow kind's name in the runtime.
KIND = 'aftercare'


class Watch(enum.Enum):
    """The states of an aftercare: watching, then settled (the end)."""

    WATCHING = 'watching'
    SETTLED = 'settled'


@dataclasses.dataclass(frozen=True)
class Rebuilds:
    """What an aftercare watches (its record's durable part)."""

    job: evacuation_job.EvacuationJob
    #: The records of the host's failure are this recent (our clock).
    since: datetime.datetime | None
    #: The host's state when it moved on, said in the events of errors.
    shown: HostState
    recovery: str
    gave_up: tuple[str, ...] = ()
    stopped: bool = False


@dataclasses.dataclass(frozen=True)
class World:
    """What the aftercare steps of one tick read."""

    snapshot: model.Snapshot | None
    #: The tick's listing of evacuation records (None: none made yet).
    listing: migration_records.SharedListing | None


class Aftercare:
    """The rebuilds of hosts that moved on, watched until they end."""

    def __init__(self, conf, env: ports.Environment,
                 workflows: runtime_loop.Runtime, drivers):
        self.conf = conf
        self.env = env
        self.workflows = workflows
        self.drivers = drivers
        workflows.register(runtime.Kind(
            name=KIND,
            transitions={Watch.WATCHING: frozenset({Watch.SETTLED})},
            steps={Watch.WATCHING: self._step}, final=frozenset(
                {Watch.SETTLED}), on_error=self._failed,
            # At most one step a tick_interval: the service loop also
            # wakes when a job finishes, which must not turn watching
            # rebuilds into a busy loop of Nova calls.
            pace=lambda: float(self.conf.tick_interval),
            named_only=True, survives_leadership=True))

    def watch(self, wf: workflow.HostWorkflow,
              job: evacuation_job.EvacuationJob | None = None,
              errors: int = 0) -> None:
        """Watch the rebuilds of ``wf``'s job (or ``job``) from now on.

        It takes over the workflow's count of failed steps (``errors``);
        one already watching the host is replaced (its job's result is
        never applied).
        """
        self.workflows.start(
            KIND, wf.host, Watch.WATCHING,
            Rebuilds(job=job or wf.job, since=wf.since, shown=wf.state,
                     recovery=wf.durable.recovery,
                     gave_up=wf.durable.gave_up, stopped=wf.durable.stopped),
            replace=True, errors=errors)

    def watched(self) -> list[runtime.Record]:
        return self.workflows.records(KIND)

    def hosts(self) -> set[str]:
        return {rec.key for rec in self.watched()}

    def watching(self, host: str) -> bool:
        """Whether rebuilds of ``host``'s instances may still be running."""
        return self.workflows.get(KIND, host) is not None

    def recovery(self, host: str) -> str | None:
        rec = self.workflows.get(KIND, host)
        return (rec.durable.recovery or None) if rec is not None else None

    def running(self) -> list[str]:
        """The hosts whose aftercare step runs now."""
        return [rec.key for rec in self.watched()
                if self.workflows.running(KIND, rec.key)]

    def holding(self) -> int:
        """The ``max_in_flight`` slots the watched rebuilds hold.

        Tracked strategies count the rebuilds in flight (the view the
        job handed over); fire-and-forget counts none.
        """
        if not self.drivers.evacuation.tracks:
            return 0
        return sum(rec.durable.job.view.in_flight for rec in self.watched())

    def harvest(self, only: frozenset) -> None:
        """Apply the results of the steps in ``only`` (finished by then)."""
        self.workflows.harvest(kinds=(KIND,), only=only)

    def step(self, snapshot: model.Snapshot | None,
             listing: migration_records.SharedListing | None) -> None:
        """Step every aftercare due now (tick thread)."""
        self.workflows.run(World(snapshot, listing), kinds=(KIND,),
                           only=frozenset())

    def _step(self, view: runtime.View) -> runtime.Outcome:
        watched: Rebuilds = view.record.durable
        job = watched.job
        # Nor while it only waits for rebuilds not yet expected to end
        # (EvacuationJob.due): their records are listed when they are.
        if not job.due(view.now, 0):
            return runtime.Wait()
        world: World = view.world
        listing = world.listing
        if listing is None or not listing.covers(watched.since):
            listing = migration_records.SharedListing(self.env.cloud,
                                                      watched.since)
        ctx = evacuation_job.StepContext(
            env=self.env, snapshot=world.snapshot, budget=0,
            gave_up=watched.gave_up, stopped=watched.stopped,
            listing=listing, reuse=False)
        # No host lock: the host itself has moved on, and its own steps
        # hold it.
        return runtime.Job(run=lambda: job.step(ctx), then=self._stepped,
                           lock=False)

    @staticmethod
    def _stepped(view: runtime.View, progress) -> runtime.Outcome:
        if progress.settled:
            return runtime.Go(Watch.SETTLED)
        return runtime.Wait()

    def _failed(self, view: runtime.View,
                exc: BaseException) -> runtime.Outcome:
        """A step that raised: said, and taken again at its pace.

        The rebuilds it watches end on Nova's time, not ours: it is not
        held back beyond its pace. ``retry_in`` says the back-off a host
        workflow's step would wait, growing while it keeps failing.
        """
        watched: Rebuilds = view.record.durable
        wait = retry.backoff(
            workflow.STEP_RETRY, view.record.errors,
            max(workflow.STEP_RETRY, float(self.conf.poll)))
        if not isinstance(exc, exceptions.InstanceHAError):
            workflow.LOG.error('host %s: unexpected error in state %s',
                               view.record.key, watched.shown, exc_info=exc)
        reason = '%s: %s' % (type(exc).__name__, exc)
        return runtime.Wait(emit=runtime.emit(
            events.STEP_ERROR, state=watched.shown.value, reason=reason,
            retry_in=int(wait)))
