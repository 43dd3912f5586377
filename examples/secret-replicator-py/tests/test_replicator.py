"""Unit tests of the replication logic against an in-memory fake cluster, in plain CPython.

Run from the repository root: python3 -m unittest discover -s examples/secret-replicator-py/tests
(The component itself is tested end to end by tests/example_secret_replicator_py.rs.)
"""

import itertools
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import replicator  # noqa: E402
from replicator import (  # noqa: E402
    NORMAL,
    REPLICA_LABEL,
    SOURCE_ANNOTATION,
    TARGETS_ANNOTATION,
    WARNING,
    ApiError,
    Cached,
    Settings,
)


class FakeCluster(replicator.Api):
    """Secrets by (namespace, name), with the API-server behaviour the logic relies on.

    apply models server-side apply as seen by one field manager: the fields it applies are set,
    data keys that another writer added stay; a missing namespace is a 404; a type change is a
    422; delete checks the UID precondition (409) and existence (404).
    """

    def __init__(self, namespaces=("default", "a", "b", "c")):
        self.namespaces = set(namespaces)
        self.secrets = {}
        self.queue = []
        self.logs = []
        self.writes = []
        self.events = []
        self._uids = itertools.count(1)

    # seeding, as another client would
    def put(self, namespace, name, data=None, annotations=None, labels=None, type_="Opaque"):
        obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{next(self._uids)}",
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
            },
            "type": type_,
            "data": dict(data or {}),
        }
        self.secrets[(namespace, name)] = obj
        return obj

    def raw(self, obj):
        """The notification the host sends for ``obj``."""
        return Cached.of(obj)

    # the Api
    def get(self, namespace, name):
        obj = self.secrets.get((namespace, name))
        return json.loads(json.dumps(obj)) if obj is not None else None

    def list_meta(self, label_selector):
        terms = [t.partition("=") for t in label_selector.split(",")]
        return [
            {k: o["metadata"][k] for k in ("namespace", "name", "uid")}
            for o in self.secrets.values()
            if all(o["metadata"].get("labels", {}).get(k) == v for k, _, v in terms)
        ]

    def apply(self, namespace, name, obj):
        self.writes.append(("apply", namespace, name))
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        current = self.secrets.get((namespace, name))
        if current is None:
            current = self.put(namespace, name, type_=obj["type"])
        elif current["type"] != obj["type"]:
            raise ApiError(422, "Invalid", "type: field is immutable")
        meta = current["metadata"]
        meta.setdefault("labels", {}).update(obj["metadata"]["labels"])
        meta.setdefault("annotations", {}).update(obj["metadata"]["annotations"])
        applied = self._applied.setdefault((namespace, name), set())
        for k in applied - set(obj["data"]):
            current["data"].pop(k, None)
        current["data"].update(obj["data"])
        self._applied[(namespace, name)] = set(obj["data"])
        return self.get(namespace, name)

    _applied = None

    def merge_patch(self, namespace, name, patch):
        self.writes.append(("patch", namespace, name))
        current = self.secrets.get((namespace, name))
        if current is None:
            raise ApiError(404, "NotFound", "not found")
        for k, v in patch.get("data", {}).items():
            if v is None:
                current["data"].pop(k, None)
            else:
                current["data"][k] = v
        return self.get(namespace, name)

    def delete(self, namespace, name, uid):
        self.writes.append(("delete", namespace, name))
        current = self.secrets.get((namespace, name))
        if current is None:
            raise ApiError(404, "NotFound", "not found")
        if uid is not None and current["metadata"]["uid"] != uid:
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        del self.secrets[(namespace, name)]
        self._applied.pop((namespace, name), None)

    def enqueue(self, key):
        self.queue.append(key)

    def log(self, level, message):
        self.logs.append((level, message))

    def event(self, regarding, type_, reason, action, note):
        self.events.append((regarding, type_, reason, action, note))

    def take_events(self):
        """(type, reason, action, note, regarding key, regarding uid) of each event so far."""
        out = [
            (t, r, a, n, f"{g['namespace']}/{g['name']}", g["uid"])
            for g, t, r, a, n in self.events
        ]
        self.events = []
        return out


def b64(s):
    import base64

    return base64.b64encode(s.encode()).decode()


class Base(unittest.TestCase):
    def setUp(self):
        self.k = FakeCluster()
        self.k._applied = {}

    def source(self, targets, data=None, name="creds", ns="default"):
        ann = {} if targets is None else {TARGETS_ANNOTATION: targets}
        return self.k.put(ns, name, data or {"password": b64("s3cret")}, annotations=ann)

    def replica(self, ns, name="creds"):
        return self.k.secrets.get((ns, name))


