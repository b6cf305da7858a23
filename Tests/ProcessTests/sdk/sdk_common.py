"""What the SDK check scripts share: the PASS/FAIL report and exit code, small assertions, the connection with the
timeouts every check uses, and the admin REST calls the cluster scripts make (add a node, rebalance, fail over).

A script calls `check(name, fn)` per check (one line `PASS name` or `FAIL name: error` with the traceback) and
ends with `finish()`: the exit code is the number of failures (0 = all passed).
"""
import base64
import json
import sys
import threading
import time
import traceback
import urllib.parse
import urllib.request
from datetime import timedelta

from couchbase.auth import PasswordAuthenticator
from couchbase.cluster import Cluster
from couchbase.exceptions import AmbiguousTimeoutException, TimeoutException, UnAmbiguousTimeoutException
from couchbase.options import ClusterOptions, ClusterTimeoutOptions, WaitUntilReadyOptions

# What Couchbase documents an application may see while the SDK learns a failover's map.
DOCUMENTED_FAILOVER_ERRORS = (TimeoutException, AmbiguousTimeoutException, UnAmbiguousTimeoutException)

_failures = 0


def check(name, fn):
    global _failures
    try:
        fn()
        print(f"PASS {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        _failures += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc(file=sys.stdout)


def finish(cluster=None):
    """Closes `cluster` and exits with the number of failed checks."""
    if cluster is not None:
        cluster.close()
    print(f"sdk checks failed: {_failures}", flush=True)
    sys.exit(min(_failures, 100))


def raises(exc, fn):
    try:
        fn()
    except exc:
        return
    raise AssertionError(f"expected {exc.__name__}")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def connect(hosts, user, password, mechanisms=None, wait=False):
    """A Cluster on `hosts` (`127.0.0.1:PORT[,...]`) with 5 s KV and 10 s connect timeouts; `mechanisms` limits
    SASL (default: the SDK's, SCRAM-SHA512 first); `wait` waits until the cluster is ready (30 s)."""
    auth = (PasswordAuthenticator(user, password, allowed_sasl_mechanisms=mechanisms) if mechanisms
            else PasswordAuthenticator(user, password))
    opts = ClusterOptions(auth, timeout_options=ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5),
                                                                       connect_timeout=timedelta(seconds=10)))
    cluster = Cluster(f"couchbase://{hosts}", opts)
    if wait:
        cluster.wait_until_ready(timedelta(seconds=30), WaitUntilReadyOptions())
    return cluster


class Admin:
    """The admin REST API of one node, with Basic credentials."""

    def __init__(self, url, user, password):
        self.url = url
        self.token = base64.b64encode(f"{user}:{password}".encode()).decode()

    def __call__(self, path, form=None, method=None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method or ("POST" if data else "GET"))
        req.add_header("Authorization", f"Basic {self.token}")
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
            return json.loads(body) if body else None

    def members(self):
        return [n["otpNode"] for n in self("/pools/default")["nodes"]]

    def rebalance_in_while(self, node, user, password, work, stop):
        """Adds `node` (host:adminport) and rebalances it in while `work` runs on a thread; sets `stop` and waits for
        `work` to return afterwards, also when the rebalance failed."""
        t = threading.Thread(target=work)
        t.start()
        try:
            self("/controller/addNode", {"hostname": node, "user": user, "password": password})
            self.rebalance(self.members())
        finally:
            stop.set()
            t.join()

    def rebalance(self, known, ejected=()):
        """Starts a rebalance and waits (5 minutes at most) until it finished without an error."""
        self("/controller/rebalance", {"knownNodes": ",".join(known), "ejectedNodes": ",".join(ejected)})
        deadline = time.time() + 300
        while time.time() < deadline:
            p = self("/pools/default/rebalanceProgress")
            if p.get("status") == "none":
                if "errorMessage" in p:
                    raise AssertionError(p["errorMessage"])
                return
            time.sleep(0.2)
        raise AssertionError("rebalance did not finish")
