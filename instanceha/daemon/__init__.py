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

"""What runs the service: the production wiring and what lives beside it.

The composition root (:mod:`.service`), health and metrics over HTTP, the
configuration checks start-up shares with ``config validate``, live reload,
the shutdown policy's side effects and what the leading copy answers the
heartbeat agents (:mod:`.hostside`). The simulator reuses some of these
pieces; the engine imports none of them.
"""
