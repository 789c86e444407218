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

"""instanceha-manage instances: crashed instances and their counters.

``instances list`` shows every instance instanceha restarted, relocated
or gave up (its metadata items ``instanceha:failure`` and
``instanceha:error``). ``instances clear SERVER`` takes an instance out of
the error state after an operator found why it kept crashing: the
counters and the error item are removed and the instance is left
SHUTOFF by the operator's own stop, which instanceha never undoes
(``--start`` starts it as well).
"""

import time

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.cmd import manage_history
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha import exceptions

#: Seconds ``clear`` waits for Nova to carry out a stop (or start).
WAIT = 120.0


def _cloud(conf):
    from instanceha.daemon import service
    return service.make_cloud(conf)


def describe(server: model.Server) -> dict | None:
    """One instance's row; None when instanceha never handled it."""
    rec = irec.Record.parse(server.metadata.get(irec.KEY))
    error = server.metadata.get(irec.ERROR_KEY)
    if rec is None and not error:
        return None
    return {'server': server.name, 'id': server.id, 'host': server.host,
            'status': server.status,
            'restarts': rec.restarts if rec else None,
            'relocations': rec.relocations if rec else None,
            'step': rec.state if rec else None, 'error': error}


def _list(conf: cfg.ConfigOpts) -> int:
    rows = [r for r in (describe(s) for s in sorted(
        _cloud(conf).snapshot().servers, key=lambda s: (s.name, s.id)))
        if r]
    if conf.command.json:
        common.print_json(rows)
        return 0
    print(common.table(
        ('SERVER', 'ID', 'HOST', 'STATUS', 'RESTARTS', 'RELOCATIONS', 'STEP',
         'ERROR'),
        [(r['server'], r['id'], r['host'] or '-', r['status'], r['restarts'],
          r['relocations'], r['step'] or '-', r['error'] or '')
         for r in rows]))
    return 0


def _find(cloud, name: str) -> model.Server:
    found = [s for s in cloud.snapshot().servers
             if name in (s.id, s.name)]
    if not found:
        raise exceptions.InstanceHAError('no instance named %r' % name)
    if len(found) > 1:
        raise exceptions.InstanceHAError(
            '%d instances are named %r; give its id: %s' % (
                len(found), name, ', '.join(s.id for s in found)))
    return found[0]


def _wait(cloud, server_id: str, status: str, sleep=time.sleep) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        srv = cloud.get_server(server_id)
        if srv.status == status and not srv.task_state:
            return
        sleep(1.0)
    raise exceptions.InstanceHAError(
        'instance %s is not %s after %ds' % (server_id, status, WAIT))


def clear(cloud, name: str, start: bool = False,
          sleep=time.sleep) -> str:
    """Take ``name`` out of instanceha's hands; returns what was done."""
    srv = _find(cloud, name)
    if describe(srv) is None:
        raise exceptions.InstanceHAError(
            'instance %s (%s) carries no instanceha counters or error; '
            'nothing to clear' % (srv.name, srv.id))
    done = []
    if srv.status == 'ERROR':
        # Nova's reset-state knows active and error only: active, then
        # the operator's own stop (never undone by instanceha) makes it
        # SHUTOFF as it was when it crashed.
        cloud.reset_server_state(srv.id, 'active')
        cloud.stop_server(srv.id)
        _wait(cloud, srv.id, 'SHUTOFF', sleep)
        done.append('error state left (SHUTOFF)')
    cloud.delete_server_metadata(srv.id, irec.ERROR_KEY)
    cloud.delete_server_metadata(srv.id, irec.KEY)
    done.append('counters removed')
    if start:
        cloud.start_server(srv.id)
        _wait(cloud, srv.id, 'ACTIVE', sleep)
        done.append('started')
    return 'instance %s (%s): %s' % (srv.name, srv.id, ', '.join(done))


def _clear(conf: cfg.ConfigOpts) -> int:
    print(clear(_cloud(conf), conf.command.server, conf.command.start))
    return 0


def add_parsers(subparsers) -> None:
    parser = subparsers.add_parser(
        'instances', help='what instanceha and Nova did to an instance; '
        'crashed instances instanceha restarted, relocated or put in the '
        'error state')
    sub = parser.add_subparsers(dest='action', required=True)
    lst = sub.add_parser('list', help='instances with instanceha counters '
                         'or in its error state')
    common.json_flag(lst, 'a JSON array with one object per instance')
    lst.set_defaults(func=_list)
    clr = sub.add_parser('clear', help='take an instance out of the error '
                         'state after fixing why it kept crashing')
    clr.add_argument('server', help='instance name or id')
    clr.add_argument('--start', action='store_true',
                     help='start it as well (else it stays SHUTOFF)')
    clr.set_defaults(func=_clear)
    manage_history.add_instance_parser(sub)
