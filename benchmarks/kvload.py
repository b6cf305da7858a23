#!/usr/bin/env python3
"""Loads N documents into a memcached-binary endpoint with pipelined quiet SETs (SETQ ... NOOP),
then optionally waits until the node reports its write queue empty (settee STAT ep_queue_size).
Used by the data-node benchmarks; speaks only to loopback."""
import argparse, os, random, socket, struct, sys, time, zlib

def vbucket(key: bytes) -> int:
    return ((zlib.crc32(key) >> 16) & 0x7FFF) % 1024

def frame(op, key=b"", value=b"", extras=b"", vb=0, opaque=0, cas=0, datatype=0):
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), datatype, vb, len(body), opaque, cas) + body

def read_frame(sock, buf):
    while len(buf) < 24:
        chunk = sock.recv(1 << 20)
        if not chunk: raise EOFError("closed")
        buf.extend(chunk)
    (_, op, kl, el, _, status, bl, opaque, cas) = struct.unpack(">BBHBBHIIQ", bytes(buf[:24]))
    while len(buf) < 24 + bl:
        chunk = sock.recv(1 << 20)
        if not chunk: raise EOFError("closed")
        buf.extend(chunk)
    body = bytes(buf[24:24 + bl]); del buf[:24 + bl]
    return op, status, opaque, body[el:el + kl], body[el + kl:]

def stats(sock):
    sock.sendall(frame(0x10, opaque=7))
    buf = bytearray(); out = {}
    while True:
        op, status, _, k, v = read_frame(sock, buf)
        if not k: return out
        out[k.decode()] = v.decode()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--wait-persisted", action="store_true")
    # pad: one repeated byte fills each value (compresses to almost nothing); varied: each value's "body" is a slice
    # of words drawn from a fixed vocabulary by a seeded generator (compresses as text does, the same on every run).
    ap.add_argument("--values", choices=["pad", "varied"], default="pad")
    a = ap.parse_args()
    sock = socket.create_connection(("127.0.0.1", a.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pad = "x" * max(0, a.value_size - 60)
    extras = struct.pack(">II", 0x02000000, 0)
    rng = random.Random(72)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(4096)]
    text = " ".join(rng.choices(vocab, k=1 << 20))  # about 6.5 MB of words; each body is a slice at a random offset
    def varied(i):
        head = '{"n":%d,"type":"image","owner":"user%05d","size":%d,"body":"' % (i, rng.randrange(100000), rng.randrange(1 << 20))
        room = max(0, a.value_size - len(head) - 2)
        start = rng.randrange(len(text) - room)
        return (head + text[start:start + room] + '"}').encode()
    t0 = time.time(); buf = bytearray(); errors = 0
    for start in range(0, a.items, a.batch):
        parts = []
        for i in range(start, min(start + a.batch, a.items)):
            key = b"doc::%08d" % i
            if a.values == "varied":
                val = varied(i)
            else:
                val = ('{"n":%d,"type":"image","pad":"%s"}' % (i, pad)).encode()[: a.value_size]
            parts.append(frame(0x11, key, val, extras, vbucket(key), i, datatype=0))
        parts.append(frame(0x0A, opaque=0xFFFFFFFF))
        sock.sendall(b"".join(parts))
        while True:
            op, status, opaque, _, _ = read_frame(sock, buf)
            if op == 0x0A: break
            errors += 1
    load_s = time.time() - t0
    persisted_s = None
    if a.wait_persisted:
        while True:
            s = stats(sock)
            if int(s.get("ep_queue_size", "0")) == 0 and int(s.get("ep_flusher_todo", "0")) == 0: break
            time.sleep(0.05)
        persisted_s = time.time() - t0
    print(f"loaded={a.items} errors={errors} load_s={load_s:.2f} load_ops_per_s={a.items/load_s:.0f}"
          + (f" persisted_s={persisted_s:.2f}" if persisted_s else ""))
    sys.exit(1 if errors else 0)

if __name__ == "__main__":
    main()
