"""Runs the official Couchbase Python SDK (couchbase==4.6.3) against one settee node.

Usage: sdk_roundtrip.py KV_PORT ADMIN_USER ADMIN_PASSWORD BUCKET
Every check prints one line `PASS name` or `FAIL name: error`; the exit code is the number of failures
(0 = all passed). The node must be initialised, with BUCKET (replicaNumber 0) already created.
"""
import sys
import time
from datetime import timedelta

from couchbase.diagnostics import PingState, ServiceType
from couchbase.durability import Durability, ServerDurability
from couchbase.exceptions import (AuthenticationException, BucketAlreadyExistsException,
                                  BucketDoesNotExistException, CasMismatchException, CouchbaseException,
                                  DocumentExistsException, DocumentLockedException, DocumentNotFoundException,
                                  DocumentNotLockedException)
from couchbase.management.buckets import BucketType, CreateBucketSettings
from couchbase.management.users import Role, User
from couchbase.options import (DecrementOptions, DeltaValue, IncrementOptions, RemoveOptions, ReplaceOptions,
                               SignedInt64, UpsertOptions, WaitUntilReadyOptions)
from couchbase.transcoder import RawBinaryTranscoder

import sdk_common
from sdk_common import check, expect, finish, raises

KV_PORT, USER, PASSWORD, BUCKET = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
HOST = f"127.0.0.1:{KV_PORT}"



def connect(user, password, mechanisms=None):
    return sdk_common.connect(HOST, user, password, mechanisms)


# Default authenticator: SCRAM-SHA512 over plain TCP (nothing forces PLAIN).
cluster = connect(USER, PASSWORD)
bucket = cluster.bucket(BUCKET)
coll = bucket.default_collection()


def ready_and_ping():
    cluster.wait_until_ready(timedelta(seconds=20), WaitUntilReadyOptions(service_types=[ServiceType.KeyValue]))
    r = bucket.ping()
    kv = r.endpoints.get(ServiceType.KeyValue, [])
    expect(kv and all(e.state == PingState.OK for e in kv), f"KV ping: {kv}")


def crud_with_cas():
    r = coll.upsert("user::1", {"name": "jane"})
    expect(r.mutation_token() is not None, "mutation token")
    expect(coll.get("user::1").content_as[dict] == {"name": "jane"}, "get after upsert")
    r2 = coll.replace("user::1", {"name": "joe"}, ReplaceOptions(cas=r.cas))
    raises(CasMismatchException, lambda: coll.replace("user::1", {"name": "x"}, ReplaceOptions(cas=r.cas)))
    raises(DocumentExistsException, lambda: coll.insert("user::1", {"name": "dup"}))
    coll.insert("user::2", {"name": "new"})
    raises(CasMismatchException, lambda: coll.remove("user::1", RemoveOptions(cas=r.cas)))
    coll.remove("user::1", RemoveOptions(cas=r2.cas))
    raises(DocumentNotFoundException, lambda: coll.get("user::1"))
    raises(DocumentNotFoundException, lambda: coll.replace("user::1", {"a": 1}))


def exists_touch_gat():
    coll.upsert("t::1", {"v": 1})
    expect(coll.exists("t::1").exists, "exists(t::1)")
    expect(not coll.exists("t::missing").exists, "exists(missing)")
    coll.touch("t::1", timedelta(seconds=100))
    expect(coll.get_and_touch("t::1", timedelta(seconds=200)).content_as[dict] == {"v": 1}, "gat value")
    raises(DocumentNotFoundException, lambda: coll.touch("t::missing", timedelta(seconds=10)))


def expiry():
    coll.upsert("ttl::1", {"v": 1}, UpsertOptions(expiry=timedelta(seconds=2)))
    expect(coll.exists("ttl::1").exists, "exists before expiry")
    time.sleep(3.1)
    raises(DocumentNotFoundException, lambda: coll.get("ttl::1"))


def counters():
    b = coll.binary()
    r = b.increment("ctr", IncrementOptions(initial=SignedInt64(10), delta=DeltaValue(5)))
    expect(r.content == 10, f"initial {r.content}")
    expect(b.increment("ctr", IncrementOptions(delta=DeltaValue(5))).content == 15, "increment")
    expect(b.decrement("ctr", DecrementOptions(delta=DeltaValue(20))).content == 0, "decrement clamps at 0")
    expect(b.decrement("ctr2", DecrementOptions(initial=SignedInt64(7), delta=DeltaValue(1))).content == 7,
           "decrement initial")


def append_prepend():
    coll.upsert("bin", b"mid", UpsertOptions(transcoder=RawBinaryTranscoder()))
    coll.binary().append("bin", b"-end")
    coll.binary().prepend("bin", b"start-")
    got = coll.get("bin", transcoder=RawBinaryTranscoder()).value
    expect(got == b"start-mid-end", f"concat {got!r}")


def durability_levels():
    for level in (Durability.MAJORITY, Durability.MAJORITY_AND_PERSIST_TO_ACTIVE, Durability.PERSIST_TO_MAJORITY):
        coll.upsert(f"dur::{level.name}", {"level": level.name}, UpsertOptions(durability=ServerDurability(level)))
        expect(coll.get(f"dur::{level.name}").content_as[dict] == {"level": level.name}, level.name)


