"""A PouchDB-style replica: a local database of revision trees that replicates with a gateway (or any CouchDB-protocol
server) by PouchDB's algorithm, and the REST client it calls the gateway with. Standard library only, so checks with
the SDK (`sdk_shared_bucket.py`) and benchmarks without it (`benchmarks/longrun.py`) share one replica.

PouchDB itself cannot be installed on the machines this project runs on (no npm registry), so `Pouch` replicates with
PouchDB's protocol and rules: push = changes since the checkpoint -> `_revs_diff` -> `_bulk_docs` with
`new_edits: false` and `_revisions`; pull = `_changes?style=all_docs` -> local revs diff -> `_bulk_get?revs=true` ->
merge the revision paths; checkpoints in `_local/`; the winner is PouchDB's (live leaves first, then the highest
generation, then the greater rev id).
"""
import base64
import json
import urllib.error
import urllib.request
import uuid


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


class Gateway:
    """The gateway's public REST API as a PouchDB client calls it (Basic credentials, JSON bodies)."""

    def __init__(self, url, user, password):
        self.url = url
        self.token = base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(self, method, path, body=None):
        """(status, parsed JSON body or None)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Basic {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                payload = r.read()
                return r.status, (json.loads(payload) if payload else None)
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                return e.code, json.loads(payload)
            except ValueError:
                return e.code, None

    def ok(self, method, path, body=None):
        status, reply = self.call(method, path, body)
        expect(200 <= status < 300, f"{method} {path}: {status} {reply}")
        return reply


def gen(rev):
    return int(rev.split("-", 1)[0])


class Pouch:
    """A local database of revision trees replicating with PouchDB's algorithm (module docstring)."""

    def __init__(self, name):
        self.name = name
        self.trees = {}  # id -> {rev: {"parent": rev|None, "deleted": bool, "body": dict|None}}
        self.seq = 0
        self.changed = {}  # id -> local seq of its last change
        self.push_checkpoint = 0
        self.pull_checkpoint = 0

    # Local documents

    def leaves(self, doc_id):
        tree = self.trees.get(doc_id, {})
        parents = {n["parent"] for n in tree.values()}
        return [r for r in tree if r not in parents]

    def winner(self, doc_id):
        """PouchDB's winning revision: a live leaf before a deleted one, then the highest generation, then the
        greater rev id."""
        tree = self.trees[doc_id]
        return max(self.leaves(doc_id), key=lambda r: (not tree[r]["deleted"], gen(r), r.split("-", 1)[1]))

    def get(self, doc_id):
        """The winner's body with `_id`/`_rev` (`_deleted` for a tombstone)."""
        rev = self.winner(doc_id)
        node = self.trees[doc_id][rev]
        if node["deleted"]:
            return {"_id": doc_id, "_rev": rev, "_deleted": True}
        return dict(node["body"], _id=doc_id, _rev=rev)

    def path(self, doc_id, rev):
        """`rev` and its ancestors, newest first."""
        tree, out = self.trees[doc_id], []
        while rev is not None:
            out.append(rev)
            rev = tree[rev]["parent"]
        return out

    def _touch(self, doc_id):
        self.seq += 1
        self.changed[doc_id] = self.seq

    def put(self, doc_id, body, deleted=False):
        """A local edit (new_edits=true) on the winner: a child revision `gen+1-<32 hex>`."""
        tree = self.trees.setdefault(doc_id, {})
        parent = self.winner(doc_id) if tree else None
        rev = f"{(gen(parent) if parent else 0) + 1}-{uuid.uuid4().hex}"
        tree[rev] = {"parent": parent, "deleted": deleted, "body": None if deleted else dict(body)}
        self._touch(doc_id)
        return rev

    def remove(self, doc_id):
        return self.put(doc_id, {}, deleted=True)

    def merge(self, doc):
        """`_bulk_docs` with new_edits=false: graft `doc`'s `_revisions` path into the tree."""
        doc_id, rev = doc["_id"], doc["_rev"]
        revisions = doc.get("_revisions") or {"start": gen(rev), "ids": [rev.split("-", 1)[1]]}
        path = [f"{revisions['start'] - i}-{h}" for i, h in enumerate(revisions["ids"])]
        expect(path[0] == rev, f"{doc_id}: _revisions {revisions} do not start at {rev}")
        tree = self.trees.setdefault(doc_id, {})
        body = {k: v for k, v in doc.items() if not k.startswith("_")}
        for i, r in enumerate(path):
            parent = path[i + 1] if i + 1 < len(path) else None
            if r not in tree:
                tree[r] = {"parent": parent, "deleted": False, "body": None}
            elif tree[r]["parent"] is None and parent is not None and i + 1 < len(path):
                tree[r]["parent"] = parent  # a stemmed root learns its parent
        tree[rev]["deleted"] = bool(doc.get("_deleted"))
        tree[rev]["body"] = None if doc.get("_deleted") else body
        self._touch(doc_id)

    # Replication

    def push(self, gw, batch=None):
        """One push: what changed locally since the checkpoint, `batch` documents a `_revs_diff` / `_bulk_docs`
        round (None: all in one). Returns the number of revisions written."""
        rep = f"_local/push-{self.name}"
        status, cp = gw.call("GET", f"/{rep}")
        since = cp.get("last_seq", 0) if status == 200 else 0
        ids = [i for i, s in self.changed.items() if s > since]
        if not ids:
            return 0
        step = batch or len(ids)
        written = 0
        for k in range(0, len(ids), step):
            diff = gw.ok("POST", "/_revs_diff", {i: self.leaves(i) for i in ids[k:k + step]})
            docs = []
            for doc_id, missing in diff.items():
                for rev in missing.get("missing", []):
                    node = self.trees[doc_id][rev]
                    path = self.path(doc_id, rev)
                    doc = {"_id": doc_id, "_rev": rev,
                           "_revisions": {"start": gen(rev), "ids": [r.split("-", 1)[1] for r in path]}}
                    if node["deleted"]:
                        doc["_deleted"] = True
                    else:
                        doc.update(node["body"])
                    docs.append(doc)
            if docs:
                results = gw.ok("POST", "/_bulk_docs", {"docs": docs, "new_edits": False})
                errors = [r for r in results if "error" in r]
                expect(not errors, f"push errors: {errors}")
                written += len(docs)
        body = {"last_seq": self.seq}
        if status == 200:
            body["_rev"] = cp["_rev"]
        gw.ok("PUT", f"/{rep}", body)
        return written

    def pull(self, gw):
        """One pull: the gateway's changes since the checkpoint, fetched with `_bulk_get`. Returns the number
        of revisions merged."""
        rep = f"_local/pull-{self.name}"
        status, cp = gw.call("GET", f"/{rep}")
        since = cp.get("last_seq", 0) if status == 200 else 0
        merged = 0
        while True:
            page = gw.ok("GET", f"/_changes?style=all_docs&since={since}&limit=100")
            rows = page["results"]
            wanted = []
            for row in rows:
                have = self.trees.get(row["id"], {})
                wanted += [{"id": row["id"], "rev": c["rev"]} for c in row["changes"] if c["rev"] not in have]
            if wanted:
                got = gw.ok("POST", "/_bulk_get?revs=true", {"docs": wanted})
                for result in got["results"]:
                    for entry in result["docs"]:
                        expect("ok" in entry, f"_bulk_get {result['id']}: {entry}")
                        self.merge(entry["ok"])
                        merged += 1
            since = page["last_seq"]
            if not rows:
                break
        body = {"last_seq": since}
        if status == 200:
            body["_rev"] = cp["_rev"]
        gw.ok("PUT", f"/{rep}", body)
        return merged
