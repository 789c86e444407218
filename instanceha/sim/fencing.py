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

"""The ``sim`` fencing driver: a simulated BMC or PDU outlet.

An ordinary driver in the ``instanceha.fencing`` namespace: the base
class does the polling and the timing, the fencing topology does levels,
retries and the chain timeout, exactly as with ipmi or redfish. Only the
device is simulated. It acts on the world the simulator made active;
anywhere else it is refused when the fencing file is validated (service
start, ``config validate``, ``fencing validate``), so that a ``driver:
sim`` entry in a real fencing file cannot pass for a fencing device.
"""

from instanceha.plugins.fencing import base
from instanceha.sim import world as sim_world

_ERRORS = {
    'timeout': base.DeviceTimeoutError,
    'unreachable': base.UnreachableError,
    'error': base.DeviceError,
    'auth': base.AuthError,
}


class SimFencing(base.FencingDriver):
    description = ('A simulated BMC or PDU outlet; only works inside '
                   'instanceha-simulate.')

    PARAMS = {
        'target': base.Param('Name of the simulated device in the scenario '
                             'topology (default: the host name, i.e. the '
                             'host\'s own BMC)'),
    }

    @property
    def target(self) -> str:
        return str(self.params.get('target') or self.host)

    def describe_target(self) -> str:
        return 'simulated %s' % self.target

    def validate(self) -> None:
        super().validate()
        world = sim_world.current()
        if world is None:
            # Registered like any driver (the simulator loads the
            # production fencing file), but it fences nothing real.
            self._fail('the sim fencing driver only works inside '
                       'instanceha-simulate; no simulated world is active '
                       '(use a real driver: ipmi, redfish, fence-agent)')
        if self.target not in world.devices:
            self._fail('parameter \'target\': no simulated device %r; the '
                       'topology has: %s' % (self.target, ', '.join(
                           sorted(world.devices))))

    def _world(self) -> sim_world.World:
        world = sim_world.current()
        if world is None:
            raise base.UnreachableError(
                self, 'the "sim" driver only works inside the simulator '
                '(instanceha-simulate); no simulated world is running')
        return world

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except sim_world.DeviceFault as fault:
            raise _ERRORS[fault.kind](self, str(fault)) from None

    def _request_power(self, state: base.PowerState,
                       deadline: float) -> None:
        self._call(self._world().device_request, self.target, state.value,
                   self.remaining(deadline))

    def _read_power(self, deadline: float) -> base.PowerState:
        return base.PowerState(self._call(
            self._world().device_read, self.target,
            self.remaining(deadline)))
