"""An official Couchbase Python SDK application (couchbase==4.6.3) and a PouchDB-style replica sharing one bucket
through a settee-gateway database with `enable_shared_bucket_access: true` (issue 20, docs/adr/0037).

Usage: sdk_shared_bucket.py KV_PORT BUCKET APP_USER APP_PASSWORD READER_USER READER_PASSWORD GATEWAY_DB_URL
                            POUCH_USER POUCH_PASSWORD
  APP_USER     data_reader + data_writer on BUCKET (an application's credentials: no system XATTR privilege)
  READER_USER  data_reader on BUCKET only
  GATEWAY_DB_URL  http://127.0.0.1:PORT/DB, the gateway's public port; POUCH_USER a gateway user seeing every
               channel
Every check prints `PASS name` or `FAIL name: error`; the exit code is the number of failures.

The replica is `pouch_replica.Pouch` (PouchDB's algorithm in Python; see its docstring for why not PouchDB itself).
"""
import sys
import threading
import time

import couchbase.subdocument as SD
from couchbase.exceptions import CouchbaseException, DocumentNotFoundException
from couchbase.options import LookupInOptions, ReplaceOptions, UpsertOptions
from couchbase.transcoder import RawJSONTranscoder

from pouch_replica import Gateway, Pouch, gen
from sdk_common import check, connect, expect, finish, raises

(KV_PORT, BUCKET, APP_USER, APP_PASSWORD, READER_USER, READER_PASSWORD, GATEWAY_DB, POUCH_USER,
 POUCH_PASSWORD) = sys.argv[1:10]

raw = RawJSONTranscoder()


def eventually(fn, seconds=30, what="condition"):
    """Polls `fn` (truthy = done) every 0.1 s for `seconds`."""
    deadline = time.time() + seconds
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception:  # noqa: BLE001 - retried until the deadline
            if time.time() > deadline:
                raise
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


cluster = connect(f"127.0.0.1:{KV_PORT}", APP_USER, APP_PASSWORD, wait=True)
coll = cluster.bucket(BUCKET).default_collection()
reader_cluster = connect(f"127.0.0.1:{KV_PORT}", READER_USER, READER_PASSWORD, wait=True)
reader = reader_cluster.bucket(BUCKET).default_collection()
gw = Gateway(GATEWAY_DB, POUCH_USER, POUCH_PASSWORD)
pouch = Pouch("phone")


def gateway_rev(doc_id):
    status, doc = gw.call("GET", f"/{doc_id}")
    return doc.get("_rev") if status == 200 else None


def pull_until(doc_id, predicate, what):
    """Pulls until the local winner of `doc_id` satisfies `predicate` (the gateway imports KV writes from its
    change stream, so an SDK write reaches `_changes` shortly after it is acknowledged)."""
    def step():
        pouch.pull(gw)
        return doc_id in pouch.trees and predicate(pouch.get(doc_id))
    eventually(step, what=what)
    return pouch.get(doc_id)


def expect_linear(doc_id):
    """One leaf (no conflict, no fork) and a history of consecutive generations."""
    leaves = pouch.leaves(doc_id)
    expect(len(leaves) == 1, f"{doc_id}: leaves {leaves}")
    path = pouch.path(doc_id, leaves[0])
    gens = [gen(r) for r in path]
    expect(gens == list(range(gens[0], gens[0] - len(gens), -1)), f"{doc_id}: history {path}")
    status, revs = gw.call("GET", f"/{doc_id}?open_revs=all")
    expect(status == 200 and len(revs) == 1, f"{doc_id}: gateway leaves {revs}")


def pouch_writes_sdk_reads():
    # PouchDB creates and edits documents and pushes them: the SDK reads exactly the application's JSON.
    pouch.put("p1", {"channels": ["all"], "title": "from the phone", "n": 1})
    pouch.put("p2", {"channels": ["all"], "title": "second", "tags": ["x"]})
    expect(pouch.push(gw) == 2, "two revisions pushed")
    pouch.put("p1", {"channels": ["all"], "title": "edited on the phone", "n": 2})
    expect(pouch.push(gw) == 1, "one revision pushed")
    expect(coll.get("p1").content_as[dict] == {"channels": ["all"], "title": "edited on the phone", "n": 2},
           f"SDK sees {coll.get('p1').content_as[dict]}")
    expect(coll.get("p2").content_as[dict] == {"channels": ["all"], "title": "second", "tags": ["x"]},
           "SDK sees p2's body")
    expect(gateway_rev("p1") == pouch.winner("p1"), "the gateway's winner is the phone's")


