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

"""The production cloud port: Nova through python-novaclient.

This is the only module that imports novaclient and keystoneauth1.

* One keystoneauth session for the life of the object, built from the
  ``[nova]`` options (any auth plugin, TLS, region, interface, timeout),
  shared by every novaclient client below. A 401 makes keystoneauth
  invalidate the token, re-authenticate and retry once, so token expiry or
  revocation does not break the service.
* Compute API microversion pinned to 2.94: up to 2.94 an evacuated server
  keeps its power state; from 2.95 it always ends SHUTOFF.
* novaclient's managers make the single calls (get, evacuate, lock, stop,
  migrate, ...). Listings go through novaclient's HTTP client and follow
  Nova's ``next`` links: the managers drop those links, and without them a
  short page cannot be told from a page cut at Nova's own ``[api]
  max_limit`` (a missed server is an instance never evacuated). The
  services listing, read every ``services_interval``, is one GET through
  it too (no per-service objects). A change
  of a compute service (status, reason, forced_down) is one PUT, as Nova
  offers it, so the marker and forced_down are set together.
* A snapshot costs a fixed number of calls, whatever the number of hosts:
  services (1), servers (1 per ``page_size`` servers; or, when the engine
  names the hosts that need deciding, 1 per such host), aggregates (1,
  unless the engine has them cached), images (1 per page, only when
  asked), evacuation records (1 per page, only when asked). Flavor extra
  specs come embedded in each server (2.47+), never one call per flavor.
  ``api_calls`` counts requests made (a keystoneauth re-authentication
  retry is part of its request).
* Image tags and properties: Glance v2 (tags and properties) when the
  catalog has an image endpoint, else Nova's deprecated image proxy at
  microversion 2.35 (properties only: the proxy does not return tags).
  Nova's functional-test stack has no Glance endpoint, only an in-process
  fake behind that proxy, so the functional tests use the proxy.
* Every failure is a :class:`~instanceha.exceptions.CloudError` naming the
  call and carrying Nova's request id when Nova answered; no credential is
  ever in a message.
"""

import datetime
import email.utils
import logging
import threading
import time
from urllib import parse

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1.identity import base as ks_identity
from keystoneauth1 import loading as ks_loading
from keystoneauth1.loading import adapter as ks_adapter
from novaclient import api_versions
from novaclient import client as nova_client
from novaclient import exceptions as nova_exc
from oslo_config import cfg

from instanceha.adapters import nova_answers as answers
from instanceha.adapters import placement
from instanceha.engine import guard
from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: See the module docstring and TEAM.md: evacuations keep power state.
MICROVERSION = '2.94'
#: Last microversion with Nova's image proxy (removed in 2.36).
IMAGE_PROXY_MICROVERSION = '2.35'
#: Hypervisors listed at 2.87: from 2.88 the listing asks every compute
#: host for its uptime (one RPC each); 2.53+ names a node by its uuid.
NODES_MICROVERSION = '2.87'


def _bound_by_lease(http) -> None:
    """Bound every HTTP request's time-out by the caller's call budget.

    Inside a side effect the leadership guard allows
    (:func:`instanceha.engine.guard.call_budget`), a request may not
    outlive the proven lease: its time-out is cut to what is left.
    """
    send = http.request

    def request(method, url, **kwargs):
        budget = guard.call_budget()
        if budget is not None:
            budget = max(budget, 0.01)
            timeout = kwargs.get('timeout')
            if isinstance(timeout, tuple):
                kwargs['timeout'] = tuple(
                    budget if t is None else min(t, budget) for t in timeout)
            else:
                kwargs['timeout'] = (budget if timeout is None
                                     else min(timeout, budget))
        return send(method, url, **kwargs)
    http.request = request


#: Endpoints whose environment settings are kept at most.
_ENVIRONMENT_KEYS = 64


