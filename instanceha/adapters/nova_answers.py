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

"""Nova's and Glance's answers, read into the engine's model.

Plain functions of the JSON bodies and headers the API returns, apart
from the calls that fetch them (:mod:`instanceha.adapters.nova`): what a
field means when Nova leaves it out or sends null is decided here, once.
"""

import datetime

from instanceha.engine import model

#: Where Nova (or Glance) names the request it answered.
REQUEST_ID_HEADERS = ('x-openstack-request-id', 'x-compute-request-id')

#: Glance v2 image keys that are not user properties.
GLANCE_CORE = frozenset({
    'id', 'name', 'status', 'visibility', 'protected', 'checksum',
    'os_hash_algo', 'os_hash_value', 'owner', 'size', 'virtual_size',
    'min_ram', 'min_disk', 'created_at', 'updated_at', 'tags', 'self',
    'file', 'schema', 'disk_format', 'container_format', 'locations',
    'direct_url', 'os_hidden', 'stores'})


def parse_time(text) -> datetime.datetime | None:
    """Nova's time stamps (naive UTC, maybe with Z/offset) -> aware UTC."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def service(raw: dict) -> model.Service:
    """A compute service of ``os-services``."""
    raw_ts = raw.get('updated_at')
    return model.Service(
        id=str(raw['id']), host=raw['host'], state=raw.get('state') or '',
        status=raw.get('status') or '',
        forced_down=bool(raw.get('forced_down')),
        updated_at=parse_time(raw_ts),
        updated_at_raw=None if raw_ts is None else str(raw_ts),
        disabled_reason=raw.get('disabled_reason'),
        zone=raw.get('zone'))


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def server(raw: dict) -> model.Server:
    """A server of ``servers/detail`` (its flavor embedded, 2.47+)."""
    flavor = raw.get('flavor') or {}
    image = raw.get('image')
    return model.Server(
        id=raw['id'], name=raw.get('name') or '',
        host=raw.get('OS-EXT-SRV-ATTR:host'),
        status=raw.get('status') or '',
        flavor=model.Flavor(
            name=flavor.get('original_name') or flavor.get('id') or '',
            extra_specs=dict(flavor.get('extra_specs') or {}),
            vcpus=_int_or_none(flavor.get('vcpus')),
            ram_mb=_int_or_none(flavor.get('ram')),
            disk_gb=_int_or_none(flavor.get('disk')),
            ephemeral_gb=_int_or_none(flavor.get('ephemeral')),
            swap_mb=_int_or_none(flavor.get('swap') or 0)),
        image_id=image.get('id') if isinstance(image, dict) else None,
        task_state=raw.get('OS-EXT-STS:task_state'),
        metadata=dict(raw.get('metadata') or {}),
        locked=bool(raw.get('locked')),
        locked_reason=raw.get('locked_reason'),
        project_id=raw.get('tenant_id'))


def aggregate(raw: dict) -> model.Aggregate:
    """A host aggregate of ``os-aggregates``."""
    return model.Aggregate(
        id=str(raw['id']), name=raw.get('name') or '',
        hosts=frozenset(raw.get('hosts') or ()),
        metadata=dict(raw.get('metadata') or {}),
        availability_zone=raw.get('availability_zone'))


def migration(raw: dict) -> model.Migration:
    """A record of ``os-migrations``."""
    return model.Migration(
        id=str(raw.get('uuid') or raw['id']),
        server_id=raw.get('instance_uuid'),
        source_host=raw.get('source_compute'),
        dest_host=raw.get('dest_compute'),
        status=raw.get('status') or '',
        migration_type=raw.get('migration_type') or '',
        created_at=parse_time(raw.get('created_at')),
        updated_at=parse_time(raw.get('updated_at')))


def glance_image(raw: dict) -> model.Image:
    """An image of Glance v2: its tags and its string properties."""
    props = {k: v for k, v in raw.items()
             if k not in GLANCE_CORE and isinstance(v, str)}
    return model.Image(id=raw['id'], name=raw.get('name') or '',
                       tags=tuple(raw.get('tags') or ()), properties=props)


def proxy_image(raw: dict) -> model.Image:
    """An image of Nova's image proxy: properties only, no tags."""
    props = {k: str(v) for k, v in (raw.get('metadata') or {}).items()}
    return model.Image(id=raw['id'], name=raw.get('name') or '',
                       properties=props)


def request_id(resp) -> str | None:
    """The request id an answer carries, None without one."""
    if resp is None:
        return None
    for header in REQUEST_ID_HEADERS:
        if resp.headers.get(header):
            return resp.headers[header]
    return None


def fault(resp) -> str:
    """Nova's (or Glance's) error text from a response body, short."""
    try:
        body = resp.json()
    except ValueError:
        return (resp.text or '').strip()[:200]
    if isinstance(body, dict) and len(body) == 1:
        inner = next(iter(body.values()))
        if isinstance(inner, dict) and 'message' in inner:
            return str(inner['message'])[:300]
    return str(body)[:300]
