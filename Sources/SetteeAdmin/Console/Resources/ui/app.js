// Settee admin console: one page, hash-routed, over the same admin REST API curl uses.
// Every call sends `ns-server-ui: yes` and the session cookie; a 401 shows the log-in form.

const $ = (sel, root = document) => root.querySelector(sel);
const page = $('#page');
let timer = null;

class Unauthorized extends Error {}

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const enc = encodeURIComponent;
const mib = (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`;

async function api(method, path, { form, json } = {}) {
  const opts = { method, headers: { 'ns-server-ui': 'yes' }, credentials: 'same-origin' };
  if (form) opts.body = new URLSearchParams(form);
  if (json !== undefined) {
    opts.body = JSON.stringify(json);
    opts.headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(path, opts);
  if (r.status === 401) {
    showLogin();
    throw new Unauthorized();
  }
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  return { status: r.status, ok: r.ok, body, text };
}

function message(r) {
  const b = r.body;
  if (b && typeof b === 'object') {
    if (b._) return b._;
    if (b.errors) return Object.values(b.errors).join('; ');
    if (b.reason) return `${b.error || ''} ${b.reason}`;
    if (Array.isArray(b)) return b.join('; ');
  }
  return typeof b === 'string' && b ? b : `HTTP ${r.status}`;
}

// MARK: log-in

function showLogin(error = '') {
  clearInterval(timer);
  $('#app').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = error;
  $('#login-password').value = '';
}

function showApp() {
  $('#login').hidden = true;
  $('#app').hidden = false;
}

$('#login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const form = { user: $('#login-user').value, password: $('#login-password').value };
  const r = await fetch('/uilogin', { method: 'POST', body: new URLSearchParams(form), credentials: 'same-origin' });
  if (r.ok) {
    showApp();
    route();
  } else {
    let text = 'Invalid username or password.';
    try { const b = await r.json(); if (b && b._) text = b._; } catch { /* empty body */ }
    showLogin(text);
  }
});

$('#logout').addEventListener('click', async () => {
  await fetch('/uilogout', { method: 'POST', credentials: 'same-origin' });
  showLogin();
});

// MARK: routing

const pages = { cluster: clusterPage, buckets: bucketsPage, documents: documentsPage, views: viewsPage, metrics: metricsPage };

async function route() {
  clearInterval(timer);
  const [name, ...rest] = (location.hash.replace(/^#\/?/, '') || 'buckets').split('/');
  const show = pages[name] || bucketsPage;
  for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.id === `nav-${name}`);
  try {
    await show(rest.map(decodeURIComponent));
  } catch (e) {
    if (!(e instanceof Unauthorized)) page.innerHTML = `<p class="error">${esc(e.message || e)}</p>`;
  }
}

function every(ms, fn) {
  clearInterval(timer);
  timer = setInterval(() => fn().catch((e) => { if (e instanceof Unauthorized) clearInterval(timer); }), ms);
}

window.addEventListener('hashchange', route);

async function bucketNames() {
  const r = await api('GET', '/pools/default/buckets');
  return r.ok ? r.body.map((b) => b.name) : [];
}

function bucketPicker(id, names, current) {
  return `<select id="${id}">${names.map((n) => `<option ${n === current ? 'selected' : ''}>${esc(n)}</option>`).join('')}</select>`;
}

// MARK: Cluster

async function clusterPage() {
  page.innerHTML = `
    <h2>Cluster</h2>
    <div class="card row">
      <span>Map revision: <strong id="map-rev">–</strong></span>
      <span>Rebalance: <strong id="rebalance-status">–</strong></span>
      <div class="bar" id="rebalance-bar"><div style="width:0%"></div></div>
      <button id="rebalance-btn" type="button">Rebalance</button>
      <span id="cluster-error" class="error"></span>
    </div>
    <table id="nodes-table"><thead><tr><th>Node</th><th>Status</th><th>Services</th><th>Ports</th>
      <th>Active vBuckets</th><th>Replica vBuckets</th><th>Memory (free / total)</th><th></th></tr></thead><tbody></tbody></table>
    <form id="add-node-form" class="card">
      <h3>Add node</h3>
      <div class="row">
        <label class="field">Host:port <input id="add-node-host" placeholder="127.0.0.1:9001" required></label>
        <label class="field">Username <input id="add-node-user"></label>
        <label class="field">Password <input id="add-node-password" type="password"></label>
        <button type="submit">Add node</button>
      </div>
      <p id="add-node-error" class="error"></p>
    </form>`;
  let otpNodes = [];
  const refresh = async () => {
    const [pd, bs, progress] = await Promise.all([
      api('GET', '/pools/default'), api('GET', '/pools/default/buckets'), api('GET', '/pools/default/rebalanceProgress'),
    ]);
    if (!pd.ok) throw new Error(message(pd));
    const active = {};
    const replica = {};
    let rev = null;
    for (const b of bs.ok ? bs.body : []) {
      const m = b.vBucketServerMap;
      for (const chain of m.vBucketMap) {
        chain.forEach((i, pos) => {
          if (i < 0) return;
          const server = m.serverList[i];
          const counts = pos === 0 ? active : replica;
          counts[server] = (counts[server] || 0) + 1;
        });
      }
      const terse = await api('GET', `/pools/default/b/${enc(b.name)}`);
      if (terse.ok && terse.body.rev !== undefined) rev = Math.max(rev ?? 0, terse.body.rev);
    }
    $('#map-rev').textContent = rev ?? '–';
    otpNodes = pd.body.nodes.map((n) => n.otpNode);
    $('#nodes-table tbody').innerHTML = pd.body.nodes.map((n) => {
      const host = n.hostname.replace(/:\d+$/, '');
      const kv = `${host}:${n.ports.direct}`;
      const colour = n.status === 'healthy' ? (n.clusterMembership === 'active' ? 'green' : 'amber') : 'red';
      return `<tr data-node="${esc(n.otpNode)}">
        <td>${esc(n.hostname)}${n.thisNode ? ' (this node)' : ''}</td>
        <td><span class="dot ${colour}"></span>${esc(n.status)} · ${esc(n.clusterMembership)}</td>
        <td>${esc((n.services || []).join(', '))}</td>
        <td>admin ${esc(n.hostname.split(':').pop())}, kv ${esc(n.ports.direct)}</td>
        <td>${active[kv] || 0}</td><td>${replica[kv] || 0}</td>
        <td>${mib(n.memoryFree)} / ${mib(n.memoryTotal)}</td>
        <td>${n.clusterMembership === 'active' && otpNodes.length > 1 ? '<button class="danger failover" type="button">Fail over</button>' : ''}</td>
      </tr>`;
    }).join('');
    const p = progress.ok ? progress.body : { status: 'none' };
    const running = p.status === 'running';
    const values = Object.values(p).filter((v) => v && typeof v === 'object' && 'progress' in v).map((v) => v.progress);
    const fraction = values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
    $('#rebalance-status').textContent = running ? `running ${(fraction * 100).toFixed(0)}%` : (p.errorMessage || (pd.body.balanced ? 'balanced' : 'needed'));
    $('#rebalance-bar > div').style.width = `${running ? fraction * 100 : (pd.body.balanced ? 100 : 0)}%`;
    $('#rebalance-btn').disabled = running;
  };
  $('#rebalance-btn').addEventListener('click', async () => {
    const r = await api('POST', '/controller/rebalance', { form: { knownNodes: otpNodes.join(','), ejectedNodes: '' } });
    $('#cluster-error').textContent = r.ok ? '' : message(r);
    await refresh();
  });
  $('#nodes-table').addEventListener('click', async (e) => {
    if (!e.target.classList.contains('failover')) return;
    const node = e.target.closest('tr').dataset.node;
    if (!confirm(`Fail over ${node}? Its active vBuckets move to replicas; data not yet replicated is lost.`)) return;
    const r = await api('POST', '/controller/failOver', { form: { otpNode: node } });
    $('#cluster-error').textContent = r.ok ? '' : message(r);
    await refresh();
  });
  $('#add-node-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const r = await api('POST', '/controller/addNode', {
      form: { hostname: $('#add-node-host').value, user: $('#add-node-user').value, password: $('#add-node-password').value, services: 'kv' },
    });
    $('#add-node-error').textContent = r.ok ? '' : message(r);
    if (r.ok) e.target.reset();
    await refresh();
  });
  await refresh();
  every(1000, refresh);
}

// MARK: Buckets

const opsSamples = {};

async function bucketOps() {
  const r = await api('GET', '/metrics');
  const now = Date.now();
  const out = {};
  if (!r.ok) return out;
  for (const m of parseMetrics(r.text)) {
    if (m.name !== 'settee_bucket_mutations_total') continue;
    const prev = opsSamples[m.labels.bucket];
    out[m.labels.bucket] = prev ? Math.max(0, (m.value - prev.value) / ((now - prev.at) / 1000)) : 0;
    opsSamples[m.labels.bucket] = { value: m.value, at: now };
  }
  return out;
}

async function bucketsPage() {
  page.innerHTML = `
    <h2>Buckets</h2>
    <table id="buckets-table"><thead><tr><th>Name</th><th>Items</th><th>RAM used / quota</th><th>Disk used</th>
      <th>Ops/s</th><th></th></tr></thead><tbody></tbody></table>
    <p id="buckets-error" class="error"></p>
    <form id="create-bucket-form" class="card" novalidate>
      <h3>Create bucket</h3>
      <div class="row">
        <div class="field"><label>Name <input id="bucket-name" name="name"></label><span class="error" id="err-name"></span></div>
        <div class="field"><label>RAM quota (MiB) <input id="bucket-ram" name="ramQuota" value="100" size="6"></label><span class="error" id="err-ramQuota"></span></div>
        <div class="field"><label>Replicas <select id="bucket-replicas" name="replicaNumber"><option>0</option><option selected>1</option><option>2</option><option>3</option></select></label><span class="error" id="err-replicaNumber"></span></div>
        <div class="field"><label class="inline"><input id="bucket-flush" type="checkbox"> Flush enabled</label><span class="error"></span></div>
        <div class="field"><label>Access control <select id="bucket-auth" name="authType">
          <option value="sasl" selected>Password (users and roles)</option>
          <option value="none">No password (Couchbase 4.x dedicated port; a gateway config without credentials)</option>
        </select></label><span class="error" id="err-authType"></span></div>
        <button id="create-bucket" type="submit">Create bucket</button>
      </div>
      <p class="error" id="err-general"></p>
    </form>`;
  const refresh = async () => {
    const [r, ops] = await Promise.all([api('GET', '/pools/default/buckets'), bucketOps()]);
    if (!r.ok) throw new Error(message(r));
    $('#buckets-table tbody').innerHTML = r.body.map((b) => {
      // The bucket's own status: "persistenceFailing" (its disk refuses writes) or "failed" (warmup failed).
      const state = b.status || 'healthy';
      const healthy = state === 'healthy' && b.nodes.length > 0 && b.nodes.every((n) => n.status === 'healthy');
      const why = state === 'healthy' ? '' : `<div class="error bucket-status">${esc(state)}: ${esc(b.statusReason || '')}</div>`;
      const s = b.basicStats;
      return `<tr data-bucket="${esc(b.name)}">
        <td><span class="dot ${healthy ? 'green' : 'red'}" title="${healthy ? 'healthy' : esc(state === 'healthy' ? 'unhealthy' : state)}"></span>${esc(b.name)}${why}</td>
        <td class="items">${s.itemCount}</td>
        <td>${mib(s.memUsed)} / ${mib(b.quota.ram)}</td>
        <td>${mib(s.diskUsed)}</td>
        <td>${(ops[b.name] || 0).toFixed(1)}</td>
        <td><a class="docs-link" href="#/documents/${enc(b.name)}">Documents</a>
          ${b.controllers && b.controllers.flush ? '<button class="secondary flush" type="button">Flush</button>' : ''}
          <button class="danger delete" type="button">Delete</button></td>
      </tr>`;
    }).join('') || '<tr><td colspan="6" class="notice">No buckets yet.</td></tr>';
  };
  $('#buckets-table').addEventListener('click', async (e) => {
    const row = e.target.closest('tr');
    if (!row || !row.dataset.bucket) return;
    const name = row.dataset.bucket;
    let r = null;
    if (e.target.classList.contains('delete') && confirm(`Delete bucket "${name}" and all its documents?`)) {
      r = await api('DELETE', `/pools/default/buckets/${enc(name)}`);
    } else if (e.target.classList.contains('flush') && confirm(`Flush bucket "${name}"? Every document is removed.`)) {
      r = await api('POST', `/pools/default/buckets/${enc(name)}/controller/doFlush`);
    }
    if (r) {
      $('#buckets-error').textContent = r.ok ? '' : message(r);
      await refresh();
    }
  });
  $('#create-bucket-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    for (const el of e.target.querySelectorAll('.error')) el.textContent = '';
    const form = {
      name: $('#bucket-name').value, ramQuota: $('#bucket-ram').value, replicaNumber: $('#bucket-replicas').value,
      flushEnabled: $('#bucket-flush').checked ? '1' : '0', bucketType: 'couchbase', authType: $('#bucket-auth').value,
    };
    const r = await api('POST', '/pools/default/buckets', { form });
    if (r.ok) {
      e.target.reset();
      await refresh();
      return;
    }
    const errors = (r.body && r.body.errors) || {};
    for (const [field, text] of Object.entries(errors)) {
      const slot = $(`#err-${field}`) || $('#err-general');
      slot.textContent = [slot.textContent, text].filter(Boolean).join(' ');
    }
    if (!Object.keys(errors).length) $('#err-general').textContent = message(r);
  });
  await refresh();
  every(2000, refresh);
}

