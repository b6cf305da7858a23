"""Pages through `_changes?style=all_docs&limit=200` on two gateways (ports OLD NEW), 6 alternated walks each."""
import http.client, json, sys, time
def walk(port):
    c = http.client.HTTPConnection("127.0.0.1", port)
    since, n, t = "0", 0, time.perf_counter()
    while True:
        c.request("GET", "/db/_changes?style=all_docs&limit=200&since=" + since)
        r = json.loads(c.getresponse().read())
        if not r["results"]: break
        n += len(r["results"]); since = str(r["last_seq"])
    return n, time.perf_counter() - t
ports = {"old": int(sys.argv[1]), "new": int(sys.argv[2])}
res = {"old": [], "new": []}
for i in range(6):
    for name in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
        n, s = walk(ports[name]); res[name].append(s)
for name in res:
    xs = sorted(res[name]); print(name, n, "rows; walk seconds", ["%.3f" % x for x in res[name]], "median %.3f" % xs[len(xs)//2])
