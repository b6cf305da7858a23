#!/usr/bin/env python3
"""Issue 71's long-run benchmark driver (ADR 0155): metadata and disk per live document over a long mixed workload
through a gateway database on a cluster bucket, then fresh pulls of the final state against pulls of the same
documents written once. `longrun.sh` starts the cluster and the gateway and calls this; see benchmarks/README.md.

Workload (`--ops` operations over `--docs` live documents, `--workers` threads, each owning a share of the documents
and users, so every thread knows its documents' current revisions):
  70 %  update: PUT the winner's child (a new ~400-byte body; one in five moves the document to another channel)
  10 %  conflict: a second replicator pushes a sibling of the winner the way PouchDB pushes (`_bulk_docs`,
        `new_edits: false`, `_revisions` sharing the winner's ancestors), then the application resolves it as a
        PouchDB/CouchDB application does: every losing leaf deleted (`DELETE ?rev=`)
  15 %  delete and re-create: a live document deleted, then one created: alternately the oldest deleted id again
        (a child of its tombstone, or a new document if the tombstone was purged meanwhile) and a new id; so the
        live count stays `--docs` and tombstones of never re-created ids are left for the purge
   5 %  users: a new user with 3 channels (at most `--users` live: past that the oldest is deleted), or a channel
        granted to an existing user (at most 10 channels each, the oldest replaced)
Every `--compact-every` operations `POST /db/_compact?type=tombstone` is asked (a run already going answers 503:
ignored); the database's own `meta_purge_interval` decides which tombstones are due. The nodes compact the bucket's
data files themselves at the cluster's auto-compaction threshold (ADR 0159; `longrun.sh` sets it); with
`--bucket-compact-seconds` > 0 the driver also asks every node to compact every that many seconds (`POST
.../controller/compactDatabases`, what `settee bucket compact --data-only` sends), as an operator's cron would.

Samples (every ops/10 operations, the workload stopped meanwhile):
  metadata bytes  the compact JSON of `_sync` (revision tree with old bodies, channel history, access, purge
                  stamps) of every document the gateway indexes, live and tombstoned (ids from admin `_changes`,
                  bytes from admin `_raw/<id>`); users, roles, sessions and `_local` checkpoints are not counted
  disk bytes      the sum over the nodes of the bucket's `basicStats.diskUsed` (each node's SQLite file, its WAL and
                  shared-memory file: actives and replicas)
                  (with `--cluster-data`, the main files and the WALs are also read from the directory apart)
  bucket live items: the cluster's `basicStats.itemCount` (documents, users and the gateway's `_sync:` items; not
                  KV tombstones)
  both divided by the live documents (the driver's count, checked against `_changes`), with the gateway's own
  `/_expvar` figures beside them. Pass: the last five samples of each within 10 % (max / min <= 1.10).

Pulls: the final state's live documents are written once (new revisions, `_bulk_docs`) into a fresh database on a
fresh bucket; then, `--pull-rounds` times in alternating order, each database is pulled from 0 by the PouchDB-
algorithm replica (`pouch_replica.Pouch`, Python), by Lite over BLIP and by Lite over REST (`settee-lite start
--once` into an empty directory; wall time of the process). Ratio: final state / written once, per replicator.
Twice: at the run's end (the last operations' old bodies within their window, the tombstones due since the last
compaction not yet purged), and at rest (`at_rest`: once both windows have passed and the tombstone compaction the
database runs by itself has run), where the final state's revision trees are also written once into `--trees-public`
(`copy_trees`) and pulled beside: final / trees is what the run's history costs a pull, trees / written once what the
protocol sends for the trees (deleted conflict branches within `revs_limit`, histories).
"""
import argparse
import base64
import collections
import glob
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "ProcessTests", "sdk"))
from pouch_replica import Gateway, Pouch  # noqa: E402  (the project's PouchDB-algorithm replica)


