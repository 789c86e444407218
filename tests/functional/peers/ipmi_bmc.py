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

"""Helper process: IPMI BMCs (pyghmi) for several hosts, on loopback.

One UDP port per host, all served by pyghmi's single event loop, bound to
``::ffff:127.0.0.1`` only. Each BMC keeps a power state; powering a host
off/on can kill/revive its nova-compute through the nova helper's control
API, as a real power cut would. A JSON control API (TCP) lets a test read
power states and make a BMC misbehave:

- ``ok``: a normal BMC;
- ``stuck``: accepts power commands (completion code 0) but the power
  state never changes (and nova is not touched);
- ``error``: power commands fail with completion code 0xd5;
- ``silent``: drops every packet, so sessions time out.

Hardware health, as a real BMC reports it: the fault bits of *Get Chassis
Status* (power overload, main power fault, power control fault, drive
fault, cooling/fan fault) and a System Event Log (*Get SEL Info*,
*Reserve SEL*, *Get SEL Entry*, *Clear SEL*) whose records the control
API adds; pyghmi's BMC implements neither, so this emulator does.

Usage: python ipmi_bmc.py CONFIG.json   (written by IpmiBmcPeer)
"""

import json
import os
import sys
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]
sys.path.append(_HERE)

import _helper_common as common  # noqa: E402

import pyghmi.ipmi.bmc as bmc  # noqa: E402

#: ok; stuck: power commands accepted and ignored; error: refused;
#: silent: no answer; lying: power commands obeyed, but the power state
#: is always reported "on" (a BMC that cannot be believed).
MODES = ('ok', 'stuck', 'error', 'silent', 'lying')
#: IPMI completion code "command cannot execute in present state".
CANNOT_EXECUTE = 0xd5
#: The storage network function (SEL commands).
STORAGE_NETFN = 0x0a
#: Get Chassis Status fault bits: name -> (response byte, bit value).
CHASSIS_FAULTS = {
    'power_overload': (1, 0x02),
    'power_interlock': (1, 0x04),
    'main_power_fault': (1, 0x08),
    'power_control_fault': (1, 0x10),
    'drive_fault': (3, 0x04),
    'cooling_fault': (3, 0x08),
}


def _le32(value):
    value = int(value)
    return [value & 0xff, value >> 8 & 0xff, value >> 16 & 0xff,
            value >> 24 & 0xff]


def _sel_record(record_id, event):
    """A 16-byte system event record (IPMI v2.0 section 32.1)."""
    direction = 0x80 if event.get('deassert') else 0x00
    event_type = event.get('event_type', 0x6f)
    return ([record_id & 0xff, record_id >> 8, 0x02]
            + _le32(event['timestamp'])
            + [0x20, 0x00, 0x04, event['sensor_type'],
               event['sensor_number'], direction | event_type,
               event['offset'] & 0x0f, 0xff, 0xff])


log = common.log


class HostBmc(bmc.Bmc):
    """The BMC of one host: a power state, a mode, an optional hook."""

    def __init__(self, host, authdata, port, power, hook, lock):
        super().__init__(authdata, port=port, address='::ffff:127.0.0.1')
        # With port 0 the kernel chose: pyghmi routes by the real port.
        self.port = self.serversocket.getsockname()[1]
        self.host = host
        self.power = power
        self.mode = 'ok'
        self.hook = hook
        self.lock = lock
        self.bootdevice = 'default'
        #: Every real power change: [wall-clock time, 'on'/'off'] (the
        #: physical truth a soak run audits against).
        self.history = [[time.time(), power]]
        #: Chassis fault bits set through the control API (CHASSIS_FAULTS).
        self.faults = set()
        #: SEL records: dicts of sensor_type, sensor_number, offset,
        #: deassert, timestamp (record ids are positions + 1).
        self.sel = []

    # -- misbehaviour -----------------------------------------------------

    def sessionless_data(self, data, sockaddr):
        if self.mode == 'silent':
            return None
        return super().sessionless_data(data, sockaddr)

    def handle_raw_request(self, request, session):
        if self.mode == 'silent':
            return None
        if request['netfn'] == STORAGE_NETFN:
            return self._storage(request, session)
        return super().handle_raw_request(request, session)

    # -- hardware health ----------------------------------------------------

    def get_chassis_status(self, session):
        with self.lock:
            power = 1 if self.get_power_state() == 'on' else 0
            faults = set(self.faults)
        byte1 = power | sum(bit for name, (byte, bit)
                            in CHASSIS_FAULTS.items()
                            if byte == 1 and name in faults)
        byte3 = sum(bit for name, (byte, bit) in CHASSIS_FAULTS.items()
                    if byte == 3 and name in faults)
        session.send_ipmi_response(data=[byte1, 0, byte3])

    def _storage(self, request, session):
        """The SEL commands of IPMI v2.0 section 31."""
        cmd, data = request['command'], list(request['data'])
        with self.lock:
            records = list(self.sel)
        if cmd == 0x40:             # Get SEL Info
            stamp = _le32(records[-1]['timestamp'] if records else 0)
            return session.send_ipmi_response(data=[
                0x51, len(records) & 0xff, len(records) >> 8, 0xff, 0xff]
                + stamp + [0, 0, 0, 0] + [0x02])
        if cmd == 0x42:             # Reserve SEL
            return session.send_ipmi_response(data=[0x01, 0x00])
        if cmd == 0x43:             # Get SEL Entry
            wanted = data[2] | data[3] << 8
            if not records:
                return session.send_ipmi_response(code=0xcb)
            index = (len(records) - 1 if wanted == 0xffff
                     else max(wanted, 1) - 1)
            if index >= len(records):
                return session.send_ipmi_response(code=0xcb)
            following = index + 2 if index + 1 < len(records) else 0xffff
            record = _sel_record(index + 1, records[index])
            offset, count = data[4], data[5]
            chunk = record[offset:] if count == 0xff else \
                record[offset:offset + count]
            return session.send_ipmi_response(
                data=[following & 0xff, following >> 8] + chunk)
        if cmd == 0x47:             # Clear SEL
            with self.lock:
                self.sel = []
            return session.send_ipmi_response(data=[0x01])
        if cmd == 0x48:             # Get SEL Time
            return session.send_ipmi_response(data=_le32(time.time()))
        return session.send_ipmi_response(code=0xc1)

    # -- power ------------------------------------------------------------

    def get_power_state(self):
        with self.lock:
            return 'on' if self.mode == 'lying' else self.power

    def _set_power(self, state):
        with self.lock:
            mode = self.mode
            if mode == 'error':
                return CANNOT_EXECUTE
            if mode == 'stuck':
                log('%s: power %s accepted but ignored (stuck)',
                    self.host, state)
                return 0
            changed = self.power != state
            self.power = state
            if changed:
                self.history.append([time.time(), state])
        log('%s: power %s%s', self.host, state, '' if changed else
            ' (already)')
        if changed and self.hook:
            self.hook.submit(self.host, 'kill' if state == 'off'
                             else 'revive')
        return 0

    def power_off(self):
        return self._set_power('off')

    def power_shutdown(self):
        return self._set_power('off')

    def power_on(self):
        return self._set_power('on')

    def power_cycle(self):
        rc = self._set_power('off')
        return rc or self._set_power('on')

    power_reset = power_cycle

    def is_active(self):
        return self.get_power_state() == 'on'

    def get_boot_device(self):
        return self.bootdevice

    def set_boot_device(self, bootdevice):
        self.bootdevice = bootdevice

    def cold_reset(self):
        # Unlike pyghmi's fakebmc, do not exit: the other hosts' BMCs
        # live in this process.
        return 0


