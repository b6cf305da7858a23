import socket, struct, sys
def stats(port, bucket="demo", group=b""):
    s = socket.create_connection(("127.0.0.1", port))
    # SELECT_BUCKET 0x89 (authType=none: no SASL)
    def req(op, key=b"", extras=b"", value=b""):
        hdr = struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, len(key)+len(extras)+len(value), 0, 0)
        s.sendall(hdr + extras + key + value)
    def resp():
        h = b""
        while len(h) < 24: h += s.recv(24-len(h))
        _, op, kl, el, _, st, bl, _, _ = struct.unpack(">BBHBBHIIQ", h)
        b = b""
        while len(b) < bl: b += s.recv(bl-len(b))
        return op, st, b[el:el+kl], b[el+kl:]
    req(0x89, bucket.encode()); resp()
    req(0x10, group); out = {}
    while True:
        op, st, k, v = resp()
        if not k: break
        out[k.decode()] = v.decode()
    return out
if __name__ == "__main__":
    d = stats(int(sys.argv[1]))
    for k in sys.argv[2:]: print(k, d.get(k))