def lock_unlock():
    coll.upsert("lock::1", {"v": 1})
    locked = coll.get_and_lock("lock::1", timedelta(seconds=10))
    expect(coll.get("lock::1").cas == 0xFFFFFFFFFFFFFFFF, "GET of a locked document shows CAS -1")
    expect(coll.exists("lock::1").cas == 0xFFFFFFFFFFFFFFFF, "exists (GET_META) hides the lock CAS")
    opts = UpsertOptions(timeout=timedelta(milliseconds=800))
    try:
        coll.upsert("lock::1", {"v": 2}, opts)
        raise AssertionError("upsert of a locked document succeeded")
    except (DocumentLockedException, CouchbaseException) as e:
        print(f"INFO upsert of a locked document raised {type(e).__name__}", flush=True)
        expect("lock" in type(e).__name__.lower() or "locked" in str(e).lower() or "timeout" in
               type(e).__name__.lower(), f"unexpected {type(e).__name__}")
    coll.replace("lock::1", {"v": 3}, ReplaceOptions(cas=locked.cas))  # the holder's CAS unlocks
    coll.upsert("lock::1", {"v": 4})
    again = coll.get_and_lock("lock::1", timedelta(seconds=10))
    coll.unlock("lock::1", again.cas)
    raises(DocumentNotLockedException, lambda: coll.unlock("lock::1", again.cas))
    coll.upsert("lock::1", {"v": 5})
    expect(coll.get("lock::1").content_as[dict] == {"v": 5}, "value after unlock")


def bucket_management():
    mgr = cluster.buckets()
    name = "sdkmgmt"
    mgr.create_bucket(CreateBucketSettings(name=name, bucket_type=BucketType.COUCHBASE, ram_quota_mb=100,
                                           num_replicas=0, flush_enabled=True))
    raises(BucketAlreadyExistsException,
           lambda: mgr.create_bucket(CreateBucketSettings(name=name, bucket_type=BucketType.COUCHBASE,
                                                          ram_quota_mb=100, num_replicas=0)))
    got = mgr.get_bucket(name)
    expect(got.name == name and got.flush_enabled, f"get_bucket {got}")
    expect(name in [b.name for b in mgr.get_all_buckets()], "listed")
    mgr.flush_bucket(name)
    mgr.drop_bucket(name)
    raises(BucketDoesNotExistException, lambda: mgr.get_bucket(name))


def other_mechanisms():
    for mechs in (["SCRAM-SHA256"], ["SCRAM-SHA1"], ["PLAIN"]):
        c = connect(USER, PASSWORD, mechs)
        c.bucket(BUCKET).default_collection().upsert(f"mech::{mechs[0]}", {"ok": True})
        c.close()


def wrong_password():
    def attempt():
        c = connect(USER, "wrong-password")
        c.bucket(BUCKET).default_collection().get("user::2")
    raises(AuthenticationException, attempt)


def rbac_reader_and_writer():
    users = cluster.users()
    users.upsert_user(User(username="reader", password="reader-pw",
                           roles=[Role(name="data_reader", bucket=BUCKET)]))
    users.upsert_user(User(username="writer", password="writer-pw",
                           roles=[Role(name="bucket_full_access", bucket=BUCKET)]))
    coll.upsert("rbac::1", {"v": 1})
    reader = connect("reader", "reader-pw")
    rc = reader.bucket(BUCKET).default_collection()
    expect(rc.get("rbac::1").content_as[dict] == {"v": 1}, "reader reads")
    try:
        rc.upsert("rbac::1", {"v": 2}, UpsertOptions(timeout=timedelta(seconds=2)))
        raise AssertionError("data_reader wrote")
    except CouchbaseException as e:
        print(f"INFO data_reader's upsert raised {type(e).__name__}", flush=True)
    expect(coll.get("rbac::1").content_as[dict] == {"v": 1}, "reader's write did not happen")
    reader.close()
    writer = connect("writer", "writer-pw")
    writer.bucket(BUCKET).default_collection().upsert("rbac::1", {"v": 3})
    writer.close()
    expect(coll.get("rbac::1").content_as[dict] == {"v": 3}, "writer wrote")


for name, fn in [
    ("wait_until_ready and ping", ready_and_ping),
    ("upsert/insert/replace/remove with CAS", crud_with_cas),
    ("exists/touch/get_and_touch", exists_touch_gat),
    ("increment/decrement with initial", counters),
    ("append/prepend", append_prepend),
    ("durability levels", durability_levels),
    ("get_and_lock/unlock", lock_unlock),
    ("expiry", expiry),
    ("bucket management over HTTP", bucket_management),
    ("SCRAM-SHA256, SCRAM-SHA1 and PLAIN on request", other_mechanisms),
    ("wrong password is AuthenticationException", wrong_password),
    ("RBAC data_reader refused writes, bucket_full_access writes", rbac_reader_and_writer),
]:
    check(name, fn)
finish(cluster)