// MARK: Documents

async function documentsPage([bucket]) {
  const names = await bucketNames();
  bucket = names.includes(bucket) ? bucket : names[0];
  if (!bucket) {
    page.innerHTML = '<h2>Documents</h2><p class="notice">No buckets yet: create one on the Buckets page.</p>';
    return;
  }
  page.innerHTML = `
    <h2>Documents</h2>
    <div class="row">
      <label class="field">Bucket ${bucketPicker('doc-bucket', names, bucket)}</label>
      <label class="field">Key prefix <input id="doc-prefix"></label>
      <button id="doc-search" type="button" class="secondary">Search</button>
      <button id="doc-new" type="button">New document</button>
    </div>
    <table id="docs-table"><thead><tr><th>ID</th><th></th></tr></thead><tbody></tbody></table>
    <div class="row"><button id="doc-prev" class="secondary" type="button">‹ Previous</button>
      <span id="doc-range" class="notice"></span><button id="doc-next" class="secondary" type="button">Next ›</button></div>
    <p id="docs-error" class="error"></p>
    <div id="doc-editor" class="card" hidden>
      <h3 id="doc-title"></h3>
      <label class="field" id="doc-id-field">Document ID <input id="doc-id"></label>
      <p id="doc-meta" class="notice mono"></p>
      <div id="doc-binary" hidden><p>Binary value, <span id="doc-size"></span> bytes. First bytes:</p><pre id="doc-hex"></pre></div>
      <textarea id="doc-value" spellcheck="false"></textarea>
      <p id="doc-error" class="error"></p>
      <div class="row"><button id="doc-save" type="button">Save</button>
        <button id="doc-delete" class="danger" type="button">Delete</button>
        <button id="doc-close" class="secondary" type="button">Close</button></div>
    </div>`;
  const pageSize = 20;
  let skip = 0;
  let current = null; // id of the open document, null for a new one
  const docPath = (id) => `/pools/default/buckets/${enc(bucket)}/docs/${enc(id)}`;
  const list = async () => {
    const prefix = $('#doc-prefix').value;
    const q = new URLSearchParams({ skip, limit: pageSize });
    if (prefix) {
      q.set('startkey', prefix);
      q.set('endkey', `${prefix}\u{10FFFF}`);
    }
    const r = await api('GET', `/pools/default/buckets/${enc(bucket)}/docs?${q}`);
    if (!r.ok) {
      $('#docs-error').textContent = message(r);
      return;
    }
    const rows = r.body.rows;
    $('#docs-table tbody').innerHTML = rows.map((row) => `<tr data-id="${esc(row.id)}">
        <td><a href="" class="doc-link mono">${esc(row.id)}</a></td>
        <td><button class="danger delete" type="button">Delete</button></td></tr>`).join('')
      || '<tr><td colspan="2" class="notice">No documents.</td></tr>';
    const total = r.body.total_rows;
    $('#doc-range').textContent = total ? `${skip + 1}–${skip + rows.length} of ${total}${r.body.truncated ? '+' : ''}` : '';
    $('#doc-prev').disabled = skip === 0;
    $('#doc-next').disabled = skip + rows.length >= total;
  };
  const open = async (id) => {
    $('#doc-error').textContent = '';
    $('#doc-editor').hidden = false;
    current = id;
    $('#doc-id-field').hidden = id !== null;
    $('#doc-delete').hidden = id === null;
    $('#doc-binary').hidden = true;
    $('#doc-value').hidden = false;
    $('#doc-save').hidden = false;
    if (id === null) {
      $('#doc-title').textContent = 'New document';
      $('#doc-meta').textContent = '';
      $('#doc-id').value = '';
      $('#doc-value').value = '{\n  \n}';
      return;
    }
    $('#doc-title').textContent = id;
    const r = await api('GET', docPath(id));
    if (!r.ok) {
      $('#doc-error').textContent = message(r);
      return;
    }
    const meta = r.body.meta;
    $('#doc-meta').textContent = `cas ${meta.cas} · flags ${meta.flags} · expiration ${meta.expiration} · ${meta.size} bytes · ${meta.datatype}`;
    if (meta.datatype === 'json') {
      // The raw value as stored: JSON.parse would round integers above 2^53.
      const raw = r.text.slice(r.text.indexOf(',"json":') + 8, -1);
      $('#doc-value').value = /\d{16,}/.test(raw) ? raw : JSON.stringify(JSON.parse(raw), null, 2);
    } else {
      $('#doc-value').hidden = true;
      $('#doc-save').hidden = true;
      $('#doc-binary').hidden = false;
      $('#doc-size').textContent = meta.size;
      $('#doc-hex').textContent = r.body.hexPreview;
    }
  };
  $('#doc-bucket').addEventListener('change', (e) => { location.hash = `#/documents/${enc(e.target.value)}`; });
  $('#doc-search').addEventListener('click', () => { skip = 0; list(); });
  $('#doc-prefix').addEventListener('keydown', (e) => { if (e.key === 'Enter') { skip = 0; list(); } });
  $('#doc-prev').addEventListener('click', () => { skip = Math.max(0, skip - pageSize); list(); });
  $('#doc-next').addEventListener('click', () => { skip += pageSize; list(); });
  $('#doc-new').addEventListener('click', () => open(null));
  $('#doc-close').addEventListener('click', () => { $('#doc-editor').hidden = true; });
  $('#docs-table').addEventListener('click', async (e) => {
    const row = e.target.closest('tr');
    if (!row || row.dataset.id === undefined) return;
    e.preventDefault();
    if (e.target.classList.contains('doc-link')) await open(row.dataset.id);
    if (e.target.classList.contains('delete') && confirm(`Delete document "${row.dataset.id}"?`)) {
      const r = await api('DELETE', docPath(row.dataset.id));
      $('#docs-error').textContent = r.ok ? '' : message(r);
      await list();
    }
  });
  $('#doc-save').addEventListener('click', async () => {
    const id = current ?? $('#doc-id').value.trim();
    const text = $('#doc-value').value;
    $('#doc-meta').textContent = '';
    if (!id) {
      $('#doc-error').textContent = 'A document ID is required.';
      return;
    }
    try { JSON.parse(text); } catch (err) {
      $('#doc-error').textContent = `Invalid JSON: ${err.message}`;
      return;
    }
    const r = await api('POST', docPath(id), { form: { value: text } });
    if (!r.ok) {
      $('#doc-error').textContent = message(r);
      return;
    }
    await list();
    await open(id);
    $('#doc-error').textContent = '';
    $('#doc-meta').textContent = `Saved. ${$('#doc-meta').textContent}`;
  });
  $('#doc-delete').addEventListener('click', async () => {
    if (current === null || !confirm(`Delete document "${current}"?`)) return;
    const r = await api('DELETE', docPath(current));
    $('#doc-error').textContent = r.ok ? '' : message(r);
    if (r.ok) $('#doc-editor').hidden = true;
    await list();
  });
  await list();
}

