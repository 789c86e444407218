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

"""Exceptions shared by every part of instanceha.

Every message names its culprit (an option, a host, a driver) and never
carries a secret: callers may log str(exc) as it is.
"""


class InstanceHAError(Exception):
    """Base of every error instanceha raises on purpose."""


class ConfigurationError(InstanceHAError):
    """A setting is missing, malformed, out of range or contradictory."""


class DriverLoadError(ConfigurationError):
    """A configured driver name is unknown or its module fails to import."""


class CloudError(InstanceHAError):
    """The cloud (Nova, Keystone) refused or failed a request.

    request_id carries Nova's x-openstack-request-id when known so
    an operator can find the call in Nova's own logs.
    """

    def __init__(self, message: str, request_id: str | None = None,
                 status: int | None = None):
        if request_id:
            message = '%s (request id %s)' % (message, request_id)
        super().__init__(message)
        self.request_id = request_id
        self.status = status


class FencingError(InstanceHAError):
    """A fencing device did not prove the host's power state."""


class CoordinationError(InstanceHAError):
    """The coordination backend is unreachable or leadership was lost."""


class NotifierError(InstanceHAError):
    """A notification could not be delivered (never stops a recovery)."""
