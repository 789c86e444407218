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

"""Nova's own witness: the nova-compute service state and heartbeat (R4)."""

import datetime

from instanceha.engine import model
from instanceha.plugins.detectors import base


class NovaDetector(base.Detector):
    """Failed when Nova says ``down`` or the heartbeat is older than delta.

    Nova itself declares a service down only after its
    ``service_down_time`` (60 s by default); ``[DEFAULT] delta`` lets
    instanceha notice a stale ``updated_at`` sooner. A missing or
    malformed time stamp on a service Nova reports ``up`` gives no vote
    (unknown, with the raw text in the reason): a parsing problem must
    never look like a dead host.
    """

    description = ('nova-compute state down, or updated_at older than '
                   '[DEFAULT] delta')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[DEFAULT] delta': 'seconds after which a heartbeat is '
                                   'stale'}

    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, base.Evidence]:
        delta = datetime.timedelta(seconds=self.conf.delta)
        return {svc.host: self._judge(svc, now, delta)
                for svc in snapshot.services}

    @staticmethod
    def _judge(svc: model.Service, now: datetime.datetime,
               delta: datetime.timedelta) -> base.Evidence:
        def ev(verdict, text):
            return base.Evidence(svc.host, verdict, 'nova: ' + text,
                                 control_plane=True)

        if svc.updated_at is not None:
            age = (now - svc.updated_at).total_seconds()
            seen = 'last heartbeat %ds ago' % age
        elif svc.updated_at_raw:
            seen = 'malformed updated_at %r' % svc.updated_at_raw[:64]
        else:
            seen = 'no updated_at'
        if svc.forced_down:
            return ev(base.Verdict.FAILED, 'forced down (%s)' % seen)
        if svc.state == model.DOWN:
            return ev(base.Verdict.FAILED, 'state down (%s)' % seen)
        if svc.state != model.UP:
            return ev(base.Verdict.UNKNOWN, 'unexpected state %r (%s)'
                      % (svc.state, seen))
        if svc.updated_at is None:
            return ev(base.Verdict.UNKNOWN, 'state up but %s' % seen)
        if now - svc.updated_at > delta:
            return ev(base.Verdict.FAILED, 'state up but %s > delta %ds'
                      % (seen, delta.total_seconds()))
        return ev(base.Verdict.ALIVE, 'state up, %s' % seen)