class Handlers(Base):
    def test_a_source_enqueues_its_own_key(self):
        src = self.source("a,b")
        replicator.on_add(self.k, self.k.raw(src))
        self.assertEqual(self.k.queue, ["default/creds"])

    def test_an_unannotated_secret_is_ignored(self):
        plain = self.source(None)
        replicator.on_add(self.k, self.k.raw(plain))
        replicator.on_update(self.k, self.k.raw(plain), self.k.raw(plain))
        replicator.on_delete(self.k, self.k.raw(plain))
        self.assertEqual(self.k.queue, [])

    def test_replica_events_enqueue_the_source_key(self):
        rep = self.k.put(
            "a",
            "creds",
            labels={REPLICA_LABEL: "true"},
            annotations={SOURCE_ANNOTATION: "default/creds", TARGETS_ANNOTATION: "c"},
        )
        replicator.on_add(self.k, self.k.raw(rep))
        replicator.on_update(self.k, self.k.raw(rep), self.k.raw(rep))
        replicator.on_delete(self.k, self.k.raw(rep))
        # Never its own key, even though a hand edit gave it the replicate-to annotation.
        self.assertEqual(self.k.queue, ["default/creds"] * 3)

    def test_removing_the_annotation_still_enqueues_the_source(self):
        old = self.source("a")
        new = json.loads(json.dumps(old))
        new["metadata"]["annotations"] = {}
        replicator.on_update(self.k, self.k.raw(old), self.k.raw(new))
        self.assertEqual(self.k.queue, ["default/creds"])

    def test_garbage_is_ignored(self):
        annotated = TARGETS_ANNOTATION.encode()
        replicator.on_add(self.k, Cached("default", "x", {}, b"not json " + annotated))
        replicator.on_add(self.k, Cached("default", "x", {REPLICA_LABEL: "true"}, b"[1,2]"))
        self.assertEqual(self.k.queue, [])

    def test_secrets_that_are_neither_source_nor_replica_are_not_parsed(self):
        # The metadata and a byte search decide: a body that would not even parse is not read.
        plain = Cached("default", "token", {"app": "web"}, b"{not json at all")
        replicator.on_add(self.k, plain)
        replicator.on_update(self.k, plain, plain)
        replicator.on_delete(self.k, plain)
        self.assertEqual(self.k.queue, [])
        self.assertFalse(plain._parsed)
        src = self.k.raw(self.source("a"))
        self.assertTrue(src.may_matter())
        replicator.on_add(self.k, src)
        self.assertTrue(src._parsed)
        self.assertEqual(self.k.queue, ["default/creds"])


class TargetParsing(unittest.TestCase):
    def targets(self, value, ns="default"):
        src = {"metadata": {"namespace": ns, "annotations": {TARGETS_ANNOTATION: value}}}
        return replicator.target_namespaces(src)

    def test_blanks_duplicates_and_own_namespace_are_dropped(self):
        self.assertEqual(self.targets(" a, ,b,a,default,"), (["a", "b"], []))

    def test_invalid_names_are_reported(self):
        self.assertEqual(self.targets("a,Bad,-x,ok-1,x_y"), (["a", "ok-1"], ["Bad", "-x", "x_y"]))


