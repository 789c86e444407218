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

"""The HTTP session's environment settings are read once per endpoint."""

from unittest import mock

import fixtures
import requests
import testtools

from instanceha.adapters import nova

NOVA = 'http://nova.example:8774/v2.1/os-services?binary=nova-compute'
KEYSTONE = 'https://keystone.example:5000/v3/auth/tokens'
LOCAL = 'http://127.0.0.1:8774/v2.1/servers/detail'


class TestEnvironmentOnce(testtools.TestCase):

    def setUp(self):
        super().setUp()
        for name, value in (('http_proxy', 'http://proxy.example:3128'),
                            ('https_proxy', 'http://proxy.example:3129'),
                            ('no_proxy', '127.0.0.1,localhost'),
                            ('REQUESTS_CA_BUNDLE', '/etc/ssl/ours.pem')):
            self.useFixture(fixtures.EnvironmentVariable(name, value))
        self.plain = requests.Session()
        self.http = requests.Session()
        nova._environment_once(self.http)

    def merge(self, session, url, **kwargs):
        args = dict(proxies={}, stream=None, verify=True, cert=None)
        args.update(kwargs)
        return session.merge_environment_settings(url, **args)

    def test_same_settings_as_requests_for_each_endpoint(self):
        for url in (NOVA, KEYSTONE, LOCAL):
            for verify in (True, False, '/etc/ssl/theirs.pem'):
                self.assertEqual(
                    self.merge(self.plain, url, verify=verify),
                    self.merge(self.http, url, verify=verify), url)
        self.assertEqual({'http': 'http://proxy.example:3128',
                          'https': 'http://proxy.example:3129',
                          'no': '127.0.0.1,localhost'},
                         self.merge(self.http, NOVA)['proxies'])
        self.assertEqual({}, self.merge(self.http, LOCAL)['proxies'])
        self.assertEqual('/etc/ssl/ours.pem',
                         self.merge(self.http, KEYSTONE)['verify'])

    def test_environment_read_once_per_endpoint(self):
        with mock.patch('requests.sessions.get_environ_proxies',
                        wraps=requests.utils.get_environ_proxies) as read:
            for _ in range(3):
                self.merge(self.http, NOVA)
                self.merge(self.http, NOVA.replace('os-services',
                                                   'servers/detail'))
                self.merge(self.http, KEYSTONE)
        self.assertEqual(2, read.call_count)  # nova, keystone

    def test_call_settings_are_part_of_the_key(self):
        given = self.merge(self.http, NOVA, proxies={'http': 'http://p2:1'},
                           verify=False, cert=('c.pem', 'k.pem'))
        self.assertEqual('http://p2:1', given['proxies']['http'])
        self.assertEqual((False, ('c.pem', 'k.pem')),
                         (given['verify'], given['cert']))
        plain = self.merge(self.http, NOVA)
        self.assertEqual('http://proxy.example:3128',
                         plain['proxies']['http'])
        self.assertEqual('/etc/ssl/ours.pem', plain['verify'])

    def test_answers_are_copies(self):
        self.merge(self.http, NOVA)['proxies']['http'] = 'changed'
        self.assertEqual('http://proxy.example:3128',
                         self.merge(self.http, NOVA)['proxies']['http'])

    def test_unhashable_setting_is_not_kept(self):
        with mock.patch('requests.sessions.get_environ_proxies',
                        wraps=requests.utils.get_environ_proxies) as read:
            for _ in range(2):
                self.merge(self.http, NOVA, cert=['c.pem', 'k.pem'])
        self.assertEqual(2, read.call_count)
