# ADR 0068: page counts of raw's row, Lite's version-4 row and in-row narrowings (50,000 rows, Lite's PRAGMAs).
# python3 pages.py DIRECTORY
import sqlite3, os, hashlib, sys
DIR=sys.argv[1]
N=50000
def body(i):
    filler="lorem ipsum "*max(1,(1024-96)//12)
    return ('{"type":"note","n":%d,"title":"note %d","done":%s,"text":"%s"}'%(i,i,"true" if i%2==0 else "false",filler)).encode()
print(len(body(12345)), len(body(12346)))
def mk(name, ddl, ins, row):
    p=os.path.join(DIR, name + ".db")
    for s in ["","-wal","-shm"]:
        try: os.remove(p+s)
        except: pass
    c=sqlite3.connect(p); c.execute("PRAGMA page_size=4096"); c.execute("PRAGMA auto_vacuum=INCREMENTAL"); c.execute("PRAGMA journal_mode=WAL")
    c.execute(ddl); c.execute("BEGIN")
    for i in range(N): c.execute(ins,row(i))
    c.execute("COMMIT")
    print(name, c.execute("PRAGMA page_count").fetchone()[0])
    c.close()
mk("raw","CREATE TABLE docs (id TEXT PRIMARY KEY, body BLOB NOT NULL)","INSERT INTO docs VALUES (?,?)",lambda i:("doc-%d"%i,body(i)))
cols="seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id INTEGER, winner TEXT NOT NULL, deleted INTEGER NOT NULL, type TEXT, tree BLOB NOT NULL, body BLOB"
mk("lite4","CREATE TABLE docs (%s)"%cols,"INSERT INTO docs VALUES (?,?,?,?,?,?,?,?)",lambda i:(i+1,"doc-%d"%i,i+1,"1-"+hashlib.md5(body(i)).hexdigest(),0,"note",b"",body(i)))
mk("bin","CREATE TABLE docs (%s)"%cols,"INSERT INTO docs VALUES (?,?,?,?,?,?,?,?)",lambda i:(i+1,"doc-%d"%i,None,b"\x02"+hashlib.md5(body(i)).digest(),0,None,b"",body(i)))
cols2="seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, rev BLOB NOT NULL, type TEXT, tree BLOB, body BLOB"
mk("fold","CREATE TABLE docs (%s)"%cols2,"INSERT INTO docs VALUES (?,?,?,?,?,?)",lambda i:(i+1,"doc-%d"%i,b"\x02"+hashlib.md5(body(i)).digest(),None,None,body(i)))
