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

"""Helper process: a real keystone on sqlite, served on loopback.

Binds its port first (port 0, so no race with other test workers), then
writes keystone.conf, runs ``keystone-manage`` db_sync, fernet_setup,
credential_setup and bootstrap (the public URL needs the port), and
serves ``keystone.wsgi.api`` with a threaded wsgiref server.

Usage: python keystone_server.py CONFIG.json   (written by KeystonePeer)
"""

import getpass
import grp
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]
sys.path.append(_HERE)

import _helper_common as common  # noqa: E402

CONF_TEMPLATE = """[DEFAULT]
debug = false
use_stderr = true

[database]
connection = sqlite:///%(dir)s/keystone.db

[token]
provider = fernet

[identity]
# Cheapest bcrypt: every password check costs CPU on a 2-core machine.
password_hash_rounds = 4

[fernet_tokens]
key_repository = %(dir)s/fernet-keys

[fernet_receipts]
key_repository = %(dir)s/fernet-receipts

[credential]
key_repository = %(dir)s/credential-keys
"""


def manage(conf_file, *args):
    """Run one keystone-manage command in this process.

    In-process takes ~1 s for all four set-up commands instead of ~8 s for
    four keystone-manage processes (each spends ~1.8 s importing keystone).
    """
    from keystone.cmd import cli
    from keystone.common import provider_api
    cli.main(argv=['keystone-manage', '--config-file', conf_file] +
             list(args))
    # Let the next command (and the WSGI app) configure from scratch.
    cli.CONF.reset()
    cli.CONF.unregister_opt(cli.command_opt)
    provider_api.ProviderAPIs._clear_registry_instances()


def main():
    started = time.monotonic()
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    workdir = cfg['dir']

    # Bind first: bootstrap must know the URL we will serve on.
    server = common.make_wsgi_server(lambda env, start: [])
    port = server.server_port
    url = 'http://127.0.0.1:%d/v3' % port

    conf_file = os.path.join(workdir, 'keystone.conf')
    with open(conf_file, 'w') as f:
        f.write(CONF_TEMPLATE % {'dir': workdir})
    user = getpass.getuser()
    group = grp.getgrgid(os.getgid()).gr_name
    manage(conf_file, 'db_sync')
    manage(conf_file, 'fernet_setup', '--keystone-user', user,
           '--keystone-group', group)
    manage(conf_file, 'credential_setup', '--keystone-user', user,
           '--keystone-group', group)
    # The password travels in the environment, never on a command line.
    os.environ['OS_BOOTSTRAP_PASSWORD'] = cfg['admin_password']
    manage(conf_file, 'bootstrap',
           '--bootstrap-username', cfg['admin_user'],
           '--bootstrap-project-name', cfg['admin_project'],
           '--bootstrap-role-name', 'admin',
           '--bootstrap-region-id', 'RegionOne',
           '--bootstrap-admin-url', url,
           '--bootstrap-public-url', url,
           '--bootstrap-internal-url', url)
    del os.environ['OS_BOOTSTRAP_PASSWORD']

    # keystone parses sys.argv with oslo.config: give it none of ours.
    os.environ['OS_KEYSTONE_CONFIG_FILES'] = conf_file
    sys.argv = [sys.argv[0]]
    from keystone.wsgi import api
    server.set_app(api.application)
    common.serve_in_thread(server, 'keystone')
    common.write_ready(cfg['ready_file'], {
        'port': port, 'pid': os.getpid(),
        'setup_seconds': round(time.monotonic() - started, 2)})
    print('keystone ready on %s' % url, flush=True)
    common.run_until_orphaned(cfg['max_lifetime'])


if __name__ == '__main__':
    main()