// MARK: Views (the views service, through the admin port's relay /settee/views/...)

async function viewsPage([bucket]) {
  const names = await bucketNames();
  bucket = names.includes(bucket) ? bucket : names[0];
  if (!bucket) {
    page.innerHTML = '<h2>Views</h2><p class="notice">No buckets yet: create one on the Buckets page.</p>';
    return;
  }
  page.innerHTML = `
    <h2>Views</h2>
    <p id="views-unavailable" class="error" hidden></p>
    <div class="row"><label class="field">Bucket ${bucketPicker('views-bucket', names, bucket)}</label></div>
    <div class="card"><h3>Design documents</h3><ul id="ddoc-list"></ul></div>
    <div class="card">
      <div class="row">
        <label class="field">Design document <input id="ddoc-name" value="dev_console"></label>
        <label class="field">View <input id="view-name" value="by_id"></label>
        <button id="ddoc-load" class="secondary" type="button">Load</button>
      </div>
      <label class="field">Map <textarea id="view-map" spellcheck="false">function (doc, meta) {\n  emit(meta.id, null);\n}</textarea></label>
      <label class="field">Reduce (optional) <textarea id="view-reduce" spellcheck="false" style="min-height:60px"></textarea></label>
      <div class="row"><button id="ddoc-save" type="button">Save design document</button>
        <button id="ddoc-delete" class="danger" type="button">Delete design document</button></div>
      <p id="ddoc-error" class="error"></p>
    </div>
    <div class="card">
      <div class="row"><label class="field">Query parameters <input id="view-params" value="stale=false&limit=20" size="40"></label>
        <button id="view-run" type="button">Run query</button></div>
      <p id="view-error" class="error"></p>
      <table id="view-rows"><thead><tr><th>id</th><th>key</th><th>value</th></tr></thead><tbody></tbody></table>
    </div>`;
  const base = `/settee/views/${enc(bucket)}`;
  const ddoc = () => `_design/${enc($('#ddoc-name').value.trim())}`;
  const probe = await api('GET', `${base}/`);
  const down = probe.status === 502 || probe.status === 503;
  $('#views-unavailable').dataset.state = down ? 'down' : 'up';
  if (down) {
    $('#views-unavailable').hidden = false;
    $('#views-unavailable').textContent = `Views service unavailable: ${message(probe)}`;
  }
  const listDdocs = async () => {
    const r = await api('GET', `/pools/default/buckets/${enc(bucket)}/ddocs`);
    const rows = r.ok && r.body && r.body.rows ? r.body.rows : [];
    $('#ddoc-list').innerHTML = rows.map((row) => {
      const id = row.doc.meta.id;
      return `<li><a href="" class="ddoc-link" data-name="${esc(id.replace(/^_design\//, ''))}">${esc(id)}</a>
        (${esc(Object.keys(row.doc.json.views || {}).join(', '))})</li>`;
    }).join('') || `<li class="notice">${r.ok ? 'None.' : 'Listing unavailable (' + esc(message(r)) + ').'}</li>`;
  };
  const load = async () => {
    $('#ddoc-error').textContent = '';
    const r = await api('GET', `${base}/${ddoc()}`);
    if (!r.ok) {
      $('#ddoc-error').textContent = message(r);
      return;
    }
    const views = r.body.views || {};
    const name = views[$('#view-name').value] ? $('#view-name').value : Object.keys(views)[0];
    if (!name) return;
    $('#view-name').value = name;
    $('#view-map').value = views[name].map || '';
    $('#view-reduce').value = views[name].reduce || '';
  };
  $('#views-bucket').addEventListener('change', (e) => { location.hash = `#/views/${enc(e.target.value)}`; });
  $('#ddoc-list').addEventListener('click', (e) => {
    if (!e.target.classList.contains('ddoc-link')) return;
    e.preventDefault();
    $('#ddoc-name').value = e.target.dataset.name;
    load();
  });
  $('#ddoc-load').addEventListener('click', load);
  $('#ddoc-save').addEventListener('click', async () => {
    const current = await api('GET', `${base}/${ddoc()}`);
    const views = current.ok && current.body && current.body.views ? current.body.views : {};
    const view = { map: $('#view-map').value };
    if ($('#view-reduce').value.trim()) view.reduce = $('#view-reduce').value;
    views[$('#view-name').value.trim()] = view;
    const r = await api('PUT', `${base}/${ddoc()}`, { json: { views } });
    $('#ddoc-error').textContent = r.ok ? 'Saved.' : message(r);
    await listDdocs();
  });
  $('#ddoc-delete').addEventListener('click', async () => {
    if (!confirm(`Delete ${ddoc()}?`)) return;
    const r = await api('DELETE', `${base}/${ddoc()}`);
    $('#ddoc-error').textContent = r.ok ? 'Deleted.' : message(r);
    await listDdocs();
  });
  $('#view-run').addEventListener('click', async () => {
    $('#view-error').textContent = '';
    const params = $('#view-params').value.replace(/^\?/, '');
    const r = await api('GET', `${base}/${ddoc()}/_view/${enc($('#view-name').value.trim())}${params ? '?' + params : ''}`);
    if (!r.ok) {
      $('#view-error').textContent = message(r);
      return;
    }
    const rows = r.body.rows || [];
    $('#view-rows tbody').innerHTML = rows.map((row) => `<tr class="view-row"><td class="mono">${esc(row.id ?? '')}</td>
      <td class="mono">${esc(JSON.stringify(row.key))}</td><td class="mono">${esc(JSON.stringify(row.value))}</td></tr>`).join('')
      || '<tr><td colspan="3" class="notice">No rows.</td></tr>';
  });
  await listDdocs();
}

