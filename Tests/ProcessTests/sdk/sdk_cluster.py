"""The official Couchbase Python SDK (couchbase==4.6.3) against a 3-node settee cluster, through a rebalance
and a failover.

Usage: sdk_cluster.py HOSTS ADMIN_URL USER PASSWORD BUCKET NEW_NODE VICTIM_OTP VICTIM_PID
  HOSTS      comma-separated 127.0.0.1:KVPORT of the three nodes (the connection string's host list)
  ADMIN_URL  http://127.0.0.1:PORT of a node that stays up
  NEW_NODE   127.0.0.1:ADMINPORT of a fourth, uninitialised node to add and rebalance in
  VICTIM_*   otpNode and pid of a cluster node this script SIGKILLs and fails over
Prints `PASS name` / `FAIL name: ...` per check; the exit code is the number of failures.

What Couchbase documents for these events, and so what the application may see: nothing during a rebalance
(the SDK follows NOT_MY_VBUCKET and pushed maps); during a failover, operations routed to the dead node time out
until the new map arrives (TimeoutException / AmbiguousTimeoutException / UnAmbiguousTimeoutException), after which
everything succeeds. Majority-durable writes acknowledged before the failover must all be readable after it.
"""
import os
import signal
import sys
import threading
import time

from couchbase.durability import Durability, ServerDurability
from couchbase.options import UpsertOptions

from sdk_common import DOCUMENTED_FAILOVER_ERRORS, Admin, check, connect, finish

HOSTS, ADMIN_URL, USER, PASSWORD, BUCKET, NEW_NODE, VICTIM_OTP, VICTIM_PID = sys.argv[1:9]
admin = Admin(ADMIN_URL, USER, PASSWORD)
KEYS = 2000


cluster = connect(HOSTS, USER, PASSWORD, wait=True)
coll = cluster.bucket(BUCKET).default_collection()
majority = UpsertOptions(durability=ServerDurability(Durability.MAJORITY))


def durable_writes():
    # Replica streams of a just-created bucket connect within about a second: probe until majority writes
    # succeed across the nodes before the writes that count.
    deadline = time.time() + 30
    for i in range(64):
        while True:
            try:
                coll.upsert(f"probe::{i}", {"n": i}, majority)
                break
            except Exception:  # noqa: BLE001 - retried until the deadline
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
    for i in range(KEYS):
        coll.upsert(f"key::{i}", {"n": i}, majority)


check("majority-durable upserts on 3 nodes", durable_writes)

# A writer/reader runs through the rebalance; it must see no error at all.
stop = threading.Event()
live = {"ok": 0, "errors": []}


def writer():
    i = 0
    while not stop.is_set():
        try:
            coll.upsert(f"live::{i}", {"n": i})
            if coll.get(f"live::{i}").content_as[dict]["n"] != i:
                live["errors"].append(f"live::{i} read back wrong")
            live["ok"] += 1
            i += 1
        except Exception as e:  # noqa: BLE001
            live["errors"].append(f"{type(e).__name__}: {e}")
            i += 1


def rebalance_in():
    admin.rebalance_in_while(NEW_NODE, USER, PASSWORD, writer, stop)
    if live["errors"]:
        raise AssertionError(f"{len(live['errors'])} errors during rebalance, first: {live['errors'][:3]}")
    if live["ok"] == 0:
        raise AssertionError("the writer made no progress during the rebalance")
    print(f"  {live['ok']} upsert+get pairs during the rebalance", flush=True)


check("upserts and gets through a rebalance with no error", rebalance_in)

documented = {"count": 0}


def read_all_after_failover():
    os.kill(int(VICTIM_PID), signal.SIGKILL)
    admin("/controller/failOver", {"otpNode": VICTIM_OTP})
    deadline = time.time() + 60
    for i in range(KEYS):
        while True:
            try:
                doc = coll.get(f"key::{i}").content_as[dict]
                if doc["n"] != i:
                    raise AssertionError(f"key::{i} has {doc}")
                break
            except DOCUMENTED_FAILOVER_ERRORS:
                documented["count"] += 1
                if time.time() > deadline:
                    raise
    print(f"  {documented['count']} documented timeouts while the SDK learned the failover map", flush=True)


check("every majority-durable write readable after SIGKILL + failover", read_all_after_failover)


def writes_after_failover():
    for i in range(200):
        coll.upsert(f"after::{i}", {"n": i})
        if coll.get(f"after::{i}").content_as[dict]["n"] != i:
            raise AssertionError(f"after::{i} read back wrong")


check("upserts and gets after the failover", writes_after_failover)
finish(cluster)
