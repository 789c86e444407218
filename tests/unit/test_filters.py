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

"""Filters on hand-built snapshots: tag matching, OR groups, globs."""

import testtools

from instanceha.conf import filters as filters_conf
from instanceha.engine import model
from instanceha.engine import plan
from instanceha.plugins.filters import tags
from tests.unit import test_decide as h

D = plan.Decision
TAGGED = model.Flavor('gold', {'evacuable': 'true'})
PLAIN = model.Flavor('plain', {'other': 'true'})
IMG_TAG = model.Image('img-tag', 'tag-image', tags=('evacuable',))
IMG_PROP = model.Image('img-prop', 'prop-image',
                       properties={'evacuable': ' Yes '})
IMG_PLAIN = model.Image('img-plain', 'plain-image', tags=('Evacuable',),
                        properties={'evacuable': 'nope'})


ALL_IMAGES = (IMG_TAG, IMG_PROP, IMG_PLAIN)


def failed_host(servers, aggregates=(), images=ALL_IMAGES):
    """host1 down with `servers`, host2..host4 healthy (no threshold)."""
    services, _ = h.cloud(4, down={'host1'})
    return h.snapshot(services, servers, aggregates, images)


def tagging_conf(**tagging):
    return h.make_conf(tagging=tagging)


class TestTagMatching(testtools.TestCase):

    def test_true_values(self):
        for value in ('true', 'True', ' TRUE ', 'yes', '1', 'on', 'y', 't'):
            self.assertTrue(tags.is_true(value), value)
        for value in ('false', '', 'nope', 'evacuable', None, '0'):
            self.assertFalse(tags.is_true(value), value)

    def test_image_tag_is_case_sensitive_property_value_is_not(self):
        self.assertTrue(tags.image_tagged(IMG_TAG, 'evacuable'))
        self.assertTrue(tags.image_tagged(IMG_PROP, 'evacuable'))
        self.assertFalse(tags.image_tagged(IMG_PLAIN, 'evacuable'))

    def test_flavor_key_is_case_sensitive(self):
        flavor = model.Flavor('f', {'Evacuable': 'true'})
        self.assertFalse(tags.flavor_tagged(flavor, 'evacuable'))
        self.assertTrue(tags.flavor_tagged(TAGGED, 'evacuable'))

    def test_shorthands_add_filters_once(self):
        conf = h.make_conf(tagging={'tagged_images': True},
                           filters={'enabled': ['enabled', 'tagged-images']})
        self.assertEqual(['enabled', 'tagged-images'],
                         filters_conf.names(conf))


