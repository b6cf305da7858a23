"""Runs the official Couchbase Python SDK's sub-document API (couchbase==4.6.3) against settee nodes.

Usage: sdk_subdoc.py KV_PORT ADMIN_USER ADMIN_PASSWORD BUCKET
Every check prints one line `PASS name` or `FAIL name: error`; the exit code is the number of failures
(0 = all passed). The node must be initialised, with BUCKET already created.
"""
import json
import sys
import time
from datetime import timedelta

import couchbase.subdocument as SD
from couchbase.durability import Durability, ServerDurability
from couchbase.exceptions import (CasMismatchException, CouchbaseException, DocumentExistsException,
                                  DocumentNotFoundException, DocumentNotJsonException, InvalidValueException,
                                  NumberTooBigException, PathExistsException, PathInvalidException,
                                  PathMismatchException, PathNotFoundException)
from couchbase.options import GetOptions, LookupInOptions, MutateInOptions, UpsertOptions
from couchbase.subdocument import StoreSemantics
from couchbase.transcoder import RawJSONTranscoder, RawStringTranscoder

from sdk_common import check, connect, expect, finish, raises

KV_PORT, USER, PASSWORD, BUCKET = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


cluster = connect(f"127.0.0.1:{KV_PORT}", USER, PASSWORD)
bucket = cluster.bucket(BUCKET)
coll = bucket.default_collection()
DOC = {"name": "settee", "tags": ["a", "b"], "n": 5, "nested": {"x": {"y": 1}}, "dot.ted": True}


def lookups():
    coll.upsert("sd1", DOC)
    r = coll.lookup_in("sd1", [SD.get("name"), SD.exists("tags"), SD.count("tags"), SD.get("nested.x.y"),
                               SD.get("tags[-1]"), SD.get("`dot.ted`"), SD.exists("missing"), SD.get_full()])
    expect(r.content_as[str](0) == "settee", "get name")
    expect(r.exists(1), "exists tags")
    expect(r.content_as[int](2) == 2, "count tags")
    expect(r.content_as[int](3) == 1, "nested get")
    expect(r.content_as[str](4) == "b", "last element")
    expect(r.content_as[bool](5) is True, "backticked name")
    expect(not r.exists(6), "missing path does not exist")
    expect(r.content_as[dict](7) == DOC, "whole document")
    expect(r.cas == coll.get("sd1").cas, "lookup CAS is the document's")


def lookup_errors():
    r = coll.lookup_in("sd1", [SD.get("missing"), SD.get("name.x"), SD.get("name")])
    raises(PathNotFoundException, lambda: r.content_as[str](0))
    raises(PathMismatchException, lambda: r.content_as[str](1))
    expect(r.content_as[str](2) == "settee", "the good path still answers")
    raises(DocumentNotFoundException, lambda: coll.lookup_in("sd-none", [SD.get("a")]))
    raises(PathInvalidException, lambda: coll.lookup_in("sd1", [SD.get("a..b")]).content_as[str](0))
    coll.upsert("sd-raw", "not json at all", transcoder=RawStringTranscoder())
    raises(DocumentNotJsonException, lambda: coll.lookup_in("sd-raw", [SD.get("a")]).content_as[str](0))


def mutations():
    coll.upsert("sd2", DOC)
    r = coll.mutate_in("sd2", [
        SD.upsert("name", "couch"),
        SD.insert("added", {"k": [1]}),
        SD.replace("nested.x.y", 2),
        SD.remove("`dot.ted`"),
        SD.array_append("tags", "c", "d"),
        SD.array_prepend("tags", "z"),
        SD.array_insert("tags[1]", "i"),
        SD.array_addunique("tags", "u"),
        SD.increment("n", 10),
        SD.decrement("n", 3),
        SD.upsert("made.on.the.way", True, create_parents=True),
    ])
    expect(r.content_as[int](8) == 15 and r.content_as[int](9) == 12, "counter results")
    doc = coll.get("sd2").content_as[dict]
    want = {"name": "couch", "tags": ["z", "i", "a", "b", "c", "d", "u"], "n": 12, "nested": {"x": {"y": 2}},
            "added": {"k": [1]}, "made": {"on": {"the": {"way": True}}}}
    expect(doc == want, f"document after mutate_in: {doc}")
    expect(r.cas == coll.get("sd2").cas, "mutate_in returns the new CAS")
    expect(r.mutation_token() is not None, "mutation token")


