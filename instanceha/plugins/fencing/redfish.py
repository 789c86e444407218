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

"""Redfish fencing through sushy, OpenStack's own Redfish library.

ComputerSystem.Reset ForceOff / On, then PowerState is polled until it
reports the new state. One sushy root (and so one Redfish session) is
kept per device and reused, so a fence does not log in for every poll;
it is rebuilt once if the BMC drops the session. TLS certificates are
verified unless the device says ``verify: false``.

Vendor answers handled: ForceOff on a system that is already off is
refused by some BMCs with 400 or 409 -- success if PowerState says Off;
On right after ForceOff is refused by some BMCs while they settle --
retried until the device's timeout.
"""

import logging
import threading
from typing import Any

from instanceha.engine import model
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import redfish_health

_SUSHY_IMPORT = threading.Lock()

LOG = logging.getLogger(__name__)

_REFUSED = (400, 409)


def _verify_value(value: Any) -> bool:
    return base.to_bool(value)


class RedfishFencing(base.FencingDriver):
    description = ('Redfish ComputerSystem.Reset (ForceOff/On) with '
                   'PowerState polling, through sushy.')

    PARAMS = {
        'address': base.Param(
            'Redfish service URL, e.g. https://bmc.example.com (the '
            'scheme is required)', required=True),
        'system_id': base.Param(
            'System identity: a path like /redfish/v1/Systems/1 or the id '
            '"1"; default: the only system of the BMC'),
        'username': base.Param('Redfish user name', required=True),
        'password': base.Param('Redfish password', required=True,
                               secret=True),
        'verify': base.Param('Verify the BMC TLS certificate',
                             convert=_verify_value, default=True),
        'ca_file': base.Param('CA bundle (file or directory) used to verify '
                              'the BMC certificate'),
        'client_cert': base.Param('Client certificate file (PEM) for '
                                  'mutual TLS'),
        'client_key': base.Param('Private key of client_cert, if not in the '
                                 'same file'),
        'auth_type': base.Param('Redfish authentication: session, basic, or '
                                'auto (session, falling back to basic)',
                                default='auto',
                                choices=('auto', 'session', 'basic')),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._root = None
        self._system = None
        self._control: ConnectorControl | None = None
        self._conn_lock = threading.Lock()

    def describe_target(self) -> str:
        return 'redfish %s%s' % (
            self.params.get('address'),
            ' system %s' % self.params['system_id']
            if self.params.get('system_id') else '')

    def validate(self) -> None:
        super().validate()
        address = self.params['address']
        if not address.startswith(('http://', 'https://')):
            self._fail("parameter 'address': %r needs a scheme (https://...)"
                       % address)
        if self.params.get('client_key') and not self.params.get(
                'client_cert'):
            self._fail("parameter 'client_key' needs 'client_cert'")
        if self.params.get('ca_file') and not self.params['verify']:
            self._fail("parameters 'ca_file' and 'verify: false' contradict "
                       "each other")

    # -- connection -----------------------------------------------------------

    def _connect(self, deadline: float):
        # sushy is imported on first use; two hosts validated or fenced
        # in parallel threads must not import it at once (its modules
        # import each other, and a second thread would see one of them
        # half-initialised). The modules read later (exceptions, the
        # resources' constants) are imported here too, whole, so that no
        # later import in another thread finds one of them half-done.
        with _SUSHY_IMPORT:
            import sushy
            from sushy import connector
            from sushy import exceptions  # noqa: F401
            from sushy.resources import constants  # noqa: F401

        verify: Any = self.params['verify']
        if verify and self.params.get('ca_file'):
            verify = self.params['ca_file']
        timeout = max(1.0, min(self.timeout, self.remaining(deadline)))
        conn = connector.Connector(
            self.params['address'], verify=verify,
            default_request_timeout=timeout,
            connect_timeout=min(timeout, 10.0),
            # One attempt per call: the chain does the retrying, within
            # its deadline.
            server_side_retries=1, server_side_retries_delay=1)
        cert = self.params.get('client_cert')
        if cert:
            ConnectorControl(conn).use_client_cert(
                (cert, self.params['client_key'])
                if self.params.get('client_key') else cert)
        auth_cls = {'auto': sushy.auth.SessionOrBasicAuth,
                    'session': sushy.auth.SessionAuth,
                    'basic': sushy.auth.BasicAuth}[self.params['auth_type']]
        auth = auth_cls(username=self.params['username'],
                        password=self.params['password'])
        root = sushy.Sushy(self.params['address'], auth=auth,
                           connector=conn, verify=verify)
        system = root.get_system(self._system_path())
        return root, system, ConnectorControl(conn)

    def _system_path(self) -> str | None:
        system_id = self.params.get('system_id')
        if not system_id or system_id.startswith('/'):
            return system_id
        return '/redfish/v1/Systems/%s' % system_id

    def _with_system(self, deadline: float, what: str, fn,
                     raw_http: bool = False):
        """Run fn(system), connecting (or reconnecting once) as needed.

        :param raw_http: let sushy's HTTPError through (the caller handles
            the vendor answers); otherwise it becomes a DeviceError.
        """
        from sushy import exceptions as sushy_exc

        for attempt in (1, 2):
            cached = False
            try:
                with self._conn_lock:
                    cached = self._system is not None
                    if not cached:
                        self._root, self._system, self._control = (
                            self._connect(deadline))
                    system = self._system
                    # The session outlives one call; bound each request by
                    # what is left of this call's time.
                    self._control.bound_requests(
                        max(1.0, self.remaining(deadline)))
                return fn(system)
            except sushy_exc.AccessError as exc:
                self._drop()
                if attempt == 1 and cached:
                    # The BMC dropped our session: log in once more.
                    continue
                raise base.AuthError(self, 'BMC rejected user %r for %s '
                                     '(HTTP %s)' % (self.params['username'],
                                                    what, exc.status_code)
                                     ) from None
            except sushy_exc.ConnectionError as exc:
                self._drop()
                raise self._connection_error(exc, what) from None
            except sushy_exc.ResourceNotFoundError:
                self._drop()
                raise base.UnknownAddressError(
                    self, 'no system %s at this BMC' % (
                        self._system_path() or '(default)')) from None
            except sushy_exc.UnknownDefaultError:
                self._drop()
                raise base.DeviceError(
                    self, 'the BMC has several systems (or none): set '
                    'system_id') from None
            except sushy_exc.HTTPError as exc:
                if raw_http:
                    raise
                raise base.DeviceError(self, '%s failed: HTTP %s %s' % (
                    what, exc.status_code, exc.detail or '')) from None
            except sushy_exc.SushyError as exc:
                self._drop()
                raise base.DeviceError(self, '%s failed: %s'
                                       % (what, exc)) from None

    def _connection_error(self, exc: Exception, what: str) -> base.DeviceError:
        text = str(exc)
        low = text.lower()
        if ('name or service not known' in low or 'nodename nor servname'
                in low or 'failed to resolve' in low
                or 'name resolution' in low):
            return base.UnknownAddressError(self, 'BMC address does not '
                                            'resolve')
        if 'timed out' in low or 'timeout' in low:
            return base.DeviceTimeoutError(self, 'no answer to %s: %s'
                                           % (what, _short(text)))
        if 'certificate' in low or 'ssl' in low:
            return base.DeviceError(self, 'TLS failed for %s (check ca_file '
                                    'or verify): %s' % (what, _short(text)))
        return base.UnreachableError(self, 'cannot connect for %s: %s'
                                     % (what, _short(text)))

    def _drop(self) -> None:
        with self._conn_lock:
            self._root = self._system = None

    def stop(self) -> None:
        self._drop()

    # -- hardware health ---------------------------------------------------------

    supports_health = True

    def health(self, timeout: float | None = None
               ) -> tuple[model.HardwareCondition, ...]:
        """The hardware conditions the BMC reports now (none: all OK)."""
        return self._with_system(self._deadline(timeout), 'health status',
                                 redfish_health.read)

    # -- power ------------------------------------------------------------------

    def _read_power(self, deadline: float) -> base.PowerState:
        from sushy.resources import constants

        def read(system):
            system.refresh(force=True)
            return system.power_state

        state = self._with_system(deadline, 'power status', read)
        if state == constants.PowerState.OFF:
            return base.PowerState.OFF
        if state == constants.PowerState.ON:
            return base.PowerState.ON
        return base.PowerState.UNKNOWN

    def _request_power(self, state: base.PowerState, deadline: float
                       ) -> None:
        from sushy import exceptions as sushy_exc
        from sushy.resources import constants

        reset = (constants.ResetType.FORCE_OFF if state is base.PowerState.OFF
                 else constants.ResetType.ON)
        what = 'power %s' % state.value
        while True:
            try:
                self._with_system(deadline, what,
                                  lambda system: system.reset_system(reset),
                                  raw_http=True)
                return
            except sushy_exc.HTTPError as exc:
                if exc.status_code not in _REFUSED:
                    raise base.DeviceError(self, '%s refused: HTTP %s %s' % (
                        what, exc.status_code, exc.detail or '')) from None
                refusal = exc
            # 400/409: maybe already there, maybe still settling.
            if self._read_power(deadline) is state:
                LOG.info('host %s device %s: %s refused (HTTP %s) but it is '
                         'already %s', self.host, self.device, what,
                         refusal.status_code, state.value)
                return
            if state is base.PowerState.OFF or self.remaining(deadline) <= 0:
                raise base.DeviceError(self, '%s refused: HTTP %s %s' % (
                    what, refusal.status_code, refusal.detail or ''))
            LOG.info('host %s device %s: power on refused (HTTP %s), '
                     'retrying', self.host, self.device,
                     refusal.status_code)
            self.clock.sleep(min(self.poll_interval,
                                 self.remaining(deadline)))


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + '...'


class ConnectorControl:
    """What sushy's Connector offers no public interface for, in one place.

    sushy takes a client certificate only through its requests session,
    and a request timeout only when the connector is made, while one
    session serves many calls, each with its own deadline. Both reach into
    the connector here and nowhere else; tests/unit/test_redfish_sushy.py
    pins that sushy still honours them, so a sushy release that changes
    its internals fails a test instead of silently ignoring a setting.
    """

    def __init__(self, connector: Any):
        self.connector = connector

    def use_client_cert(self, cert: str | tuple[str, str]) -> None:
        """Present ``cert`` (file, or (cert, key) files) to the BMC."""
        self.connector._session.cert = cert

    def bound_requests(self, seconds: float) -> None:
        """Give up each further request after ``seconds``."""
        self.connector._default_request_timeout = seconds