def sdk_never_sees_sync():
    # The application's user and a data_reader user: bodies without `_sync`, `_sync` not readable, `$XTOC`
    # without it; the application's own user XATTR works beside it.
    for c in (coll, reader):
        body = c.get("p1", transcoder=raw).content_as[bytes]
        expect(b"_sync" not in body and b"_rev" not in body and b"_id" not in body, f"body {body}")
        r = c.lookup_in("p1", [SD.get("_sync", xattr=True), SD.get("$XTOC", xattr=True),
                               SD.get("title")])
        raises(CouchbaseException, lambda: r.content_as[dict](0))
        expect("_sync" not in r.content_as[list](1), f"$XTOC {r.content_as[list](1)}")
        expect(r.content_as[str](2) == "edited on the phone", "body path")
    raises(CouchbaseException, lambda: coll.mutate_in("p1", [SD.upsert("_sync.rev", "9-x", xattr=True)]))


def sdk_updates_are_children_of_the_winner():
    # The SDK replaces, upserts and edits with mutate_in; each write reaches PouchDB as a child of the revision
    # PouchDB held, and the body the SDK wrote stays byte for byte what it wrote.
    before = pouch.winner("p1")
    got = coll.get("p1")
    written = b'{ "channels" : ["all"],  "title":"replaced by the SDK", "n":3 }'
    coll.replace("p1", written, ReplaceOptions(cas=got.cas, transcoder=raw))
    doc = pull_until("p1", lambda d: d.get("n") == 3, "the SDK's replace")
    expect(doc["title"] == "replaced by the SDK", f"pulled {doc}")
    expect(pouch.trees["p1"][doc["_rev"]]["parent"] == before and gen(doc["_rev"]) == gen(before) + 1,
           f"{doc['_rev']} is not a child of {before}")
    expect(coll.get("p1", transcoder=raw).content_as[bytes] == written, "the import left the SDK's bytes")
    expect_linear("p1")

    before = doc["_rev"]
    coll.mutate_in("p1", [SD.increment("n", 1), SD.upsert("by", "mutate_in")])
    doc = pull_until("p1", lambda d: d.get("n") == 4, "the SDK's mutate_in")
    expect(doc["by"] == "mutate_in" and pouch.trees["p1"][doc["_rev"]]["parent"] == before, f"pulled {doc}")

    # An SDK-created document arrives as a `1-` root.
    coll.upsert("s1", {"channels": ["all"], "made": "by the SDK"})
    doc = pull_until("s1", lambda d: d.get("made") == "by the SDK", "the SDK's new document")
    expect(gen(doc["_rev"]) == 1, f"s1 {doc}")
    expect_linear("p1")
    expect_linear("s1")


def user_xattr_is_not_a_revision():
    # The application's own XATTR: written with mutate_in, read with lookup_in; it makes no revision (the body
    # digest is unchanged), and the gateway's next write keeps it.
    before = pouch.winner("p1")
    coll.mutate_in("p1", [SD.upsert("app.owner", "ann", xattr=True, create_parents=True),
                          SD.upsert("app.edits", 1, xattr=True)])
    r = coll.lookup_in("p1", [SD.get("app", xattr=True), SD.get("$XTOC", xattr=True)])
    expect(r.content_as[dict](0) == {"owner": "ann", "edits": 1}, f"app xattr {r.content_as[dict](0)}")
    expect(r.content_as[list](1) == ["app"], f"$XTOC {r.content_as[list](1)}")
    # A later SDK body write is exactly one generation on: the XATTR write made no revision of its own.
    coll.mutate_in("p1", [SD.upsert("after_xattr", True)])
    doc = pull_until("p1", lambda d: d.get("after_xattr") is True, "the write after the XATTR")
    expect(gen(doc["_rev"]) == gen(before) + 1 and pouch.trees["p1"][doc["_rev"]]["parent"] == before,
           f"{doc['_rev']} after {before}")
    # PouchDB edits and pushes: the gateway's write keeps the application's XATTR.
    body = {k: v for k, v in doc.items() if not k.startswith("_")}
    pouch.put("p1", dict(body, title="phone again"))
    expect(pouch.push(gw) == 1, "pushed")
    expect(coll.get("p1").content_as[dict]["title"] == "phone again", "SDK reads the push")
    kept = coll.lookup_in("p1", [SD.get("app.owner", xattr=True)])
    expect(kept.content_as[str](0) == "ann", "the gateway's write kept the user XATTR")
    expect_linear("p1")