def mutation_errors():
    coll.upsert("sd3", DOC)
    before = coll.get("sd3")
    raises(PathExistsException, lambda: coll.mutate_in("sd3", [SD.insert("name", "x")]))
    raises(PathNotFoundException, lambda: coll.mutate_in("sd3", [SD.replace("nope", 1)]))
    raises(PathNotFoundException, lambda: coll.mutate_in("sd3", [SD.upsert("a.b.c", 1)]))
    raises(PathMismatchException, lambda: coll.mutate_in("sd3", [SD.array_append("name", 1)]))
    raises(PathExistsException, lambda: coll.mutate_in("sd3", [SD.array_addunique("tags", "a")]))
    coll.upsert("sd-big", {"big": 9223372036854775808, "max": 9223372036854775807})
    raises(NumberTooBigException, lambda: coll.mutate_in("sd-big", [SD.increment("big", 1)]))
    raises(InvalidValueException, lambda: coll.mutate_in("sd-big", [SD.increment("max", 1)]))
    raises(PathMismatchException, lambda: coll.mutate_in("sd3", [SD.increment("name", 1)]))
    # A failing spec in the middle leaves the document untouched (all or nothing).
    raises(PathNotFoundException,
           lambda: coll.mutate_in("sd3", [SD.upsert("name", "x"), SD.remove("nope"), SD.upsert("n", 0)]))
    expect(coll.get("sd3").cas == before.cas, "nothing applied")
    raises(DocumentNotFoundException, lambda: coll.mutate_in("sd-none", [SD.upsert("a", 1)]))
    raises(CasMismatchException,
           lambda: coll.mutate_in("sd3", [SD.upsert("a", 1)], MutateInOptions(cas=before.cas + 1)))
    r = coll.mutate_in("sd3", [SD.upsert("a", 1)], MutateInOptions(cas=before.cas))
    expect(r.cas != before.cas, "CAS-matched mutate_in applies")


def document_flags():
    coll.remove("sd4") if coll.exists("sd4").exists else None
    coll.mutate_in("sd4", [SD.upsert("a.b", 1), SD.array_append("list", 1)],
                   MutateInOptions(store_semantics=StoreSemantics.UPSERT))
    expect(coll.get("sd4").content_as[dict] == {"a": {"b": 1}, "list": [1]}, "upsert semantics create")
    raises(DocumentExistsException, lambda: coll.mutate_in(
        "sd4", [SD.upsert("x", 1)], MutateInOptions(store_semantics=StoreSemantics.INSERT)))
    coll.remove("sd4")
    coll.mutate_in("sd4", [SD.upsert("x", 1)], MutateInOptions(store_semantics=StoreSemantics.INSERT))
    expect(coll.get("sd4").content_as[dict] == {"x": 1}, "insert semantics create")
    coll.mutate_in("sd4", [SD.replace("", {"whole": True})])
    expect(coll.get("sd4").content_as[dict] == {"whole": True}, "whole-document replace")


def expiry_and_durability():
    # With an expiry it expires; without one a mutation clears the old TTL; preserve_expiry keeps it.
    coll.upsert("sd5", DOC)
    coll.mutate_in("sd5", [SD.upsert("e", 1)], MutateInOptions(expiry=timedelta(seconds=2)))
    coll.upsert("sd6", DOC, UpsertOptions(expiry=timedelta(seconds=2)))
    coll.mutate_in("sd6", [SD.upsert("e", 1)])
    coll.upsert("sd7", DOC, UpsertOptions(expiry=timedelta(seconds=2)))
    coll.mutate_in("sd7", [SD.upsert("e", 1)], MutateInOptions(preserve_expiry=True))
    time.sleep(3.5)
    raises(DocumentNotFoundException, lambda: coll.get("sd5"))
    expect(coll.get("sd6").content_as[dict]["e"] == 1, "a mutation without expiry clears the TTL")
    raises(DocumentNotFoundException, lambda: coll.get("sd7"))
    coll.mutate_in("sd6", [SD.upsert("d", 1)],
                   MutateInOptions(durability=ServerDurability(Durability.MAJORITY_AND_PERSIST_TO_ACTIVE)))
    expect(coll.get("sd6").content_as[dict]["d"] == 1, "durable mutate_in applied")


