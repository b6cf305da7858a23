"""PUT latency of one writer for 5 s alone, then for 5 s while 2 readers loop over PATH (default: the whole `_changes`)."""
import http.client, json, sys, threading, time

port = int(sys.argv[1])
path = sys.argv[2] if len(sys.argv) > 2 else "/db/_changes"

def writer(tag, seconds):
    c = http.client.HTTPConnection("127.0.0.1", port)
    lat, end, i = [], time.time() + seconds, 0
    while time.time() < end:
        body = json.dumps({"channels": ["x"], "i": i})
        t = time.perf_counter()
        c.request("PUT", "/db/probe-%s-%d" % (tag, i), body, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 201, r.status
        lat.append((time.perf_counter() - t) * 1000); i += 1
    lat.sort()
    return lat

def reader(stop, counts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        c.request("GET", path); r = c.getresponse(); r.read(); counts.append(1)

def report(name, lat, extra=""):
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print("%s: %d PUTs, p50 %.1f ms, p99 %.1f ms, max %.1f ms%s" % (name, len(lat), q(0.5), q(0.99), lat[-1], extra))

tag = str(int(time.time() * 1000))
report("PUT alone", writer("a" + tag, 5))
stop, counts = threading.Event(), []
readers = [threading.Thread(target=reader, args=(stop, counts)) for _ in range(2)]
for t in readers: t.start()
lat = writer("b" + tag, 5)
stop.set()
for t in readers: t.join()
report("PUT while 2 readers loop over %s" % path, lat, " (%d answers read)" % len(counts))