def deletes_are_tombstones():
    # An SDK remove arrives at PouchDB as a deleted child of its winner; a PouchDB delete pushed makes the key
    # gone for the SDK; a PouchDB revision on its own tombstone revives the key.
    before = pouch.winner("s1")
    coll.remove("s1")
    doc = pull_until("s1", lambda d: d.get("_deleted") is True, "the SDK's remove")
    expect(pouch.trees["s1"][doc["_rev"]]["parent"] == before and gen(doc["_rev"]) == gen(before) + 1,
           f"tombstone {doc['_rev']} after {before}")
    expect_linear("s1")
    pouch.remove("p2")
    expect(pouch.push(gw) == 1, "pushed the delete")
    raises(DocumentNotFoundException, lambda: coll.get("p2"))
    # The tombstone keeps `_sync`, which the application's lookup cannot read either.
    r = coll.lookup_in("p2", [SD.get("_sync", xattr=True)], LookupInOptions(access_deleted=True))
    raises(CouchbaseException, lambda: r.content_as[dict](0))
    # The SDK recreates a document the phone deleted: a live child of the tombstone, not a new root.
    coll.insert("p2", {"channels": ["all"], "title": "back from the SDK"})
    doc = pull_until("p2", lambda d: d.get("title") == "back from the SDK", "the SDK's recreation")
    expect(pouch.trees["p2"][doc["_rev"]]["parent"] == pouch.path("p2", doc["_rev"])[1], "linked")
    expect_linear("p2")
    # The phone deletes a document and brings it back (a child of its tombstone): the gateway revives the KV
    # tombstone (REVIVE_DOCUMENT) and the SDK reads the new body.
    pouch.put("r1", {"channels": ["all"], "life": 1})
    pouch.push(gw)
    pouch.remove("r1")
    pouch.push(gw)
    raises(DocumentNotFoundException, lambda: coll.get("r1"))
    pouch.put("r1", {"channels": ["all"], "life": 2})
    expect(pouch.push(gw) == 1, "pushed the revival")
    expect(coll.get("r1").content_as[dict] == {"channels": ["all"], "life": 2}, "SDK reads the revived body")
    expect(gen(gateway_rev("r1")) == 3, f"r1 at {gateway_rev('r1')}")
    expect_linear("r1")


def gateway_never_clobbers_concurrent_sdk_writes():
    # The SDK increments a counter in the body with mutate_in while a REST client of the gateway keeps rewriting the whole body (read, change its own counter, PUT with the read _rev, on 409 read again).
    # No SDK increment may be lost: each gateway write is CAS-guarded, and a concurrent SDK write is imported
    # first, which makes the REST client's parent a non-leaf (409).
    coll.upsert("c1", {"channels": ["all"], "sdk": 0, "gw": 0})
    eventually(lambda: gateway_rev("c1"), what="c1 imported")
    sdk_writes, stop = 0, threading.Event()
    gw_ok, gw_conflicts, gw_busy, errors = [0], [0], [0], []

    def rest_writer():
        while not stop.is_set():
            status, doc = gw.call("GET", "/c1")
            if status == 503:
                gw_busy[0] += 1  # the on-demand import's CAS retries ran out under the SDK's writes
                continue
            if status != 200:
                errors.append((status, doc))
                return
            doc["gw"] += 1
            status, reply = gw.call("PUT", "/c1", doc)
            if status == 201:
                gw_ok[0] += 1
            elif status == 409:
                gw_conflicts[0] += 1
            elif status == 503:
                gw_busy[0] += 1  # the gateway's CAS retries ran out under the SDK's writes: read again
            else:
                errors.append((status, reply))
                return

    t = threading.Thread(target=rest_writer)
    t.start()
    deadline = time.time() + 20
    try:
        # Bursts of 10 increments 5 ms apart with 250 ms pauses, until at least 150 increments and 10 gateway
        # writes: the REST client's read-modify-write cycles (about 0.2 s on a loaded debug build) run into the
        # bursts (409s) and land in the pauses.
        while sdk_writes < 150 or (gw_ok[0] < 10 and time.time() < deadline):
            for _ in range(10):
                coll.mutate_in("c1", [SD.increment("sdk", 1)])
                sdk_writes += 1
                time.sleep(0.005)
            time.sleep(0.25)
    finally:
        stop.set()
        t.join()
    expect(not errors, f"REST writer errors {errors}")
    expect(gw_ok[0] >= 5, f"the gateway wrote {gw_ok[0]} times concurrently ({gw_conflicts[0]} 409s, "
                           f"{gw_busy[0]} 503s, {sdk_writes} SDK writes)")
    final = coll.get("c1").content_as[dict]
    expect(final["sdk"] == sdk_writes, f"SDK increments lost: {final} after {sdk_writes}")
    expect(final["gw"] == gw_ok[0], f"gateway writes {final['gw']} vs {gw_ok[0]} acknowledged")
    doc = pull_until("c1", lambda d: d.get("sdk") == sdk_writes and d.get("gw") == gw_ok[0], "c1 settled")
    expect_linear("c1")
    print(f"concurrent: {sdk_writes} SDK increments, {gw_ok[0]} gateway writes, {gw_conflicts[0]} 409s, "
          f"{gw_busy[0]} 503s, final rev {doc['_rev']}", flush=True)


check("PouchDB pushes, the SDK reads the application's JSON", pouch_writes_sdk_reads)
check("the SDK never sees _sync", sdk_never_sees_sync)
check("SDK writes reach PouchDB as children of its winner", sdk_updates_are_children_of_the_winner)
check("the SDK's user XATTR is no revision and survives gateway writes", user_xattr_is_not_a_revision)
check("deletes travel as tombstones both ways", deletes_are_tombstones)
check("the gateway never clobbers a concurrent SDK write", gateway_never_clobbers_concurrent_sdk_writes)
reader_cluster.close()
finish(cluster)
