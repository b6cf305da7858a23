"""The official Couchbase Python SDK's sub-document API on a 3-node settee cluster (replicaNumber 1), through a
rebalance that adds a fourth node, then a SIGKILL and failover of a member.

Usage: sdk_subdoc_cluster.py HOSTS ADMIN_URL ADMIN_USER ADMIN_PASSWORD BUCKET NEW_NODE VICTIM_OTP VICTIM_PID
  HOSTS      comma-separated 127.0.0.1:KVPORT of the three members
  ADMIN_URL  http://127.0.0.1:ADMINPORT of a member (not the victim)
  NEW_NODE   127.0.0.1:ADMINPORT of a fourth, uninitialised node to add and rebalance in
  VICTIM_OTP, VICTIM_PID  a member to SIGKILL and fail over afterwards
Every check prints `PASS name` or `FAIL name: error`; the exit code is the number of failures.
A rebalance must be invisible to the application (the SDK follows NOT_MY_VBUCKET and pushed maps): every
mutate_in / lookup_in during it succeeds, and every acknowledged sub-document increment is counted exactly once.
After a failover, every majority-durable mutate_in acknowledged before it is still there (reads may time out
while the SDK learns the new map, as Couchbase documents), and mutate_in works again.
"""
import os
import signal
import sys
import threading
import time

import couchbase.subdocument as SD
from couchbase.durability import Durability, ServerDurability
from couchbase.options import MutateInOptions
from couchbase.subdocument import StoreSemantics

from sdk_common import DOCUMENTED_FAILOVER_ERRORS, Admin, check, connect, finish

HOSTS, ADMIN_URL, USER, PASSWORD, BUCKET, NEW_NODE, VICTIM_OTP, VICTIM_PID = sys.argv[1:9]
admin = Admin(ADMIN_URL, USER, PASSWORD)
DOCS = 16


cluster = connect(HOSTS, USER, PASSWORD, wait=True)
coll = cluster.bucket(BUCKET).default_collection()
majority = MutateInOptions(durability=ServerDurability(Durability.MAJORITY))


def durable_subdoc_writes():
    # Replica streams of a just-created bucket connect within about a second: retry the first durable write.
    deadline = time.time() + 30
    for i in range(DOCS):
        while True:
            try:
                coll.mutate_in(f"sd::{i}", [SD.upsert("n", 0), SD.upsert("log", [])],
                               MutateInOptions(store_semantics=StoreSemantics.UPSERT,
                                               durability=ServerDurability(Durability.MAJORITY)))
                break
            except Exception:  # noqa: BLE001 - retried until the deadline
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
    for i in range(DOCS):
        coll.mutate_in(f"sd::{i}", [SD.increment("n", 1), SD.array_append("log", "durable")], majority)
        r = coll.lookup_in(f"sd::{i}", [SD.get("n"), SD.count("log")])
        if r.content_as[int](0) != 1 or r.content_as[int](1) != 1:
            raise AssertionError(f"sd::{i} after a durable mutate_in: {r.content_as[int](0)}, {r.content_as[int](1)}")


check("majority-durable mutate_in on 3 nodes", durable_subdoc_writes)

stop = threading.Event()
live = {"acked": [0] * DOCS, "errors": [], "lookups": 0}


def worker():
    i = 0
    while not stop.is_set():
        k = i % DOCS
        try:
            coll.mutate_in(f"sd::{k}", [SD.increment("n", 1), SD.upsert("last", i)])
            live["acked"][k] += 1
            r = coll.lookup_in(f"sd::{k}", [SD.get("n"), SD.exists("last")])
            if not r.exists(1):
                live["errors"].append(f"sd::{k} lost its last field")
            live["lookups"] += 1
        except Exception as e:  # noqa: BLE001
            live["errors"].append(f"{type(e).__name__}: {e}")
        i += 1


def through_rebalance():
    admin.rebalance_in_while(NEW_NODE, USER, PASSWORD, worker, stop)
    if live["errors"]:
        raise AssertionError(f"{len(live['errors'])} errors during rebalance, first: {live['errors'][:3]}")
    if sum(live["acked"]) == 0:
        raise AssertionError("no progress during the rebalance")
    for k in range(DOCS):
        n = coll.lookup_in(f"sd::{k}", [SD.get("n")]).content_as[int](0)
        if n != 1 + live["acked"][k]:
            raise AssertionError(f"sd::{k}: counter {n}, acknowledged increments {1 + live['acked'][k]}")
    print(f"  {sum(live['acked'])} mutate_in and {live['lookups']} lookup_in during the rebalance", flush=True)


check("mutate_in and lookup_in through a rebalance, every increment counted once", through_rebalance)


def durable_then_failover():
    expected = {}
    for k in range(DOCS):
        coll.mutate_in(f"sd::{k}", [SD.increment("n", 1000), SD.array_append("log", "before failover")], majority)
        expected[k] = coll.lookup_in(f"sd::{k}", [SD.get("n")]).content_as[int](0)
    os.kill(int(VICTIM_PID), signal.SIGKILL)
    admin("/controller/failOver", {"otpNode": VICTIM_OTP})
    deadline = time.time() + 60
    waited = 0
    for k in range(DOCS):
        while True:
            try:
                r = coll.lookup_in(f"sd::{k}", [SD.get("n"), SD.get("log[-1]")])
                if r.content_as[int](0) != expected[k] or r.content_as[str](1) != "before failover":
                    raise AssertionError(f"sd::{k} after failover: {r.content_as[int](0)} (expected {expected[k]})")
                break
            except DOCUMENTED_FAILOVER_ERRORS:
                waited += 1
                if time.time() > deadline:
                    raise
    for k in range(DOCS):
        coll.mutate_in(f"sd::{k}", [SD.increment("n", 1)])
        if coll.lookup_in(f"sd::{k}", [SD.get("n")]).content_as[int](0) != expected[k] + 1:
            raise AssertionError(f"sd::{k}: mutate_in after the failover was not applied once")
    print(f"  {waited} documented timeouts while the SDK learned the failover map", flush=True)


check("majority-durable mutate_in survives SIGKILL + failover, and mutate_in works after", durable_then_failover)
finish(cluster)