// MARK: Metrics (SVG charts of /metrics, sampled every 2 s in this page)

export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const p of m[3].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]] = p[2];
    out.push({ name: m[1], labels, value: parseFloat(m[4]) });
  }
  return out;
}

const history = { at: [], ops: [], mutations: [], memory: [], queue: [], connections: [] };
let lastTotals = null;

const charts = [
  ['ops', 'KV ops/s', (v) => v.toFixed(1)],
  ['mutations', 'Mutations/s (all buckets)', (v) => v.toFixed(1)],
  ['memory', 'Memory used by buckets', mib],
  ['queue', 'Flusher queue (items)', (v) => v.toFixed(0)],
  ['connections', 'KV connections', (v) => v.toFixed(0)],
];

function sparkline(values) {
  const w = 300;
  const h = 100;
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - (v / max) * (h - 4) - 2).toFixed(1)}`).join(' ');
  return `<svg viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" role="img"><polyline points="${points}"/></svg>`;
}

async function metricsPage() {
  page.innerHTML = `<h2>Metrics <span class="notice">(this node, every 2 s)</span></h2>
    <div class="charts">${charts.map(([id, title]) => `<div class="card chart" id="chart-${id}">
      <div>${esc(title)}</div><div class="value">–</div>${sparkline([])}</div>`).join('')}</div>`;
  const sample = async () => {
    const r = await api('GET', '/metrics');
    if (!r.ok) throw new Error(message(r));
    const sum = (name) => parseMetrics(r.text).filter((m) => m.name === name).reduce((a, m) => a + m.value, 0);
    const now = Date.now();
    const totals = { ops: sum('settee_kv_ops_total'), mutations: sum('settee_bucket_mutations_total') };
    const seconds = lastTotals ? (now - lastTotals.at) / 1000 : 0;
    const rate = (k) => (lastTotals && seconds > 0 ? Math.max(0, (totals[k] - lastTotals[k]) / seconds) : 0);
    const point = {
      ops: rate('ops'), mutations: rate('mutations'), memory: sum('settee_bucket_mem_used_bytes'),
      queue: sum('settee_bucket_flusher_queue_items'), connections: sum('settee_kv_connections'),
    };
    lastTotals = { ...totals, at: now };
    for (const [id, , format] of charts) {
      history[id].push(point[id]);
      if (history[id].length > 60) history[id].shift();
      const card = $(`#chart-${id}`);
      if (!card) return;
      card.querySelector('.value').textContent = format(point[id]);
      card.querySelector('svg').outerHTML = sparkline(history[id]);
    }
  };
  await sample();
  every(2000, sample);
}

// MARK: start: a live session shows the console, anything else the log-in form.

(async () => {
  try {
    await api('GET', '/pools/default/buckets');
    showApp();
    route();
  } catch (e) {
    if (!(e instanceof Unauthorized)) showLogin(String(e.message || e));
  }
})();