def _environment_once(http) -> None:
    """Read the process environment's HTTP settings once per endpoint.

    requests reads the proxy variables (``*_proxy``, ``no_proxy``) and
    the CA bundle variables again for every request, walking the whole
    environment several times: about a tenth of the CPU of a steady
    services read. A process's environment does not change from outside,
    so the answer for one scheme and host is kept and reused; the
    settings of the call itself (verify, cert, stream, proxies) are part
    of the key.
    """
    merge = http.merge_environment_settings
    found: dict = {}

    def merge_environment_settings(url, proxies, stream, verify, cert):
        split = parse.urlsplit(url)
        try:
            key = (split.scheme, split.netloc,
                   tuple(sorted((proxies or {}).items())), stream, verify,
                   cert)
            hash(key)
        except TypeError:  # a setting that cannot be a key: not kept
            return merge(url, proxies, stream, verify, cert)
        settings = found.get(key)
        if settings is None:
            settings = merge(url, dict(proxies or {}), stream, verify, cert)
            if len(found) >= _ENVIRONMENT_KEYS:
                found.clear()  # (a few endpoints in practice)
            found[key] = settings
        # Copies: requests may change what it is given.
        return dict(settings, proxies=dict(settings.get('proxies') or {}))
    http.merge_environment_settings = merge_environment_settings


