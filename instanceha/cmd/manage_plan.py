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

"""instanceha-manage plan: one dry-run cycle against the real cloud.

Reads Nova once, runs the configured detectors, filters and gates, and
prints what the service would do, without acting. Exit 0 when the cloud
could be read, 1 (with one line naming what failed) when it could not,
2 for a configuration error.
"""

import dataclasses
import json
import sys

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.engine import plan as plan_mod
from instanceha import exceptions
from instanceha.plugins import loader


def format_table(plan: plan_mod.Plan) -> str:
    rows = []
    for d in plan.decisions:
        decision = d.decision.value
        if d.recovery_state is not None:
            decision += ' (%s)' % d.recovery_state.value
        count = (str(len(d.servers)) if d.decision in (
            plan_mod.Decision.RECOVER, plan_mod.Decision.BLOCKED,
            plan_mod.Decision.RECOVERING) else '-')
        rows.append((d.host, decision, d.verdict or '-', count,
                     '; '.join(d.reasons)))
    lines = [common.table(('HOST', 'DECISION', 'VERDICT', 'INSTANCES',
                           'REASONS'), rows, right=(3,)), '']
    lines.append('snapshot taken at %s' % plan.taken_at.isoformat())
    lines.extend('plan blocked by %s' % why for why in plan.blocked_by)
    return '\n'.join(lines)


def annotate_fencing(plan: plan_mod.Plan, conf: cfg.ConfigOpts
                     ) -> plan_mod.Plan:
    """Say which hosts the service would try to recover but cannot fence.

    The service never evacuates a host it could not fence; a dry run
    that hid this would promise a recovery that will not happen. Keys are
    matched against Nova's host names, as the service does: a short key
    naming two Nova hosts serves neither.
    """
    from instanceha.plugins.fencing import topology

    try:
        fencer = topology.Topology.from_conf(conf)
        fencer.learn_hosts(d.host for d in plan.decisions)
        missing = 'no entry in the fencing file %s' % fencer.file.path
    except exceptions.ConfigurationError as exc:
        fencer, missing = None, 'fencing file unusable: %s' % exc

    def annotate(d: plan_mod.HostDecision) -> plan_mod.HostDecision:
        if d.decision is not plan_mod.Decision.RECOVER:
            return d
        why = missing
        if fencer is not None:
            try:
                if fencer.file.find(d.host) is not None:
                    return d
            except exceptions.ConfigurationError as exc:
                why = str(exc)
        return dataclasses.replace(d, reasons=d.reasons + (
            'cannot be fenced (%s): will not be evacuated' % why,))

    return dataclasses.replace(
        plan, decisions=tuple(annotate(d) for d in plan.decisions))


def annotate_capacity(plan: plan_mod.Plan, cloud, drivers, conf,
                      snapshot) -> plan_mod.Plan:
    """Say which instances of the hosts recovered now would find no room.

    The hosts the plan recovers are taken as failing together; their
    evacuable instances are packed onto what remains, as
    ``instanceha-manage capacity`` does. Room is never a reason not to
    recover: this only says where Nova's scheduler will answer "No valid
    host".
    """
    from instanceha.engine import capacity
    from instanceha.ops import capacity as ops_capacity

    failing = [d.host for d in plan.to_recover()]
    if not failing:
        return plan
    try:
        reservation = loader.load(
            'instanceha.reservation', [conf.reservation.strategy],
            '[reservation] strategy', conf)[0]
        facts = ops_capacity.gather(cloud, drivers.filters, reservation,
                                    snapshot)
    except exceptions.InstanceHAError as exc:
        notes = {h: 'room elsewhere unknown: %s' % exc for h in failing}
    else:
        whys: dict[str, list[str]] = {}
        for u in capacity.host_loss(facts, failing).packing.unplaced:
            whys.setdefault(u.need.host, []).append(
                '%s (%s): %s' % (u.need.name, u.need.server_id, u.why))
        notes = {h: 'would find no room: %s' % '; '.join(w)
                 for h, w in whys.items()}

    def annotate(d: plan_mod.HostDecision) -> plan_mod.HostDecision:
        if d.host not in notes or d.decision is not plan_mod.Decision.RECOVER:
            return d
        return dataclasses.replace(d, reasons=d.reasons + (notes[d.host],))

    return dataclasses.replace(
        plan, decisions=tuple(annotate(d) for d in plan.decisions))


#: Said when gates that ask someone (veto hooks) were left out.
NOT_ASKED = ('veto hooks not asked (a dry run; --ask-hooks asks them, '
             'sending them a proposal nobody will carry out): %s')
#: Said when they were asked.
ASKED = ('veto hooks asked (--ask-hooks); the proposal they received will '
         'not be carried out: %s')


def hook_gates(drivers, ask: bool) -> tuple[object, str | None]:
    """Drivers for a dry run and what to say about the veto hooks.

    Gates that ask someone outside (``pure = False``: veto hooks) are
    asked only when the operator says so: a dry run must not send a
    proposal as if it were about to be carried out.
    """
    asking = [g for g in drivers.gates if not g.pure
              and getattr(g, 'hooks', None)]
    if not asking:
        return drivers, None
    names = ', '.join(g.name or type(g).__name__ for g in asking)
    if ask:
        return drivers, ASKED % names
    kept = [g for g in drivers.gates if g not in asking]
    return dataclasses.replace(drivers, gates=kept), NOT_ASKED % names


def _plan(conf: cfg.ConfigOpts) -> int:
    from instanceha.adapters import nova
    from instanceha.engine import decide

    drivers, note = hook_gates(loader.load_deciders(conf),
                               conf.command.plan_ask_hooks)
    cloud = nova.NovaCloud(conf)
    snapshot = cloud.snapshot(**decide.snapshot_needs(drivers))
    plan = annotate_fencing(
        decide.make_plan(snapshot, drivers, conf, snapshot.taken_at), conf)
    plan = annotate_capacity(plan, cloud, drivers, conf, snapshot)
    if conf.command.format == 'json':
        json.dump(plan.as_dicts(), sys.stdout, indent=2)
        sys.stdout.write('\n')
        if note:
            print(note, file=sys.stderr)
    else:
        print(format_table(plan))
        if note:
            print(note)
        print('%d Nova API call(s)' % cloud.api_calls)
    return 0


def add_parsers(subparsers) -> None:
    parser = subparsers.add_parser(
        'plan', help='read the cloud once and print what would be done, '
                     'without doing it')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table',
                        help='table for people (default), json (a list of '
                             '{host, decision, verdict, reasons, servers, '
                             'recovery_state}) for machines')
    parser.add_argument('--ask-hooks', dest='plan_ask_hooks',
                        action='store_true',
                        help='also ask the veto hooks ([veto_hooks] hooks); '
                             'by default they are not asked, since they '
                             'would receive a proposal that is not carried '
                             'out')
    parser.set_defaults(func=_plan)