def control_app(bmcs, lock):
    def describe():
        return {h: {'port': b.port, 'power': b.power, 'mode': b.mode,
                    'history': list(b.history)}
                for h, b in bmcs.items()}

    def get(parts, body):
        with lock:
            return 200, describe()

    def set_mode(parts, body):
        b = bmcs[parts[1]]
        mode = body.get('mode')
        if mode not in MODES:
            return 400, {'error': 'mode must be one of %s' % (MODES,)}
        with lock:
            b.mode = mode
        log('%s: mode %s', b.host, mode)
        return 200, describe()[b.host]

    def set_power(parts, body):
        """Set the recorded power state without touching nova."""
        b = bmcs[parts[1]]
        state = body.get('power')
        if state not in ('on', 'off'):
            return 400, {'error': 'power must be on or off'}
        with lock:
            if b.power != state:
                b.history.append([time.time(), state])
            b.power = state
        return 200, describe()[b.host]

    def set_faults(parts, body):
        """Replace a BMC's chassis fault bits."""
        b = bmcs[parts[1]]
        faults = set(body.get('faults') or ())
        unknown = faults - set(CHASSIS_FAULTS)
        if unknown:
            return 400, {'error': 'unknown faults %s; known: %s' % (
                sorted(unknown), sorted(CHASSIS_FAULTS))}
        with lock:
            b.faults = faults
        return 200, {'faults': sorted(faults)}

    def add_event(parts, body):
        """Append one record to a BMC's SEL (or clear it)."""
        b = bmcs[parts[1]]
        if body.get('clear'):
            with lock:
                b.sel = []
            return 200, {'sel': 0}
        try:
            event = {'sensor_type': int(body['sensor_type']),
                     'sensor_number': int(body.get('sensor_number', 1)),
                     'offset': int(body['offset']),
                     'event_type': int(body.get('event_type', 0x6f)),
                     'deassert': bool(body.get('deassert')),
                     'timestamp': time.time()}
        except (KeyError, TypeError, ValueError) as exc:
            return 400, {'error': 'bad event: %s' % exc}
        with lock:
            b.sel.append(event)
            count = len(b.sel)
        return 200, {'sel': count}

    return common.json_app({
        ('GET', ('bmcs',)): get,
        ('POST', ('bmcs', '*', 'mode')): set_mode,
        ('POST', ('bmcs', '*', 'power')): set_power,
        ('POST', ('bmcs', '*', 'faults')): set_faults,
        ('POST', ('bmcs', '*', 'sel')): add_event,
    })


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    hook = (common.NovaHook(cfg['nova_control'])
            if cfg.get('nova_control') else None)
    lock = threading.RLock()
    authdata = {cfg['username']: cfg['password']}
    bmcs = {}
    for host, spec in cfg['hosts'].items():
        bmcs[host] = HostBmc(host, authdata, spec.get('port', 0),
                             spec.get('power', 'on'), hook, lock)
        bmcs[host].mode = spec.get('mode', 'ok')
    control = common.make_wsgi_server(control_app(bmcs, lock))
    common.serve_in_thread(control, 'bmc-control')
    threading.Thread(target=common.run_until_orphaned, daemon=True,
                     args=(cfg['max_lifetime'],)).start()
    common.write_ready(cfg['ready_file'], {
        'control_port': control.server_port, 'pid': os.getpid(),
        'ports': {h: b.port for h, b in bmcs.items()}})
    log('BMCs ready: %s', {h: b.port for h, b in bmcs.items()})
    bmc.Bmc.listen(timeout=1)


if __name__ == '__main__':
    main()
