"""Secret replication logic, independent of the WebAssembly bindings.

A Secret annotated ``replicator.kube/replicate-to: ns1,ns2`` (the *source*) is copied into each
listed namespace under the same name (a *replica*). Replicas carry the labels
``replicator.kube/replica: "true"`` and ``replicator.kube/source-namespace: <ns>`` and record
their source as ``namespace/name`` in the annotation ``replicator.kube/source``; they hold the
source's ``type`` and ``data`` and nothing else of it.

Why the source's namespace is a label: a source's replicas are found with a label selector over
the host's cache (metadata only), so a reconcile never copies unrelated Secrets into the guest.
The name needs no label (names can be longer than label values may be): a replica has its
source's name.

Everything the controller does to the cluster goes through an ``api`` object (see ``Api``), so
this module runs unchanged inside the component (``app.py`` adapts the host's imports to it) and
in plain CPython against a fake cluster (``tests/``). That includes Kubernetes Events: each
action on a source (replicas written, replicas deleted, a target it cannot write) is recorded
as one, which ``kubectl describe secret`` and ``kubectl events`` show.

Handlers receive the object as the host's cache holds it (``Cached``: the metadata the host
parsed, beside the JSON), so a Secret that is neither a replica nor a source is passed over
without parsing its JSON: most Secrets in a cluster are neither.

Settings (``Settings``) come from the operator's ``config:`` for the plugin, checked at load.

Why one reconcile per *source* key: every decision (which namespaces, what content, which stale
replicas to remove) depends on the source alone, so events on replicas are mapped back to their
source's key. A hand-edited replica thus triggers a reconcile of its source, which restores it.
"""

import json

TARGETS_ANNOTATION = "replicator.kube/replicate-to"
SOURCE_ANNOTATION = "replicator.kube/source"
REPLICA_LABEL = "replicator.kube/replica"
SOURCE_NAMESPACE_LABEL = "replicator.kube/source-namespace"
REPLICA_SELECTOR = REPLICA_LABEL + "=true"

# How long to wait before trying again when a listed namespace does not exist (yet), unless
# configured. The controller does not watch Namespaces (it would need the right to), so it polls
# for them at this modest rate instead.
MISSING_NAMESPACE_RETRY_MS = 30_000

# Event types, as the API spells them.
NORMAL = "Normal"
WARNING = "Warning"


