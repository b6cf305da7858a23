"""Pulls a settee-gateway database with the third-party pythonblip 0.3.1 client (a BLIP 3 / CBMobile_3 puller
independent of Settee) and checks what it received. Run by GatewayBLIPProcessTests.

    blip_pull.py HOST PORT DB USER PASSWORD OUTDIR EXPECTED_IDS FORBIDDEN_IDS ATTACHMENT_DOC ATTACHMENT_TEXT

Prints one PASS/FAIL line per check and `CLIENT <checkpoint client id>`; exits 1 when a check failed.
Also checks, over plain HTTP, the answers before an upgrade: 401 with WWW-Authenticate for a wrong password
(through pythonblip, as its user sees it, and raw), 400 naming the spoken subprotocols for an unknown one.
"""
import base64
import glob
import http.client
import json
import os
import sys

from pythonblip.exceptions import ReplicationError
from pythonblip.headers import BasicAuth
from pythonblip.output import LocalFile
from pythonblip.replicator import Replicator, ReplicatorConfiguration, ReplicatorType

host, port, db, user, password, outdir = sys.argv[1:7]
expected = set(filter(None, sys.argv[7].split(",")))
forbidden = set(filter(None, sys.argv[8].split(",")))
attachment_doc, attachment_text = sys.argv[9], sys.argv[10]
failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures += 1


def pull(pw):
    config = ReplicatorConfiguration.create(
        db, host, ReplicatorType.PULL, BasicAuth(user, pw), port=port, output=LocalFile(outdir))
    replicator = Replicator(config)
    try:
        replicator.start()
        replicator.replicate()
    finally:
        if replicator.blip.run_status.value == 0:
            replicator.stop()
    return replicator


def upgrade(pw, protocol):
    """A raw upgrade request: (status, headers, body)."""
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    auth = base64.b64encode(f"{user}:{pw}".encode()).decode()
    conn.request("GET", f"/{db}/_blipsync", headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Protocol": protocol,
        "Authorization": f"Basic {auth}"})
    r = conn.getresponse()
    body = r.read().decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, headers, body


# 1. The pull: every document of the user's channels, nothing else, bodies and the attachment intact.
replicator = pull(password)
print(f"CLIENT {replicator.client}", flush=True)
received = {}
with open(os.path.join(outdir, f"{db}.jsonl")) as f:
    for line in f:
        received.update(json.loads(line))
check("pulled exactly the user's documents", set(received) == expected,
      f"got {sorted(received)}, expected {sorted(expected)}")
check("no document of another channel", not (set(received) & forbidden), sorted(set(received) & forbidden))
check("bodies are the REST bodies", all(
    isinstance(received[d], dict) and received[d].get("id") == d and "_id" not in received[d] for d in received),
    received)
files = glob.glob(os.path.join(outdir, f"{db}_{attachment_doc.lower()}*"))
data = open(files[0], "rb").read() if files else b""
check("attachment fetched with getAttachment", data == attachment_text.encode(), f"files {files}, data {data!r}")

# 2. A wrong password: refused before the upgrade, as pythonblip's user sees it and on the wire.
try:
    pull(password + "-wrong")
    check("wrong password refused by pythonblip", False, "the pull ran")
except ReplicationError as err:
    check("wrong password refused by pythonblip", "Unauthorized" in str(err), str(err))
status, headers, body = upgrade(password + "-wrong", "BLIP_3+CBMobile_3")
check("wrong password is 401 before the upgrade", status == 401 and "www-authenticate" in headers,
      f"{status} {headers} {body}")

# 3. A subprotocol the gateway does not speak: 400 saying which it speaks.
status, headers, body = upgrade(password, "BLIP_3+CBMobile_9")
check("unknown subprotocol is 400 naming the spoken ones",
      status == 400 and "BLIP_3+CBMobile_3" in body and "BLIP_3+CBMobile_2" in body, f"{status} {body}")

sys.stdout.flush()
os._exit(1 if failures else 0)
