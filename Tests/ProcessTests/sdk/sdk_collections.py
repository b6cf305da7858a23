"""Runs the official Couchbase Python SDK's collections API (couchbase==4.6.3) against settee nodes.

Usage: sdk_collections.py KV_SEEDS ADMIN_USER ADMIN_PASSWORD BUCKET
KV_SEEDS is a KV port or `127.0.0.1:PORT[,127.0.0.1:PORT...]`. Every check prints one line `PASS name` or `FAIL name: error`; the
exit code is the number of failures (0 = all passed). The node(s) must be initialised, with BUCKET already created.
"""
import sys
import time
from datetime import timedelta

import couchbase.subdocument as SD
from couchbase.durability import Durability, ServerDurability
from couchbase.exceptions import (AmbiguousTimeoutException, CollectionAlreadyExistsException,
                                  CollectionNotFoundException, DocumentNotFoundException, ScopeAlreadyExistsException,
                                  ScopeNotFoundException, UnAmbiguousTimeoutException)
from couchbase.management.collections import CreateCollectionSettings
from couchbase.options import GetOptions, UpsertOptions

from sdk_common import check, connect, expect, finish, raises

SEEDS, USER, PASSWORD, BUCKET = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if ":" not in SEEDS:  # a bare KV port, as PythonSDKProcessTests.runOnOneNode passes it
    SEEDS = f"127.0.0.1:{SEEDS}"

cluster = connect(SEEDS, USER, PASSWORD, wait=True)
bucket = cluster.bucket(BUCKET)
manager = bucket.collections()
SHORT = GetOptions(timeout=timedelta(seconds=3))


def scopes():
    return {s.name: {c.name: c for c in s.collections} for s in manager.get_all_scopes()}


def manage():
    manager.create_scope("tenant")
    manager.create_collection("tenant", "users")
    manager.create_collection("tenant", "orders", CreateCollectionSettings(max_expiry=timedelta(seconds=3600)))
    raises(ScopeAlreadyExistsException, lambda: manager.create_scope("tenant"))
    raises(CollectionAlreadyExistsException, lambda: manager.create_collection("tenant", "users"))
    raises(ScopeNotFoundException, lambda: manager.create_collection("nope", "users"))
    listed = scopes()
    expect(set(listed.get("tenant", {})) == {"users", "orders"}, f"get_all_scopes: {listed}")
    expect("_default" in listed.get("_default", {}), f"default collection listed: {listed}")
    expect(listed["tenant"]["orders"].max_expiry == timedelta(seconds=3600), "maxTTL listed")


def separate_key_spaces():
    users = bucket.scope("tenant").collection("users")
    orders = bucket.scope("tenant").collection("orders")
    default = bucket.default_collection()
    for i in range(20):
        users.upsert(f"k{i}", {"in": "users", "i": i})
        orders.upsert(f"k{i}", {"in": "orders", "i": i})
    default.upsert("k0", {"in": "default"})
    for i in range(20):
        expect(users.get(f"k{i}").content_as[dict] == {"in": "users", "i": i}, f"users k{i}")
        expect(orders.get(f"k{i}").content_as[dict] == {"in": "orders", "i": i}, f"orders k{i}")
    expect(default.get("k0").content_as[dict] == {"in": "default"}, "default k0")
    raises(DocumentNotFoundException, lambda: default.get("k1", SHORT))
    users.upsert("only-users", {"x": 1})
    raises(DocumentNotFoundException, lambda: orders.get("only-users", SHORT))
    raises(DocumentNotFoundException, lambda: default.get("only-users", SHORT))
    # The orders collection's maxTTL (3600 s) gives its documents an expiry; the users' have none.
    got = orders.get("k0", GetOptions(with_expiry=True))
    expect(got.expiry_time is not None and abs(got.expiry_time.timestamp() - (time.time() + 3600)) < 60,
           f"maxTTL applied: {got.expiry_time}")
    expect(users.get("k0", GetOptions(with_expiry=True)).expiry_time is None, "no maxTTL, no expiry")
    users.remove("k19")
    raises(DocumentNotFoundException, lambda: users.get("k19", SHORT))
    expect(orders.get("k19").content_as[dict]["in"] == "orders", "a remove in one collection leaves the other")


def data_operations_in_a_collection():
    users = bucket.scope("tenant").collection("users")
    users.upsert("durable", {"n": 1}, UpsertOptions(durability=ServerDurability(Durability.MAJORITY)))
    users.mutate_in("durable", [SD.upsert("m", 2)])
    r = users.lookup_in("durable", [SD.get("n"), SD.get("m")])
    expect(r.content_as[int](0) == 1 and r.content_as[int](1) == 2, "subdoc in a named collection")
    locked = users.get_and_lock("durable", timedelta(seconds=5))
    users.unlock("durable", locked.cas)
    expect(users.exists("durable").exists, "exists")
    expect(not bucket.default_collection().exists("durable").exists, "not in the default collection")
    counter = users.binary().increment("counter")
    expect(counter.content == 0 or counter.content == 1, f"counter {counter.content}")


def drop():
    manager.drop_collection("tenant", "orders")
    raises(CollectionNotFoundException, lambda: manager.drop_collection("tenant", "orders"))
    expect_unknown_collection(bucket.scope("tenant").collection("orders"))
    expect(bucket.scope("tenant").collection("users").get("k0").content_as[dict]["in"] == "users", "users intact")
    listed = scopes()
    expect(set(listed["tenant"]) == {"users"}, f"after the drop: {listed}")
    manager.create_scope("scratch")
    manager.drop_scope("scratch")
    raises(ScopeNotFoundException, lambda: manager.drop_scope("scratch"))


def expect_unknown_collection(coll):
    """A get in a collection the server does not know: CollectionNotFound, or (what 4.6.3 does against Couchbase
    Server too) a timeout after retrying because the server answered UNKNOWN_COLLECTION (retry reason
    key_value_collection_outdated)."""
    try:
        coll.get("k0", SHORT)
    except CollectionNotFoundException:
        return
    except (UnAmbiguousTimeoutException, AmbiguousTimeoutException) as e:
        expect("key_value_collection_outdated" in str(e), f"timed out for another reason: {e}")
        return
    raise AssertionError("a get in an unknown collection succeeded")


def unknown_collection_is_collection_not_found():
    expect_unknown_collection(bucket.scope("tenant").collection("ghost"))


check("manage scopes and collections", manage)
check("each collection is its own key space", separate_key_spaces)
check("durability, subdoc, locks, counters in a named collection", data_operations_in_a_collection)
check("drop a collection and a scope", drop)
check("a collection never created is unknown to the server", unknown_collection_is_collection_not_found)
finish(cluster)
