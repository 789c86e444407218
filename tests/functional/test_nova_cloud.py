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

"""NovaCloud against a real nova (and a real keystone): no mocks.

Also home of the helpers the plan tests share: a config file pointing at
the peers, and a ConfigOpts parsed from it.
"""

import datetime
import json
import os
import tempfile
import threading
import time
from urllib import parse
from wsgiref import simple_server

from oslo_config import cfg
import testtools

from instanceha.adapters import nova
from instanceha import conf as ha_conf
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions
from tests.functional import peers


def conf_text(nova_peer, keystone=None, password=None, extra=''):
    """instanceha.conf text reaching nova_peer (through keystone if set)."""
    if keystone is None:
        auth = ('auth_type = none\nendpoint_override = %s\n'
                % nova_peer.endpoint)
    else:
        auth = ('auth_type = password\nauth_url = %s\nusername = %s\n'
                'password = %s\nproject_name = %s\nuser_domain_name = %s\n'
                'project_domain_name = %s\nregion_name = %s\n'
                'valid_interfaces = public\n' % (
                    keystone.auth_url, keystone.admin_user,
                    password or keystone.admin_password,
                    keystone.admin_project, keystone.user_domain,
                    keystone.project_domain, keystone.region))
    text = '[nova]\ntimeout = 30\n' + auth
    # Merge extra sections: a [nova] block in extra adds to ours.
    if extra.startswith('[nova]\n'):
        text += extra[len('[nova]\n'):]
    else:
        text += extra
    return text


def write_conf(test, text):
    fd, path = tempfile.mkstemp(suffix='.conf', prefix='instanceha-')
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    test.addCleanup(os.unlink, path)
    return path


def load_conf(path):
    conf = cfg.ConfigOpts()
    ha_conf.parse_args(['--config-file', path], conf,
                       default_config_files=[])
    ha_conf.validate(conf)
    return conf


def make_cloud(test, nova_peer, keystone=None, password=None, extra=''):
    path = write_conf(test, conf_text(nova_peer, keystone, password, extra))
    return nova.NovaCloud(load_conf(path))


