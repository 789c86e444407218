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

"""Nova JSON -> model values, and the adapter's configuration errors.

The HTTP side is tested against a real nova in
tests/functional/test_nova_cloud.py.
"""

import datetime
import socket
from unittest import mock

import testtools

from instanceha.adapters import nova
from instanceha.adapters import nova_answers as answers
from instanceha import exceptions
from tests.unit import test_decide as h

UTC = datetime.timezone.utc


class TestParsing(testtools.TestCase):

    def test_time_stamps(self):
        self.assertEqual(datetime.datetime(2026, 1, 2, 3, 4, 5, 600000,
                                           tzinfo=UTC),
                         answers.parse_time('2026-01-02T03:04:05.600000'))
        self.assertEqual(datetime.datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC),
                         answers.parse_time('2026-01-02T03:04:05+01:00'))
        self.assertEqual(datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                         answers.parse_time('2026-01-02T03:04:05Z'))
        for bad in (None, '', 'yesterday', 12, '2026-13-01T00:00:00'):
            self.assertIsNone(answers.parse_time(bad), bad)

    def test_malformed_service_time_keeps_raw_text(self):
        svc = answers.service({'id': 'u', 'host': 'h', 'state': 'up',
                               'status': 'enabled', 'updated_at': 'soon'})
        self.assertIsNone(svc.updated_at)
        self.assertEqual('soon', svc.updated_at_raw)
        svc = answers.service({'id': 'u', 'host': 'h', 'state': 'up',
                               'status': 'enabled', 'updated_at': None})
        self.assertEqual((None, None), (svc.updated_at, svc.updated_at_raw))

    def test_server_from_volume_and_embedded_flavor(self):
        srv = answers.server({
            'id': 's', 'name': 'n', 'status': 'SHUTOFF', 'image': '',
            'OS-EXT-SRV-ATTR:host': 'h1', 'locked': True,
            'tenant_id': 'p', 'metadata': {'k': 'v'},
            'flavor': {'original_name': 'gold',
                       'extra_specs': {'evacuable': 'true'}}})
        self.assertIsNone(srv.image_id)
        self.assertEqual(('h1', 'gold', {'evacuable': 'true'}, True),
                         (srv.host, srv.flavor.name,
                          dict(srv.flavor.extra_specs), srv.locked))

    def test_glance_image_properties(self):
        img = answers.glance_image({'id': 'i', 'name': 'n', 'tags': ['a'],
                                    'status': 'active', 'evacuable': 'true',
                                    'min_ram': 0})
        self.assertEqual(('a',), img.tags)
        self.assertEqual({'evacuable': 'true'}, dict(img.properties))


class TestConfiguration(testtools.TestCase):

    def test_missing_auth_type(self):
        exc = self.assertRaises(exceptions.ConfigurationError,
                                nova.NovaCloud, h.make_conf())
        self.assertIn('[nova] auth_type is not set', str(exc))

    def test_missing_auth_option_named_without_secrets(self):
        conf = h.make_conf(nova={'auth_type': 'password'})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                nova.NovaCloud, conf)
        self.assertIn('[nova] is missing auth option(s) auth_url', str(exc))

    def test_unknown_auth_type(self):
        conf = h.make_conf(nova={'auth_type': 'pasword'})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                nova.NovaCloud, conf)
        self.assertIn('[nova] auth_type', str(exc))

    def test_novaclient_pinned_to_2_94_on_our_session(self):
        conf = h.make_conf(nova={'auth_type': 'none',
                                 'endpoint_override': 'http://127.0.0.1:9'})
        cloud = nova.NovaCloud(conf)
        self.assertEqual('2.94', cloud.nova.api_version.get_string())
        self.assertEqual('2.35', cloud.image_proxy.api_version.get_string())
        # One session (one token) for every client.
        self.assertIs(cloud.session, cloud.compute.session)
        self.assertIs(cloud.session, cloud.image_proxy.session)
        self.assertEqual(['internal', 'public'], cloud.compute.interface)

    def test_unreachable_nova_is_unanswered_not_refused(self):
        # A bound port nobody listens on refuses connections: no status,
        # so the engine treats the call as unanswered (it may have been
        # carried out).
        sock = socket.socket()
        self.addCleanup(sock.close)
        sock.bind(('127.0.0.1', 0))
        url = 'http://127.0.0.1:%d' % sock.getsockname()[1]
        conf = h.make_conf(nova={'auth_type': 'none',
                                 'endpoint_override': url})
        cloud = nova.NovaCloud(conf)
        exc = self.assertRaises(exceptions.CloudError, cloud.evacuate, 'x')
        self.assertIsNone(exc.status)
        self.assertIn('evacuate server x: cannot connect', str(exc))
        self.assertEqual(1, cloud.api_calls)


class TestClockSkew(testtools.TestCase):
    """Nova's Date header -> how far our clock is ahead of Nova's.

    A bare object stands in for a response: only its headers are read
    (the functional tests run the real Nova, whose clock is ours).
    """

    def skew(self, date, sent):
        cloud = nova.NovaCloud.__new__(nova.NovaCloud)
        cloud.clock_skew = None
        resp = type('Resp', (), {'headers': {'Date': date} if date else {}})
        with mock.patch('time.time', return_value=sent):
            cloud._note_date(resp, sent)
        return cloud.clock_skew

    def test_date_header(self):
        # Nova says 12:00:00 (whole seconds); we say 12:05:00.5.
        noon = datetime.datetime(2026, 1, 1, 12, 0,
                                 tzinfo=datetime.timezone.utc).timestamp()
        self.assertEqual(300.0, self.skew('Thu, 01 Jan 2026 12:00:00 GMT',
                                          noon + 300.5))
        self.assertEqual(-120.0, self.skew('Thu, 01 Jan 2026 12:00:00 GMT',
                                           noon - 119.5))
        # Within the header's resolution: no skew.
        self.assertEqual(0.0, self.skew('Thu, 01 Jan 2026 12:00:00 GMT',
                                        noon + 0.9))

    def test_missing_or_malformed_date_keeps_unknown(self):
        self.assertIsNone(self.skew(None, 0))
        self.assertIsNone(self.skew('yesterday', 0))