class Settings:
    """What the operator may set: the ``config:`` of the plugin's entry in the host's plugins
    file, a JSON object with camelCase keys (``null`` when none was given, which is the
    defaults). Unknown keys are refused, so a typo never silently leaves a default in force.

    ``missingNamespaceRetrySeconds``: how long to wait before trying a listed namespace that
    does not exist again, 1 to 3600 (default 30).
    """

    KEYS = ("missingNamespaceRetrySeconds",)
    RETRY_RANGE = (1, 3600)

    def __init__(self, missing_namespace_retry_seconds=MISSING_NAMESPACE_RETRY_MS // 1000):
        self.missing_namespace_retry_seconds = missing_namespace_retry_seconds

    @property
    def missing_namespace_retry_ms(self):
        return self.missing_namespace_retry_seconds * 1000

    @classmethod
    def parse(cls, raw):
        """The settings in ``raw`` (the JSON bytes ``config.get`` returns). Raises ``ValueError``
        with a message for the operator when they are not valid."""
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        try:
            value = json.loads(text) if text.strip() else None
        except ValueError as e:
            raise ValueError(f"invalid configuration: not JSON: {e}") from None
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ValueError(
                f"invalid configuration: expected a map of settings, not {json.dumps(value)}"
            )
        unknown = sorted(k for k in value if k not in cls.KEYS)
        if unknown:
            raise ValueError(
                f"invalid configuration: unknown key {unknown[0]!r} (known: {', '.join(cls.KEYS)})"
            )
        retry = value.get("missingNamespaceRetrySeconds", MISSING_NAMESPACE_RETRY_MS // 1000)
        low, high = cls.RETRY_RANGE
        if isinstance(retry, bool) or not isinstance(retry, int):
            raise ValueError(
                f"missingNamespaceRetrySeconds must be a whole number of seconds, not {retry!r}"
            )
        if not low <= retry <= high:
            raise ValueError(
                f"missingNamespaceRetrySeconds must be between {low} and {high}, not {retry}"
            )
        return cls(retry)


class Cached:
    """An object as a notification brings it: the metadata the host already parsed
    (``namespace``, ``name``, ``labels``) and the JSON, parsed only when ``obj()`` is called."""

    def __init__(self, namespace, name, labels, raw):
        self.namespace = namespace
        self.name = name
        self.labels = labels
        self.raw = raw
        self._parsed = False
        self._obj = None

    @classmethod
    def of(cls, obj):
        """The notification for ``obj`` (a dict), as the host would send it."""
        meta = _meta(obj)
        labels = dict(_map(meta, "labels"))
        return cls(meta.get("namespace"), meta.get("name", ""), labels, json.dumps(obj).encode())

    def obj(self):
        """The whole object (None when the JSON is not an object), parsed on first use."""
        if not self._parsed:
            self._obj = parse(self.raw)
            self._parsed = True
        return self._obj

    def may_matter(self):
        """Whether the object can be a replica or a source, from the metadata and a byte search
        alone: a source names the annotation in its JSON, a replica carries the label."""
        return self.labels.get(REPLICA_LABEL) == "true" or TARGETS_ANNOTATION.encode() in self.raw


class ApiError(Exception):
    """An API failure: the HTTP code and the API's machine-readable reason."""

    def __init__(self, code, reason, message=""):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Api:
    """What the logic needs from the host. ``app.py`` and the tests' fake implement it.

    Reads come from the host's informer cache; writes go to the API server.
    """

    def get(self, namespace, name):
        """The Secret ``namespace/name`` as a dict, or None."""
        raise NotImplementedError

    def list_meta(self, label_selector):
        """Metadata of the Secrets in every namespace matching ``label_selector``: dicts with
        ``namespace``, ``name`` and ``uid``."""
        raise NotImplementedError

    def apply(self, namespace, name, obj):
        """Server-side apply (forced) of ``obj``; returns the stored object."""
        raise NotImplementedError

    def merge_patch(self, namespace, name, patch):
        """JSON merge patch; returns the stored object."""
        raise NotImplementedError

    def delete(self, namespace, name, uid):
        """Deletes the Secret if it still has ``uid``."""
        raise NotImplementedError

    def enqueue(self, key):
        """Adds ``key`` to the workqueue."""
        raise NotImplementedError

    def log(self, level, message):
        """Logs ``message`` at ``level`` (``"info"``, ``"warn"``, ``"error"``)."""
        raise NotImplementedError

    def event(self, regarding, type_, reason, action, note):
        """Records a Kubernetes Event about ``regarding`` (a dict: ``namespace``, ``name`` and
        ``uid`` of a Secret; ``uid`` None when unknown). ``type_`` is ``NORMAL`` or
        ``WARNING``. Never fails: the host aggregates and writes Events on its own time."""
        raise NotImplementedError


def parse(raw):
    """The object in ``raw`` (JSON bytes), or None when it is not a JSON object."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _meta(obj):
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _map(meta, field):
    value = meta.get(field)
    return value if isinstance(value, dict) else {}


def key_of(obj):
    """``namespace/name`` of a namespaced object."""
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_replica(obj):
    """Whether ``obj`` is a replica this controller made (by its label)."""
    return _map(_meta(obj), "labels").get(REPLICA_LABEL) == "true"


def source_of(replica):
    """The source key a replica records, or None."""
    value = _map(_meta(replica), "annotations").get(SOURCE_ANNOTATION)
    return value if isinstance(value, str) and "/" in value else None


def is_source(obj):
    """Whether ``obj`` asks to be replicated (replicas never are, whatever they carry)."""
    return not is_replica(obj) and TARGETS_ANNOTATION in _map(_meta(obj), "annotations")


def _valid_namespace(ns):
    # A DNS-1123 label: what the API server accepts as a namespace name.
    return (
        0 < len(ns) <= 63
        and all(c.islower() or c.isdigit() or c == "-" for c in ns)
        and ns.isascii()
        and ns[0] != "-"
        and ns[-1] != "-"
    )


def target_namespaces(source):
    """The namespaces ``source`` lists, in order, without duplicates, blanks or its own.

    Returns ``(valid, invalid)``.
    """
    own = _meta(source).get("namespace")
    raw = _map(_meta(source), "annotations").get(TARGETS_ANNOTATION)
    valid, invalid = [], []
    if not isinstance(raw, str):
        return valid, invalid
    for part in raw.split(","):
        ns = part.strip()
        if not ns or ns == own or ns in valid:
            continue
        (valid if _valid_namespace(ns) else invalid).append(ns)
    return valid, invalid


def desired_replica(source, namespace):
    """The partial object this controller applies (and so owns) in ``namespace``."""
    meta = _meta(source)
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": meta.get("name"),
            "namespace": namespace,
            "labels": {REPLICA_LABEL: "true", SOURCE_NAMESPACE_LABEL: meta.get("namespace")},
            "annotations": {SOURCE_ANNOTATION: key_of(source)},
        },
        "type": source.get("type") or "Opaque",
    }
    data = source.get("data")
    obj["data"] = dict(data) if isinstance(data, dict) else {}
    return obj


def up_to_date(current, desired):
    """Whether ``current`` already matches ``desired`` exactly (data keys included)."""
    meta, want = _meta(current), desired["metadata"]
    labels = _map(meta, "labels")
    return (
        (current.get("type") or "Opaque") == desired["type"]
        and (current.get("data") or {}) == desired["data"]
        and all(labels.get(k) == v for k, v in want["labels"].items())
        and _map(meta, "annotations").get(SOURCE_ANNOTATION)
        == want["annotations"][SOURCE_ANNOTATION]
    )


# --- handlers: map every event to the key of the source it concerns ---------------------------


def _enqueue_for(api, cached):
    if not cached.may_matter():
        return
    obj = cached.obj()
    if obj is None:
        return
    if is_replica(obj):
        src = source_of(obj)
        if src is not None:
            api.enqueue(src)
    elif is_source(obj):
        api.enqueue(key_of(obj))


def on_add(api, cached):
    _enqueue_for(api, cached)


def on_update(api, old, new):
    _enqueue_for(api, new)
    # A source whose annotation was removed must still be reconciled, to delete its replicas.
    if old.may_matter():
        o = old.obj()
        if o is not None and is_source(o):
            n = new.obj() if new.may_matter() else None
            if n is None or not is_source(n):
                api.enqueue(key_of(o))


def on_delete(api, cached):
    _enqueue_for(api, cached)


# --- reconcile -------------------------------------------------------------------------------


class Result:
    """What ``reconcile`` decided: ``requeue_after_ms`` is None when the key is done."""

    def __init__(self, requeue_after_ms=None):
        self.requeue_after_ms = requeue_after_ms


def _split(key):
    ns, sep, name = key.partition("/")
    if not sep or not ns or not name:
        raise ValueError(f"not a namespace/name key: {key!r}")
    return ns, name


def _ref(namespace, name, uid):
    return {"namespace": namespace, "name": name, "uid": uid}


def reconcile(api, key, settings=None):
    """Makes the replicas of source ``key`` match it. Raises ``ApiError`` to be retried.

    Each action is an Event about the source (while it exists; about its last known reference
    otherwise, which ``kubectl events`` still lists): ``Normal Replicated`` (action
    ``Replicate``) naming the namespaces written, ``Normal ReplicasDeleted`` (action ``Delete``)
    naming the replicas removed, ``Warning ReplicaConflict`` for a target holding a Secret that
    is not its replica, ``Warning InvalidNamespace`` and ``Warning NamespaceMissing`` (action
    ``Replicate``) for targets it cannot write.
    """
    settings = settings or Settings()
    ns, name = _split(key)
    source = api.get(ns, name)
    deleting = source is not None and _meta(source).get("deletionTimestamp") is not None
    regarding = _ref(ns, name, _meta(source).get("uid") if source is not None else None)
    if source is None or deleting or not is_source(source):
        targets = []
    else:
        targets, invalid = target_namespaces(source)
        for bad in invalid:
            api.log("warn", f"{key}: {TARGETS_ANNOTATION} names an invalid namespace {bad!r}")
        if invalid:
            api.event(
                regarding,
                WARNING,
                "InvalidNamespace",
                "Replicate",
                f"{TARGETS_ANNOTATION} names invalid namespaces: {', '.join(invalid)}; skipped",
            )

    # Stale replicas: this source's (its namespace by label, its name), in a namespace no longer
    # listed.
    deleted = []
    for replica in api.list_meta(f"{REPLICA_SELECTOR},{SOURCE_NAMESPACE_LABEL}={ns}"):
        rns = replica.get("namespace")
        if replica.get("name") != name or rns in targets:
            continue
        _delete(api, rns, name, replica.get("uid"))
        api.log("info", f"{key}: deleted replica {rns}/{name}")
        deleted.append(f"{rns}/{name}")
    if deleted:
        if source is None or deleting:
            why = "the source is gone"
        elif not is_source(source):
            why = f"the source no longer has {TARGETS_ANNOTATION}"
        else:
            why = "no longer listed"
        api.event(
            regarding,
            NORMAL,
            "ReplicasDeleted",
            "Delete",
            f"deleted replicas {', '.join(sorted(deleted))}: {why}",
        )

    missing, written = [], []
    for target in targets:
        outcome = _replicate(api, source, key, target, name)
        if outcome == "missing":
            missing.append(target)
        elif outcome == "written":
            written.append(target)
        elif outcome == "conflict":
            api.event(
                regarding,
                WARNING,
                "ReplicaConflict",
                "Replicate",
                f"{target}/{name} exists and is not its replica; leaving it alone",
            )
    if written:
        api.event(
            regarding,
            NORMAL,
            "Replicated",
            "Replicate",
            f"replicated to {', '.join(written)}",
        )
    if missing:
        retry_ms = settings.missing_namespace_retry_ms
        what = f"namespaces {','.join(missing)} do not exist; retrying in {retry_ms // 1000}s"
        api.log("info", f"{key}: {what}")
        api.event(regarding, WARNING, "NamespaceMissing", "Replicate", what)
        return Result(retry_ms)
    return Result()


def _delete(api, namespace, name, uid):
    try:
        api.delete(namespace, name, uid)
    except ApiError as e:
        # Gone already (404), or replaced by a new object with another UID (409): not ours now.
        if e.code not in (404, 409):
            raise


def _replicate(api, source, key, target, name):
    """Brings one replica up to date: returns "written" or "ok" (nothing to write), "missing"
    when the namespace does not exist, "conflict" when another Secret holds the name."""
    desired = desired_replica(source, target)
    current = api.get(target, name)
    if current is not None:
        if not is_replica(current) or source_of(current) != key:
            # Someone else's Secret (or another source's replica): never overwrite it.
            api.log(
                "warn",
                f"{key}: {target}/{name} exists and is not its replica; leaving it alone",
            )
            return "conflict"
        if up_to_date(current, desired):
            return "ok"
    try:
        stored = api.apply(target, name, desired)
    except ApiError as e:
        if e.code == 404:
            return "missing"
        if e.code == 422 and current is not None:
            # A Secret's type cannot change in place: recreate the replica.
            _delete(api, target, name, _meta(current).get("uid"))
            stored = api.apply(target, name, desired)
        else:
            raise
    # Apply only removes fields this controller applied before; keys another writer added by
    # hand stay unless removed explicitly, and a replica must hold exactly the source's data.
    extra = [k for k in (stored.get("data") or {}) if k not in desired["data"]]
    if extra:
        api.merge_patch(target, name, {"data": {k: None for k in extra}})
    api.log("info", f"{key}: replicated to {target}")
    return "written"
