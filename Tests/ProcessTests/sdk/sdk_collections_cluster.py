"""The official Couchbase Python SDK (couchbase==4.6.3) with its collection API on a 3-node settee cluster
(replicaNumber=1), through a rebalance, a SIGKILL + failover and a restart: issue 70's first "must show".

Usage:
  sdk_collections_cluster.py load HOSTS ADMIN_URL USER PASSWORD BUCKET DOCS NEW_NODE VICTIM_OTP VICTIM_PID
  sdk_collections_cluster.py verify HOSTS ADMIN_URL USER PASSWORD BUCKET DOCS
    HOSTS      comma-separated 127.0.0.1:KVPORT of the cluster's nodes (the connection string's host list)
    ADMIN_URL  http://127.0.0.1:PORT of a node that stays up
    DOCS       documents to write, split evenly over the two collections
    NEW_NODE   127.0.0.1:ADMINPORT of an uninitialised node to add and rebalance in
    VICTIM_*   otpNode and pid of a cluster node this script SIGKILLs and fails over

`load` creates scope `app` with collections `c1` and `c2`, writes DOCS documents across them with durability
majority (`upsert_multi` batches), rebalances NEW_NODE in, SIGKILLs and fails over the victim, reads every document
back from its own collection (and a sample from the other, where it must not be), lists the scopes with
`get_all_scopes` and drops `c2`. The caller then restarts the surviving nodes and runs `verify`: `c1` still holds
all its documents, `c2` is unknown and `get_all_scopes` lists `app` with `c1` only.

Prints `PASS name` / `FAIL name: ...` per check and `  figure: ...` lines with counts and seconds; the exit code is
the number of failures.
"""
import os
import signal
import sys
import time
from datetime import timedelta

from couchbase.durability import Durability, ServerDurability
from couchbase.exceptions import (AmbiguousTimeoutException, CollectionNotFoundException, DocumentNotFoundException,
                                  UnAmbiguousTimeoutException)
from couchbase.options import GetMultiOptions, GetOptions, UpsertMultiOptions, UpsertOptions

from sdk_common import DOCUMENTED_FAILOVER_ERRORS, Admin, check, connect, expect, finish

PHASE, HOSTS, ADMIN_URL, USER, PASSWORD, BUCKET, DOCS = sys.argv[1:8]
DOCS = int(DOCS)
SCOPE, COLLECTIONS = "app", ("c1", "c2")
BATCH = 500
admin = Admin(ADMIN_URL, USER, PASSWORD)
cluster = connect(HOSTS, USER, PASSWORD, wait=True)
bucket = cluster.bucket(BUCKET)
manager = bucket.collections()
majority = ServerDurability(Durability.MAJORITY)


def figure(text):
    print(f"  figure: {text}", flush=True)


def home(i):
    """The collection document `doc::i` lives in: even numbers in c1, odd in c2."""
    return COLLECTIONS[i % 2]


def keys_of(name):
    return [f"doc::{i}" for i in range(DOCS) if home(i) == name]


def coll(name):
    return bucket.scope(SCOPE).collection(name)


def scopes():
    return {s.name: sorted(c.name for c in s.collections) for s in manager.get_all_scopes()}


def batches(items):
    for start in range(0, len(items), BATCH):
        yield items[start:start + BATCH]


def read_back(name, keys, deadline_s, what):
    """Reads `keys` from collection `name` with `get_multi`, retrying only the documented failover timeouts until
    `deadline_s`; every document must be there with its own collection and number. Returns the retries."""
    c = coll(name)
    retries = 0
    deadline = time.time() + deadline_s
    for batch in batches(keys):
        pending = batch
        while pending:
            r = c.get_multi(pending, GetMultiOptions(timeout=timedelta(seconds=10)))
            missing = []
            for key, e in (r.exceptions or {}).items():
                if isinstance(e, DOCUMENTED_FAILOVER_ERRORS) and time.time() < deadline:
                    missing.append(key)
                else:
                    raise AssertionError(f"{what}: {name} {key}: {type(e).__name__}: {e}")
            for key, got in r.results.items():
                doc = got.content_as[dict]
                expect(doc == {"coll": name, "n": int(key.split("::")[1])}, f"{what}: {name} {key} holds {doc}")
            retries += len(missing)
            pending = missing
    return retries


def create():
    manager.create_scope(SCOPE)
    for name in COLLECTIONS:
        manager.create_collection(SCOPE, name)
    expect(scopes().get(SCOPE) == ["c1", "c2"], f"get_all_scopes after create: {scopes()}")