class TestInstanceTags(testtools.TestCase):

    def servers(self):
        return [
            h.server('by-flavor', 'host1', flavor=TAGGED),
            h.server('by-tag', 'host1', flavor=PLAIN, image_id='img-tag'),
            h.server('by-prop', 'host1', flavor=PLAIN, image_id='img-prop'),
            h.server('plain', 'host1', flavor=PLAIN, image_id='img-plain'),
            h.server('volume', 'host1', flavor=PLAIN, image_id=None),
            h.server('gone', 'host1', flavor=PLAIN, image_id='img-gone'),
        ]

    def eligible(self, conf, servers=None, images=ALL_IMAGES):
        p = h.run(failed_host(servers or self.servers(), images=images),
                  conf)
        d = p.decision('host1')
        return d, sorted(s.name for s in d.servers)

    def test_images_or_flavors(self):
        d, names = self.eligible(tagging_conf(tagged_images=True,
                                              tagged_flavors=True))
        self.assertEqual(['by-flavor', 'by-prop', 'by-tag'], names)
        self.assertIn("plain (srv-plain): image plain-image not tagged "
                      "'evacuable' and flavor plain not tagged 'evacuable'",
                      d.reasons[-1])
        self.assertIn('no image (booted from volume)', d.reasons[-1])
        self.assertIn('image img-gone not found', d.reasons[-1])

    def test_images_only(self):
        _d, names = self.eligible(tagging_conf(tagged_images=True))
        self.assertEqual(['by-prop', 'by-tag'], names)

    def test_flavors_only(self):
        _d, names = self.eligible(tagging_conf(tagged_flavors=True))
        self.assertEqual(['by-flavor'], names)

    def test_custom_tag(self):
        flavor = model.Flavor('f', {'ha:evac': 'true'})
        servers = [h.server('a', 'host1', flavor=flavor),
                   h.server('b', 'host1', flavor=TAGGED)]
        _d, names = self.eligible(tagging_conf(
            tagged_flavors=True, evacuable_tag='ha:evac'), servers)
        self.assertEqual(['a'], names)

    def test_host_with_nothing_eligible_is_ignored(self):
        servers = [h.server('plain', 'host1', flavor=PLAIN)]
        d, names = self.eligible(tagging_conf(tagged_flavors=True), servers)
        self.assertEqual(D.IGNORED, d.decision)
        self.assertIn('no eligible instance: plain (srv-plain): flavor '
                      "plain not tagged 'evacuable'", d.reasons)

    def test_nothing_tagged_strict_by_default(self):
        servers = [h.server('plain', 'host1', flavor=PLAIN,
                            image_id='img-plain')]
        conf = tagging_conf(tagged_flavors=True, tagged_images=True)
        d, _ = self.eligible(conf, servers, images=(IMG_PLAIN,))
        self.assertEqual(D.IGNORED, d.decision)

    def test_nothing_tagged_means_all_when_asked(self):
        servers = [h.server('plain', 'host1', flavor=PLAIN,
                            image_id='img-plain')]
        conf = tagging_conf(tagged_flavors=True, tagged_images=True,
                            all_when_none_tagged=True)
        d, names = self.eligible(conf, servers, images=(IMG_PLAIN,))
        self.assertEqual((D.RECOVER, ['plain']), (d.decision, names))

    def test_one_tagged_flavor_anywhere_restores_strictness(self):
        # Red Hat's rule: "none tagged" is judged over the whole cloud
        # and over both sources, not per host or per source.
        servers = [h.server('plain', 'host1', flavor=PLAIN,
                            image_id='img-plain'),
                   h.server('gold', 'host2', flavor=TAGGED,
                            image_id='img-plain')]
        conf = tagging_conf(tagged_flavors=True, tagged_images=True,
                            all_when_none_tagged=True)
        d, _ = self.eligible(conf, servers, images=(IMG_PLAIN,))
        self.assertEqual(D.IGNORED, d.decision)


class TestAggregatesAndNames(testtools.TestCase):

    def test_tagged_aggregates(self):
        servers = [h.server('a', 'host1')]
        aggs = [model.Aggregate('1', 'ha', frozenset({'host1'}),
                                {'evacuable': 'true'})]
        conf = tagging_conf(tagged_aggregates=True)
        p = h.run(failed_host(servers, aggs), conf)
        self.assertEqual(D.RECOVER, p.decision('host1').decision)
        aggs = [model.Aggregate('1', 'ha', frozenset({'host2'}),
                                {'evacuable': 'true'})]
        p = h.run(failed_host(servers, aggs), conf)
        self.assertEqual(D.IGNORED, p.decision('host1').decision)
        self.assertIn("in no aggregate tagged 'evacuable'",
                      p.decision('host1').reasons)
        conf = tagging_conf(tagged_aggregates=True,
                            all_when_none_tagged=True)
        p = h.run(failed_host(servers, ()), conf)
        self.assertEqual(D.RECOVER, p.decision('host1').decision)

    def test_skip_by_name(self):
        servers = [h.server('test-1', 'host1'), h.server('prod-1', 'host1'),
                   h.server('TEST-2', 'host1')]
        conf = h.make_conf(filters={'skip_instance_names': ['test-*']})
        d = h.run(failed_host(servers), conf).decision('host1')
        self.assertEqual(['TEST-2', 'prod-1'],
                         sorted(s.name for s in d.servers))
        self.assertIn("name matches [filters] skip_instance_names "
                      "'test-*'", d.reasons[-1])
        conf = h.make_conf(filters={'skip_host_names': ['host[13]']})
        d = h.run(failed_host(servers), conf).decision('host1')
        self.assertEqual(D.IGNORED, d.decision)
        self.assertIn("host name matches [filters] skip_host_names "
                      "'host[13]'", d.reasons)
