import http.client, json, statistics, sys, threading, time

docs = int(sys.argv[1])
targets = [(a.split("=")[0], int(a.split("=")[1])) for a in sys.argv[2:]]

def req(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data

for name, port in targets:
    t0 = time.time()
    for start in range(0, docs, 1000):
        batch = [{"_id": "doc%07d" % (i * 7919 % docs), "channels": ["x"], "n": i} for i in range(start, min(docs, start + 1000))]
        s, _ = req(port, "POST", "/db/_bulk_docs", json.dumps({"docs": batch}))
        assert s == 201, s
    print(f"{name}: {docs} docs loaded in {time.time() - t0:.1f} s", flush=True)

def timed(port, path, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s, data = req(port, "GET", path)
        out.append((time.perf_counter() - t) * 1000)
        assert s == 200, (s, data[:200])
    return out

def writer(port, stop, count):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    i = 0
    while not stop.is_set():
        c.request("PUT", "/db/new%08d-%s" % (i, port), body=json.dumps({"channels": ["x"]}), headers={"Content-Type": "application/json"})
        r = c.getresponse(); r.read(); i += 1
    count.append(i)

results = {}
for rnd in range(3):
    for name, port in (targets if rnd % 2 == 0 else targets[::-1]):
        r = results.setdefault(name, {"limit10": [], "limit10_writes": [], "whole": [], "range": [], "writes": []})
        r["limit10"] += timed(port, "/db/_all_docs?limit=10", 20)
        stop = threading.Event(); count = []
        th = threading.Thread(target=writer, args=(port, stop, count)); th.start()
        time.sleep(0.2)
        r["limit10_writes"] += timed(port, "/db/_all_docs?limit=10", 20)
        stop.set(); th.join(); r["writes"] += count
        r["whole"] += timed(port, "/db/_all_docs", 3)
        r["range"] += [timed(port, '/db/_all_docs?startkey="doc%07d"&endkey="doc%07d"' % (k, k + 99), 1)[0]
                       for k in range(0, docs - 100, max(1, docs // 20))]

for name, r in results.items():
    def p(v): return f"median {statistics.median(v):.1f} ms (min {min(v):.1f}, max {max(v):.1f})"
    print(f"{name}: _all_docs?limit=10 {p(r['limit10'])}")
    print(f"{name}: _all_docs?limit=10 beside a writer {p(r['limit10_writes'])} (writer's PUTs per round {r['writes']})")
    print(f"{name}: whole _all_docs {p(r['whole'])}")
    print(f"{name}: startkey/endkey of 100 rows {p(r['range'])}")
