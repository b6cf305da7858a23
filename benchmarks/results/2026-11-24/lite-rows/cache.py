# ADR 0068: Lite's 4 MiB cache against 64 MiB, raw's row, Lite's version-4 row and the ids split (CPU seconds).
# python3 cache.py DOCUMENTS DIRECTORY cache
import sqlite3, os, hashlib, time, resource, sys
N=int(sys.argv[1])
DIR=sys.argv[2]
def body(i):
    filler="lorem ipsum "*max(1,(1024-96)//12)
    return ('{"type":"note","n":%d,"title":"note %d","done":%s,"text":"%s"}'%(i,i,"true" if i%2==0 else "false",filler)).encode()
def cpu():
    r=resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime+r.ru_stime
B=[body(i) for i in range(N)]
W=["1-"+hashlib.md5(b).hexdigest() for b in B]
def run(name, ddls, step, ckpt=1000, cache=4096):
    p=os.path.join(DIR, name + ".db")
    for s in ["","-wal","-shm"]:
        try: os.remove(p+s)
        except: pass
    c=sqlite3.connect(p, isolation_level=None)
    for x in ["page_size=4096","auto_vacuum=INCREMENTAL","journal_mode=WAL","synchronous=NORMAL","wal_autocheckpoint=%d"%ckpt,"cache_size=-%d"%cache]: c.execute("PRAGMA "+x)
    for d in ddls: c.execute(d)
    t0=cpu()
    c.execute("BEGIN")
    for i in range(N): step(c,i)
    t1=cpu()
    c.execute("COMMIT")
    t=cpu()-t0
    pc=c.execute("PRAGMA page_count").fetchone()[0]
    c.close()
    return t,t-(t1-t0),pc
cols="seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id INTEGER NOT NULL, winner TEXT NOT NULL, deleted INTEGER NOT NULL, type TEXT, tree BLOB NOT NULL, body BLOB"
def raw(c,i): c.execute("INSERT INTO docs VALUES (?,?)",("doc-%d"%i,B[i]))
def lite(c,i): c.execute("INSERT INTO docs VALUES (?,?,?,?,?,?,?,?)",(i+1,"doc-%d"%i,i+1,W[i],0,"note",b"",B[i]))
def ids(c,i):
    c.execute("INSERT INTO ids VALUES (?,?,?,?,?)",("doc-%d"%i,i+1,W[i],0,"note"))
    c.execute("INSERT INTO docs VALUES (?,?,?,?,?)",(i+1,"doc-%d"%i,None,b"",B[i]))
designs={
 "raw":(["CREATE TABLE docs (id TEXT PRIMARY KEY, body BLOB NOT NULL)"],raw),
 "lite_v4":(["CREATE TABLE docs (%s)"%cols],lite),
 "ids_split":(["CREATE TABLE docs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, doc_id INTEGER, tree BLOB NOT NULL, body BLOB)",
         "CREATE TABLE ids (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, winner TEXT NOT NULL, deleted INTEGER NOT NULL, type TEXT) WITHOUT ROWID"],ids),
}
extra=sys.argv[3] if len(sys.argv)>3 else ""
for rnd in range(3):
    r={}
    for k,v in designs.items():
        r[k]=run(k,*v)
        if extra=="cache": r[k+"_64M"]=run(k,*v,cache=65536)
    print(" | ".join("%s cpu %.3f (commit %.3f) pages %d %.2fx"%(k,t,cm,pc,r["raw"][0]/t) for k,(t,cm,pc) in r.items()),flush=True)