class TestNovaCloudStub(testtools.TestCase):
    """Nova with keystone stubbed out (every caller is an admin)."""

    def setUp(self):
        super().setUp()
        self.peer = self.useFixture(peers.NovaPeer(hosts=3))
        self.cloud = make_cloud(self, self.peer)

    def test_snapshot_reads_services_servers_aggregates_flavor_specs(self):
        nova_client = self.peer.client()
        flavor = self.peer.create_flavor(
            'tagged', extra_specs={'evacuable': 'true'}, client=nova_client)
        self.peer.create_aggregate('rack1', hosts=['host1', 'host2'],
                                   metadata={'max_unhealthy': '1'},
                                   client=nova_client)
        booted = self.peer.create_servers(1, host='host1', flavor=flavor,
                                          name='db', client=nova_client)
        self.cloud.api_calls = 0
        snap = self.cloud.snapshot()
        self.assertEqual(3, self.cloud.api_calls)
        self.assertEqual(['host1', 'host2', 'host3'],
                         sorted(s.host for s in snap.services))
        svc = snap.service('host1')
        self.assertEqual((model.UP, model.ENABLED), (svc.state, svc.status))
        # uuid service ids (2.53+) are what PUT os-services/{id} needs.
        self.assertEqual(36, len(svc.id))
        (srv,) = snap.servers_on('host1')
        self.assertEqual(booted[0].id, srv.id)
        self.assertEqual('db-0', srv.name)
        self.assertEqual('ACTIVE', srv.status)
        self.assertEqual('tagged', srv.flavor.name)
        self.assertEqual({'evacuable': 'true'}, dict(srv.flavor.extra_specs))
        self.assertEqual(peers.nova_peer.IMAGE_ID, srv.image_id)
        (agg,) = snap.aggregates
        self.assertEqual(('rack1', frozenset({'host1', 'host2'})),
                         (agg.name, agg.hosts))
        self.assertEqual({'max_unhealthy': '1'}, dict(agg.metadata))
        self.assertEqual({}, dict(snap.images))
        # Nova's Date header was read (same machine: no skew).
        self.assertEqual(0.0, snap.clock_skew)

    def test_services_read_is_one_call_for_the_compute_services(self):
        self.cloud.api_calls = 0
        read = self.cloud.read_services()
        self.assertEqual(1, self.cloud.api_calls)
        # Only nova-compute: the peer's conductor and scheduler are
        # services too.
        every = self.peer.client().services.list()
        self.assertGreater(len(every), 3)
        self.assertEqual(
            sorted((s.id, s.host) for s in every
                   if s.binary == 'nova-compute'),
            sorted((s.id, s.host) for s in read.services))
        svc = read.service('host2')
        self.assertEqual((model.UP, model.ENABLED, False, None),
                         (svc.state, svc.status, svc.forced_down,
                          svc.disabled_reason))
        self.assertEqual((), read.servers)
        self.assertEqual(0.0, read.clock_skew)

    def test_images_through_nova_proxy_carry_properties(self):
        # The test nova has no Glance endpoint, only its in-process fake
        # behind the image proxy: set a property there, read it back.
        self.cloud.image_proxy.post(
            '/images/%s/metadata' % peers.nova_peer.IMAGE_ID,
            json={'metadata': {'evacuable': 'true'}})
        self.assertEqual('nova', self.cloud.image_source())
        self.cloud.api_calls = 0
        snap = self.cloud.snapshot(images=True)
        self.assertEqual(4, self.cloud.api_calls)
        image = snap.images[peers.nova_peer.IMAGE_ID]
        self.assertEqual('true', image.properties['evacuable'])
        self.assertEqual((), image.tags)

    def test_servers_are_paginated(self):
        self.peer.create_servers(5, name='p')
        self.cloud.conf.set_override('page_size', 2, group='nova')
        self.cloud.api_calls = 0
        servers = self.cloud.list_servers()
        self.assertEqual(5, len(servers))
        self.assertEqual(5, len({s.id for s in servers}))
        # 2 + 2 + 1, and nova cannot know the last page is the last.
        self.assertEqual(3, self.cloud.api_calls)

    def test_stopped_servers_one_listing_of_both_statuses(self):
        # What the instance failure loop reads every poll: SHUTOFF and
        # VERIFY_RESIZE servers in one request (Nova takes the status
        # filter repeated), both kept on every page.
        client = self.peer.client()
        running, stopped, resized, stopped2 = self.peer.create_servers(
            4, host='host1', name='st', client=client)
        for srv in (stopped, stopped2):
            client.servers.stop(srv.id)
            self.peer.wait_for_server(srv.id, 'SHUTOFF', client=client)
        self.cloud.cold_migrate(resized.id)
        self.peer.wait_for_server(resized.id, 'VERIFY_RESIZE', client=client)
        self.cloud.api_calls = 0
        found = self.cloud.stopped_servers()
        self.assertEqual(1, self.cloud.api_calls)
        self.assertEqual(
            sorted([(stopped.id, 'SHUTOFF'), (stopped2.id, 'SHUTOFF'),
                    (resized.id, 'VERIFY_RESIZE')]),
            sorted((s.id, s.status) for s in found))
        self.assertNotIn(running.id, {s.id for s in found})
        # Paged: the next links keep both statuses.
        self.cloud.conf.set_override('page_size', 1, group='nova')
        self.cloud.api_calls = 0
        paged = self.cloud.stopped_servers()
        self.assertEqual(sorted(s.id for s in found),
                         sorted(s.id for s in paged))
        self.assertEqual(4, self.cloud.api_calls)  # 1 + 1 + 1 + empty

    def test_stopped_servers_changes_since(self):
        # The instance failure loop's read between two full listings:
        # every server Nova changed since then, whatever its status (one
        # that left SHUTOFF too), deleted ones with the status DELETED;
        # never the servers nobody touched.
        client = self.peer.client()
        started, deleted, tagged, stopped, untouched = \
            self.peer.create_servers(5, host='host1', name='cs',
                                     client=client)
        for srv in (started, deleted, tagged):
            client.servers.stop(srv.id)
            self.peer.wait_for_server(srv.id, 'SHUTOFF', client=client)
        # changes-since has whole seconds, compared with >=.
        time.sleep(2.0)
        since = datetime.datetime.now(datetime.timezone.utc)
        client.servers.start(started.id)
        self.peer.wait_for_server(started.id, 'ACTIVE', client=client)
        client.servers.delete(deleted.id)
        client.servers.stop(stopped.id)
        self.peer.wait_for_server(stopped.id, 'SHUTOFF', client=client)
        self.cloud.set_server_metadata(tagged.id, 'instanceha:failure',
                                       'restarts=1')
        deadline = time.monotonic() + 60
        while any(s.id == deleted.id for s in client.servers.list()):
            self.assertLess(time.monotonic(), deadline, 'not deleted')
            time.sleep(0.5)
        self.cloud.api_calls = 0
        found = {s.id: s for s in self.cloud.stopped_servers(since)}
        self.assertEqual(1, self.cloud.api_calls)
        self.assertEqual('ACTIVE', found[started.id].status)
        self.assertEqual('DELETED', found[deleted.id].status)
        self.assertEqual('SHUTOFF', found[stopped.id].status)
        self.assertNotIn(untouched.id, found)
        # A metadata write alone is a change too: the record the loop
        # writes on a server that stays SHUTOFF is listed back.
        self.assertEqual('restarts=1',
                         found[tagged.id].metadata['instanceha:failure'])
        self.assertEqual({started.id, deleted.id, stopped.id, tagged.id},
                         set(found))

    def test_locked_servers_one_listing_with_their_reasons(self):
        # What the sweep of our left-behind locks reads: Nova's locked
        # filter (2.73+), every tenant, each server's lock reason.
        client = self.peer.client()
        free, ours, users = self.peer.create_servers(
            3, host='host1', name='lk', client=client)
        self.cloud.set_server_lock(ours.id, True, reason=(
            reasons.Lock('host9', 'SHUTOFF').render()))
        self.cloud.set_server_lock(users.id, True)
        self.cloud.api_calls = 0
        found = {s.id: s for s in self.cloud.locked_servers()}
        self.assertEqual(1, self.cloud.api_calls)
        self.assertEqual(
            {ours.id: 'instanceha: evacuating from host9 (was SHUTOFF)',
             users.id: None},
            {k: s.locked_reason for k, s in found.items()})
        self.assertEqual(reasons.Lock('host9', 'SHUTOFF'),
                         reasons.of_lock(found[ours.id]).lock)
        self.assertEqual(reasons.Kind.NOBODY,
                         reasons.of_lock(found[users.id]).kind)

    def test_recovery_calls_round_trip(self):
        (srv,) = self.peer.create_servers(1, host='host1')
        svc = self.cloud.snapshot().service('host1')
        self.peer.control.kill('host1')
        self.peer.wait_for_service('host1', 'down')
        marker = marker_mod.Marker(states.HostState.FENCED,
                                   datetime.datetime.now(
                                       datetime.timezone.utc)).render()
        updated = self.cloud.update_service(
            svc, status=model.DISABLED, disabled_reason=marker,
            forced_down=True)
        self.assertEqual((model.DISABLED, marker, True),
                         (updated.status, updated.disabled_reason,
                          updated.forced_down))
        self.assertEqual(states.HostState.FENCED,
                         reasons.read(updated.disabled_reason).marker.state)

        self.cloud.set_server_lock(srv.id, True, reason='instanceha')
        self.assertTrue(self.cloud.get_server(srv.id).locked)
        before = datetime.datetime.now(datetime.timezone.utc)
        self.cloud.evacuate(srv.id)
        self.peer.wait_for_server(srv.id, 'ACTIVE')
        moved = self.cloud.get_server(srv.id)
        self.assertNotEqual('host1', moved.host)
        migs = self.cloud.migrations(server_id=srv.id)
        self.assertEqual(1, len(migs))
        self.assertEqual(('host1', moved.host, 'evacuation'),
                         (migs[0].source_host, migs[0].dest_host,
                          migs[0].migration_type))
        self.assertEqual(migs, self.cloud.migrations(source_host='host1'))
        snap = self.cloud.snapshot(
            migrations_since=before - datetime.timedelta(seconds=5))
        self.assertEqual([srv.id], [m.server_id for m in snap.migrations])

        self.cloud.set_server_lock(srv.id, False)
        self.assertFalse(self.cloud.get_server(srv.id).locked)
        self.cloud.reset_server_state(srv.id, 'error')
        self.assertEqual('ERROR', self.cloud.get_server(srv.id).status)
        self.cloud.reset_server_state(srv.id, 'active')
        self.cloud.stop_server(srv.id)
        self.peer.wait_for_server(srv.id, 'SHUTOFF')

        # Nova refuses to clear forced_down while an evacuation record
        # from the host is still 'done' (the recovery workflow must wait
        # for the host to come back and clean up: 'completed').
        exc = self.assertRaises(exceptions.CloudError,
                                self.cloud.update_service, updated,
                                forced_down=False)
        self.assertEqual(400, exc.status)
        self.assertIn('evacuation migration records', str(exc))
        self.peer.control.revive('host1')
        peers.base.wait_until(
            lambda: self.cloud.migrations(server_id=srv.id)[0].status
            == 'completed', 60, interval=0.5, what='migration completed')
        back = self.cloud.update_service(updated, status=model.ENABLED,
                                         forced_down=False)
        self.assertEqual((model.ENABLED, None, False),
                         (back.status, back.disabled_reason,
                          back.forced_down))

    def test_forced_down_service_keeps_reporting(self):
        # What the hand-back relies on (Steps._step_waiting_up): Nova
        # stamps a forced-down service's updated_at with nova-compute's
        # reports (its DB servicegroup driver reports regardless of
        # forced_down) while it says the service is down; and it stamps
        # our own write too (model.OWN_WRITE).
        svc = self.cloud.snapshot().service('host3')
        before = datetime.datetime.now(datetime.timezone.utc)
        self.cloud.update_service(svc, forced_down=True)
        first = self.cloud.snapshot().service('host3')
        self.assertEqual((model.DOWN, True), (first.state, first.forced_down))
        self.assertGreaterEqual(
            first.updated_at, before - datetime.timedelta(seconds=1))

        def reported():
            now = self.cloud.snapshot().service('host3')
            return now.forced_down and now.updated_at > first.updated_at
        peers.base.wait_until(reported, 6 * self.peer.report_interval,
                              interval=0.5,
                              what='a report of host3 while forced down')
        self.assertEqual(model.DOWN,
                         self.cloud.snapshot().service('host3').state)

    def test_failures_carry_nova_request_id(self):
        exc = self.assertRaises(exceptions.CloudError,
                                self.cloud.get_server,
                                '00000000-0000-0000-0000-000000000000')
        self.assertEqual(404, exc.status)
        self.assertTrue(exc.request_id.startswith('req-'), exc.request_id)
        self.assertIn('get server 00000000-0000-0000-0000-000000000000: '
                      'HTTP 404', str(exc))
        self.assertIn(exc.request_id, str(exc))

    def test_evacuate_of_server_on_live_host_is_refused_clearly(self):
        (srv,) = self.peer.create_servers(1, host='host2')
        exc = self.assertRaises(exceptions.CloudError, self.cloud.evacuate,
                                srv.id)
        self.assertIn(exc.status, (400, 409))
        self.assertIn('evacuate server %s' % srv.id, str(exc))
        self.assertIsNotNone(exc.request_id)

    def test_a_requested_host_is_validated_by_the_scheduler(self):
        # Microversion 2.94 evacuate has no force: a named host is checked
        # by Nova's scheduler. The simulator models the same refusals
        # (tests/scenarios/test_sim.py); this pins them on real Nova.
        first, second = self.peer.create_servers(2, host='host1')
        self.peer.control.kill('host1')
        self.peer.wait_for_service('host1', 'down')
        snap = self.cloud.snapshot()
        self.assertEqual({1}, {s.flavor.vcpus for s in
                               snap.servers_on('host1')})
        self.cloud.update_service(snap.service('host1'), forced_down=True)
        self.cloud.update_service(snap.service('host2'),
                                  status=model.DISABLED,
                                  disabled_reason='test: not a target')
        for host, status in (('nope', 404), ('host1', 400)):
            exc = self.assertRaises(exceptions.CloudError,
                                    self.cloud.evacuate, first.id, host=host)
            self.assertEqual(status, exc.status, str(exc))
        self.cloud.evacuate(first.id, host='host2')
        mig, server = self.peer.wait_for_evacuation(first.id,
                                                    expect=('error',))
        self.assertEqual(('error', 'host1'), (mig.status, server.to_dict()[
            'OS-EXT-SRV-ATTR:host']))
        self.cloud.evacuate(second.id, host='host3')
        mig, server = self.peer.wait_for_evacuation(second.id)
        self.assertEqual('host3', self.cloud.get_server(second.id).host)

    def test_unreachable_endpoint(self):
        conf = self.cloud.conf
        port = peers.base.free_port()
        conf.set_override('endpoint_override',
                          'http://127.0.0.1:%d/v2.1' % port, group='nova')
        cloud = nova.NovaCloud(conf)
        exc = self.assertRaises(exceptions.CloudError, cloud.snapshot)
        self.assertIn('list nova-compute services: cannot connect', str(exc))
        self.assertIn('127.0.0.1:%d' % port, str(exc))


