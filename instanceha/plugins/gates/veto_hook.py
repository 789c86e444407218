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

"""Lifecycle hooks that may veto fencing and evacuation.

OpenShift's etcd operator holds a ``preDrain`` lifecycle hook on a
control-plane machine until its etcd member has been replaced: whoever
knows what a host is critical for gets a say before it is disrupted.
Here the hosts about to be fenced and evacuated are proposed to each
configured hook (an executable or an HTTP endpoint); a hook may veto the
whole proposal or name the hosts it vetoes. The vetoed hosts stay
BLOCKED with the hook's reason in the plan and are proposed again on the
next poll, so a veto holds exactly as long as the hook keeps saying so.

A hook that crashes, hangs or answers nonsense is a hook error, which
blocks the plan by default (``[veto_hooks] on_error = veto``): quorum
protection that silently fails open protects nothing.
"""

import base64
from concurrent import futures
from concurrent.futures import Future
import dataclasses
import http.client
import json
import logging
import os
import signal
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request

from instanceha import exceptions
from instanceha.plugins.gates import base

LOG = logging.getLogger(__name__)

GROUP = 'veto_hooks'
#: Longest reason quoted from a hook, in characters.
MAX_REASON = 200
#: Most bytes read from a hook's output or an HTTP answer.
MAX_ANSWER = 64 * 1024
#: HTTP statuses that mean "veto".
VETO_STATUSES = (403, 409)
#: Protocol version of the proposal (bumped on incompatible changes).
PROPOSAL_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one hook said about one proposal."""

    hook: str
    #: Hosts vetoed one by one (empty when vetoing all or allowing).
    veto: frozenset[str] = frozenset()
    veto_all: bool = False
    reason: str = ''
    #: Set when the hook failed to answer: why.
    error: str | None = None
    #: Hosts the hook named that were not proposed (ignored: a static
    #: guard names the hosts it protects, whatever is proposed).
    not_proposed: frozenset[str] = frozenset()


def clean(text: str) -> str:
    """The first non-empty line of text, printable and bounded."""
    for line in text.splitlines():
        line = ''.join(c if c.isprintable() else '?' for c in line).strip()
        if line:
            if len(line) > MAX_REASON:
                line = line[:MAX_REASON - 3] + '...'
            return line
    return ''


def parse_veto(hook: str, text: str, proposed: frozenset[str]) -> Answer:
    """Read a veto: a reason line, or JSON naming the vetoed hosts.

    An answer starting with ``{`` must be a JSON object whose optional
    ``veto`` lists hosts (absent: every host) and whose optional
    ``reason`` is a string; anything else in it is a hook error, since a
    hook that cannot say what it vetoes must not be guessed at. Hosts in
    ``veto`` that are not proposed are ignored (a guard may always name
    the hosts it protects); when none of them is proposed, nothing is
    vetoed.
    """
    if not text.lstrip().startswith('{'):
        return Answer(hook, veto_all=True,
                      reason=clean(text) or 'no reason given')
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return Answer(hook, error='its veto is not valid JSON (%s)' % exc)
    if not isinstance(doc, dict):
        return Answer(hook, error='its veto is not a JSON object')
    reason = doc.get('reason', '')
    if not isinstance(reason, str):
        return Answer(hook, error='"reason" in its veto is not a string')
    reason = clean(reason) or 'no reason given'
    if 'veto' not in doc:
        return Answer(hook, veto_all=True, reason=reason)
    hosts = doc['veto']
    if (not isinstance(hosts, list)
            or not all(isinstance(h, str) for h in hosts)):
        return Answer(hook, error='"veto" in its answer is not a list of '
                                  'host names')
    if not hosts:
        return Answer(hook, error='it vetoes but its "veto" list is empty')
    # A static guard ("never fence compute-1") names its hosts whatever
    # is proposed: a host it names that is not proposed is simply not at
    # stake this time, not a confused hook.
    unknown = sorted(set(hosts) - proposed)
    if unknown:
        LOG.debug('hook %s names host(s) not proposed this time (ignored): '
                  '%s', hook, ', '.join(clean(h) for h in unknown[:5]))
    return Answer(hook, veto=frozenset(hosts) & proposed, reason=reason,
                  not_proposed=frozenset(unknown))


class Hook:
    """One configured hook; ``name`` is safe to log."""

    name: str = ''

    def ask(self, payload: bytes, proposed: frozenset[str],
            timeout: float) -> Answer:
        raise NotImplementedError


class ExecHook(Hook):
    """An executable: proposal on stdin, exit status is the answer."""

    def __init__(self, path: str):
        self.path = path
        self.name = path

    def check(self) -> None:
        if not os.path.isfile(self.path):
            raise exceptions.ConfigurationError(
                'option [%s] hooks: %s does not exist or is not a file'
                % (GROUP, self.path))
        if not os.access(self.path, os.X_OK):
            raise exceptions.ConfigurationError(
                'option [%s] hooks: %s is not executable' % (GROUP,
                                                             self.path))

    def ask(self, payload, proposed, timeout):
        # No shell, no inherited environment (the service's may hold
        # credentials), its own session so a timeout kills its children.
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
               'LANG': 'C.UTF-8'}
        try:
            proc = subprocess.Popen(
                [self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=env, cwd='/', close_fds=True,
                start_new_session=True)
        except OSError as exc:
            return Answer(self.name, error='cannot run it: %s'
                          % (exc.strerror or exc))
        try:
            out, err = proc.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            return Answer(self.name, error='no answer within %gs (killed)'
                          % timeout)
        out = out[:MAX_ANSWER].decode('utf-8', 'replace')
        err = err[:MAX_ANSWER].decode('utf-8', 'replace')
        if proc.returncode == 0:
            return Answer(self.name)
        if proc.returncode == 1:
            return parse_veto(self.name, out if out.strip() else err,
                              proposed)
        if proc.returncode < 0:
            what = 'killed by signal %d' % -proc.returncode
        else:
            what = 'exit status %d (0 allows, 1 vetoes)' % proc.returncode
        detail = clean(err) or clean(out)
        return Answer(self.name, error=what + (': ' + detail if detail
                                               else ''))

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A child that left the session still holds the pipes: stop
            # reading them; the killed hook itself is reaped.
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe:
                    pipe.close()
            proc.wait(timeout=5)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer we do not understand, not one to follow."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def safe_url(url: str) -> str:
    """The URL without user info, query or fragment: fit for a log."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition('@')[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, '',
                                    ''))


