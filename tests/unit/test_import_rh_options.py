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

"""The importer against Red Hat InstanceHA's configuration template.

``UPSTREAM_TEMPLATE`` is the option list of that project's ConfigMap
template (templates/instanceha/config/config.yaml of
openstack-k8s-operators/infra-operator), with the value the template
sets: when upstream adds an option, add it here, and the tests fail until
the importer converts it or names it as not converted.
"""

import os

import fixtures
import testtools
import yaml

from instanceha.cmd import manage_import
from instanceha.cmd import rh_options
from tests.unit import test_import_rh as helpers

UPSTREAM_TEMPLATE = {
    'DISABLED': 'false', 'LOGLEVEL': 'info', 'SSL_VERIFY': 'true',
    'POLL': '45', 'DELTA': '30', 'THRESHOLD': '50',
    'MAX_HOSTS_PER_CYCLE': '10', 'K8S_API_CHECK_INTERVAL': '15',
    'CHECK_HEARTBEAT': 'false', 'HEARTBEAT_TIMEOUT': '120',
    'HEARTBEAT_CLIFF_THRESHOLD': '50', 'HEARTBEAT_CLIFF_MAX_CYCLES': '3',
    'CHECK_KDUMP': 'false', 'KDUMP_TIMEOUT': '30',
    'FENCING_TIMEOUT': '30', 'WATCHDOG_TIMEOUT': '60', 'WORKERS': '4',
    'SMART_EVACUATION': 'false', 'ORCHESTRATED_RESTART': 'false',
    'DELAY': '0', 'EVACUATION_MAX_THREADS': '32', 'EVACUATION_RETRIES': '5',
    'EVACUATION_STAGGER': '0', 'EVACUATION_TIMEOUT': '300',
    'EVACUABLE_TAG': 'evacuable', 'TAGGED_IMAGES': 'true',
    'TAGGED_FLAVORS': 'true', 'TAGGED_AGGREGATES': 'true',
    'SKIP_SERVERS_WITH_NAME': '', 'RESERVED_HOSTS': 'false',
    'FORCE_RESERVED_HOST_EVACUATION': 'false', 'FORCE_ENABLE': 'false',
    'LEAVE_DISABLED': 'false', 'HASH_INTERVAL': '60',
}


def convert(**options):
    result = manage_import.Result()
    values = rh_options.convert(options, result)
    return result, values


def notes(result, kind):
    return {source: text for k, source, text in result.report if k == kind}


class TestUpstreamOptionList(testtools.TestCase):

    def test_every_upstream_option_is_known_with_its_default(self):
        self.assertEqual(34, len(UPSTREAM_TEMPLATE))
        self.assertEqual(sorted(UPSTREAM_TEMPLATE),
                         sorted(rh_options.OPTIONS))
        result = manage_import.Result()
        for name, text in UPSTREAM_TEMPLATE.items():
            if name == 'LOGLEVEL':
                text = text.upper()  # as upstream reads it
            self.assertEqual(
                rh_options.OPTIONS[name].default,
                rh_options.read_value(name, text, result), name)

    def test_every_option_is_accounted_for(self):
        result, _values = convert(**UPSTREAM_TEMPLATE)
        named = {source.split(' ')[0].rstrip(',')
                 for _kind, source, _text in result.report}
        named |= {n for _k, s, _t in result.report for n in s.split(', ')}
        self.assertEqual(set(), set(UPSTREAM_TEMPLATE) - named)
        # The template's values lose nothing.
        self.assertEqual({}, notes(result, 'unconverted'))

    def test_an_unknown_option_is_not_converted(self):
        result, _values = convert(NEW_UPSTREAM_OPTION='1', POLL='30')
        self.assertIn('NEW_UPSTREAM_OPTION', notes(result, 'unconverted'))

    def test_options_the_old_importer_dropped(self):
        result, values = convert(
            SKIP_SERVERS_WITH_NAME='test-*, scratch-*', WORKERS='100',
            ORCHESTRATED_RESTART='true', SMART_EVACUATION='true',
            EVACUATION_RETRIES='7', EVACUATION_MAX_THREADS='64')
        conf = result.conf
        self.assertEqual('test-*,scratch-*',
                         conf['filters']['skip_instance_names'])
        # Upstream's defaults where ours differ or have no cap.
        self.assertEqual('10', conf['gates']['max_hosts_per_cycle'])
        self.assertEqual('300', conf['evacuation']['timeout'])
        self.assertEqual('100', conf['DEFAULT']['workers'])
        self.assertEqual('7', conf['evacuation']['retries'])
        self.assertEqual('64', conf['evacuation']['max_in_flight'])
        self.assertEqual('orchestrated', conf['evacuation']['strategy'])
        self.assertEqual('false', conf['DEFAULT']['smart_evacuation'])
        self.assertEqual('instanceha:restart_priority',
                         conf['evacuation']['priority_key'])
        self.assertIn('groups are not supported',
                      notes(result, 'changed')['ORCHESTRATED_RESTART'])
        result, values = convert(WORKERS='150')
        self.assertEqual(100, values['WORKERS'])

    def test_lost_behaviour_is_named_with_what_to_do(self):
        result, _values = convert(DELAY='20', EVACUATION_STAGGER='5',
                                  CHECK_HEARTBEAT='yes', LOGLEVEL='loud')
        lost = notes(result, 'unconverted')
        self.assertEqual(['CHECK_HEARTBEAT', 'DELAY', 'EVACUATION_STAGGER',
                          'LOGLEVEL'], sorted(lost))
        self.assertIn('lower max_in_flight', lost['EVACUATION_STAGGER'])
        self.assertIn('instanceha-heartbeat-agent', lost['CHECK_HEARTBEAT'])
        self.assertEqual('120', result.conf['heartbeat']['timeout'])

    def test_log_level_and_ssl_verify(self):
        result, _values = convert(LOGLEVEL='warning', SSL_VERIFY='false')
        self.assertIn('instanceha=WARNING',
                      result.conf['DEFAULT']['default_log_levels'])
        # SSL_VERIFY is about the BMCs only: Nova's certificate is checked.
        self.assertNotIn('nova', result.conf)


