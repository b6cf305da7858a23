# Health-verdict latency with a SIGSTOPped peer (ADR 0039). Usage: python3 benchmarks/heartbeat-latency.py BIN LOGDIR
# (BIN: a built settee-server). Starts three nodes on 127.0.0.1 with kernel-picked ports, data in a temp dir.
# M1: C paused for good; B paused until A reports it unhealthy, then resumed: seconds until A reports B healthy (x5).
# M2: auto-failover (timeout 5 s) of the paused C: seconds from SIGSTOP until C's vBuckets are active on A and B.
import subprocess, socket, time, json, urllib.request, urllib.parse, base64, os, sys, shutil, signal, tempfile
BIN=sys.argv[1]; LOGDIR=sys.argv[2]
os.makedirs(LOGDIR, exist_ok=True)
def free():
    s=socket.socket(); s.bind(('127.0.0.1',0)); p=s.getsockname()[1]; s.close(); return p
AUTH='Basic '+base64.b64encode(b'Administrator:password').decode()
def http(port, method, path, form=None):
    data=None
    if form is not None: data='&'.join(f"{k}={urllib.parse.quote(v,safe='')}" for k,v in form).encode()
    req=urllib.request.Request(f'http://127.0.0.1:{port}{path}', data=data, method=method)
    req.add_header('Authorization',AUTH)
    if data: req.add_header('Content-Type','application/x-www-form-urlencoded')
    try:
        with urllib.request.urlopen(req, timeout=30) as r: return r.status, r.read()
    except urllib.error.HTTPError as e: return e.code, e.read()
nodes=[]
for i in range(3):
    a,k,v=free(),free(),free()
    d=tempfile.mkdtemp(prefix=f'hb-{i}-')
    log=open(f'{LOGDIR}/n{i}.log','w')
    p=subprocess.Popen([BIN,'--data-dir',d,'--host','127.0.0.1','--admin-port',str(a),'--kv-port',str(k),'--views-port',str(v),'--kv-threads','1'],stdout=log,stderr=subprocess.STDOUT)
    nodes.append(dict(p=p,admin=a,kv=k,dir=d,name=f'n_{a}@127.0.0.1'))
def status(via, node):
    st,b=http(via['admin'],'GET','/pools/default')
    for n in json.loads(b).get('nodes',[]):
        if n.get('otpNode')==node['name']: return n.get('status')
try:
    for n in nodes:
        for _ in range(600):
            try: socket.create_connection(('127.0.0.1',n['admin']),1).close(); break
            except OSError: time.sleep(0.1)
    A,B,C=nodes
    http(A['admin'],'POST','/settings/web',[('username','Administrator'),('password','password'),('port','SAME')])
    for n in (B,C):
        http(A['admin'],'POST','/controller/addNode',[('hostname',f"127.0.0.1:{n['admin']}"),('user','Administrator'),('password','password')])
    http(A['admin'],'POST','/controller/rebalance',[('knownNodes',','.join(n['name'] for n in nodes)),('ejectedNodes','')])
    while json.loads(http(A['admin'],'GET','/pools/default/rebalanceProgress')[1]).get('status')!='none': time.sleep(0.2)
    print('bucket',http(A['admin'],'POST','/pools/default/buckets',[('name','demo'),('ramQuotaMB','256'),('replicaNumber','1'),('authType','none')])[0])
    def m(n):
        st,b=http(n['admin'],'GET','/pools/default/b/demo')
        return json.loads(b) if st==200 else None
    while not all((m(n) or {}).get('vBucketServerMap',{}).get('vBucketMap') for n in nodes): time.sleep(0.2)
    time.sleep(2)
    # M1
    C['p'].send_signal(signal.SIGSTOP)
    while status(A,C)=='healthy': time.sleep(0.1)
    lat=[]
    for r in range(5):
        B['p'].send_signal(signal.SIGSTOP)
        while status(A,B)=='healthy': time.sleep(0.05)
        t0=time.time(); B['p'].send_signal(signal.SIGCONT)
        while status(A,B)!='healthy': time.sleep(0.02)
        lat.append(time.time()-t0); time.sleep(1.5)
    print('M1 healthy verdict after resume, s:', ' '.join(f'{x:.2f}' for x in lat), f'mean {sum(lat)/len(lat):.2f} max {max(lat):.2f}')
    C['p'].send_signal(signal.SIGCONT)
    while not (status(A,C)=='healthy' and status(B,C)=='healthy'): time.sleep(0.1)
    time.sleep(3)
    # M2
    print('afo',http(B['admin'],'POST','/settings/autoFailover',[('enabled','true'),('timeout','5')])[0])
    time.sleep(3)
    t0=time.time(); C['p'].send_signal(signal.SIGSTOP)
    done=None
    while time.time()-t0<60:
        d=m(A)
        if d:
            sm=d['vBucketServerMap']; servers=sm['serverList']
            surv={i for i,s in enumerate(servers) if s in (f"127.0.0.1:{A['kv']}",f"127.0.0.1:{B['kv']}")}
            if len(sm['vBucketMap'])==1024 and all(ch[0] in surv for ch in sm['vBucketMap']):
                done=time.time()-t0; break
        time.sleep(0.1)
    print('M2 auto-failover of a SIGSTOPped node (timeout 5 s), s:', f'{done:.1f}' if done else None)
finally:
    for n in nodes:
        if n['p'].poll() is None:
            n['p'].send_signal(signal.SIGCONT); n['p'].kill(); n['p'].wait()
        shutil.rmtree(n['dir'], ignore_errors=True)
