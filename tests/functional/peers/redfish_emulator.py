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

"""Helper process: sushy-tools' Redfish emulator (fake driver) on loopback.

Runs the real ``sushy-emulator`` Flask application, configured from a
sushy config file (``SUSHY_EMULATOR_FAKE_DRIVER = True``, one fake system
per host, optional htpasswd auth file), on a port bound here (port 0, so
no race with other test workers) with a threaded wsgiref server.

Extras over the stock ``sushy-emulator`` command, all optional:

- the fake driver applies a power change 1-11 s (random) after the
  request, and only when the state is next read: a poller here reads
  every system twice a second so changes land on time;
- ``power_delay`` [lo, hi] replaces the 1-11 s range;
- when a power change lands, the nova helper's control API kills (off)
  or revives (on) that host's nova-compute;
- hardware health a test injects (:func:`health_app`): the stock fake
  driver reports every system OK and no power supplies;
- every power change that lands, with its wall-clock time
  (``GET /ih-test/power``: ``{name: [[time, 'On'/'Off'], ...]}``), the
  physical truth a soak run audits against.

Usage: python redfish_emulator.py CONFIG.json   (written by RedfishPeer)
"""

import json
import os
import random
import sys
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]
sys.path.append(_HERE)

import _helper_common as common  # noqa: E402


log = common.log


def patch_fake_driver(fakedriver, cfg):
    """Delay override and power-change hook on sushy's FakeDriver."""
    delay = cfg.get('power_delay')
    if delay:
        lo, hi = delay

        class Delay(object):
            @staticmethod
            def randint(a, b):
                return random.randint(lo, hi)

        fakedriver.random = Delay

    hook = (common.NovaHook(cfg['nova_control'])
            if cfg.get('nova_control') else None)
    original = fakedriver.FakeDriver._update

    def _update(self, system, **changes):
        if isinstance(system, str):
            system = self._get(system)
        before = system.get('power_state')
        original(self, system, **changes)
        after = changes.get('power_state', before)
        if after != before and after in ('On', 'Off'):
            log('%s: power %s', system['name'], after)
            with HEALTH_LOCK:
                POWER.setdefault(system['name'], []).append(
                    [time.time(), after])
            if hook:
                hook.submit(system['name'],
                            'kill' if after == 'Off' else 'revive')

    fakedriver.FakeDriver._update = _update


#: Hardware health injected by tests: system name -> what its BMC says.
HEALTH = {}
HEALTH_LOCK = threading.Lock()
#: system name -> [[wall-clock time, 'On'/'Off'], ...]: its start, then
#: every power change that landed.
POWER = {}
_CHASSIS = '/redfish/v1/Chassis/ih-%s'


def _parts(spec, key, default_name):
    return [{'Name': name, 'MemberId': str(i),
             'Status': {'State': 'Enabled', 'Health': health}}
            for i, (name, health) in enumerate(sorted(
                (spec.get(key) or {default_name: 'OK'}).items()))]


def _system_health(body, spec):
    """A system resource as its BMC reports the injected health."""
    status = body.setdefault('Status', {})
    status['Health'] = spec.get('system', 'OK')
    status['HealthRollup'] = spec.get('rollup', status['Health'])
    memory = body.setdefault('MemorySummary', {}).setdefault('Status', {})
    memory['Health'] = memory['HealthRollup'] = spec.get('memory', 'OK')
    body.setdefault('Links', {})['Chassis'] = [
        {'@odata.id': _CHASSIS % body.get('Name')}]
    return body


def health_app(app):
    """sushy-tools extended with hardware health a test can inject.

    The stock fake driver says every system is OK and serves no power
    supplies, so this wraps it: ``PUT /ih-test/health/<system name>``
    with ``{"system": "OK", "rollup": "Critical", "memory": "OK",
    "power_supplies": {"PSU 1": "OK", "PSU 2": "Critical"},
    "temperatures": {...}, "fans": {...}}`` makes that system report it
    (its ``Status``, ``MemorySummary``, and a chassis of its own with the
    standard ``Power`` and ``Thermal`` resources); ``{}`` clears it.
    """
    def reply(start_response, body, code='200 OK'):
        data = json.dumps(body).encode()
        start_response(code, [('Content-Type', 'application/json'),
                              ('Content-Length', str(len(data)))])
        return [data]

    def wrapper(environ, start_response):
        path = environ.get('PATH_INFO', '')
        method = environ.get('REQUEST_METHOD')
        if path == '/ih-test/power' and method == 'GET':
            with HEALTH_LOCK:
                return reply(start_response, POWER)
        if path.startswith('/ih-test/health/') and method == 'PUT':
            size = int(environ.get('CONTENT_LENGTH') or 0)
            spec = json.loads(environ['wsgi.input'].read(size) or b'{}')
            with HEALTH_LOCK:
                HEALTH[path.rsplit('/', 1)[1]] = spec
            return reply(start_response, {'ok': True})
        parts = path.rstrip('/').split('/')
        with HEALTH_LOCK:
            health = dict(HEALTH)
        if path.startswith('/redfish/v1/Chassis/ih-') and len(parts) == 6:
            spec = health.get(parts[4][3:], {})
            if parts[5] == 'Power':
                return reply(start_response, {'PowerSupplies': _parts(
                    spec, 'power_supplies', 'PSU 1')})
            return reply(start_response, {
                'Temperatures': _parts(spec, 'temperatures', 'CPU 1'),
                'Fans': _parts(spec, 'fans', 'Fan 1')})
        if not (method == 'GET' and len(parts) == 5
                and path.startswith('/redfish/v1/Systems/')):
            return app(environ, start_response)
        seen = {}

        def keep(status, headers, exc_info=None):
            seen['status'], seen['headers'] = status, headers
        body = b''.join(app(environ, keep))
        try:
            system = json.loads(body)
        except ValueError:
            system = None
        spec = health.get((system or {}).get('Name'))
        if spec is None or not seen['status'].startswith('200'):
            start_response(seen['status'], seen['headers'])
            return [body]
        return reply(start_response, _system_health(system, spec))
    return wrapper


def poll_power(app, interval=0.5):
    """Read every system's power so pending changes land on time."""
    while True:
        time.sleep(interval)
        try:
            with app.app_context():
                systems = app.systems
                for uuid in systems.systems:
                    systems.get_power_state(uuid)
        except Exception as exc:  # noqa: BLE001 - keep polling
            log('power poll failed: %r', exc)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    os.environ['SUSHY_EMULATOR_CONFIG'] = cfg['sushy_config']
    from sushy_tools.emulator import main as emulator
    from sushy_tools.emulator.resources.systems import fakedriver

    patch_fake_driver(fakedriver, cfg)
    for name, power in cfg.get('initial_power', {}).items():
        POWER.setdefault(name, []).append([time.time(), power])
    app = emulator.app  # configured from SUSHY_EMULATOR_CONFIG
    server = common.make_wsgi_server(health_app(app),
                                     port=cfg.get('port', 0),
                                     tls=cfg.get('tls'))
    common.serve_in_thread(server, 'redfish')
    threading.Thread(target=poll_power, args=(app,), daemon=True,
                     name='power-poll').start()
    common.write_ready(cfg['ready_file'], {'port': server.server_port,
                                           'pid': os.getpid()})
    log('redfish emulator ready on port %d', server.server_port)
    common.run_until_orphaned(cfg['max_lifetime'])


if __name__ == '__main__':
    main()
