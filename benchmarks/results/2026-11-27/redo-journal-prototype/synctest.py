import os, threading, time, sys
def worker(path, n_sec, out, size=36*1024, span=32*1024*1024):
    fd = os.open(path, os.O_RDWR|os.O_CREAT, 0o600)
    os.pwrite(fd, b'\0'*span, 0); os.fsync(fd)
    buf = os.urandom(size); off = 0; cnt = 0; lat=[]
    end = time.time()+n_sec
    while time.time() < end:
        t=time.perf_counter()
        os.pwrite(fd, buf, off); os.fdatasync(fd)
        lat.append(time.perf_counter()-t)
        off += size
        if off + size > span: off = 0
        cnt += 1
    out.append((cnt, sorted(lat)[len(lat)//2]))
for threads in (1,2,4):
    out=[]
    ts=[threading.Thread(target=worker, args=(f"/work/main/.build/synctest-{i}.dat", 5, out)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    total=sum(c for c,_ in out)
    print(threads, "threads:", total/5, "syncs/s total; median latency us", [round(l*1e6) for _,l in out], flush=True)
for i in range(4):
    try: os.unlink(f"/work/main/.build/synctest-{i}.dat")
    except: pass