class Reconcile(Base):
    def test_creates_replicas_in_every_listed_namespace(self):
        src = self.source("a, b")
        result = replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(result.requeue_after_ms)
        for ns in ("a", "b"):
            rep = self.replica(ns)
            self.assertEqual(rep["data"], src["data"])
            self.assertEqual(rep["type"], "Opaque")
            self.assertEqual(
                rep["metadata"]["labels"],
                {REPLICA_LABEL: "true", replicator.SOURCE_NAMESPACE_LABEL: "default"},
            )
            self.assertEqual(
                rep["metadata"]["annotations"], {SOURCE_ANNOTATION: "default/creds"}
            )
        self.assertIsNone(self.replica("c"))

    def test_up_to_date_replicas_are_not_written_again(self):
        self.source("a")
        replicator.reconcile(self.k, "default/creds")
        self.k.writes.clear()
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.k.writes, [])

    def test_a_changed_source_updates_replicas(self):
        src = self.source("a")
        replicator.reconcile(self.k, "default/creds")
        src["data"] = {"password": b64("rotated"), "user": b64("admin")}
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.replica("a")["data"], src["data"])

    def test_a_hand_edited_replica_is_restored_exactly(self):
        src = self.source("a")
        replicator.reconcile(self.k, "default/creds")
        rep = self.replica("a")
        rep["data"]["password"] = b64("tampered")
        rep["data"]["extra"] = b64("added by hand")
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.replica("a")["data"], src["data"])

    def test_a_namespace_dropped_from_the_list_loses_its_replica(self):
        src = self.source("a,b")
        replicator.reconcile(self.k, "default/creds")
        src["metadata"]["annotations"][TARGETS_ANNOTATION] = "b"
        replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(self.replica("a"))
        self.assertIsNotNone(self.replica("b"))

    def test_a_deleted_source_deletes_all_its_replicas_only(self):
        self.source("a,b")
        other = self.source("a", name="other")
        replicator.reconcile(self.k, "default/creds")
        replicator.reconcile(self.k, "default/other")
        del self.k.secrets[("default", "creds")]
        replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(self.replica("a"))
        self.assertIsNone(self.replica("b"))
        self.assertEqual(self.replica("a", "other")["data"], other["data"])

    def test_a_same_named_source_elsewhere_keeps_its_replicas(self):
        self.source("a")
        self.source("b", ns="c")
        replicator.reconcile(self.k, "default/creds")
        replicator.reconcile(self.k, "c/creds")
        del self.k.secrets[("default", "creds")]
        replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(self.replica("a"))
        kept = self.replica("b")
        self.assertEqual(kept["metadata"]["annotations"][SOURCE_ANNOTATION], "c/creds")

    def test_a_removed_annotation_deletes_the_replicas(self):
        src = self.source("a")
        replicator.reconcile(self.k, "default/creds")
        src["metadata"]["annotations"] = {}
        replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(self.replica("a"))

    def test_someone_elses_secret_is_never_overwritten(self):
        self.source("a")
        mine = self.k.put("a", "creds", {"k": b64("theirs")})
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.replica("a"), mine)
        self.assertTrue(any(level == "warn" and "a/creds" in m for level, m in self.k.logs))

    def test_a_missing_namespace_is_retried_later(self):
        self.source("a,later")
        result = replicator.reconcile(self.k, "default/creds")
        self.assertEqual(result.requeue_after_ms, replicator.MISSING_NAMESPACE_RETRY_MS)
        self.assertIsNotNone(self.replica("a"))
        self.k.namespaces.add("later")
        result = replicator.reconcile(self.k, "default/creds")
        self.assertIsNone(result.requeue_after_ms)
        self.assertIsNotNone(self.replica("later"))

    def test_the_retry_interval_is_a_setting(self):
        self.source("later")
        settings = Settings.parse(b'{"missingNamespaceRetrySeconds": 5}')
        result = replicator.reconcile(self.k, "default/creds", settings)
        self.assertEqual(result.requeue_after_ms, 5000)
        self.assertIn(
            ("info", "default/creds: namespaces later do not exist; retrying in 5s"), self.k.logs
        )

    def test_a_changed_type_recreates_the_replica(self):
        src = self.source("a")
        replicator.reconcile(self.k, "default/creds")
        old_uid = self.replica("a")["metadata"]["uid"]
        src["type"] = "kubernetes.io/basic-auth"
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.replica("a")["type"], "kubernetes.io/basic-auth")
        self.assertNotEqual(self.replica("a")["metadata"]["uid"], old_uid)

    def test_a_replica_recreated_meanwhile_is_not_deleted(self):
        # The cache still shows the old replica; the server has a new object under that name.
        self.source("a")
        replicator.reconcile(self.k, "default/creds")
        stale = self.k.list_meta(replicator.REPLICA_SELECTOR)
        self.k.secrets[("a", "creds")]["metadata"]["uid"] = "someone-else"
        del self.k.secrets[("default", "creds")]
        self.k.list_meta = lambda _sel: stale
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.replica("a")["metadata"]["uid"], "someone-else")

    def test_api_errors_propagate_for_retry(self):
        self.source("a")

        def refuse(*_args):
            raise ApiError(500, "InternalError", "boom")

        self.k.apply = refuse
        with self.assertRaises(ApiError):
            replicator.reconcile(self.k, "default/creds")

    def test_a_bad_key_is_an_error(self):
        with self.assertRaises(ValueError):
            replicator.reconcile(self.k, "no-namespace")