class TestTemplateImport(testtools.TestCase):

    def test_upstream_template_imports_and_validates(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        config = os.path.join(tmp, 'config.yaml')
        with open(config, 'w') as f:
            yaml.safe_dump({'config': dict(
                UPSTREAM_TEMPLATE, SKIP_SERVERS_WITH_NAME='canary-*')}, f)
        fencing = os.path.join(tmp, 'fencing.yaml')
        with open(fencing, 'w') as f:
            f.write('FencingConfig:\n  compute-0:\n    agent: redfish\n'
                    '    ipaddr: 192.0.2.30\n    login: admin\n'
                    '    passwd: x-Redfish-Secret\n    tls: "true"\n')
        out = os.path.join(tmp, 'out')
        res = helpers.import_rh(out, config=config, fencing=fencing,
                                allow_unconverted=False)
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        self.assertNotIn('NOT CONVERTED', res.stdout)
        # A Redfish entry without a port: 443, as upstream.
        with open(os.path.join(out, 'fencing.yaml')) as f:
            self.assertIn('address: https://192.0.2.30:443', f.read())
        res = helpers.manage(
            '--config-file', os.path.join(out, 'instanceha.conf'),
            '--config-file', os.path.join(out, 'secrets.conf'),
            'config', 'validate', '--strict')
        self.assertEqual(0, res.returncode, res.stderr)

    def test_application_credential_clouds_yaml(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        clouds = os.path.join(tmp, 'clouds.yaml')
        with open(clouds, 'w') as f:
            f.write('clouds:\n  overcloud:\n'
                    '    auth_type: v3applicationcredential\n'
                    '    region_name: regionOne\n    auth:\n'
                    '      auth_url: https://keystone.example.com/v3\n'
                    '      application_credential_id: 4d2c0ffee\n')
        secure = os.path.join(tmp, 'secure.yaml')
        with open(secure, 'w') as f:
            f.write('clouds:\n  overcloud:\n    auth:\n'
                    '      application_credential_secret: Ac-S3cret-1\n')
        out = os.path.join(tmp, 'out')
        res = helpers.manage(
            'import', 'rh-instanceha', '--config',
            os.path.join(helpers.SAMPLES, 'config.yaml'), '--fencing',
            os.path.join(helpers.SAMPLES, 'fencing.yaml'), '--clouds',
            clouds, '--secure', secure, '--out', out, '--allow-unconverted')
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertNotIn('Ac-S3cret-1', res.stdout + res.stderr)
        with open(os.path.join(out, 'instanceha.conf')) as f:
            conf = f.read()
        self.assertIn('auth_type = v3applicationcredential', conf)
        self.assertIn('application_credential_id = 4d2c0ffee', conf)
        self.assertNotIn('Ac-S3cret-1', conf)
        with open(os.path.join(out, 'secrets.conf')) as f:
            self.assertIn('application_credential_secret = Ac-S3cret-1',
                          f.read())
        res = helpers.manage(
            '--config-file', os.path.join(out, 'instanceha.conf'),
            '--config-file', os.path.join(out, 'secrets.conf'),
            'config', 'validate', '--strict')
        self.assertEqual(0, res.returncode, res.stderr)