def _iso(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime(
        '%Y-%m-%dT%H:%M:%SZ')


def _nova_message(exc: nova_exc.ClientException) -> str:
    """The text Nova gave with a refusal (novaclient parsed the body)."""
    message = getattr(exc, 'message', None)
    if not message or message == 'n/a':
        return type(exc).__name__
    return str(message)[:300]


class NovaCloud(ports.CloudPort):
    """:class:`ports.CloudPort` on a real Nova."""

    def __init__(self, conf: cfg.ConfigOpts):
        self.conf = conf
        self.api_calls = 0
        self._lock = threading.Lock()
        #: Seconds our clock is ahead of Nova's, from the Date header of
        #: its last answer (None until one carried it).
        self.clock_skew: float | None = None
        group = conf.nova
        try:
            self._auth = ks_loading.load_auth_from_conf_options(conf,
                                                                'nova')
        except ks_exc.MissingRequiredOptions as exc:
            names = ', '.join(o.dest for o in exc.options)
            raise exceptions.ConfigurationError(
                '[nova] is missing auth option(s) %s for auth_type %s'
                % (names, group.auth_type)) from None
        except ks_exc.NoMatchingPlugin as exc:
            raise exceptions.ConfigurationError(
                'invalid value for option [nova] auth_type: %s' % exc
            ) from None
        if self._auth is None:
            raise exceptions.ConfigurationError(
                'option [nova] auth_type is not set: instanceha needs '
                'credentials to reach Nova (e.g. auth_type = password)')
        self.session = ks_loading.load_session_from_conf_options(
            conf, 'nova', auth=self._auth)
        # Every answer passes here, whichever novaclient call made it.
        self.session.session.hooks['response'].append(self._on_response)
        _bound_by_lease(self.session.session)
        _environment_once(self.session.session)
        #: novaclient at the pinned microversion (its managers).
        self.nova = self._client(MICROVERSION)
        #: novaclient's HTTP client (a keystoneauth Adapter) for the calls
        #: its managers do not make in one request.
        self.compute = self.nova.client
        #: The same at 2.35, for Nova's image proxy (gone in 2.36).
        self.image_proxy = self._client(IMAGE_PROXY_MICROVERSION).client
        self._image_source: str | None = None
        self._nodes_client = None
        #: Placement, read through the same session.
        self.placement = placement.PlacementReader(
            self.session, conf, self.compute_nodes)

    def _client(self, version: str):
        """A novaclient client on our session with the [nova] options."""
        kwargs: dict = {}
        try:
            ks_adapter.process_conf_options(self.conf.nova, kwargs)
        except TypeError as exc:
            raise exceptions.ConfigurationError(
                'invalid [nova] adapter options: %s' % exc) from None
        # The major version is novaclient's own first argument.
        kwargs.pop('version', None)
        interface = kwargs.pop('interface', None)
        if interface:
            kwargs['endpoint_type'] = interface
        try:
            return nova_client.Client(
                api_versions.APIVersion(version), session=self.session,
                auth=self._auth, **kwargs)
        except nova_exc.UnsupportedVersion as exc:
            raise exceptions.ConfigurationError(
                'the installed python-novaclient cannot speak compute API '
                'microversion %s: %s' % (version, exc)) from None

    # -- plumbing ---------------------------------------------------------

    def _on_response(self, resp, *args, **kwargs) -> None:
        """Response hook of the session: note Nova's clock.

        Every HTTP answer passes here, whichever novaclient call made it;
        Nova's (they name the compute API version) carry the clock.
        """
        if 'compute' not in resp.headers.get('OpenStack-API-Version', ''):
            return
        elapsed = getattr(resp, 'elapsed', None)
        self._note_date(resp, time.time() - (
            elapsed.total_seconds() if elapsed else 0.0))

    def _note_date(self, resp, sent: float) -> None:
        """Measure our clock against Nova's from its Date header.

        The header has whole seconds (Nova's clock read between ``sent``
        and now, rounded down): a difference under a second is noise.
        """
        try:
            nova = email.utils.parsedate_to_datetime(
                resp.headers['Date']).timestamp()
        except (KeyError, TypeError, ValueError, AttributeError):
            return
        skew = (sent + time.time()) / 2 - (nova + 0.5)
        self.clock_skew = round(skew, 1) if abs(skew) >= 1.0 else 0.0

    def _where(self) -> str:
        """Where we tried to go, for error messages (never a secret)."""
        group = self.conf.nova
        bits = []
        auth_url = getattr(group, 'auth_url', None)
        if auth_url:
            bits.append('auth_url %s' % auth_url)
        user = getattr(group, 'username', None)
        if user:
            bits.append('user %s' % user)
        if group.endpoint_override:
            bits.append('endpoint %s' % group.endpoint_override)
        if group.region_name:
            bits.append('region %s' % group.region_name)
        return ', '.join(bits)

    def _refused(self, what: str, status: int, text: str,
                 request_id: str | None, microversion: str
                 ) -> exceptions.CloudError:
        """The CloudError of an HTTP refusal, with a hint for the usual."""
        hint = ''
        if status == 401:
            hint = ' (token refused even after re-authenticating)'
        elif status == 406:
            hint = (' (this Nova does not offer compute API microversion '
                    '%s, which instanceha needs)' % microversion)
        elif status == 403:
            hint = ' (the [nova] user needs the admin role for this call)'
        return exceptions.CloudError(
            '%s: HTTP %d from Nova: %s%s' % (what, status, text, hint),
            request_id=request_id, status=status)

    def _call(self, what: str, fn, *args, microversion: str = MICROVERSION,
              **kwargs):
        """One counted request through ``fn``; raises CloudError."""
        with self._lock:
            self.api_calls += 1
        try:
            return fn(*args, **kwargs)
        except nova_exc.ClientException as exc:
            status = getattr(exc, 'code', None)
            if not isinstance(status, int):
                raise exceptions.CloudError(
                    '%s failed: %s' % (what, _nova_message(exc)),
                    request_id=getattr(exc, 'request_id', None)) from None
            raise self._refused(what, status, _nova_message(exc),
                                getattr(exc, 'request_id', None),
                                microversion) from None
        except ks_exc.Unauthorized as exc:
            raise exceptions.CloudError(
                '%s: keystone refused the credentials of [nova] (%s): %s'
                % (what, self._where(), exc), status=401) from None
        except ks_exc.EndpointNotFound:
            raise exceptions.CloudError(
                '%s: no compute endpoint in the catalog for [nova] '
                'region_name %s and valid_interfaces %s' % (
                    what, self.conf.nova.region_name,
                    ','.join(self.conf.nova.valid_interfaces or []))
            ) from None
        except ks_exc.ConnectFailure as exc:
            raise exceptions.CloudError(
                '%s: cannot connect (%s): %s'
                % (what, self._where(), type(exc).__name__)) from None
        except ks_exc.ConnectionError as exc:
            raise exceptions.CloudError(
                '%s: connection failed (%s): %s: %s'
                % (what, self._where(), type(exc).__name__, exc)) from None
        except ks_exc.ClientException as exc:
            raise exceptions.CloudError(
                '%s failed (%s): %s: %s' % (what, self._where(),
                                            type(exc).__name__, exc)
            ) from None

    def _get(self, what: str, url: str, *, client=None,
             microversion: str = MICROVERSION, **kwargs) -> dict:
        """GET through novaclient's HTTP client; the JSON body."""
        client = client or self.compute
        resp, body = self._call(what, client.get, url,
                                microversion=microversion, **kwargs)
        if not isinstance(body, dict):
            raise exceptions.CloudError(
                '%s: Nova answered HTTP %d with a body that is not JSON'
                % (what, resp.status_code),
                request_id=answers.request_id(resp)) from None
        return body

    def _pages(self, what: str, url: str, key: str, links_key: str,
               params: dict, **kwargs) -> list[dict]:
        """Every item of a paginated listing, following the next links."""
        items: list[dict] = []
        first = params = dict(params, limit=self.conf.nova.page_size)
        seen_markers = set()
        while True:
            body = self._get(what, url, params=params, **kwargs)
            page = body.get(key) or []
            items.extend(page)
            nxt = None
            for link in body.get(links_key) or []:
                if link.get('rel') == 'next':
                    nxt = link.get('href')
            if not nxt or not page:
                return items
            # Only the marker is taken from the next link: Nova writes the
            # request's filters into it with a repeated one (status=A&
            # status=B) cut down to its last value.
            query = parse.parse_qs(parse.urlsplit(nxt).query)
            marker = (query.get('marker') or [None])[-1]
            if not marker or marker in seen_markers:
                return items
            seen_markers.add(marker)
            params = dict(first, marker=marker)

    # -- snapshot ---------------------------------------------------------

    def list_services(self) -> tuple[model.Service, ...]:
        # The read made every services_interval: one GET and the JSON
        # body, without novaclient's manager (it builds a resource object
        # per service only to deep-copy it back into the same dict).
        body = self._get('list nova-compute services', '/os-services',
                         params={'binary': 'nova-compute'})
        return tuple(answers.service(s) for s in body.get('services') or ())

    def list_servers(self, host: str | None = None
                     ) -> tuple[model.Server, ...]:
        """Every server of the cloud, or of one compute ``host``."""
        params: dict = {'all_tenants': 1}
        what = 'list servers'
        if host is not None:
            params['host'] = host
            what = 'list servers on %s' % host
        raw = self._pages(what, '/servers/detail', 'servers',
                          'servers_links', params)
        # A server created or deleted between two pages can shift the
        # pages and show up twice: keep one copy of each.
        unique = {s['id']: s for s in raw}
        return tuple(answers.server(s) for s in unique.values())

    def stopped_servers(self, since: datetime.datetime | None = None
                        ) -> tuple[model.Server, ...]:
        """SHUTOFF and VERIFY_RESIZE servers, or the changes since ``since``.

        Without ``since``: one filtered listing; Nova takes the ``status``
        filter repeated (``status=SHUTOFF&status=VERIFY_RESIZE``, any of
        them) in one request. With it: every server changed since then
        (``changes-since``, no status filter, so that one that left those
        states is listed too), deleted ones with the status ``DELETED``.
        """
        if since is not None:
            raw = self._changes(since)
        else:
            raw = self._pages('list SHUTOFF and VERIFY_RESIZE servers',
                              '/servers/detail', 'servers', 'servers_links',
                              {'all_tenants': 1,
                               'status': ['SHUTOFF', 'VERIFY_RESIZE']})
        found = {s['id']: answers.server(s) for s in raw}
        return tuple(found[k] for k in sorted(found))

    def locked_servers(self) -> tuple[model.Server, ...]:
        """Locked servers only, with their lock reasons: one listing.

        Nova's ``locked`` filter (microversion 2.73 and later).
        """
        raw = self._pages('list locked servers', '/servers/detail',
                          'servers', 'servers_links',
                          {'all_tenants': 1, 'locked': 'true'})
        found = {s['id']: answers.server(s) for s in raw}
        return tuple(found[k] for k in sorted(found))

    def list_aggregates(self) -> tuple[model.Aggregate, ...]:
        found = self._call('list aggregates', self.nova.aggregates.list)
        return tuple(answers.aggregate(a.to_dict()) for a in found)

    def image_source(self) -> str:
        """'glance' or 'nova', per ``[tagging] image_source``."""
        if self._image_source:
            return self._image_source
        wanted = self.conf.tagging.image_source
        if wanted == 'auto':
            wanted = 'nova'
            if isinstance(self._auth, ks_identity.BaseIdentityPlugin):
                try:
                    if self._glance_endpoint():
                        wanted = 'glance'
                except (ks_exc.EndpointNotFound, ks_exc.ClientException):
                    pass
        self._image_source = wanted
        return wanted

    def _glance_endpoint(self) -> str | None:
        return self.session.get_endpoint(
            self._auth, service_type='image',
            interface=self.conf.nova.valid_interfaces,
            region_name=self.conf.nova.region_name)

    def list_images(self) -> dict[str, model.Image]:
        if self.image_source() == 'glance':
            try:
                base = self._glance_endpoint()
            except ks_exc.EndpointNotFound:
                base = None
            if not base:
                raise exceptions.CloudError(
                    'list images: [tagging] image_source = glance but the '
                    'catalog has no image endpoint for [nova] region_name '
                    '%s' % self.conf.nova.region_name)
            root = base.rstrip('/')
            if root.endswith('/v2'):
                root = root[:-3]
            # Glance leaves hidden images (os_hidden) out of a listing
            # unless asked; servers may still run from them.
            raw = (self._glance_pages('list images (glance)', root, {})
                   + self._glance_pages('list hidden images (glance)',
                                        root, {'os_hidden': 'true'}))
            return {i['id']: answers.glance_image(i) for i in raw}
        raw = self._pages(
            'list images (nova image proxy)', '/images/detail', 'images',
            'images_links', {}, client=self.image_proxy,
            microversion=IMAGE_PROXY_MICROVERSION)
        return {i['id']: answers.proxy_image(i) for i in raw}

    def _glance_get(self, what: str, url: str) -> dict:
        """One GET on Glance (no novaclient there: the plain session)."""
        resp = self._call(what, self.session.get, url, raise_exc=False)
        if resp.status_code != 200:
            raise self._refused(what, resp.status_code, answers.fault(resp),
                                answers.request_id(resp), MICROVERSION)
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise exceptions.CloudError(
                '%s: Glance answered with a body that is not JSON' % what,
                request_id=answers.request_id(resp))
        return body

    def _glance_pages(self, what: str, root: str, params: dict
                      ) -> list[dict]:
        """Glance's listing: absolute URLs, a relative "next" link."""
        items: list[dict] = []
        url = '%s/v2/images?%s' % (root, parse.urlencode(
            dict(params, limit=self.conf.nova.page_size)))
        seen = set()
        while url and url not in seen:
            seen.add(url)
            body = self._glance_get(what, url)
            page = body.get('images') or []
            items.extend(page)
            nxt = body.get('next')
            url = root + nxt if nxt and page else None
        return items

    def snapshot(self, *, images: bool = False,
                 migrations_since: datetime.datetime | None = None,
                 hosts: model.HostSelector | None = None,
                 aggregates: bool = True,
                 services: model.Snapshot | None = None) -> model.Snapshot:
        taken_at = datetime.datetime.now(datetime.timezone.utc)
        skew = None
        if services is not None:
            # Read just now by the caller: not listed again.
            taken_at, skew = services.taken_at, services.clock_skew
            services = services.services
        else:
            services = self.list_services()
        servers_read = None
        if hosts is None:
            servers = self.list_servers()
        else:
            # One bounded listing per host that needs deciding: a healthy
            # cloud of 100,000 instances is not read page by page.
            servers_read = model.select_hosts(hosts, services)
            servers = tuple(srv for host in sorted(servers_read)
                            for srv in self.list_servers(host))
        aggregates = self.list_aggregates() if aggregates else ()
        image_map = self.list_images() if images else {}
        migrations = (tuple(self.migrations(since=migrations_since))
                      if migrations_since is not None else ())
        calls = self.api_calls
        snap = model.Snapshot(taken_at=taken_at, services=services,
                              servers=servers, aggregates=aggregates,
                              images=image_map, migrations=migrations,
                              clock_skew=(self.clock_skew if skew is None
                                          else skew),
                              servers_read=servers_read)
        LOG.debug('snapshot: %d compute services, %d servers, %d '
                  'aggregates, %d images, %d evacuation records; %d API '
                  'calls so far', len(services), len(servers),
                  len(aggregates), len(image_map), len(migrations), calls)
        return snap

    def read_services(self) -> model.Snapshot:
        """The compute services alone: one call, ~240 bytes a host."""
        taken_at = datetime.datetime.now(datetime.timezone.utc)
        return model.Snapshot(taken_at=taken_at,
                              services=self.list_services(),
                              clock_skew=self.clock_skew)

    # -- single calls -----------------------------------------------------

    def update_service(self, service: model.Service, *,
                       status: str | None = None,
                       disabled_reason: str | None = None,
                       forced_down: bool | None = None) -> model.Service:
        body: dict = {}
        if status is not None:
            body['status'] = status
        if disabled_reason is not None:
            body['disabled_reason'] = disabled_reason
        if forced_down is not None:
            body['forced_down'] = forced_down
        if not body:
            return service
        # One PUT: novaclient's managers would split it in two requests,
        # and the marker must never be set without forced_down.
        what = 'update nova-compute service on %s' % service.host
        resp, data = self._call(what, self.compute.put,
                                '/os-services/%s' % service.id, body=body)
        if not isinstance(data, dict) or 'service' not in data:
            raise exceptions.CloudError(
                '%s: Nova answered HTTP %d without the service'
                % (what, resp.status_code), request_id=answers.request_id(resp))
        return answers.service(data['service'])

    def evacuate(self, server_id: str, *, host: str | None = None) -> None:
        """Rebuild the server elsewhere; on ``host`` if Nova's checks agree.

        From microversion 2.68 (we speak 2.94) evacuate has no ``force``:
        a named host is a requested destination that Nova's scheduler
        still validates (enabled, up, room, the flavor's and image's
        filters). A host that fails them ends the migration record in
        ``error`` ("No valid host"); an unknown host is refused at once
        (404), the server's own host too (400).

        (The hosts' room, ``host_resources``, is read from Placement by
        :mod:`instanceha.adapters.placement`.)
        """
        self._call('evacuate server %s' % server_id,
                   self.nova.servers.evacuate, server_id, host=host)

    def compute_nodes(self) -> dict[str, str | None]:
        """Host -> the uuid of its compute node (its resource provider).

        One listing per ``page_size`` hypervisors (compute API 2.53 and
        later name a node by its uuid, which Placement's provider of it
        shares). A host with several nodes maps to None: its room cannot
        be told apart.
        """
        if self._nodes_client is None:
            self._nodes_client = self._client(NODES_MICROVERSION).client
        raw = self._pages('list hypervisors', '/os-hypervisors/detail',
                          'hypervisors', 'hypervisors_links', {},
                          client=self._nodes_client,
                          microversion=NODES_MICROVERSION)
        found: dict[str, str | None] = {}
        for node in raw:
            host = (node.get('service') or {}).get('host')
            if host:
                found[host] = None if host in found else str(node['id'])
        return found

    def host_resources(self) -> dict[str, model.HostResources]:
        """The hosts' room from Placement, cached (see adapters/placement)."""
        return self.placement.read()

    def get_server(self, server_id: str) -> model.Server:
        found = self._call('get server %s' % server_id,
                           self.nova.servers.get, server_id)
        return answers.server(found.to_dict())

    def _changes(self, since: datetime.datetime) -> list[dict]:
        """Servers changed since ``since`` (our clock), deleted ones too.

        ``changes-since`` is compared with Nova's own clock: ``since`` is
        moved by the measured skew. Nova lists the deleted servers a
        changes-since listing covers (status DELETED).
        """
        return self._pages('list servers changed since %s' % _iso(since),
                           '/servers/detail', 'servers', 'servers_links',
                           {'all_tenants': 1, 'changes-since': _iso(
                               since - datetime.timedelta(
                                   seconds=self.clock_skew or 0))})

    def changed_servers(self, since: datetime.datetime
                        ) -> tuple[model.Server, ...]:
        """Servers changed since ``since`` (our clock): one listing.

        Nova lists deleted ones too (status DELETED): they are left out,
        so that reading one alone says 404.
        """
        unique = {s['id']: s for s in self._changes(since)
                  if (s.get('status') or '').upper() != 'DELETED'}
        return tuple(answers.server(s) for s in unique.values())

    def migrations(self, *, server_id: str | None = None,
                   source_host: str | None = None,
                   since: datetime.datetime | None = None,
                   migration_type: str = 'evacuation'
                   ) -> list[model.Migration]:
        """Migration records, newest first (evacuations unless asked).

        ``migration_type`` is Nova's filter: evacuation, live-migration,
        migration (cold) or resize.
        """
        params: dict = {'migration_type': migration_type}
        if server_id:
            params['instance_uuid'] = server_id
        if source_host:
            params['source_compute'] = source_host
        if since is not None:
            # Given on our clock; Nova compares it with its own.
            params['changes-since'] = _iso(since - datetime.timedelta(
                seconds=self.clock_skew or 0))
        raw = self._pages('list %s records' % migration_type,
                          '/os-migrations', 'migrations',
                          'migrations_links', params)
        result = [answers.migration(m) for m in raw]
        epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
        result.sort(key=lambda m: m.created_at or epoch, reverse=True)
        return result

    @staticmethod
    def _first_request_id(answer) -> str | None:
        ids = getattr(answer, 'request_ids', None) or ()
        return ids[0] if ids else None

    def live_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        """Start a live migration; returns Nova's request id.

        ``host`` None lets Nova's scheduler pick the destination; a named
        host is still checked by the scheduler (never forced). Block
        migration is ``auto``: Nova chooses by the server's storage.
        """
        what = 'live-migrate server %s%s' % (
            server_id, ' to %s' % host if host else '')
        return self._first_request_id(self._call(
            what, self.nova.servers.live_migrate, server_id, host, 'auto'))

    def cold_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        """Start a cold migration; returns Nova's request id.

        The server ends in VERIFY_RESIZE: :meth:`confirm_resize` it.
        """
        what = 'cold-migrate server %s%s' % (
            server_id, ' to %s' % host if host else '')
        return self._first_request_id(self._call(
            what, self.nova.servers.migrate, server_id, host=host))

    def confirm_resize(self, server_id: str) -> None:
        self._call('confirm migration of server %s' % server_id,
                   self.nova.servers.confirm_resize, server_id)

    def action_errors(self, server_id: str, action: str,
                      request_id: str | None = None
                      ) -> tuple[str | None, list[str]]:
        """Nova's error details of an instance action (2.84+ events).

        An asynchronous failure (no valid host, a compute refusing) is
        only visible here: the request itself was accepted with 202. The
        action with ``request_id`` is used when Nova lists it, else the
        newest ``action`` (e.g. live-migration). Returns (its request id,
        "event: details" of each failed event).
        """
        actions = self.instance_actions(server_id)
        chosen = [a for a in actions if a.get('request_id') == request_id]
        chosen = chosen or [a for a in actions if a.get('action') == action]
        if not chosen:
            return None, []
        rid = max(chosen, key=lambda a: a.get('start_time') or '')[
            'request_id']
        detail = self._call('get action %s of server %s' % (rid, server_id),
                            self.nova.instance_action.get, server_id, rid)
        events = detail.to_dict().get('events') or ()
        return rid, ['%s: %s' % (e.get('event'), (
            e.get('details') or e.get('result') or '').strip())
            for e in events if (e.get('result') or '').lower() == 'error']

    def instance_actions(self, server_id: str) -> list[dict]:
        """Nova's instance actions of a server, as Nova lists them.

        Each has ``action``, ``request_id``, ``user_id``, ``start_time``
        and ``message`` ('Error' when an event failed); the history
        commands join them with migration records.
        """
        found = self._call('list actions of server %s' % server_id,
                           self.nova.instance_action.list, server_id)
        return [a.to_dict() for a in found]

    def server_actions(self, server_id: str
                       ) -> list[model.InstanceAction]:
        """The server's instance actions, newest first.

        A stop Nova's own power-state sync made (the guest died under a
        running nova-compute) has no ``user_id``: the compute service
        acts in an admin context without a user.
        """
        found = [model.InstanceAction(
            action=a.get('action') or '', request_id=a.get('request_id'),
            user_id=a.get('user_id') or None,
            start_time=answers.parse_time(a.get('start_time')),
            message=a.get('message'))
            for a in self.instance_actions(server_id)]
        epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
        found.sort(key=lambda a: a.start_time or epoch, reverse=True)
        return found

    def start_server(self, server_id: str) -> None:
        self._call('start server %s' % server_id, self.nova.servers.start,
                   server_id)

    def set_server_metadata(self, server_id: str, key: str,
                            value: str) -> None:
        """Set one metadata item (others are left alone)."""
        # novaclient's set_meta_item puts the key in the URL unquoted.
        self._call('set metadata %s on server %s' % (key, server_id),
                   self.compute.put, '/servers/%s/metadata/%s' % (
                       server_id, parse.quote(key, safe='')),
                   body={'meta': {key: value}})

    def delete_server_metadata(self, server_id: str, key: str) -> None:
        """Remove one metadata item; an absent item is not an error."""
        try:
            self._call('delete metadata %s of server %s' % (key, server_id),
                       self.nova.servers.delete_meta, server_id,
                       [parse.quote(key, safe='')])
        except exceptions.CloudError as exc:
            if exc.status != 404:
                raise

    def set_server_lock(self, server_id: str, locked: bool,
                        reason: str | None = None) -> None:
        if locked:
            self._call('lock server %s' % server_id, self.nova.servers.lock,
                       server_id, reason=reason)
        else:
            self._call('unlock server %s' % server_id,
                       self.nova.servers.unlock, server_id)

    def stop_server(self, server_id: str) -> None:
        self._call('stop server %s' % server_id, self.nova.servers.stop,
                   server_id)

    def reset_server_state(self, server_id: str, state: str) -> None:
        if state not in ('error', 'active'):
            raise ValueError('reset state must be error or active, not %r'
                             % state)
        self._call('reset state of server %s to %s' % (server_id, state),
                   self.nova.servers.reset_state, server_id, state)

    def check(self) -> None:
        """Authenticate and reach Nova once (for start-up and the CLI)."""
        self.list_services()

    def microversions(self) -> tuple[str, str]:
        """(lowest, highest) compute API microversion this Nova offers."""
        body = self._get('read the compute API version', '/')
        version = body.get('version') or {}
        return (str(version.get('min_version') or '2.1'),
                str(version.get('version') or '2.1'))


def offers(low: str, high: str, wanted: str) -> bool:
    """Is microversion ``wanted`` within [low, high]?"""
    want = api_versions.APIVersion(wanted)
    return (api_versions.APIVersion(low) <= want
            <= api_versions.APIVersion(high))