class HttpHook(Hook):
    """An HTTP(S) endpoint: proposal POSTed as JSON, status is the answer."""

    def __init__(self, url: str, ca_file: str | None = None):
        self.name = safe_url(url)
        parts = urllib.parse.urlsplit(url)
        user = parts.netloc.rpartition('@')[0]
        self._auth = None
        if user:
            self._auth = 'Basic ' + base64.b64encode(
                urllib.parse.unquote(user).encode()).decode()
        self._url = urllib.parse.urlunsplit(
            (parts.scheme, parts.netloc.rpartition('@')[2], parts.path,
             parts.query, ''))
        self._parts = parts
        self._ca_file = ca_file

    def check(self) -> None:
        try:
            port = self._parts.port
        except ValueError:
            port = -1
        if not self._parts.hostname or port == -1:
            raise exceptions.ConfigurationError(
                'option [%s] hooks: %s is not a valid http(s) URL (host or '
                'port)' % (GROUP, self.name))
        if self._ca_file and not os.path.isfile(self._ca_file):
            raise exceptions.ConfigurationError(
                'option [%s] ca_file: %s does not exist' % (GROUP,
                                                            self._ca_file))

    def ask(self, payload, proposed, timeout):
        headers = {'Content-Type': 'application/json',
                   'Accept': 'application/json, text/plain',
                   'User-Agent': 'instanceha-veto-hook'}
        if self._auth:
            headers['Authorization'] = self._auth
        req = urllib.request.Request(self._url, data=payload,
                                     headers=headers, method='POST')
        handlers = [_NoRedirect()]
        if self._parts.scheme == 'https':
            handlers.append(urllib.request.HTTPSHandler(
                context=ssl.create_default_context(cafile=self._ca_file)))
        opener = urllib.request.build_opener(*handlers)
        try:
            status, body = self._post(opener, req, timeout)
        except (urllib.error.URLError, http.client.HTTPException,
                OSError) as exc:
            why = getattr(exc, 'reason', None) or exc
            if isinstance(why, TimeoutError):
                return Answer(self.name, error='no answer within %gs'
                              % timeout)
            return Answer(self.name, error='cannot reach it: %s' % why)
        text = body.decode('utf-8', 'replace')
        if 200 <= status < 300:
            return Answer(self.name)
        if status in VETO_STATUSES:
            return parse_veto(self.name, text, proposed)
        detail = clean(text)
        return Answer(self.name, error='HTTP %d (2xx allows, 403/409 '
                      'vetoes)%s' % (status, ': ' + detail if detail else ''))

    @staticmethod
    def _post(opener, req, timeout: float) -> tuple[int, bytes]:
        try:
            with opener.open(req, timeout=timeout) as resp:
                return resp.status, resp.read(MAX_ANSWER)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read(MAX_ANSWER)