class Client:
    """One keep-alive HTTP connection; reconnects once on a dropped connection."""

    def __init__(self, base, user=None, password=None):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.prefix = u.hostname, u.port, u.path.rstrip("/")
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        self.conn = None

    def call(self, method, path, body=None):
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        for attempt in range(3):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                self.conn.request(method, self.prefix + path, body=data, headers=self.headers)
                r = self.conn.getresponse()
                payload = r.read()
                return r.status, (json.loads(payload) if payload else None)
            except (http.client.HTTPException, OSError, ValueError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.2)

    def ok(self, method, path, body=None, allow=()):
        status, reply = self.call(method, path, body)
        if not (200 <= status < 300 or status in allow):
            raise RuntimeError(f"{method} {self.prefix}{path}: {status} {reply}")
        return status, reply


def q(doc_id):
    return urllib.parse.quote(doc_id, safe="")


class Worker:
    """The documents `index % workers == w` and the users it created; runs its share of each phase."""

    def __init__(self, w, args):
        self.w, self.args = w, args
        self.rng = random.Random(args.seed * 1000 + w)
        self.pub = Client(args.public)
        self.adm = Client(args.admin)
        self.live = []  # ids
        self.pos = {}  # id -> index in live
        self.rev = {}  # id -> winner rev
        self.chan = {}  # id -> its channel
        self.deleted = collections.deque()
        self.new_ids = 0
        self.users = collections.deque()  # (name, channels)
        self.user_count = 0
        self.counts = collections.Counter()
        self.errors = 0
        self.next_op = 0.0  # time.monotonic() of this worker's next paced operation (--rate)

    def body(self, channel):
        return {"type": "item", "channels": [channel], "owner": f"w{self.w}", "n": self.rng.randrange(1 << 30),
                "text": "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(400))}

    def channel(self):
        return f"ch{self.rng.randrange(self.args.channels)}"

    def add_live(self, doc_id, rev):
        self.pos[doc_id] = len(self.live)
        self.live.append(doc_id)
        self.rev[doc_id] = rev

    def remove_live(self, doc_id):
        i = self.pos.pop(doc_id)
        last = self.live.pop()
        if last != doc_id:
            self.live[i] = last
            self.pos[last] = i
        self.rev.pop(doc_id, None)
        self.chan.pop(doc_id, None)

    def create(self, doc_id, tombstone=None):
        b = self.body(self.channel())
        if tombstone:
            b["_rev"] = tombstone
        status, reply = self.pub.ok("PUT", f"/{q(doc_id)}", b, allow=(404, 409))
        if status in (404, 409):  # the tombstone was purged meanwhile (or is another revision): ask the gateway
            self.counts["recreate_retry"] += 1
            b.pop("_rev", None)
            _, cur = self.pub.ok("GET", f"/{q(doc_id)}?deleted=true", allow=(404,))
            if cur and cur.get("_rev"):
                b["_rev"] = cur["_rev"]
            status, reply = self.pub.ok("PUT", f"/{q(doc_id)}", b)
        self.add_live(doc_id, reply["rev"])
        self.chan[doc_id] = b["channels"][0]

    def load(self, count):
        for i in range(count):
            if i % self.args.workers == self.w:
                self.create(f"doc{i:06d}")

    def winner(self, doc_id):
        _, cur = self.pub.ok("GET", f"/{q(doc_id)}")
        return cur

    def live_leaves(self, doc_id):
        """The revisions of the document's live leaves (`open_revs=all`; the gateway has no `conflicts=true`)."""
        _, leaves = self.pub.ok("GET", f"/{q(doc_id)}?open_revs=all")
        return [e["ok"]["_rev"] for e in leaves or [] if "ok" in e and not e["ok"].get("_deleted")]

    def update(self):
        doc_id = self.rng.choice(self.live)
        b = self.body(self.chan[doc_id] if self.rng.random() >= 0.2 else self.channel())
        b["_rev"] = self.rev[doc_id]
        status, reply = self.pub.ok("PUT", f"/{q(doc_id)}", b, allow=(409,))
        if status == 409:  # should not happen: each document has one writer
            self.errors += 1
            self.rev[doc_id] = self.winner(doc_id)["_rev"]
            return
        self.rev[doc_id] = reply["rev"]
        self.chan[doc_id] = b["channels"][0]

    def conflict(self):
        doc_id = self.rng.choice(self.live)
        _, cur = self.pub.ok("GET", f"/{q(doc_id)}?revs=true")
        revisions = cur["_revisions"]
        start, ids = revisions["start"], revisions["ids"]
        sibling = uuid.UUID(int=self.rng.getrandbits(128)).hex
        doc = {k: v for k, v in cur.items() if not k.startswith("_")}
        doc["text"] = "second replica " + doc.get("text", "")[:300]
        doc.update({"_id": doc_id, "_rev": f"{start}-{sibling}",
                    "_revisions": {"start": start, "ids": [sibling] + ids[1:]}})
        _, results = self.pub.ok("POST", "/_bulk_docs", {"docs": [doc], "new_edits": False})
        if any("error" in r for r in results or []):
            self.errors += 1
        cur = self.winner(doc_id)
        losers = [r for r in self.live_leaves(doc_id) if r != cur["_rev"]]
        if not losers:
            self.counts["conflict_not_made"] += 1
        for loser in losers:
            self.pub.ok("DELETE", f"/{q(doc_id)}?rev={loser}", allow=(409,))
        self.rev[doc_id] = cur["_rev"]

    def delete_and_recreate(self):
        doc_id = self.rng.choice(self.live)
        status, gone = self.pub.ok("DELETE", f"/{q(doc_id)}?rev={self.rev[doc_id]}", allow=(409,))
        if status == 409:
            self.errors += 1
            self.rev[doc_id] = self.winner(doc_id)["_rev"]
            return
        tombstone = gone.get("rev") if isinstance(gone, dict) else None
        self.remove_live(doc_id)
        self.deleted.append((doc_id, tombstone))
        self.counts["recreate_turn"] += 1
        if self.counts["recreate_turn"] % 2 == 0 and len(self.deleted) > 1:
            old, rev = self.deleted.popleft()
            self.create(old, tombstone=rev)
        else:
            self.new_ids += 1
            self.create(f"new-w{self.w}-{self.new_ids:07d}")

    def user(self):
        per_worker = max(1, self.args.users // self.args.workers)
        if not self.users or self.rng.random() < 0.5:
            self.user_count += 1
            name = f"user-w{self.w}-{self.user_count:07d}"
            chans = [self.channel() for _ in range(3)]
            self.adm.ok("PUT", f"/_user/{name}", {"password": "pw-" + name, "admin_channels": chans})
            self.users.append((name, chans))
            if len(self.users) > per_worker:
                old, _ = self.users.popleft()
                self.adm.ok("DELETE", f"/_user/{old}", allow=(404,))
        else:
            i = self.rng.randrange(len(self.users))
            name, chans = self.users[i]
            chans = (chans + [self.channel()])[-10:]
            self.adm.ok("PUT", f"/_user/{name}", {"admin_channels": chans})
            self.users[i] = (name, chans)

    def run(self, ops):
        # Paced (--rate): this worker's share of the rate, each operation at its slot; a pause (a sample, a phase
        # boundary) restarts the slots from now, so the workload never bursts to catch up.
        interval = self.args.workers / self.args.rate if self.args.rate > 0 else 0.0
        self.next_op = max(self.next_op, time.monotonic())
        for _ in range(ops):
            if interval:
                wait = self.next_op - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.next_op = max(self.next_op + interval, time.monotonic() - interval)
            x = self.rng.random()
            if x < 0.70:
                self.update()
                self.counts["update"] += 1
            elif x < 0.80:
                self.conflict()
                self.counts["conflict"] += 1
            elif x < 0.95:
                self.delete_and_recreate()
                self.counts["delete_recreate"] += 1
            else:
                self.user()
                self.counts["user"] += 1


def parallel(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported and re-raised by the caller
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def indexed_ids(adm):
    """(live ids, tombstoned ids) the database's admin `_changes` lists (purged tombstones are gone from it)."""
    live, dead, since = [], [], 0
    while True:
        _, page = adm.ok("GET", f"/_changes?since={since}&limit=5000&style=all_docs")
        for row in page["results"]:
            if row["id"].startswith("_"):
                continue
            (dead if row.get("deleted") else live).append(row["id"])
        if not page["results"]:
            return live, dead
        since = page["last_seq"]


def sync_bytes(args, ids):
    """Sum of the compact JSON lengths of `_sync` and of the rest of the body, over `ids` (admin `_raw`)."""
    shares = [ids[i::args.workers] for i in range(args.workers)]
    totals = [[0, 0, 0] for _ in shares]

    def one(k):
        c = Client(args.admin)
        for doc_id in shares[k]:
            status, raw = c.call("GET", f"/_raw/{q(doc_id)}")
            if status != 200 or not isinstance(raw, dict):
                continue
            meta = raw.get("_sync")
            totals[k][0] += len(json.dumps(meta, separators=(",", ":"))) if meta is not None else 0
            totals[k][1] += len(json.dumps({k2: v for k2, v in raw.items() if k2 != "_sync"}, separators=(",", ":")))
            totals[k][2] += 1

    parallel([lambda k=k: one(k) for k in range(len(shares))])
    return [sum(t[i] for t in totals) for i in range(3)]


def sample(args, ops, workers, started):
    began = time.time()
    adm = Client(args.admin)
    live_ids, dead_ids = indexed_ids(adm)
    meta, data, read = sync_bytes(args, live_ids + dead_ids)
    disk, items = 0, 0
    for node in args.nodes:
        c = Client(node, args.cluster_user, args.cluster_password)
        _, b = c.ok("GET", f"/pools/default/buckets/{args.bucket}")
        disk += b["basicStats"]["diskUsed"]  # this node's files
        items = b["basicStats"]["itemCount"]  # the cluster's live items in active vBuckets (every node says the total)
    files = collections.Counter()
    if args.cluster_data:
        for path in glob.glob(os.path.join(args.cluster_data, "n*", "buckets", f"{args.bucket}-*", "data.sqlite*")):
            kind = "wal" if path.endswith("-wal") else "shm" if path.endswith("-shm") else "main"
            try:
                files[kind] += os.path.getsize(path)
            except OSError:
                pass
    _, ev = Client(args.admin.rsplit("/", 1)[0]).ok("GET", "/_expvar")
    figures = ev["syncgateway"]["per_db"][args.db]["database"]
    live = sum(len(w.live) for w in workers)
    return {
        "ops": ops, "seconds": round(time.time() - started, 1), "sample_seconds": round(time.time() - began, 1),
        "live": live, "indexed_live": len(live_ids),
        "indexed_tombstones": len(dead_ids), "raw_read": read, "sync_bytes": meta, "body_bytes": data,
        "disk_bytes": disk, "bucket_items": items, "sqlite_main_bytes": files["main"], "sqlite_wal_bytes": files["wal"],
        "meta_per_live": meta / max(1, live), "disk_per_live": disk / max(1, live),
        "main_file_per_live": files["main"] / max(1, live),
        "gateway": {k: figures.get(k) for k in (
            "documents", "tombstones", "stored_revisions", "tombstones_purged", "channel_history_entries",
            "channel_history_pruned", "old_bodies", "old_body_bytes", "old_bodies_expired", "sessions", "checkpoints")},
    }


def flat(values):
    last = values[-5:]
    if len(last) < 5 or min(last) <= 0:
        return False, float("nan")
    spread = max(last) / min(last)
    return spread <= 1.10, spread


def write_fresh(args, workers):
    """The live documents (their winners' bodies, `_bulk_get`) written once, with new revisions, into the fresh
    database."""
    src, dst = Client(args.public), Client(args.fresh_public)
    ids = sorted(i for w in workers for i in w.live)
    written = 0
    for k in range(0, len(ids), 200):
        _, got = src.ok("POST", "/_bulk_get", {"docs": [{"id": i} for i in ids[k:k + 200]]})
        batch = []
        for result in got["results"]:
            for entry in result["docs"]:
                doc = entry.get("ok")
                if doc and not doc.get("_deleted"):
                    batch.append({k2: v for k2, v in doc.items() if not k2.startswith("_")} | {"_id": doc["_id"]})
        _, results = dst.ok("POST", "/_bulk_docs", {"docs": batch})
        written += sum(1 for r in results if "error" not in r)
    return written


def copy_trees(args):
    """The final state's revision trees written once into the `trees` database: a PouchDB-algorithm replica pulls
    `demo` from 0 (every leaf the feed lists, deleted ones included, each with its `_revisions` path, as the final
    pulls fetch them) and pushes every leaf with its path (`Pouch.push`: `new_edits: false`, 500 documents a round).
    The same documents, tombstones, conflict branches and histories, without what the run's operations left besides:
    old bodies, channel history, purged sequences, compactions. Returns (documents, revisions written); a refused
    revision raises AssertionError."""
    replica = Pouch(f"longrun-trees-{uuid.uuid4().hex[:8]}")
    replica.pull(Gateway(args.public, args.reader, args.reader_password))
    written = replica.push(Gateway(args.trees_public, args.reader, args.reader_password), batch=500)
    return len(replica.trees), written


def lite_pull(args, url, scheme):
    directory = tempfile.mkdtemp(prefix="longrun-lite-")
    try:
        u = url.replace("http://", scheme + "://", 1)
        cmd = [args.lite, "start", "--db", os.path.join(directory, "db"), u, "--user", args.reader,
               "--password", args.reader_password, "--once"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        seconds = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-2000:]}")
        pulls = [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("pull ")]
        return seconds, (pulls[-1] if pulls else "")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pouch_pull(args, url, name):
    replica = Pouch(name)
    t0 = time.perf_counter()
    merged = replica.pull(Gateway(url, args.reader, args.reader_password))
    seconds = time.perf_counter() - t0
    live = sum(1 for i in replica.trees if not replica.get(i).get("_deleted"))
    return seconds, f"{merged} revisions merged, {live} live documents"


def compaction_idle(args, seconds=600):
    """Waits until no tombstone compaction runs (a purge between a pull's `_changes` and its `_bulk_get` would
    answer 404 for a revision the feed listed)."""
    adm = Client(args.admin)
    deadline = time.time() + seconds
    while time.time() < deadline:
        _, st = adm.ok("GET", "/_compact?type=tombstone")
        if (st or {}).get("status") != "running":
            return st
        time.sleep(0.5)
    raise RuntimeError(f"the tombstone compaction still runs after {seconds} s")


def pulls(args, with_trees):
    results = collections.defaultdict(list)
    targets = [("final", args.public), ("fresh", args.fresh_public)]
    if with_trees and args.trees_public:
        targets.append(("trees", args.trees_public))
    for r in range(args.pull_rounds):
        order = targets[r % len(targets):] + targets[:r % len(targets)]
        for label, url in order:
            for kind in ("pouch", "lite-blip", "lite-rest"):
                try:
                    if kind == "pouch":
                        s, what = pouch_pull(args, url, f"longrun-{label}-{r}-{uuid.uuid4().hex[:8]}")
                    else:
                        s, what = lite_pull(args, url, "ws" if kind == "lite-blip" else "http")
                except (AssertionError, RuntimeError) as e:
                    print(f"  pull round {r + 1} {label:5} {kind:9} FAILED: {str(e)[:300]}", flush=True)
                    continue
                results[(kind, label)].append(s)
                print(f"  pull round {r + 1} {label:5} {kind:9} {s:7.2f} s  {what}", flush=True)
    return results


def report(results, with_trees):
    """Prints each replicator's medians and ratios; returns the ratios (final / written once, and with the trees
    database final / trees)."""
    ratios = {}
    for kind in ("pouch", "lite-blip", "lite-rest"):
        if not results[(kind, "final")] or not results[(kind, "fresh")]:
            print(f"  {kind:9} no ratio: a pull failed in every round")
            continue
        final, fresh = median(results[(kind, "final")]), median(results[(kind, "fresh")])
        ratios[kind] = final / fresh
        print(f"  {kind:9} final state {final:6.2f} s, written once {fresh:6.2f} s: ratio {ratios[kind]:.2f} "
              f"({'PASS' if ratios[kind] <= 1.10 else 'FAIL'}: no longer, within 10 %)")
    for kind in ("pouch", "lite-blip", "lite-rest"):
        if not with_trees or not all(results[(kind, x)] for x in ("final", "fresh", "trees")):
            continue
        final, fresh, trees = (median(results[(kind, x)]) for x in ("final", "fresh", "trees"))
        ratios[f"{kind}/trees"] = final / trees
        print(f"  {kind:9} final state / same trees written once {final:6.2f} / {trees:6.2f} s = {final / trees:.2f} "
              f"({'PASS' if final / trees <= 1.10 else 'FAIL'}: the run's history); same trees / live documents "
              f"written once {trees / fresh:.2f} (the content the protocol sends)")
    return ratios


def at_rest(args):
    """Waits until the time windows of the run's last operations have passed, the old-body window and a tenth (the
    sweep's period, ADR 0156) and the purge interval (`meta_purge_interval`), then runs the tombstone compaction the
    database runs by itself every `compact_interval_days` and waits for it: the final state as it stands once the
    writes stop. Returns the compaction's status."""
    wait = max(args.old_rev_expiry * 1.1, args.purge_days * 86_400) + 5
    waited = time.time() - args.last_op
    if waited < wait:
        time.sleep(wait - waited)
    adm = Client(args.admin)
    while True:  # the run's status is `running` when the POST answers; 503: one still runs (started before the wait)
        compaction_idle(args)
        status, _ = adm.ok("POST", "/_compact?type=tombstone", allow=(503,))
        if status != 503:
            break
    return f"{max(wait, waited):.0f} s after the last operation, then a tombstone compaction: {compaction_idle(args)}"


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--public", required=True, help="http://127.0.0.1:PORT/DB (GUEST may write every channel)")
    p.add_argument("--admin", required=True, help="http://127.0.0.1:ADMINPORT/DB")
    p.add_argument("--fresh-public", required=True, help="the fresh database's public URL")
    p.add_argument("--trees-public", help="a third database's public URL: the final state's revision trees written "
                   "once into it (`copy_trees`), pulled beside the other two")
    p.add_argument("--db", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--nodes", required=True, help="the nodes' admin base URLs, comma-separated")
    p.add_argument("--cluster-user", default="Administrator")
    p.add_argument("--cluster-password", default="password")
    p.add_argument("--reader", default="reader")
    p.add_argument("--reader-password", default="reader-password")
    p.add_argument("--cluster-data", help="cluster/up's data directory: the SQLite files' sizes, main file and WAL")
    p.add_argument("--lite", required=True, help="the settee-lite executable")
    p.add_argument("--ops", type=int, default=1_000_000)
    p.add_argument("--docs", type=int, default=10_000)
    p.add_argument("--users", type=int, default=1_000)
    p.add_argument("--channels", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--compact-every", type=int, default=10_000)
    p.add_argument("--bucket-compact-seconds", type=float, default=0)
    p.add_argument("--rate", type=float, default=0,
                   help="operations per second the workers keep to together (0: as fast as they go); a steady rate "
                        "keeps the time-windowed populations (tombstones until purged, old bodies until expired) steady")
    p.add_argument("--pull-rounds", type=int, default=3)
    p.add_argument("--purge-days", type=float, default=0.001, help="the database's meta_purge_interval (at rest)")
    p.add_argument("--old-rev-expiry", type=float, default=60, help="the database's old_rev_expiry_seconds (at rest)")
    p.add_argument("--seed", type=int, default=71)
    p.add_argument("--json", help="write the samples and pulls here")
    args = p.parse_args()
    args.nodes = args.nodes.split(",")

    workers = [Worker(w, args) for w in range(args.workers)]
    t0 = time.time()
    parallel([lambda w=w: w.load(args.docs) for w in workers])
    print(f"loaded {args.docs} documents in {time.time() - t0:.1f} s; seed {args.seed}", flush=True)
    started = time.time()
    samples = [sample(args, 0, workers, started)]
    done = 0
    step = max(args.workers, min(args.compact_every, args.ops // 10))
    every = max(1, args.ops // 10)
    next_sample = every
    adm = Client(args.admin)
    nodes = [Client(n, args.cluster_user, args.cluster_password) for n in args.nodes]
    last_bucket_compact = time.time()
    bucket_compactions = 0
    while done < args.ops:
        n = min(step, args.ops - done)
        parallel([lambda w=w, k=k: w.run(n // args.workers + (1 if k < n % args.workers else 0))
                  for k, w in enumerate(workers)])
        done += n
        adm.ok("POST", "/_compact?type=tombstone", allow=(503,))
        if args.bucket_compact_seconds > 0 and time.time() - last_bucket_compact >= args.bucket_compact_seconds:
            for c in nodes:
                c.ok("POST", f"/pools/default/buckets/{args.bucket}/controller/compactDatabases")
            last_bucket_compact = time.time()
            bucket_compactions += 1
        if done >= next_sample:
            s = sample(args, done, workers, started)
            samples.append(s)
            g = s["gateway"]
            print(f"  {done:>9} ops {s['seconds']:>7.0f} s (sample {s['sample_seconds']:.0f} s)  "
                  f"meta/live {s['meta_per_live']:8.1f} B  "
                  f"disk/live {s['disk_per_live']:8.1f} B  tombstones {s['indexed_tombstones']}  "
                  f"revs {g['stored_revisions']}  chan-hist {g['channel_history_entries']}  old bodies {g['old_bodies']}  "
                  f"expired {g.get('old_bodies_expired')}", flush=True)
            next_sample += every
    args.last_op = time.time()
    elapsed = time.time() - started
    counts = collections.Counter()
    for w in workers:
        counts.update(w.counts)
    counts.pop("recreate_turn", None)
    print(f"\n{done} operations in {elapsed:.0f} s ({done / max(elapsed, 1e-9):.0f} ops/s incl. samples): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"; 409s {sum(w.errors for w in workers)}; bucket compactions asked {bucket_compactions}")

    print("\n| ops | live docs | tombstones indexed | `_sync` B / live doc | disk B / live doc | of it main files B / live "
          "| WAL MiB | bucket live items | stored revs / live | channel-history entries | old bodies (B) | old bodies expired "
          "| tombstones purged |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in samples:
        g = s["gateway"]
        print(f"| {s['ops']:,} | {s['live']:,} | {s['indexed_tombstones']:,} | {s['meta_per_live']:,.0f} | "
              f"{s['disk_per_live']:,.0f} | {s['main_file_per_live']:,.0f} | {s['sqlite_wal_bytes'] / 2**20:.1f} | "
              f"{s['bucket_items']:,} | "
              f"{(g['stored_revisions'] or 0) / max(1, s['live']):.2f} | {g['channel_history_entries']} | "
              f"{g['old_bodies']} ({g['old_body_bytes']}) | {g.get('old_bodies_expired')} | {g['tombstones_purged']} |")
    rest = samples[1:]
    ok_meta, spread_meta = flat([s["meta_per_live"] for s in rest])
    ok_disk, spread_disk = flat([s["disk_per_live"] for s in rest])
    ok_main, spread_main = flat([s["main_file_per_live"] for s in rest])
    print(f"\nflattening (last five samples, max/min <= 1.10): metadata {spread_meta:.3f} "
          f"{'PASS' if ok_meta else 'FAIL'}; disk {spread_disk:.3f} {'PASS' if ok_disk else 'FAIL'} (main files "
          f"alone {spread_main:.3f} {'PASS' if ok_main else 'FAIL'})")

    compaction_idle(args)
    written = write_fresh(args, workers)
    print(f"\nfresh database: {written} live documents written once", flush=True)
    print(f"pulls from 0 at the run's end ({args.pull_rounds} rounds; the last operations' old bodies, and the "
          "tombstones the last compaction did not reach, still there):")
    end_results = pulls(args, with_trees=False)
    ratios = {f"end/{k}": v for k, v in report(end_results, with_trees=False).items()}

    rested = at_rest(args)
    print(f"\nat rest: {rested}", flush=True)
    if args.trees_public:
        try:
            tree_docs, tree_revs = copy_trees(args)
            print(f"trees database: the final state's revision trees written once, {tree_docs} documents, "
                  f"{tree_revs} leaves with their histories", flush=True)
        except (AssertionError, RuntimeError) as e:  # a purge between the copy's `_changes` and its `_bulk_get`
            print(f"trees database: not written ({str(e)[:300]}); pulled without it", flush=True)
            args.trees_public = None
    print(f"pulls from 0 at rest ({args.pull_rounds} rounds):")
    results = pulls(args, with_trees=True)
    ratios.update(report(results, with_trees=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ops": done, "seconds": elapsed, "counts": counts, "samples": samples,
                       "flat": {"metadata": [ok_meta, spread_meta], "disk": [ok_disk, spread_disk],
                                                             "main_files": [ok_main, spread_main]},
                       "pulls": {f"{k}/{l}": v for (k, l), v in results.items()},
                       "pulls_at_end": {f"{k}/{l}": v for (k, l), v in end_results.items()},
                       "at_rest": rested, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