class SettingsParsing(unittest.TestCase):
    def test_no_configuration_is_the_defaults(self):
        for raw in (b"null", b"", b"{}", "null"):
            s = Settings.parse(raw)
            self.assertEqual(s.missing_namespace_retry_seconds, 30)
            self.assertEqual(s.missing_namespace_retry_ms, replicator.MISSING_NAMESPACE_RETRY_MS)

    def test_the_retry_interval_is_checked(self):
        self.assertEqual(
            Settings.parse(b'{"missingNamespaceRetrySeconds": 3600}').missing_namespace_retry_ms,
            3_600_000,
        )
        for raw, message in [
            (b'{"missingNamespaceRetrySeconds": 0}', "between 1 and 3600, not 0"),
            (b'{"missingNamespaceRetrySeconds": 3601}', "between 1 and 3600, not 3601"),
            (b'{"missingNamespaceRetrySeconds": "30s"}', "whole number of seconds, not '30s'"),
            (b'{"missingNamespaceRetrySeconds": true}', "whole number of seconds, not True"),
            (b'{"missingNamespaceRetrySeconds": 1.5}', "whole number of seconds, not 1.5"),
        ]:
            with self.assertRaises(ValueError) as e:
                Settings.parse(raw)
            self.assertIn(message, str(e.exception))
            self.assertTrue(str(e.exception).startswith("missingNamespaceRetrySeconds must be"))

    def test_unknown_keys_and_non_maps_are_refused(self):
        with self.assertRaises(ValueError) as e:
            Settings.parse(b'{"retrySeconds": 5}')
        self.assertEqual(
            str(e.exception),
            "invalid configuration: unknown key 'retrySeconds' "
            "(known: missingNamespaceRetrySeconds)",
        )
        for raw in (b"[1]", b'"x"', b"7", b"{"):
            with self.assertRaises(ValueError) as e:
                Settings.parse(raw)
            self.assertTrue(str(e.exception).startswith("invalid configuration: "))


class Events(Base):
    def test_each_replication_is_one_normal_event_on_the_source(self):
        src = self.source("a, b")
        uid = src["metadata"]["uid"]
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(
            self.k.take_events(),
            [(NORMAL, "Replicated", "Replicate", "replicated to a, b", "default/creds", uid)],
        )
        # Nothing written, nothing recorded.
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(self.k.take_events(), [])
        # An update is written to every replica again.
        src["data"] = {"password": b64("rotated")}
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(
            [e[1:4] for e in self.k.take_events()],
            [("Replicated", "Replicate", "replicated to a, b")],
        )

    def test_deleted_replicas_are_named_in_order_whatever_the_cache_s(self):
        self.source("b,a")
        replicator.reconcile(self.k, "default/creds")
        listed = self.k.list_meta
        self.k.list_meta = lambda sel: list(reversed(listed(sel)))
        del self.k.secrets[("default", "creds")]
        self.k.take_events()
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(
            [e[3] for e in self.k.take_events()],
            ["deleted replicas a/creds, b/creds: the source is gone"],
        )

    def test_deleted_replicas_are_one_event_saying_why(self):
        src = self.source("a,b")
        uid = src["metadata"]["uid"]
        replicator.reconcile(self.k, "default/creds")
        self.k.take_events()
        src["metadata"]["annotations"][TARGETS_ANNOTATION] = "b"
        replicator.reconcile(self.k, "default/creds")
        self.assertEqual(
            self.k.take_events(),
            [
                (
                    NORMAL,
                    "ReplicasDeleted",
                    "Delete",
                    "deleted replicas a/creds: no longer listed",
                    "default/creds",
                    uid,
                )
            ],
        )
        del self.k.secrets[("default", "creds")]
        replicator.reconcile(self.k, "default/creds")
        # The source is gone: the event names it without a uid (kubectl events lists it).
        self.assertEqual(
            self.k.take_events(),
            [
                (
                    NORMAL,
                    "ReplicasDeleted",
                    "Delete",
                    "deleted replicas b/creds: the source is gone",
                    "default/creds",
                    None,
                )
            ],
        )

    def test_targets_it_cannot_write_are_warnings(self):
        self.source("a, Bad_Name, later")
        self.k.put("a", "creds", {"k": b64("theirs")})
        result = replicator.reconcile(self.k, "default/creds")
        self.assertEqual(result.requeue_after_ms, replicator.MISSING_NAMESPACE_RETRY_MS)
        self.assertEqual(
            [e[:4] for e in self.k.take_events()],
            [
                (
                    WARNING,
                    "InvalidNamespace",
                    "Replicate",
                    f"{TARGETS_ANNOTATION} names invalid namespaces: Bad_Name; skipped",
                ),
                (
                    WARNING,
                    "ReplicaConflict",
                    "Replicate",
                    "a/creds exists and is not its replica; leaving it alone",
                ),
                (
                    WARNING,
                    "NamespaceMissing",
                    "Replicate",
                    "namespaces later do not exist; retrying in 30s",
                ),
            ],
        )


if __name__ == "__main__":
    unittest.main()