class GlanceStandIn(object):
    """GET /v2/images with Glance's pagination, tags and properties.

    A stand-in, not Glance: no real Glance can run here (nova's test stack
    only has an in-process fake Glance, reachable through Nova's image
    proxy, which the other tests use; installing Glance into the shared
    environment would disturb nova's and keystone's pinned libraries).
    It exercises what only a Glance endpoint can: discovery through the
    real keystone catalog, Glance's "next" links and image tags.
    """

    def __init__(self, images):
        self.images = images
        self.tokens = []
        self.server = simple_server.make_server(
            '127.0.0.1', 0, self.app, handler_class=_QuietHandler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)

    def app(self, environ, start_response):
        self.tokens.append(environ.get('HTTP_X_AUTH_TOKEN'))
        query = dict(parse.parse_qsl(environ.get('QUERY_STRING', '')))
        if environ['PATH_INFO'] != '/v2/images':
            start_response('404 Not Found', [])
            return [b'']
        limit = int(query.get('limit', 25))
        hidden = query.get('os_hidden') == 'true'
        images = [i for i in self.images
                  if bool(i.get('os_hidden')) == hidden]
        ids = [i['id'] for i in images]
        start = ids.index(query['marker']) + 1 if 'marker' in query else 0
        page = images[start:start + limit]
        body = {'images': page, 'first': '/v2/images',
                'schema': '/v2/schemas/images'}
        if start + limit < len(images):
            query.update(marker=page[-1]['id'])
            body['next'] = '/v2/images?' + parse.urlencode(query)
        start_response('200 OK', [('Content-Type', 'application/json')])
        return [json.dumps(body).encode()]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