def make_hook(spec: str, ca_file: str | None = None) -> Hook:
    """A hook from one ``[veto_hooks] hooks`` entry, checked for sanity."""
    spec = spec.strip()
    scheme = urllib.parse.urlsplit(spec).scheme.lower()
    if scheme in ('http', 'https'):
        hook = HttpHook(spec, ca_file)
    elif os.path.isabs(spec):
        hook = ExecHook(spec)
    else:
        shown = safe_url(spec) if '://' in spec else spec
        raise exceptions.ConfigurationError(
            'option [%s] hooks: %r is neither an absolute path to an '
            'executable nor an http(s):// URL' % (GROUP, shown))
    hook.check()
    return hook


def proposal(ctx: base.GateContext) -> dict:
    """What the hooks are asked about, as a JSON-able document."""
    snap = ctx.snapshot
    hosts = []
    for host in sorted(ctx.candidates):
        service = snap.service(host)
        aggs = sorted(snap.aggregates_of(host), key=lambda a: a.name)
        zones = {a.availability_zone for a in aggs if a.availability_zone}
        if service is not None and service.zone:
            zones.add(service.zone)
        statuses: dict[str, int] = {}
        for server in snap.servers_on(host):
            statuses[server.status] = statuses.get(server.status, 0) + 1
        hosts.append({
            'host': host,
            'aggregates': [a.name for a in aggs],
            'availability_zones': sorted(zones),
            'instances': sum(statuses.values()),
            'instance_statuses': dict(sorted(statuses.items())),
            'evacuable_instances': len(ctx.servers.get(host, ())),
            'reasons': list(ctx.reasons.get(host, ())),
        })
    return {
        'version': PROPOSAL_VERSION,
        'action': 'fence-and-evacuate',
        'reason': 'these compute hosts look failed: instanceha is about to '
                  'fence (power off) them and rebuild their instances '
                  'elsewhere',
        'time': ctx.now.isoformat(),
        'hosts': hosts,
        'failed': sorted(ctx.failed),
        'recovering': sorted(ctx.recovering),
        'monitored': len(ctx.monitored),
    }


