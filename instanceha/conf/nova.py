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

"""How to reach Nova: keystoneauth's standard auth, session and adapter
options, so every keystone auth plugin (password, application credentials,
tokens, ...) and every TLS setting works as in other OpenStack services.
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = 'nova'

OPTS: list[cfg.Opt] = [
    cfg.IntOpt('page_size', default=1000, min=1, max=10000,
               help='Servers, images and migrations are listed in pages of '
                    'this many entries (Nova caps a page at its own '
                    '[api] max_limit, 1000 by default). The number of calls '
                    'per cycle grows with the number of servers divided by '
                    'this, never with the number of hosts.'),
]

#: keystoneauth's defaults we change: a request must never hang a cycle.
_DEFAULTS = {'service_type': 'compute',
             'valid_interfaces': ['internal', 'public'],
             'timeout': 60}


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(cfg.OptGroup(GROUP, title='Nova access'))
    conf.register_opts(OPTS, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP)
    for name, value in _DEFAULTS.items():
        conf.set_default(name, value, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    opts = (ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
    seen: dict[str, cfg.Opt] = {}
    for opt in OPTS + opts:
        if opt.dest in _DEFAULTS:
            opt.default = _DEFAULTS[opt.dest]
        seen.setdefault(opt.dest, opt)
    return [(GROUP, list(seen.values()))]