class TestNovaCloudKeystone(testtools.TestCase):
    """Real keystone tokens, validated by nova's auth_token middleware."""

    def setUp(self):
        super().setUp()
        self.keystone = self.useFixture(peers.KeystonePeer())
        self.peer = self.useFixture(peers.NovaPeer(hosts=2,
                                                   keystone=self.keystone))

    def test_auth_paths(self):
        # One stack, several checks: keystone + nova cost ~15 s to start.
        cloud = make_cloud(self, self.peer, self.keystone)
        self.assertEqual(2, len(cloud.snapshot().services))

        # A token keystone does not know (expired, revoked, or rotated
        # fernet keys all look like this to nova): nova answers 401, the
        # session re-authenticates and retries once; the cycle succeeds.
        old = cloud.session.get_token()
        cloud._auth.auth_ref._auth_token = 'gAAAAAbogus' + old[11:]
        cloud.api_calls = 0
        self.assertEqual(2, len(cloud.snapshot().services))
        self.assertEqual(3, cloud.api_calls)
        self.assertNotEqual(old, cloud.session.get_token())

        # Wrong password: a clear message, never the password.
        wrong = 'Wr0ng-pa55word-%s' % os.getpid()
        bad = make_cloud(self, self.peer, self.keystone, password=wrong)
        exc = self.assertRaises(exceptions.CloudError, bad.snapshot)
        msg = str(exc)
        self.assertIn('keystone refused the credentials of [nova]', msg)
        self.assertIn('user admin', msg)
        self.assertNotIn(wrong, msg)
        self.assertNotIn(self.keystone.admin_password, msg)

        # A member-only user: nova's policy refuses os-services.
        name, password = self.keystone.create_user()
        text = conf_text(self.peer, self.keystone).replace(
            'username = admin', 'username = %s' % name).replace(
            'password = %s' % self.keystone.admin_password,
            'password = %s' % password)
        member = nova.NovaCloud(load_conf(write_conf(self, text)))
        exc = self.assertRaises(exceptions.CloudError, member.snapshot)
        self.assertEqual(403, exc.status)
        self.assertIn('needs the admin role', str(exc))
        self.assertNotIn(password, str(exc))

        # A region without a compute endpoint: named in the message.
        other = make_cloud(self, self.peer, self.keystone,
                           extra='[nova]\nregion_name = Nowhere\n')
        exc = self.assertRaises(exceptions.CloudError, other.snapshot)
        self.assertIn('no compute endpoint in the catalog', str(exc))
        self.assertIn('Nowhere', str(exc))

    def test_image_tags_from_glance_found_in_the_catalog(self):
        images = [{'id': 'img-%d' % i, 'name': 'image %d' % i,
                   'status': 'active', 'tags': [], 'visibility': 'public',
                   'min_ram': 0}
                  for i in range(5)]
        images[1]['tags'] = ['evacuable']
        images[3]['evacuable'] = 'True'
        images[4]['os_hidden'] = True
        images[4]['tags'] = ['evacuable']
        with GlanceStandIn(images) as glance:
            admin = self.keystone.session()
            ks = self.keystone.auth_url
            svc = admin.post(ks + '/services', json={'service': {
                'type': 'image', 'name': 'glance'}}).json()['service']
            self.addCleanup(admin.delete, ks + '/services/' + svc['id'])
            admin.post(ks + '/endpoints', json={'endpoint': {
                'service_id': svc['id'], 'interface': 'public',
                'url': glance.url, 'region_id': self.keystone.region}})
            cloud = make_cloud(self, self.peer, self.keystone,
                               extra='[nova]\npage_size = 2\n')
            self.assertEqual('glance', cloud.image_source())
            cloud.api_calls = 0
            snap = cloud.snapshot(images=True)
            # services, servers, aggregates + 2 pages of visible images
            # + 1 of hidden ones.
            self.assertEqual(6, cloud.api_calls)
        self.assertEqual(['img-%d' % i for i in range(5)],
                         sorted(snap.images))
        self.assertEqual(('evacuable',), snap.images['img-1'].tags)
        self.assertEqual({'evacuable': 'True'},
                         dict(snap.images['img-3'].properties))
        self.assertEqual({}, dict(snap.images['img-0'].properties))
        self.assertEqual(('evacuable',), snap.images['img-4'].tags)
        self.assertTrue(all(glance.tokens), glance.tokens)