def durable_writes():
    # A collection just created reaches every node with the cluster document, and a bucket's replica streams connect
    # within about a second: probe each collection until a majority-durable write succeeds before the ones counted.
    deadline = time.time() + 30
    for name in COLLECTIONS:
        while True:
            try:
                coll(name).upsert("probe", {"coll": name}, UpsertOptions(durability=majority,
                                                                          timeout=timedelta(seconds=5)))
                break
            except Exception:  # noqa: BLE001 - retried until the deadline
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
    began = time.time()
    for name in COLLECTIONS:
        c = coll(name)
        for batch in batches(keys_of(name)):
            docs = {k: {"coll": name, "n": int(k.split("::")[1])} for k in batch}
            r = c.upsert_multi(docs, UpsertMultiOptions(durability=majority, timeout=timedelta(seconds=10)))
            if not r.all_ok:
                key, e = next(iter(r.exceptions.items()))
                raise AssertionError(f"{len(r.exceptions)} of {len(batch)} durable upserts in {name} failed, "
                                     f"first {key}: {type(e).__name__}: {e}")
    elapsed = time.time() - began
    figure(f"{DOCS} majority-durable upserts in {elapsed:.1f} s ({DOCS / elapsed:.0f}/s)")


def rebalance_in():
    new_node = sys.argv[8]
    began = time.time()
    admin("/controller/addNode", {"hostname": new_node, "user": USER, "password": PASSWORD})
    admin.rebalance(admin.members())
    figure(f"rebalance in of a fourth node: {time.time() - began:.1f} s")


def kill_and_fail_over():
    victim_otp, victim_pid = sys.argv[9], int(sys.argv[10])
    os.kill(victim_pid, signal.SIGKILL)
    admin("/controller/failOver", {"otpNode": victim_otp})


def read_everything():
    began = time.time()
    retries = sum(read_back(name, keys_of(name), 60, "after the failover") for name in COLLECTIONS)
    figure(f"{DOCS} documents read back from their collections in {time.time() - began:.1f} s, 0 lost, "
           f"{retries} documented timeouts retried")
    # A sample of each collection's keys is absent from the other: the same names are separate documents.
    for name, other in (("c1", "c2"), ("c2", "c1")):
        for key in keys_of(name)[:100]:
            try:
                coll(other).get(key, GetOptions(timeout=timedelta(seconds=10)))
            except DocumentNotFoundException:
                continue
            raise AssertionError(f"{key} of {name} found in {other}")


def listed():
    got = scopes()
    expect(got.get(SCOPE) == ["c1", "c2"], f"get_all_scopes: {got}")
    expect("_default" in got.get("_default", []), f"default collection listed: {got}")


def drop_c2():
    manager.drop_collection(SCOPE, "c2")
    expect(scopes().get(SCOPE) == ["c1"], f"get_all_scopes after the drop: {scopes()}")


def expect_unknown(name):
    """A get in a dropped collection: CollectionNotFound, or (what 4.6.3 does against Couchbase Server too) a
    timeout after retrying because the server answered UNKNOWN_COLLECTION."""
    try:
        coll(name).get(keys_of(name)[0], GetOptions(timeout=timedelta(seconds=3)))
    except CollectionNotFoundException:
        return
    except (UnAmbiguousTimeoutException, AmbiguousTimeoutException) as e:
        expect("key_value_collection_outdated" in str(e), f"timed out for another reason: {e}")
        return
    raise AssertionError(f"a get in the dropped collection {name} succeeded")


def after_restart():
    expect(scopes().get(SCOPE) == ["c1"], f"get_all_scopes after the restart: {scopes()}")
    began = time.time()
    retries = read_back("c1", keys_of("c1"), 60, "after the restart")
    figure(f"{len(keys_of('c1'))} c1 documents read back after the restart in {time.time() - began:.1f} s, 0 lost, "
           f"{retries} timeouts retried")
    expect_unknown("c2")


if PHASE == "load":
    check("create a scope and two collections", create)
    check("majority-durable writes across two collections", durable_writes)
    check("rebalance a node in", rebalance_in)
    check("SIGKILL and fail over a node", kill_and_fail_over)
    check("every document read back from its own collection after the failover", read_everything)
    check("get_all_scopes lists the scope and both collections", listed)
    check("drop one collection", drop_c2)
elif PHASE == "verify":
    check("after a restart the kept collection is whole and the dropped one unknown", after_restart)
else:
    print(f"FAIL unknown phase {PHASE}", flush=True)
finish(cluster)