class VetoHookGate(base.Gate):
    """Ask each ``[veto_hooks] hooks`` entry; any of them may veto."""

    description = ('ask lifecycle hooks ([veto_hooks] hooks) whether the '
                   'failed hosts may be fenced and evacuated')

    def __init__(self, conf):
        super().__init__(conf)
        self._hooks: list[Hook] | None = None
        #: The proposal being asked on the engine's executor, and its job.
        self._job: tuple[frozenset[str], Future] | None = None

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[veto_hooks] hooks': 'executables or http(s) URLs',
                '[veto_hooks] timeout': 'seconds per hook',
                '[veto_hooks] on_error': 'veto or allow',
                '[veto_hooks] ca_file': 'CA bundle for https hooks'}

    def validate(self) -> None:
        group = self.conf[GROUP]
        self._hooks = [make_hook(spec, group.ca_file)
                       for spec in group.hooks if spec.strip()]

    @property
    def hooks(self) -> list[Hook]:
        if self._hooks is None:
            self.validate()
        return self._hooks

    def ask_all(self, payload: bytes, proposed: frozenset[str]
                ) -> list[Answer]:
        """Every hook's answer, in configured order; asked in parallel."""
        timeout = self.conf[GROUP].timeout
        pool = futures.ThreadPoolExecutor(max_workers=len(self.hooks),
                                          thread_name_prefix='veto-hook')
        try:
            jobs = [pool.submit(h.ask, payload, proposed, timeout)
                    for h in self.hooks]
            # Executables are killed at the timeout; a grace second more
            # bounds an HTTP server that drips its answer.
            futures.wait(jobs, timeout=timeout + 1)
            answers = []
            for hook, job in zip(self.hooks, jobs):
                if not job.done():
                    answers.append(Answer(hook.name, error='no answer '
                                          'within %gs' % timeout))
                elif job.exception() is not None:
                    answers.append(Answer(hook.name, error='asking it failed:'
                                          ' %s' % job.exception()))
                else:
                    answers.append(job.result())
            return answers
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def check(self, ctx: base.GateContext) -> base.GateVerdict:
        """Ask the hooks about ``ctx.candidates``.

        With ``ctx.submit`` (the service) the hooks are asked as a job on
        the engine's executor, so a slow hook never holds up the tick nor
        the other hosts' workflows: until the job is done the proposed
        hosts are BLOCKED ("waiting for the veto hooks") and the verdict
        names the job, which the engine waits for before planning again.
        An answer is used once, for the proposal it was asked about; a
        new proposal is asked anew. Without ``ctx.submit`` (a dry run
        asked to) they are asked in place.
        """
        if not self.hooks:
            return base.GateVerdict()
        proposed = frozenset(ctx.candidates)
        payload = json.dumps(proposal(ctx), sort_keys=True).encode()
        if ctx.submit is None:
            return self._verdict(self.ask_all(payload, proposed), proposed)
        job = self._job
        if job is not None and job[1].done():
            self._job = None
            if job[0] == proposed:
                return self._verdict(self._answers(job[1]), proposed)
            job = None  # answered a proposal that changed since: ask anew
        if job is None:
            fut = ctx.submit(self.ask_all, payload, proposed)
            if fut.done():  # asked at once (an idle executor, a simulation)
                return self._verdict(self._answers(fut), proposed)
            self._job = job = (proposed, fut)
        why = ('waiting for the veto hooks\' answer' if job[0] == proposed
               else 'waiting for the veto hooks to answer an earlier '
                    'proposal before asking about this one')
        return base.GateVerdict(blocked_hosts={h: why for h in proposed},
                                waiting=(job[1],))

    def _answers(self, fut: Future) -> list[Answer]:
        exc = fut.exception()
        if exc is not None:
            return [Answer(h.name, error='asking it failed: %s' % exc)
                    for h in self.hooks]
        return fut.result()

    def _verdict(self, answers: list[Answer], proposed: frozenset[str]
                 ) -> base.GateVerdict:
        block_all: list[str] = []
        blocked: dict[str, list[str]] = {}
        on_error = self.conf[GROUP].on_error
        for ans in answers:
            if ans.error:
                msg = 'hook %s failed: %s' % (ans.hook, ans.error)
                if on_error == 'veto':
                    block_all.append(msg + ' ([veto_hooks] on_error = veto)')
                else:
                    LOG.warning('%s; ignored ([veto_hooks] on_error = '
                                'allow)', msg)
            elif ans.veto_all:
                block_all.append('hook %s vetoes %s: %s' % (
                    ans.hook, ', '.join(sorted(proposed)), ans.reason))
            for host in sorted(ans.veto):
                blocked.setdefault(host, []).append(
                    'hook %s vetoes %s: %s' % (ans.hook, host, ans.reason))
        return base.GateVerdict(
            block_all='; '.join(block_all) or None,
            blocked_hosts={h: '; '.join(w) for h, w in blocked.items()})