def collections():
    scopes = bucket.collections().get_all_scopes()
    names = {(s.name, c.name) for s in scopes for c in s.collections}
    expect(("_default", "_default") in names, f"default collection listed: {names}")
    named = bucket.scope("nope").collection("nothere")
    raises(CouchbaseException, lambda: named.get("k", GetOptions(timeout=timedelta(seconds=2))))


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def virtual_xattrs():
    # get(with_expiry) and get(project) are lookup_in with `$document` XATTR paths under the hood.
    stored = json.dumps(DOC).encode()
    coll.upsert("sd8", stored, UpsertOptions(expiry=timedelta(seconds=600), transcoder=RawJSONTranscoder()))
    wrote = time.time()
    r = coll.get("sd8", GetOptions(with_expiry=True))
    expect(r.content_as[dict] == DOC, "with_expiry body")
    expect(r.expiry_time is not None and abs(r.expiry_time.timestamp() - (wrote + 600)) < 5,
           f"with_expiry expiry: {r.expiry_time}")
    expect(coll.get("sd1", GetOptions(with_expiry=True)).expiry_time is None, "no expiry")
    p = coll.get("sd8", GetOptions(project=["name", "nested.x.y", "tags"]))
    expect(p.content_as[dict] == {"name": "settee", "nested": {"x": {"y": 1}}, "tags": ["a", "b"]},
           f"projection: {p.content_as[dict]}")
    r = coll.lookup_in("sd8", [SD.get("$document.exptime", xattr=True), SD.get("$document.CAS", xattr=True),
                               SD.get("$document", xattr=True), SD.get("$vbucket.HLC", xattr=True), SD.get("name")])
    expect(abs(r.content_as[int](0) - (wrote + 600)) < 5, "exptime")
    expect(int(r.content_as[str](1), 16) == r.cas, "$document.CAS is the document's CAS")
    document = r.content_as[dict](2)
    expect(document["value_bytes"] == len(stored), f"value_bytes {document}")
    expect(document["deleted"] is False and document["datatype"] == ["json"], f"$document {document}")
    expect(document["value_crc32c"] == "0x%08x" % crc32c(stored), f"value_crc32c {document}")
    hlc = r.content_as[dict](3)
    expect(hlc["mode"] in ("real", "logical") and abs(int(hlc["now"]) - time.time()) < 60, f"$vbucket.HLC {hlc}")
    expect(r.content_as[str](4) == "settee", "body path after XATTR paths")
    r = coll.lookup_in("sd8", [SD.get("$nosuch", xattr=True), SD.get("myattr", xattr=True),
                               SD.get("name")])
    raises(CouchbaseException, lambda: r.content_as[str](0))
    expect(not r.exists(1), "a user XATTR that is not stored does not exist")
    expect(r.content_as[str](2) == "settee", "other specs still answer")
    raises(CouchbaseException, lambda: coll.mutate_in("sd8", [SD.upsert("$document.x", 1, xattr=True)]))


def stored_xattrs():
    # User and system XATTRs stored with the document (ADR 0029): written and read with xattr=True specs, kept
    # by a full-document upsert, hidden from get(), macros expanded, system ones kept on the tombstone.
    coll.upsert("sd9", b'{"app":1}', UpsertOptions(transcoder=RawJSONTranscoder()))
    mutated = coll.mutate_in("sd9", [SD.upsert("_sync.rev", "1-a", xattr=True, create_parents=True),
                                     SD.upsert("_sync.cas", SD.MutationMacro.cas(), xattr=True),
                                     SD.upsert("_sync.crc", SD.MutationMacro.value_crc32c(), xattr=True),
                                     SD.upsert("owner", "ann", xattr=True), SD.increment("app", 1)])
    r = coll.lookup_in("sd9", [SD.get("_sync", xattr=True), SD.get("owner", xattr=True),
                               SD.get("$XTOC", xattr=True), SD.get("app")])
    sync = r.content_as[dict](0)
    expect(sync["rev"] == "1-a", f"_sync {sync}")
    expect(int.from_bytes(bytes.fromhex(sync["cas"][2:]), "little") == mutated.cas,
           f"${{Mutation.CAS}} is the mutation's CAS, little-endian: {sync['cas']} vs {mutated.cas}")
    expect(sync["crc"] == "0x%08x" % crc32c(b'{"app":2}'), f"value_crc32c {sync['crc']}")
    expect(r.content_as[str](1) == "ann" and r.content_as[list](2) == ["_sync", "owner"], "user xattr, $XTOC")
    expect(r.content_as[int](3) == 2, "body path")
    expect(coll.get("sd9").content_as[dict] == {"app": 2}, "get() answers the body alone")
    coll.upsert("sd9", {"app": 3})
    kept = coll.lookup_in("sd9", [SD.get("_sync.rev", xattr=True), SD.get("owner", xattr=True)])
    expect(kept.content_as[str](0) == "1-a" and kept.content_as[str](1) == "ann", "upsert keeps XATTRs")
    coll.remove("sd9")
    raises(DocumentNotFoundException, lambda: coll.get("sd9"))
    tomb = coll.lookup_in("sd9", [SD.get("_sync.rev", xattr=True), SD.get("owner", xattr=True)],
                          LookupInOptions(access_deleted=True))
    expect(tomb.content_as[str](0) == "1-a", "the tombstone keeps system XATTRs")
    expect(not tomb.exists(1), "user XATTRs go with the body")


check("lookups", lookups)
check("lookup_errors", lookup_errors)
check("mutations", mutations)
check("mutation_errors", mutation_errors)
check("document_flags", document_flags)
check("expiry_and_durability", expiry_and_durability)
check("collections", collections)
check("virtual_xattrs", virtual_xattrs)
check("stored_xattrs", stored_xattrs)
finish(cluster)
