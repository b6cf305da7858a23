/// Every bound of the system, named once. Checked at the edge (decoder, admin API, storage entry
/// points); the rest of the code may assume them.
public enum Limits {
    /// Largest SCRAM iteration count a client accepts from a server (Couchbase Server's default is 15,000; ours
    /// 4,096): a server asking for more gets no proof, instead of making the client spend minutes in PBKDF2.
    public static let scramClientMaxIterations = 100_000
    /// Largest SCRAM client-first or client-final message a server accepts (RFC 5802 sets none); past it the
    /// exchange fails as a malformed one does (AUTH_ERROR), before any parsing. The server keeps client-first-bare
    /// and its nonce until SASL_STEP, so without this one connection could make it hold a frame's worth. Real
    /// messages are far smaller: client-first is `n,,n=<user>,r=<nonce>` (a Couchbase user name is at most 128
    /// characters, so 512 UTF-8 bytes; SDK nonces are under 100 bytes) and client-final is `c=biws,r=<both
    /// nonces>,p=<88 base64 bytes>`; 2 KiB leaves room for an authzid repeating the name.
    public static let scramMaxClientMessageBytes = 2048
    /// Longest a KV connection's SCRAM exchange may wait between the server's challenge (SASL_AUTH) and the
    /// client's proof (SASL_STEP). The exchange counts against the login throttle's allowance while it waits
    /// (`LoginThrottle.beginCheck`), so a connection that never sends its proof must not hold it for ever; past
    /// this the exchange is dropped (its allowance freed, no failure recorded) and a late SASL_STEP is refused.
    /// A client answers within a round trip and one PBKDF2 run (milliseconds at the 4,096 rounds we issue).
    public static let scramStepTimeoutMs = 10_000
    /// How long nodes keep accepting the internal node secret's previous value after a rotation (and keep
    /// sending it, so a node that has not adopted the new document yet still understands them): long enough for
    /// the new cluster document to reach every member (pushed at once, pulled every second) and for replication
    /// to reconnect; short enough that a leaked secret stops working within a minute.
    public static let internalSecretGraceSeconds = 60
    /// Longest grace an admin may ask for in `POST /controller/rotateInternalSecret` (`graceSeconds`): a rotation
    /// meant to lock out a leaked secret must not leave it valid for days.
    public static let internalSecretMaxGraceSeconds = 3600
    /// vBuckets per bucket. Never changes for a bucket: clients ignore configs with another count.
    public static let numVBuckets = 1024
    /// Longest document key in bytes (memcached's and Couchbase's limit).
    public static let maxKeyLength = 250
    /// Largest document value; bigger ones are refused with E2BIG (kv_engine's `max_item_size`).
    public static let maxValueSize = 20 * 1024 * 1024
    /// Largest by-seqno a vBucket gives or accepts: 2^48 - 1 (an item keeps it in 48 bits, ADR 0048). A replica
    /// refuses a snapshot reaching past it (`invalidArguments`); an active vBucket at it refuses client writes.
    public static let maxSeqno: UInt64 = (1 << 48) - 1
    /// Largest revSeqno a document keeps: 2^48 - 1 (kv_engine's `uint48_t`). A replica refuses a larger one from
    /// its producer; a document's own revision stops counting at it (the next write keeps it: conflict resolution
    /// then falls to CAS).
    public static let maxRevSeqno: UInt64 = (1 << 48) - 1
    /// Largest extras section a request may carry.
    public static let maxExtrasLength = 64
    /// Largest framing-extras section.
    public static let maxFramingExtrasLength = 255
    /// Largest body (extras + key + value) a frame may declare. Bigger frames close the connection:
    /// the stream cannot be resynchronised without reading the body, and we refuse to buffer it.
    public static let maxFrameBodySize = maxValueSize + maxKeyLength + maxExtrasLength + maxFramingExtrasLength + 1024
    /// Keys one OBSERVE (0x92) request may list. Its reply holds 13 bytes plus the key for each, so this bounds the
    /// reply at about 17 MB with the longest keys, under `maxValueSize`; libcouchbase sends one OBSERVE per node
    /// for all the keys of a durability poll, so a bulk write's poll fits.
    public static let observeMaxKeys = 65_536
    /// Responses buffered per connection before it stops reading (backpressure for pipelining clients).
    public static let maxPendingResponsesPerConnection = 4096
    /// KV connection write-buffer water marks: above `high` unsent bytes the channel turns unwritable and
    /// the connection stops reading and executing frames until the client has read down to `low`. 1 MiB
    /// keeps a pipelined burst of small answers in one `write(2)` while bounding what a client that never
    /// reads can make the node hold (at most `high` plus one response, up to `maxValueSize`).
    public static let kvOutputHighWaterBytes = 1024 * 1024
    public static let kvOutputLowWaterBytes = 256 * 1024
    /// Finished response bytes a KV connection may queue behind one waiting operation (disk fetch, durable
    /// write) before it stops executing frames: the same bound as the socket's, for the ordered queue. A DCP
    /// producer connection also starts no scan past it (at most `dcpScansPerConnection` batches more arrive).
    public static let kvMaxQueuedResponseBytes = 4 * 1024 * 1024
    /// Seconds a KV connection has to authenticate or use an open bucket before it is closed, so idle or
    /// half-sent connections cannot hold descriptors. SDKs finish HELLO + SASL + SELECT_BUCKET in milliseconds;
    /// 10 s leaves room for a loaded node (settee-server `--kv-handshake-timeout` overrides it).
    public static let kvHandshakeDeadlineSeconds: Int64 = 10
    /// Percent of the handshake deadline by which each stranger's deadline is spread (it is closed between
    /// the deadline and 1.5 times it, never earlier): strangers that arrived in a burst are then closed at a steady
    /// rate instead of thousands in one event-loop tick, which delayed every other connection on the loop (ADR 0042;
    /// evenly by the connection count, `HandshakeDeadline.unit(sequence:)`).
    public static let kvHandshakeDeadlineSpreadPercent = 50
    /// Connections the KV listener accepts in one read of its socket (NIO's `maxMessagesPerRead` on the server
    /// channel), before its event loop serves the ready connections again. Half the new connections are set up
    /// inline on the listener's loop (handler, channel options, registration, deadline timer: tens of
    /// microseconds each on a loaded node), so a burst of thousands of connects delayed a client on that loop by up
    /// to a whole batch each tick; 4 bounds that to a few set-ups, and a burst of 5,000 is still accepted in full
    /// (issue 16, ADR 0042 amendment). Was 16.
    public static let kvAcceptsPerRead = 4
    /// Connections each KV listener accepts a second once its saved-up `kvAcceptBurst` is spent (`AcceptPacer`,
    /// ADR 0062; settee-server `--kv-accept-rate`, 0 unpaced). Set-up and teardown of a connection cost the node
    /// about 35-45 us of CPU each, so 2,000 a second bound a connect flood to under a tenth of a core while the
    /// node's established connections keep the rest; connects past it wait in the listen backlog.
    public static let kvAcceptsPerSecond = 2_000
    /// Accepts a quiet KV listener takes back to back before pacing starts: a pool of SDK connections opening
    /// together (tens to a few hundred) is not delayed.
    public static let kvAcceptBurst = 256
    /// Listen backlog of the KV port: connects the kernel queues while the node accepts `kvAcceptsPerRead` at a
    /// time (Linux caps it at `net.core.somaxconn`).
    public static let kvListenBacklog: Int32 = 1024
    /// Days the self-signed certificate a node makes at first start (`settee-server --tls` without files)
    /// stays valid. Clients pin it or take it as their CA; it is kept in the data directory, so a short life
    /// would break every pin at expiry. Ten years, like the self-generated certificates of Couchbase Server.
    public static let selfSignedCertificateValidityDays = 3650
    /// Largest frame body a connection may send before it authenticated, when no open (`authType=none`)
    /// bucket could serve it: HELLO, SASL and SELECT_BUCKET fit easily, and a stranger cannot make the
    /// node buffer a 20 MiB frame.
    public static let kvUnauthenticatedMaxFrameBody = 64 * 1024
    /// Times one operation re-fetches an evicted value that the item pager evicted again before the
    /// operation could use it; after that the client gets TMPFAIL and retries itself.
    public static let backgroundFetchAttempts = 8
    /// GET_AND_LOCK: lock time when the request asks 0 or more than `lockMaxSeconds` (kv_engine's defaults).
    public static let lockDefaultSeconds: UInt32 = 15
    public static let lockMaxSeconds: UInt32 = 30
    /// Concurrent KV connections per node.
    public static let maxConnections = 10_000
    /// The flusher's window: how long plain writes wait before the transaction that persists them (ADR 0107,
    /// replacing ADR 0085's 20 ms gather). One transaction carries the window's rows, so a B-tree leaf that
    /// several of them share is written once: 1 s cut the node's CPU per operation under 90/10 pipelined load by
    /// about a fifth. Nobody waiting for persistence waits for the window: a durable write's vBucket is written
    /// at once in an express batch. The price is up to this much more time before a plain (non-durable) write
    /// is on disk, which nobody was promised; a crash of the process loses up to a window of plain writes that
    /// no replica holds.
    public static let flusherWindowMilliseconds = 1_000
    /// Items written by the flusher in one SQLite transaction, and the queue length that ends its window early. A
    /// window's rows share B-tree leaves only within one transaction, so 10,000 gave away much of the window's gain
    /// (ADR 0107); 100,000 saved no more CPU than 30,000, and its transient batches are about 136 B per row. (The
    /// extra RSS ADR 0107 measured with 100,000 was malloc arenas, ADR 0108.)
    public static let flusherBatchMaxItems = 30_000
    /// Bytes (uncompressed values) written by the flusher in one transaction.
    public static let flusherBatchMaxBytes = 64 * 1024 * 1024
    /// First wait before the flusher retries a batch whose commit failed (disk full, EIO). Short, so a
    /// transient fault (a log rotated, space freed by an operator) costs little.
    public static let flusherRetryInitialMilliseconds = 100
    /// Longest wait between two retries of a failed batch (the wait doubles up to this): persistence
    /// resumes at most this long after the disk recovers, and a full disk is probed only every 2 s.
    public static let flusherRetryMaxMilliseconds = 2_000
    /// Seconds between two log lines about a persistence failure that goes on (the first failure and
    /// the recovery are always logged): loud enough for an operator, not a line per retry.
    public static let persistenceFailureLogIntervalSeconds = 30
    /// Unpersisted items (queued + the failed batch) past which a bucket that cannot persist refuses
    /// plain writes with TMPFAIL: bounds what a crash during a disk fault can lose and the memory held
    /// by data that is not on disk, instead of acknowledging writes without limit.
    public static let maxUnpersistedItemsWhileFailing = 10_000
    /// Default seconds a shutdown keeps retrying to persist dirty items when the disk fails; after that
    /// the node exits non-zero naming how many items were lost (a supervisor must not wait forever).
    public static let shutdownPersistRetrySeconds = 30
    /// Seconds a bucket's open spends at most on SQLite's `PRAGMA integrity_check` of an existing data file (every
    /// page, b-tree and index entry; ADR 0144) before warmup. A check that runs out is logged and the open goes on:
    /// a damaged row or index entry is then still found at first use (a value fetch that misses reports the item
    /// corrupt). 10,000 small items take tens of milliseconds; the bound keeps a huge file's warmup from doubling.
    public static let openIntegrityCheckSeconds = 10
    /// Dirty items queued in a bucket before writes get TMPFAIL (the flusher is behind).
    public static let maxDirtyQueueItems = 2_000_000
    /// Expiries below this many seconds are relative to now; above, absolute Unix time (memcached rule).
    public static let relativeExpiryLimitSeconds: UInt32 = 30 * 24 * 60 * 60
    /// Buckets per cluster (Couchbase's limit).
    public static let maxBuckets = 30
    /// Scopes one bucket's collections manifest may hold, `_default` included (ns_server's default cluster-wide
    /// `max_scopes_count`, applied per bucket here).
    public static let maxScopesPerBucket = 1000
    /// Collections one bucket's manifest may hold, `_default._default` included (ns_server's default
    /// `max_collections_count`, applied per bucket here). Each KV connection keeps an id table of this size.
    public static let maxCollectionsPerBucket = 1000
    /// STATS `collections` / `scopes` / `collections-details` counts (a pass over every active item) one node runs at
    /// once on its blocking pool, which logins and flushes share (ADR 0143); one more is refused ETMPFAIL.
    public static let collectionStatsPassesPerNode = 1
    /// Items of dropped collections the collection purger removes per hold of a vBucket's lock (ADR 0138): what a
    /// write to that vBucket may wait behind.
    public static let collectionPurgeBatchItems = 1000
    /// Pause between the collection purger's passes while items it could not take yet (unflushed, locked) are left.
    public static let collectionPurgeRetryMilliseconds = 100
    /// Longest scope or collection name, in bytes (ns_server's limit).
    public static let maxCollectionNameLength = 251
    /// Largest per-collection `maxTTL`, in seconds (ns_server accepts 0 ... 2^31 - 1).
    public static let maxCollectionMaxTTLSeconds: UInt32 = 2_147_483_647
    /// Longest key of a document in a named collection, without its LEB128 collection id (kv_engine's
    /// `MaxCollectionsLogicalKeyLen`: the prefix and the key together stay within 251 bytes).
    public static let maxCollectionLogicalKeyLength = 246
    /// Longest bucket name.
    public static let maxBucketNameLength = 100
    /// Smallest bucket RAM quota in MiB.
    public static let minBucketRamQuotaMB = 100
    /// A bucket's tombstone purge interval (`purgeInterval`, days) when none is set: Couchbase's default metadata
    /// purge interval. Tombstones are kept this long, so this bounds the memory deletions hold (ADR 0095).
    public static let defaultPurgeIntervalDays = 3.0
    /// Times one view index pass starts again after tombstones were purged under its scan (ADR 0095); each retry
    /// rebuilds the vBuckets concerned from 0.
    public static let viewPassPurgeRetries = 3
    /// The `purgeInterval` values the bucket API accepts, in days (Couchbase's range: about an hour to 60 days).
    public static let purgeIntervalDays: ClosedRange<Double> = 0.04...60
    /// Largest admin HTTP request body.
    public static let maxAdminRequestBody = 1024 * 1024
    /// Failover-log entries kept per vBucket.
    public static let maxFailoverEntries = 25
    /// Memory watermarks as fractions of the bucket quota (ep-engine's defaults).
    public static let memHighWatermark = 0.85
    public static let memLowWatermark = 0.75
    /// Above this fraction of quota, mutations that cannot evict get TMPFAIL.
    public static let mutationMemRatio = 0.93
    /// Read-only SQLite connections kept open per bucket for change-feed scans of evicted values.
    public static let changeFeedReaders = 2
    /// Largest `limit` one change-feed scan accepts (bounds the batch it copies out).
    public static let changeFeedMaxBatch = 100_000
    /// The latest seqnos (with their keys) each vBucket remembers, so a change feed close behind the high seqno
    /// finds what changed without visiting every item (`RecentChanges`, ADR 0077). Memory per bucket is at most
    /// this x vBuckets x (48 B + a key longer than 24 B).
    public static let recentChangesPerVBucket = 64
    /// Threads per node running DCP producer scans of the change feed.
    public static let dcpScanThreads = 2
    /// Changes one DCP producer scan sends as one snapshot, and their key + value bytes.
    public static let dcpBatchItems = 1_000
    public static let dcpBatchBytes = 4 * 1024 * 1024
    /// Change-feed scans one DCP connection may run at once (batches it holds beyond the flow-control window).
    public static let dcpScansPerConnection = 4
    /// Collection and scope ids one DCP producer connection's stream filters may hold (ADR 0143), counted once per
    /// distinct filter: streams with equal filters (the usual case, one filter on every vBucket) share one copy. A
    /// stream request whose new filter would pass it is refused E2BIG. Without it a connection could hold
    /// vBuckets x `maxCollectionsPerBucket` ids (about a million).
    public static let dcpFilterIDsPerConnection = 16_384
    /// Largest flow-control window a DCP consumer may ask for (CONTROL connection_buffer_size).
    public static let dcpMaxBufferBytes = 64 * 1024 * 1024
    /// The window our replication consumers ask for; they acknowledge every quarter of it.
    public static let dcpConsumerBufferBytes = 10 * 1024 * 1024
    /// Items and key + value bytes a DCP consumer (a replica, a client's change stream) stages for one snapshot
    /// before it applies it: beyond either, the producer broke the protocol and the stream closes. Our producers
    /// send at most `dcpBatchItems` items and `dcpBatchBytes` (or one item of up to `maxValueSize` and its XATTRs)
    /// per snapshot, so these leave a hundred and three times that room.
    public static let dcpConsumerMaxSnapshotItems = 100_000
    public static let dcpConsumerMaxSnapshotBytes = 64 * 1024 * 1024
    /// Key + value bytes one DCP consumer connection (a replica's, a client change stream's) stages across all its
    /// streams' open snapshots: a producer opening a snapshot on every vBucket cannot make it hold
    /// `dcpConsumerMaxSnapshotBytes` a thousand times. An item past it closes that item's stream, which reopens from
    /// what storage holds (a change stream: from the last whole snapshot it handed out).
    public static let dcpConsumerMaxStagedBytes = 256 * 1024 * 1024
    /// First wait before a replica's consumer connects again after losing its producer (`Backoff.doubling`).
    public static let replicationFirstBackoffMs: Int64 = 50
    /// Longest wait between replication reconnect attempts (doubling from `replicationFirstBackoffMs`).
    public static let replicationMaxBackoffMs: Int64 = 1_000
    /// Refusals in a row (TMPFAIL) of one replica snapshot's apply the consumer retries before it closes the
    /// stream and reopens it from storage (`RefusedApplyRetry`, ADR 0074).
    public static let replicaApplyRetryMaxAttempts = 200
    /// Longest time a replica consumer keeps retrying one refused apply (not reading meanwhile) before it closes
    /// the stream.
    public static let replicaApplyRetryMaxMs: Int64 = 30_000
    /// First wait before retrying a refused apply; doubles on each refusal up to `replicaApplyRetryMaxDelayMs`.
    public static let replicaApplyRetryFirstDelayMs: Int64 = 10
    /// Longest wait between retries of a refused apply.
    public static let replicaApplyRetryMaxDelayMs: Int64 = 500
    /// Durable-write timeout when the client gives none (kv_engine's default).
    public static let durabilityDefaultTimeoutMs = 30_000
    /// How long a cluster-wide bucket flush waits for one node to flush its copy (one SQLite transaction
    /// deleting every row: seconds even for millions of items on a slow disk; a node that takes longer is
    /// reported as failed rather than holding the caller for ever).
    public static let clusterFlushTimeout: Duration = .seconds(60)

    // Views and JavaScript.
    /// Longest one call into a JavaScript function (map, reduce, sync) may run before JSC's watchdog
    /// stops it (Couchbase's map functions have a timeout too).
    public static let jsCallTimeLimitSeconds = 5.0
    /// Bytes of JavaScript heap (live objects and the strings and buffers they hold, as JSC counts them) past which
    /// a call is stopped (`JSError.outOfMemory`): a map, reduce or sync function is written by an administrator but
    /// runs on every document, and JSC itself has no heap limit. A 20 MiB document parsed in JavaScript holds well
    /// under a tenth of this.
    public static let jsHeapMaxBytes = 512 * 1024 * 1024
    /// CPU seconds between the checks of a running call's heap (JSC's watchdog interval; a call shorter than this is
    /// never interrupted). One operation may still allocate past the bound before the next check (JSC's own limits
    /// bound it: a string is at most 2^31 characters).
    public static let jsHeapCheckSeconds = 0.05
    /// Largest emitted key in bytes of JSON (`MAX_EMIT_KEY_SIZE` in Couchbase's mapreduce.cc).
    public static let maxViewKeySize = 4096
    /// Largest emitted value in bytes of JSON (24-bit length field in Couchbase's B-tree).
    public static let maxViewValueSize = 16 * 1024 * 1024
    /// Rows one document may emit into one view (Couchbase refuses more than 65 535).
    public static let maxViewRowsPerDocument = 65_535
    /// Largest custom reduction in bytes of JSON ("Reduction too large").
    public static let maxReductionSize = 64 * 1024 - 1
    /// Values handed to one custom reduce call before the engine rereduces partial results; also the most partial
    /// results one rereduce call is handed (more are folded: `reduce(null, [p1…pn], true)` becomes the first partial
    /// of the next call).
    public static let reduceBatchSize = 1000
    /// Bytes of JSON (the call's `keys` and `values` arrays together) one custom reduce or rereduce call is handed at
    /// most: a batch is called before a row would take it past this, so 1,000 values of up to `maxViewValueSize` each
    /// are not held at once (ADR 0112's amendment). A single row larger than this (a value near `maxViewValueSize`
    /// with its key) is handed alone; a rereduce call is always handed at least two partials (each at most
    /// `maxReductionSize`), so that it makes progress.
    public static let reduceBatchBytes = 16 * 1024 * 1024
    /// Changes the indexer takes from a vBucket per SQLite transaction.
    public static let viewIndexBatchSize = 5000
    /// Key and value bytes of one such batch (at least one change): 5,000 ordinary documents are a few MB, and
    /// the map pipeline holds a few batches at once with their bodies.
    public static let viewIndexBatchBytes = 32 * 1024 * 1024
    /// Documents one JavaScript call maps (views: `MapDriver`); a batch also stops after a document once it
    /// ran `viewMapBatchMilliseconds` (well under `jsCallTimeLimitSeconds`, so the watchdog stops a batch only
    /// for a document that alone runs seconds) or its answer reached `viewMapBatchAnswerLength` characters.
    public static let viewMapBatchDocuments = 512
    public static let viewMapBatchMilliseconds = 500
    public static let viewMapBatchAnswerLength = 16 << 20
    /// Threads (each with its own JavaScript context) that map a view index pass with at least
    /// `viewIndexParallelChanges` changes in several vBuckets, while the index's worker writes; they exist
    /// only during such a pass. Mapped batches waiting for the writer: at most `viewIndexMappedBatchesQueued`.
    public static let viewIndexMapThreads = 2
    public static let viewIndexParallelChanges = 20_000
    public static let viewIndexMappedBatchesQueued = 4
    /// Changes the indexer writes per SQLite transaction (several vBuckets' batches together; ADR 0031).
    public static let viewIndexTransactionChanges = 50_000
    /// After a mutation, how long the background updater waits to batch more before a pass.
    public static let viewBackgroundUpdateSeconds = 1.0
    /// Views per design document, design documents per bucket.
    public static let maxViewsPerDesignDocument = 100
    public static let maxDesignDocumentsPerBucket = 100
    /// Largest design-document or views query body.
    public static let maxViewsRequestBody = 4 * 1024 * 1024
    /// Longest a `stale=false` query waits for the index to catch up before answering 500 timeout.
    public static let viewStaleFalseTimeoutSeconds = 60.0
    /// Deepest nesting of arrays and objects a document may have, counting the document's own object as 1
    /// (`{"a":[1]}` is 2 deep): the one document bound of every entry point (a gateway `PUT`, each `_bulk_docs`
    /// row in both modes, a multipart body, an import from KV in both bucket layouts, a Lite save or pull), measured
    /// on the document itself, never on what carries it (`{"docs":[…]}`, `_bulk_get`'s results, the `_sync`
    /// envelope). Sync Gateway takes Go's 10,000; this is what the recursive walks over a `JSON` value (parse,
    /// serialize, compare, free) can afford on `minimumThreadStack` in a debug build with half of it to spare: the
    /// deepest walk, the parse, takes 1.6 KiB a level there (ADR 0121 has the measurements).
    public static let maxDocumentDepth = 512
    /// Levels a text carrying documents may add around one (`_bulk_docs`' `{"docs":[…]}` adds 2, a `_bulk_get` reply
    /// 4, a stored non-winning body under `_sync.history.bodies` 4): `maxJSONDepth` is the document bound plus this.
    public static let documentEnvelopeDepth = 8
    /// Deepest nesting of arrays and objects `JSON.parse` accepts by default (documents and the texts carrying them,
    /// view keys, configs, peer replies): a document at `maxDocumentDepth` inside its deepest envelope. Bounds the
    /// parser's recursion (and that of serialising, comparing and freeing the value) far below
    /// `minimumThreadStack`.
    public static let maxJSONDepth = maxDocumentDepth + documentEnvelopeDepth
    /// The smallest thread stack (bytes) JSON work is budgeted for: Swift's task threads, dispatch's, NIO's event loops
    /// and Foundation threads take the process's `RLIMIT_STACK` on Linux, 8 MiB by default and 2 MiB when it is
    /// unlimited (measured, ADR 0121).
    public static let minimumThreadStack = 2 << 20
    /// Longest JSON text `JSON.parse` reads: the largest body any caller hands it (a replication
    /// `_changes` or `_bulk_get` reply, `ReplicationLimits.maxResponseBody`). Callers cap their own bodies
    /// lower first; this keeps a missed cap from parsing gigabytes into memory.
    public static let maxJSONBytes = 512 * 1024 * 1024
    /// Most values `JSON.parse` makes from one text (every scalar, array, object and object member counts one), past
    /// which it refuses the text before reading on. A parsed tree grows with its values, not its bytes: a number in
    /// an array holds 32 bytes, a one-element array nested in another about 68 (measured, ADR 0113), so
    /// `maxJSONBytes` alone let 512 MiB of `[0,0,…]` become 268 M values. 2^24 is above the 10.5 M values of the
    /// densest document a node stores (`maxValueSize` of `[0,0,…]`), so every stored document, design document, peer
    /// message and single-document body parses; it bounds one parse to about 0.5-1.1 GiB. Callers that parse many
    /// documents in one text pass their own bound (`ReplicationLimits.maxBulkGetJSONValues`, a views peer's answer,
    /// the design-document file, `liteMaxJSONValues`); the gateway's request bodies a lower one
    /// (`GatewayHTTPLimits.maxRequestJSONValues`).
    public static let maxJSONValues = 1 << 24

    /// Admin console: a session cookie unused this long is expired (seconds; `--ui-session-timeout` overrides).
    public static let consoleSessionIdleTimeoutSeconds = 1800
    /// Admin console: live sessions per node; logging in beyond it drops the least recently used one.
    public static let consoleMaxSessions = 256
    /// Documents endpoint: most keys one listing scans per node (a page is cut from these; beyond it the
    /// listing says `truncated`).
    public static let consoleMaxListedKeys = 100_000
    /// Documents endpoint: largest `limit` of one page.
    public static let consoleMaxPageSize = 1000

    // Sync gateway: the sync function, principals and access.
    /// Longest one run of a sync function may take before JSC's watchdog stops it; the write is then
    /// rejected with 500 (a runaway function never blocks a worker for longer).
    public static let syncFunctionTimeLimitSeconds = 1.0
    /// JavaScript threads (one JSEngine each) per database's sync function.
    public static let syncFunctionThreads = 2
    /// Sync-function runs queued per database before new writes are refused with 503.
    public static let syncFunctionMaxQueuedRuns = 10_000
    /// bcrypt cost of stored user passwords (Sync Gateway's default).
    public static let bcryptCost = 10
    /// Shortest accepted user password (Sync Gateway's `IsPasswordValid`); bcrypt reads at most 72 bytes.
    public static let minPasswordLength = 3
    public static let maxPasswordLength = 72
    /// Longest user or role name, and channel name, in bytes.
    public static let maxPrincipalNameLength = 240
    /// Longest email address a gateway user may have (RFC 5321's 254-byte path, less its brackets).
    public static let maxEmailLength = 254
    public static let maxChannelNameLength = 240
    /// Most channels (or roles) one principal document or one sync-function run may name.
    public static let maxChannelsPerGrant = 100_000
}

/// Bounds of the smart client, the router and the CLI (SetteeClient).
public enum ClientLimits {
    /// Default deadline of one client operation, retries included (Couchbase SDKs' KV timeout).
    public static let defaultOperationTimeoutMs = 2_500
    /// Deadline of connecting and authenticating one KV connection.
    public static let connectTimeoutMs = 5_000
    /// Deadline of one HTTP request to an admin port.
    public static let httpTimeoutMs = 30_000
    /// Longest `settee collection create` / `scope create` wait, in delays slept, for every data node to report the
    /// edit's manifest uid (`ManifestPropagation`, ADR 0143): a node adopts it with the next cluster document, well
    /// under a second on a healthy cluster. The passes' delays double from the first to the cap.
    public static let manifestWaitMs = 30_000
    public static let manifestWaitFirstDelayMs = 20
    public static let manifestWaitMaxDelayMs = 1_000
    /// Most vBuckets a config the client adopts may have. The key hash (`(crc >> 16) & 0x7fff`) names at most
    /// 32,768 vBuckets, and `VBucketHash` traps above 65,535: a node's config with 65,536 made every key
    /// operation of the smart client (and the router and gateway above it) trap.
    public static let maxConfigVBuckets = 32_768
    /// Largest HTTP response body the client reads (a 1024-vBucket config is ~20 KiB per replica).
    public static let maxHTTPResponseBody = 16 * 1024 * 1024
    /// Requests in flight on one client connection; more wait for the connection (back-pressure).
    public static let maxInFlightPerConnection = 65_536
    /// Retry backoff: first delay, doubling, capped.
    public static let retryBackoffInitialMs = 1
    public static let retryBackoffMaxMs = 100
    /// How often the client polls for a newer config while connected (the SDK's 2.5 s).
    public static let configPollIntervalMs = 2_500
    /// Longest a retry waits for the shared config refresh before trying the map it has (a refresh that asks a
    /// slow admin port can take seconds; the map also arrives in NOT_MY_VBUCKET bodies and pushes).
    public static let refreshWaitMaxMs = 200
    /// After a connection to a node fails, don't reconnect to it for this long.
    public static let nodeDownHoldOffMs = 100
    /// Requests one router connection may have outstanding before it stops reading.
    public static let routerMaxPendingPerConnection = 4_096
    /// Forwarded requests (and FLUSHes) one router connection may have waiting for the cluster before it stops
    /// taking new requests; it takes them again once half have been answered. The size of an answer is known only
    /// when it arrives, and every answer already asked for must be held until the client reads it, so this count
    /// times the largest answer (a `maxValueSize` document) is what a client that pipelines GETs and never reads
    /// can make the router hold beyond `Limits.kvMaxQueuedResponseBytes` and the socket's high-water mark
    /// (`Limits.kvOutputHighWaterBytes`): 16 × 20 MiB. 16 in flight keep a router–node round trip (well under a
    /// millisecond) busy for one client connection, so pipelined small requests lose next to no throughput; the
    /// router used to forward up to `routerMaxPendingPerConnection` (4,096) at once.
    public static let routerMaxForwardsInFlight = 16
    /// Change streams: bytes of batches handed out and not yet read before the stream stops acknowledging
    /// bytes (the producers then stop sending once their window is full).
    public static let changeStreamMaxPendingBytes = 32 * 1024 * 1024
    /// Change streams: how often the map is checked for vBuckets that moved while their stream stayed quiet.
    public static let changeStreamMapCheckMs: Int64 = 250
    /// Change streams: delay before reopening a vBucket's stream, doubling from the first to the cap.
    public static let changeStreamBackoffInitialMs = 10
    public static let changeStreamBackoffMaxMs = 1_000
}

/// A bucket's cluster-wide `basicStats` (itemCount summed over nodes, opsPerSec over a window).
extension Limits {
    /// Window of a bucket's `opsPerSec`: long enough to smooth the console's 2 s polls, short enough that
    /// the figure is about now (Couchbase's UI samples over seconds as well).
    public static let adminOpsRateWindowSeconds = 10
    /// Samples kept per bucket for that window (a client polling many times a second cannot grow it).
    public static let adminOpsRateSamples = 64
    /// Shortest span an `opsPerSec` is measured over: a sample taken moments ago (a peer's poll of this node's
    /// share) is not a baseline, or the rate would be a few milliseconds' worth (0 after a burst).
    public static let adminOpsRateMinimumSpanMilliseconds = 500
    /// How long a bucket GET waits for another node's share of the counts before naming it as not counted:
    /// SDKs and the console poll this endpoint, so a dead peer must not hold the answer for long.
    public static let adminPeerStatsTimeoutMilliseconds = 1000
}

/// Bounds of the sync gateway's database core (SetteeGateway/Database, EmbeddedBucket).
extension Limits {
    /// Deadline of one KV operation of a gateway on a cluster bucket (RemoteBucket), retries included: longer
    /// than an SDK's 2.5 s, so a busy node during a rebalance does not turn a sequence allocation into a 503.
    public static let gatewayRemoteOperationTimeoutMs = 10_000
    /// How long `_ensure_full_commit` on a cluster bucket waits for this gateway's acknowledged writes to be persisted
    /// on a majority of their vBuckets' copies before it fails (the replicator then retries from its checkpoint; ADR
    /// 0039 decision 6).
    public static let gatewayFullCommitTimeoutMs = 10_000
    /// Pause between two OBSERVE_SEQNO passes of that wait.
    public static let gatewayFullCommitPollMs = 20
    /// Deadline of one OBSERVE_SEQNO call of that wait (an unanswered vBucket is asked again next pass).
    public static let gatewayFullCommitObserveTimeoutMs = 2_000
    /// Collections one gateway database may name in its config (`scopes.S.collections`, ADR 0142). Sync Gateway 3.1
    /// allows 1,000; here each collection is a keyspace with its own change stream over every vBucket, its own index
    /// and its own sync-function threads, so the bound is what one gateway process carries comfortably.
    public static let gatewayMaxCollectionsPerDatabase = 32
    /// vBuckets of an embedded (`walrus:` or directory) gateway bucket; fixed for a bucket's life.
    public static let gatewayEmbeddedVBuckets = 64
    /// RAM quota of an embedded gateway bucket in MiB (values above it are evicted to disk).
    public static let gatewayEmbeddedRamQuotaMB = 1024
    /// Times an embedded bucket fetches an evicted value and retries before answering `temporary`.
    public static let gatewayBucketFetchRetries = 8
    /// Changes read per change-feed scan by an embedded bucket's mutation stream.
    public static let gatewayMutationScanBatch = 1000
    /// How long a gateway database collects vBucket restarts from its bucket's stream (a failover or a flush restarts
    /// many at once) before one pass over its index rechecks their documents against the bucket (ADR 0096).
    public static let gatewayRestartRecheckDelayMilliseconds = 100
    /// Longest wait before a recheck round whose reads failed (a node still failing over) is tried again; the wait
    /// doubles from `gatewayRestartRecheckDelayMilliseconds` up to it.
    public static let gatewayRestartRecheckMaxDelayMilliseconds = 10_000
    /// Seconds a write of this gateway may stay ahead of the change stream (indexed, not yet delivered) before its
    /// item is read from the bucket again (`GatewayDatabase.armOwnWriteTimer`): a write acknowledged by a node that
    /// was then failed over, and indexed after its vBucket's branch was rechecked, is never delivered by the new
    /// history's stream. A write is checked after one to two of these; the stream delivers the rest in milliseconds.
    public static let gatewayOwnWriteStreamWaitSeconds = 10.0
    /// Lanes of a gateway database's mutation stream (`MutationLanes`): mutations of vBuckets in different lanes are
    /// handled (imported) at the same time, each vBucket's in order. One lane bounded a debug gateway's imports to one
    /// per round trip, ~120-190 a second on a busy 2-core machine (issue 67's soak writes 250).
    public static let gatewayImportLanes = 8
    /// Mutations one lane holds while its worker is busy; the stream's reader waits when its lane is full.
    public static let gatewayImportLaneDepth = 16
    /// Times an import from the change stream whose CAS write failed (the application wrote the document again) reads
    /// the item again and imports what it holds then (`GatewayDatabase.importFromStream`).
    public static let gatewayImportRereads = 2
    /// Times a document write re-reads the document and retries after a CAS conflict.
    public static let gatewayWriteRetries = 64
    /// Sequences a document remembers in `_sync.recent_sequences` (lets every gateway close the gaps
    /// left by updates the bucket's change stream deduplicated).
    public static let gatewayRecentSequences = 50
    /// Bodies of non-leaf revisions kept this many generations below their leaves (for replicators).
    public static let gatewayKeptAncestorBodies = 20
    /// Bytes of non-leaf revision bodies a document keeps in all (nearest ancestors first): each kept body is stored
    /// in the document's item (or, with shared bucket access, in its `_sync` system XATTR, at most 1 MiB), so 20
    /// copies of a large body made it impossible to update.
    public static let gatewayKeptAncestorBodyBytes = 256 * 1024
    /// `old_rev_expiry_seconds` default (Sync Gateway's `DefaultOldRevExpirySeconds`): a replaced revision's body is
    /// kept this long for replicators still fetching it (`OldBodyRule`, ADR 0156).
    public static let gatewayOldRevExpirySeconds = 300
    /// The longest `old_rev_expiry_seconds` a config may give (a year; the body is in the document's item, so "keep
    /// forever" is 0, which leaves only the per-document bounds).
    public static let gatewayMaxOldRevExpirySeconds = 365 * 86_400
    /// Bytes of replaced revision bodies (ancestors' bodies in the documents' trees) one gateway database keeps in all;
    /// past it the sweep drops every ancestor body of the documents whose oldest one is oldest, until under it
    /// (ADR 0156). Per document, `gatewayKeptAncestorBodyBytes` bounds them at each write.
    public static let gatewayOldBodyBytes = 256 << 20
    /// Longest wait between two sweeps of expired or excess old bodies (`GatewayDatabase.sweepOldBodies`); a shorter
    /// `old_rev_expiry_seconds` sweeps `gatewayOldBodySweepsPerWindow` times a window (at least every second).
    public static let gatewayOldBodySweepSeconds = 60
    /// Sweeps of old bodies per `old_rev_expiry_seconds` window (at most one every `gatewayOldBodySweepSeconds`, at
    /// least one a second): a replaced body is dropped between its window and its window plus a tenth.
    public static let gatewayOldBodySweepsPerWindow = 10
    /// Winning revisions (body and history) a gateway database keeps in memory (`RevisionCache`, Sync Gateway's
    /// revision cache, whose default size is 5,000): when a KV client replaces one, the import keeps its body as the
    /// parent's and, without shared bucket access, its history, so replicas that have it are not forked and pullers
    /// can still fetch it.
    public static let gatewayRevisionCacheEntries = 5_000
    /// Bytes the revision cache holds in all (bodies plus history); the oldest entries leave first.
    public static let gatewayRevisionCacheBytes = 32 << 20
    /// Ancestors of a cached winner an import continues from when the item lost its history (the 1.x layout; at most
    /// the database's `revs_limit`).
    public static let gatewayRevisionCacheHistory = 100
    /// Ancestors of a cached winner the cache keeps for reads (at most the database's `revs_limit`; 1,000 is its
    /// default): a pull's `_bulk_get` is answered from the cache only with the revision's whole history, so a bound
    /// below the histories documents reach sent every fetch back to the bucket once they passed it (issue 67's soak:
    /// the 1.x layout's pulls timed out once its documents passed 100 revisions). Each id counts 48 bytes against
    /// `gatewayRevisionCacheBytes`.
    public static let gatewayRevisionCacheReadHistory = 1_000
    /// Seconds a missing sequence may hold back the stable sequence before it is abandoned.
    public static let gatewaySkippedSequenceWaitSeconds = 10.0
    /// Seconds the index waits for the bucket's first dump at open (it ends early once the stream idles).
    public static let gatewayOpenIndexWaitSeconds = 30.0
    /// A quiet stream for this long at open means the dump has been read (seconds).
    public static let gatewayOpenIdleSeconds = 0.15
    /// Documents one database watches at once for change-stream echoes of their `_purge` (PurgeEchoes); a watch
    /// ends when the stream brings the purge's deletion, so only purges whose deletion never comes back stay.
    public static let gatewayPurgeEchoesTracked = 10_000
    /// Smallest `revs_limit` a gateway database takes while `allow_conflicts` is on (Sync Gateway refuses a config
    /// below it: conflict branches need that much shared history to be told apart); with it off, 1.
    public static let gatewayMinRevsLimitWithConflicts = 20
    /// Days between a gateway database's background tombstone compactions when its config names none (Sync Gateway's
    /// `compact_interval_days` default); a config may ask for 0.04 ... 60, as Sync Gateway allows.
    public static let gatewayCompactIntervalDays = 1.0
    /// Largest `meta_purge_interval` (days) a gateway database takes: ten years.
    public static let gatewayMaxMetaPurgeIntervalDays = 3_650.0
    /// Tombstones one compaction batch reads before purging the due ones (each batch announces its highest sequence in
    /// the purge horizon first): what a run holds at once.
    public static let gatewayTombstonePurgeBatch = 500
    /// Largest `limit` of one `_changes` answer (0 or larger asks are cut to it; the answer's `last_seq` then says
    /// where the next one starts). `_all_docs` is not cut: a one-shot reader could not tell a cut answer from a
    /// whole one (its rows are built a page at a time, ADR 0092, in the index's id order, ADR 0093).
    public static let gatewayMaxRows = 1_000_000
    /// Rows of one `_changes` page: every feed reads its answer from the index a page at a time (`ChangesPager`) and
    /// writes it before reading the next, so an answer holds at most this many rows, rendered or not, however many it
    /// has (before, a normal feed of a big database built all of them, up to `gatewayMaxRows`, ~100-250 MB), and one
    /// walk of the index holds the index's lock for about this many entries per source, not for the whole answer.
    public static let gatewayChangesPageRows = 1_000
    /// Ids added to the gateway's id order (`IDOrder`, ADR 0093) since its last merge that an `_all_docs` request sorts
    /// and walks beside it without merging them, however small the database; past that and an eighth of the ids held,
    /// the request merges them (outside the index's lock) and installs the merge for the requests after it. Forgotten
    /// ids are dropped once they are more than this and half of the ids held.
    public static let gatewayIDOrderMergeFloor = 1_024
    /// Rows of an `include_docs` answer (`_changes` in every feed, `_all_docs`) whose bodies are read, written and let
    /// go together: such an answer is written a chunk at a time, so it holds at most this many bodies however many
    /// rows it has (before, a normal feed of a big database held one body per row, up to `gatewayMaxRows`). Equal
    /// to `gatewayBulkDocsConcurrency`, so a chunk is one round of overlapping reads.
    public static let gatewayIncludeDocsChunk = gatewayBulkDocsConcurrency
    /// Default and longest session lifetime in seconds.
    public static let gatewaySessionTTLSeconds = 24 * 3600
    public static let gatewayMaxSessionTTLSeconds = 365 * 24 * 3600
    /// `local_doc_expiry_secs` default: a `_local` document (a replicator's checkpoint) neither written nor read for
    /// this long expires from the bucket (Sync Gateway's 90 days; ADR 0151).
    public static let gatewayLocalDocExpirySeconds = 90 * 86_400
    /// The longest `local_doc_expiry_secs` a config may give (10 years: past it, "never" is what is meant, and a
    /// bucket expiry is an absolute `UInt32` epoch time).
    public static let gatewayMaxLocalDocExpirySeconds = 3_650 * 86_400
    /// Channels a document remembers having left (`_sync.channels` removal entries, which give readers of those
    /// channels a `removed` row; ADR 0151). Past it the oldest removals go and the purge horizon rises to them, so a
    /// client whose checkpoint is older restarts its pull (410) instead of missing the removal.
    public static let gatewayChannelRemovalsPerDocument = 64
    /// Users whose last verified password a gateway database remembers (`VerifiedCredentials`).
    public static let gatewayVerifiedPasswords = 10_000
    /// `_bulk_docs` documents written (and `_revs_diff` documents loaded, `_bulk_get` documents read, `include_docs`
    /// bodies of `_changes` and `_all_docs` read) at once per request (`BoundedConcurrency`). 16, not 8, since the
    /// KV client sends what one loop pass gathers in one write (ADR 0081): a push on a cluster bucket went ~14.6k ->
    /// ~16.3k docs/s.
    public static let gatewayBulkDocsConcurrency = 16
    /// Wanted revisions a BLIP pull reads concurrently before sending them in order (`BLIPChangesFeed.send`): at most
    /// this many revision bodies are held per subscription beyond the one being sent.
    public static let gatewayBLIPRevReadAhead = 16
    /// Documents in one `_bulk_docs` request.
    public static let gatewayMaxBulkDocs = 100_000
    /// Seconds an unused-sequence marker `_sync:unusedSeq:<n>` lives in the bucket.
    public static let gatewayUnusedSequenceMarkerSeconds: UInt32 = 3600
    /// Most sequences a gateway reserves with one increment of `_sync:seq` (ADR 0045; Sync Gateway allows 100,000).
    /// Also the longest unused-sequences range marker a gateway accepts from the bucket.
    public static let gatewaySequenceBatchMax = 1000
    /// A gateway reserving again sooner than this after its last reserve doubles its batch (Sync Gateway: 1 s).
    public static let gatewaySequenceGrowIntervalSeconds = 1.0
    /// Seconds after a reserve at which what the batch still holds is released (Sync Gateway: 1.5 s); well under
    /// `gatewaySkippedSequenceWaitSeconds`, so other gateways never abandon a sequence a live gateway holds.
    public static let gatewaySequenceReleaseWaitSeconds = 1.5
}

/// Bounds of the replication protocol client and codecs (SetteeReplication).
public enum ReplicationLimits {
    /// Largest header block of one MIME part (CouchDB's part headers are a few hundred bytes).
    public static let maxPartHeaderBytes = 16 * 1024
    /// Most parts one multipart body may hold (a `_bulk_get` answer has one per requested revision).
    public static let maxMultipartParts = 100_000
    /// Deepest nesting of multipart bodies (`multipart/mixed` holding `multipart/related`).
    public static let maxMultipartDepth = 4
    /// Largest response body the remote endpoint reads (one `_bulk_get` batch with attachments). A `_bulk_get` or
    /// `open_revs` answer past it is asked for again in halves, down to one revision, which is then that revision's
    /// error (ADR 0113's amendment).
    public static let maxResponseBody = 512 * 1024 * 1024
    /// Largest ratio of inflated to compressed bytes a gzip response may reach before the remote endpoint's HTTP
    /// client refuses it (NIOHTTPCompression's `.ratio`, counted over the whole response): deflate's own maximum,
    /// 1032:1 (zlib's technical details), so only a stream no deflate encoder writes is refused. What a response may
    /// hold after inflating is `maxResponseBody` (read as it inflates), and one inflate step holds at most this ratio
    /// times one read of the socket. 200 refused real answers: a document holding 200 KB of one repeated character
    /// compresses past 1000:1, and a pull of its channel failed every time with "network: limit" (issue 67's
    /// property test, which every client must read what another wrote).
    public static let maxDecompressionRatio = 1032
    /// Most values (`Limits.maxJSONValues`) a `_bulk_get` or `open_revs` answer in JSON may hold: CouchDB and PouchDB
    /// answer so, with every revision asked for (`bulkGetBatchSize`, up to 20 MiB each) in one text, where Sync
    /// Gateway, settee-gateway and Lite peers answer `multipart/mixed`, parsed a revision at a time under
    /// `Limits.maxJSONValues`. One value per 4 bytes of `maxResponseBody`: ordinary documents spend about 6 bytes a
    /// value or more, so an answer of them that fits the body parses, and only a near-full answer denser than that
    /// (long arrays of one-digit numbers) is refused, and asked for again in halves as an answer past
    /// `maxResponseBody` is. It bounds the parse to about 4-9 GiB, half what the bytes alone allowed.
    public static let maxBulkGetJSONValues = maxResponseBody / 4
    /// Longest line of a continuous `_changes` feed the remote endpoint holds while it waits for the line feed
    /// (a peer streaming bytes without one fails the feed at this many with a `badResponse`, instead of growing
    /// the buffer until memory runs out). The replicator asks `style=all_docs` without `include_docs`, so a row
    /// names one document's id, sequence and leaf revisions: metadata a peer keeps within the document's own
    /// item, at most `Limits.maxValueSize` (Sync Gateway's 20 MiB document limit). The bound is that plus 1 MiB
    /// of framing, so even a peer that inlined the whole document in the row fits; not `maxResponseBody`
    /// (512 MiB), which is sized for a whole `_bulk_get` batch with attachments, not one row.
    public static let maxChangesLineBytes = Limits.maxValueSize + 1024 * 1024
    /// Changes read per batch (PouchDB uses 100, CouchDB 500).
    public static let defaultBatchSize = 200
    /// Revisions asked for in one `_bulk_get` (Couchbase Lite 1.x used 50).
    public static let bulkGetBatchSize = 50
    /// Retry backoff after a transient error: first delay, doubling, capped.
    public static let retryBackoffInitialMs = 250
    public static let retryBackoffMaxMs = 30_000
    /// Attempts in a row a one-shot replication makes against transient failures before it gives up with the
    /// last error (Couchbase Lite's default for single-shot replicators); continuous ones keep trying.
    public static let oneShotMaxAttempts = 10
    /// Heartbeat asked of a longpoll or continuous `_changes` feed.
    public static let changesHeartbeatMs = 10_000
    /// Heartbeats' worth of silence after which a continuous `_changes` feed counts as a failed connection (a
    /// transient `network` error: the replicator retries with backoff), as CouchDB's replicator gives up on a
    /// feed silent for its `connection_timeout`. Not CouchDB's 3: a healthy peer may be silent longer than the
    /// heartbeat asked, since Sync Gateway and settee-gateway raise a shorter heartbeat to 25 s
    /// (`GatewayHTTPLimits.changesMinHeartbeatMs`) and a Lite peer's listener writes one each
    /// `Limits.liteFeedTimeoutMs` (30 s) whatever is asked; 6 × the 10 s asked is 60 s, twice the longest.
    public static let changesFeedIdleHeartbeats = 6
    /// Largest body read from a peer's answer that is only an error or a session (`_session`): its reason or cookie
    /// is all that is used.
    public static let maxSmallResponseBody = 1 << 20
    /// Longest silence of one HTTP request that is not a long-lived feed: while its body is sent, between two of its
    /// pieces (`uploadPieceBytes`) written to the socket; then until its response head (a longpoll's: its timeout
    /// plus this); then between two pieces of the answer's body. A request with a body is not failed for silence
    /// before `uploadMinBytesPerSecond` allows. Past both the request fails (transient: retried).
    public static let requestTimeoutMs = 60_000
    /// The least time a request with a body is given before silence fails it: `requestTimeoutMs` plus its bytes at
    /// this rate, at most `requestDeadlineMs`. What the kernel's buffers take at once (on loopback, hundreds of KiB;
    /// on a slow link, about its congestion window) leaves the pieces' progress (`uploadPieceBytes`) early and
    /// drains at the link's pace, so a body they hold whole is covered by this rate, and a larger body on a slower
    /// link by its progress. 32 KiB/s (256 kbit/s, a poor mobile link).
    public static let uploadMinBytesPerSecond = 32 * 1024
    /// A request body is written in pieces of this size, each one written to the socket counting as the peer heard
    /// from (`requestTimeoutMs`): an upload on a slow link lasts as long as the link keeps taking it, within the
    /// whole request's `requestDeadlineMs` (before, only `uploadMinBytesPerSecond` gave it time, and a body larger
    /// than a slower link carried in that time failed at every retry).
    public static let uploadPieceBytes = 16 * 1024
    /// Deadline of one whole HTTP request that is not a continuous feed: sending it, its head and its whole body
    /// (a longpoll `_changes` gets its timeout plus this). `requestTimeoutMs` bounds only silence, so without it a
    /// peer sending a byte every 59 s kept one request, its connection and its buffer (up to `maxResponseBody`) for
    /// ever. 15 minutes: the largest ordinary request is one `_bulk_get` or `_bulk_docs` batch (`bulkGetBatchSize`
    /// revisions; a few MiB, tens with attachments), which a 1 Mbit/s link carries in a few minutes and which may
    /// be up to 112 MiB at that rate; only a batch near `maxResponseBody` (512 MiB) needs more than 4.7 Mbit/s. A
    /// request past it fails as a transient network error, and the replicator retries it with backoff. A
    /// continuous feed has no total deadline (it stays open while its peer keeps its heartbeat): its bound is the
    /// idle one (`changesFeedIdleHeartbeats`), which only whole lines reset.
    public static let requestDeadlineMs = 900_000
    /// How many `history` entries a checkpoint document keeps (CouchDB keeps 50).
    public static let checkpointHistory = 50
    /// Largest sequence a peer's `_changes` may name (a row's `seq`, `last_seq`), serialized: CouchDB 2+ sends a
    /// string of a few hundred bytes per shard range, Sync Gateway a number or a short string. The replicator
    /// keeps it in its checkpoint (`_local` documents), so a deep or huge one made the checkpoint unreadable.
    public static let maxSequenceBytes = 64 * 1024
    /// Deepest sequence a peer may name (BigCouch's `[n, "..."]` is 1 level).
    public static let maxSequenceDepth = 4
    /// A live `_doc_ids` replication polls the normal feed this often when idle.
    public static let docIDPollIntervalMs = 1_000
    /// Smallest request body a remote endpoint with `gzipRequests` compresses.
    public static let gzipRequestMinBytes = 4 * 1024
    /// `rev` requests a BLIP push keeps in flight (replication-protocol.adoc §4 Push: the client bounds what it has
    /// sent unanswered; Sync Gateway sends its own revisions a handful at a time).
    public static let blipRevsInFlight = 10
}

// Lite, the embedded database.
extension Limits {
    /// Longest Lite document id in UTF-8 bytes (Couchbase's key limit).
    public static let liteMaxDocIDBytes = 250
    /// Revisions a Lite document keeps behind each leaf before pruning (Couchbase Lite's default
    /// `maxRevTreeDepth` is 20; deeper keeps conflicts with long-offline peers resolvable).
    public static let liteRevsLimit = 100
    /// Rows one `changes(since:)` call returns at most.
    public static let liteMaxChangesBatch = 10_000
    /// Latest document expiration a Lite database stores, in milliseconds since 1970 (the start of year 10000):
    /// a later date is refused, so converting it to a timer deadline in nanoseconds can never overflow (ADR 0153).
    public static let liteMaxExpirationMilliseconds: Int64 = 253_402_300_800_000
    /// Expired documents one purge transaction removes (the expiry timer runs transactions until none is due), so
    /// the writer is never held for more than this many purges at once.
    public static let liteExpiryPurgeBatch = 1_000
    /// Longest wait the expiry timer arms at once, in seconds: a later expiration is re-armed when it fires, so a
    /// wall clock that jumps (NTP, a suspended device) delays a purge by at most this.
    public static let liteExpiryTimerMaxDelaySeconds = 3_600
    /// Seconds before the expiry timer tries again after a purge failed (a full disk, a busy file).
    public static let liteExpiryRetrySeconds = 5
    /// Times a pull asks a collection's conflict resolver about one document when local writes keep changing its
    /// live leaves between the question and the save (ADR 0152); past it the conflict stays in the revision tree.
    public static let liteConflictResolverAttempts = 3
    /// Values one parse of a Lite database's own data may make (documents, revision trees, local documents, index
    /// rows, encoded models): what the application saved, which Lite does not bound in size, so no bound past the one
    /// `Limits.maxJSONBytes` sets (a JSON text holds at most one value per two bytes, plus one). A document the app
    /// could save stays readable, and compaction, which keeps the attachments of the bodies it can parse, misses none
    /// for their count. Bytes from peers (the P2P listener) are bounded as the gateway's.
    public static let liteMaxJSONValues = maxJSONBytes / 2 + 1
    /// How often a Lite database that someone follows (`changes`, live queries) checks whether another
    /// process committed to its file: the delay before such writes show in a live query.
    public static let liteExternalChangePollMilliseconds = 250
    /// Collections one Lite database holds at most, `_default._default` included: each is a set of SQLite tables
    /// (documents, revisions, views, full-text), and `committedLastSeq` reads every one (docs/adr/0150).
    public static let liteMaxCollections = 1_000
    /// Longest scope or collection name in UTF-8 bytes (Couchbase Lite's and Couchbase Server's rule, 1...251).
    public static let liteMaxCollectionNameBytes = 251
    /// Documents one index update processes per transaction (bounds how long a query holds the writer).
    public static let liteIndexBatch = 1_000
    /// Documents per chunk that `saveAll` prepares (validates, serializes, digests) on its helper thread, and
    /// how many chunks the helper may hold ready ahead of the writer (ADR 0080): at most 2,048 prepared rows.
    public static let liteSavePrepareChunk = 128
    public static let liteSavePrepareAhead = 16
    /// How long a local endpoint's longpoll/continuous `_changes` waits for a change, and how often it
    /// looks.
    public static let liteFeedTimeoutMs = 30_000
    public static let liteFeedPollMs = 25
    /// Largest request body a Lite P2P listener reads from a peer (`_bulk_docs`, `_revs_diff`, `_bulk_get`,
    /// `_local`): a 20 MiB document plus room for a batch, as the gateway's `GatewayHTTPLimits.maxRequestBody`. Its
    /// values are bounded as the gateway's too (`GatewayHTTPLimits.maxRequestJSONValues`).
    public static let liteListenerMaxRequestBody = 64 * 1024 * 1024
    /// Connections a Lite P2P listener keeps open at once (a few peers replicate with it, each with a handful of
    /// connections); more wait in the accept queue.
    public static let liteListenerMaxConnections = 64
    /// Longest `open_revs` list of one `GET /db/doc?open_revs=[…]` to a Lite P2P listener (413 past it): a peer asks
    /// for a document's missing leaves, a handful. Its `_bulk_get` and `open_revs` answers are bounded as the
    /// gateway's `_bulk_get` (`GatewayHTTPLimits.maxBulkItems`, `maxBulkReadDocs`, `maxBulkReadBytes`).
    public static let liteListenerMaxOpenRevs = 1_000
    /// Rows one `changes` request of a Lite P2P listener's BLIP feed carries at most (the peer's `subChanges` `batch`
    /// is lowered to it; 200 when it names none, as Couchbase Lite asks), and entries one `changes` or
    /// `proposeChanges` from a peer may list (413 past it).
    public static let liteListenerBLIPMaxChangesBatch = 1_000
    public static let liteListenerBLIPDefaultChangesBatch = 200
    public static let liteListenerBLIPMaxProposals = 10_000
    /// Longest `client` property of `getCheckpoint`/`setCheckpoint` (Couchbase Lite sends `cp-` and 28 base64
    /// characters), and most collections one `getCollections` names, on a Lite P2P listener's BLIP connection.
    public static let liteListenerBLIPMaxClientBytes = 256
    public static let liteListenerBLIPMaxCollections = 1_000
    /// Longest `proveAttachment` nonce a Lite P2P listener answers (its length travels as one byte in the proof).
    public static let liteListenerBLIPMaxNonceBytes = 255
    /// `subChanges` feeds of one Lite P2P listener BLIP connection still running: the current subscription plus the
    /// ones `unsubChanges` ended that have not returned yet (one waiting for room in the outgoing queue of a peer that
    /// does not read returns only once there is room or the connection closes). Past it a `subChanges` is refused
    /// (429), so a peer alternating `subChanges` and `unsubChanges` cannot pile up feeds (as
    /// `gatewayBLIPMaxLiveFeeds`).
    public static let liteListenerBLIPMaxLiveFeeds = 4
    /// `subChanges` feeds of one Lite P2P listener BLIP connection running or still ending over all its collection
    /// indexes (ADR 0149; one subscription per index): a peer replicating up to 32 collections at once plus
    /// `liteListenerBLIPMaxLiveFeeds` ending ones, as `gatewayBLIPMaxLiveFeedsPerConnection`. Past it 429.
    public static let liteListenerBLIPMaxLiveFeedsPerConnection = 32 + liteListenerBLIPMaxLiveFeeds
}

/// Bounds of the sync gateway's HTTP shell (settee-gateway). A Lite P2P listener's `_bulk_get` and `open_revs` keep
/// the same `maxBulkItems`, `maxBulkReadDocs` and `maxBulkReadBytes`.
public enum GatewayHTTPLimits {
    /// Largest request body accepted (after gzip decoding): Sync Gateway's 20 MiB document limit plus
    /// room for multipart framing and `_bulk_docs` batches.
    public static let maxRequestBody = 64 * 1024 * 1024
    /// Most values (`Limits.maxJSONValues`: every scalar, array, object and object member) the gateway parses from one
    /// request body or JSON parameter; past it the request is 400 naming the bound. Values, not bytes, make what a
    /// parse holds (32 bytes a number in an array, about 68 each of nested one-element arrays), so under the default
    /// bound `maxRequestBody` of `[[[[0]]],…]` held 17 times its size (1.1 GB). At 4 Mi a body's parse holds at most
    /// about 4.2 times `maxRequestBody` (283 MB) whatever its shape (measured, ADR 0113; a body of 16-byte strings,
    /// which the count does not bound, 5.9 times). Documents spend about 6 bytes a value (short names and
    /// numbers) to 30 or more (text), so a `_bulk_docs` batch passes up to 24 MiB or more (replicators send 100-200
    /// documents a batch); one document is refused only past 4 Mi values (a 20 MiB array of small numbers), which the
    /// gateway still reads and serves when it was stored through KV.
    public static let maxRequestJSONValues = 1 << 22
    /// Largest body of a request made before any authentication (`POST /db/_session`'s name and password), after
    /// gzip decoding too.
    public static let maxAnonymousBody = 64 * 1024
    /// Largest config file read at start-up.
    public static let maxConfigFile = 16 * 1024 * 1024
    /// `_changes` default timeout (ms) when no heartbeat is asked for; longer ones are clamped.
    public static let changesDefaultTimeoutMs = 300_000
    public static let changesMaxTimeoutMs = 900_000
    /// `_changes` heartbeats shorter than this are raised to it (Sync Gateway's 25 s floor).
    public static let changesMinHeartbeatMs = 25_000
    /// Rows one `_changes` page asks the database for at a time (continuous feeds loop).
    public static let changesBatch = 500
    /// Session lifetime when `POST /db/_session` does not give one (24 h, Sync Gateway's).
    public static let sessionTTLSeconds = 24 * 3600
    /// Responses smaller than this are sent uncompressed even when the client accepts gzip.
    public static let gzipMinimumBytes = 256
    /// Longest `keys`/`docs`/`doc_ids` list of one bulk request.
    public static let maxBulkItems = 100_000
    /// Distinct documents one `_bulk_get`, or `_all_docs?keys=…&include_docs=true`, may read (duplicates are
    /// dropped first). Couchbase Lite asks 50 per `_bulk_get` and PouchDB 100-ish; 10,000 stops one small
    /// request from asking the gateway to read and hold a whole database.
    public static let maxBulkReadDocs = 10_000
    /// Bytes of documents (bodies, inline attachments) one `_bulk_get` response may gather before the request is
    /// refused with 413: the client splits it. Room for 12 documents at Sync Gateway's 20 MiB limit. Reads overlap
    /// (`gatewayBulkDocsConcurrency`): once past this no read is started, and the ones running finish, so a request
    /// holds at most this plus `gatewayBulkDocsConcurrency` - 1 documents.
    public static let maxBulkReadBytes = 256 * 1024 * 1024
}

/// Bounds on numbers that arrive in requests and peer messages (rev ids, query parameters, quotas):
/// each is checked where the number is parsed, so arithmetic on it later cannot overflow.
extension Limits {
    /// Highest revision generation accepted (`N` of `N-digest`) and produced: 2^52, so `_revisions.start`
    /// stays a JSON number every peer reads exactly (doubles hold integers exactly up to 2^53, and
    /// `JSON.intValue` reads them up to 9e15). At a million edits a second a document needs 142 years
    /// to get there; a higher one can only be forged, and refusing it keeps `generation + 1` from
    /// overflowing. A document at the limit cannot be edited.
    public static let maxRevGeneration = 1 << 52
    /// Largest view query `skip`, `limit` and `group_level` kept; larger asks are cut to it. No index
    /// holds 2^40 rows, so the cut changes no answer, and `skip + limit` (the partial query a
    /// coordinator sends its peers) and SQLite's 64-bit LIMIT/OFFSET cannot overflow.
    public static let maxViewQueryCount = 1 << 40
    /// Longest `keys` list of one view query (a 400 past it): each listed key is an index lookup of its own, and a
    /// coordinator's merge a pass per key, so the 4 MiB body's ~2,000,000 keys cost that many. The gateway's
    /// `maxBulkReadDocs` for the same reason.
    public static let viewMaxQueryKeys = 10_000
    /// Bytes of rows one view query may hold (`ViewQueryBudget`): a node's read of its index, and on a coordinator its
    /// own part, its peers' answers as their bytes arrive and the merged page, all counted together. Past it the query
    /// fails with 413 `too_large` and the client pages with `limit` and `startkey`/`startkey_docid`. Couchbase streams
    /// a result of any size; this node holds it whole, so it is bounded as the gateway's `_bulk_get` is (256 MiB):
    /// the JSON body written from the page (about its size) is the one copy not counted.
    public static let viewMaxQueryResultBytes = 256 << 20
    /// Longest view query `connection_timeout` (ms) kept; longer asks are cut to it. An hour is longer
    /// than any peer answer is worth waiting for, and keeps the nanosecond conversion far from overflow.
    public static let maxViewConnectionTimeoutMs = 3_600_000
    /// Largest answer the admin port's `/settee/views` relay (the console's Views page) reads from the views service
    /// before relaying it; past it the relay answers 413 `too_large`, as the views port does for a query past its
    /// budget. It holds the answer whole, beside the views port's own copy, so it is the query's budget
    /// (`viewMaxQueryResultBytes`): an answer within the budget is about its counted bytes or less (a row's count adds
    /// over 200 bytes to its byte arrays, more than its JSON framing), and the relay holds no more than a query may.
    public static let viewsRelayMaxReplyBytes = viewMaxQueryResultBytes
    /// Largest request body the `/settee/views` relay takes from its caller (a design document PUT, a query's POST
    /// `keys`): the views port's own bound on the same bodies (`maxViewsRequestBody`), so the relay refuses nothing
    /// the views port would take. Past it 413 `too_large`; before, a larger body (past `maxAdminRequestBody`) was
    /// dropped and the request forwarded without it.
    public static let viewsRelayMaxRequestBytes = maxViewsRequestBody
    /// Longest the `/settee/views` relay waits for the views service's whole answer, head and body; past it 504. The
    /// views port's own waits come first: a `stale=false` query waits up to `viewStaleFalseTimeoutSeconds` (60 s) for
    /// its index and a coordinator up to the default `connection_timeout` (60 s) for its peers, so twice 60 s. Before,
    /// only the head was bounded (60 s), and a body sent a byte at a time held the relay for ever.
    public static let viewsRelayDeadlineSeconds: Int64 = 120
    /// Largest `skip` of the console's documents listing (400 above): the node gathers `skip + limit`
    /// keys from every node to find a page, so 100,000 bounds one request to ~25 MB of keys. Further
    /// pages are reached with `startkey`.
    public static let consoleMaxSkip = 100_000
    /// Largest bucket RAM quota in MiB (1 PiB): more than any node has, and small enough that the quota
    /// in bytes summed over `maxBuckets` buckets stays far below `Int.max`.
    public static let maxBucketRamQuotaMB = 1 << 30
}

/// Bounds on what a cluster document (from a peer, or the node metadata file at start) may hold, and on
/// login attempts: checked before any of it reaches the disk or a hash function.
extension Limits {
    /// Most replicas of a bucket (Couchbase's limit; the REST API refuses more).
    public static let maxReplicas = 3
    /// Highest cluster epoch (a config's `revEpoch`, a promise, a claim) a node accepts from a peer, reads from its
    /// metadata file or takes itself: 2^53. Each epoch is claimed by one config change, so at a change per
    /// millisecond a cluster reaches it after 285,000 years; every JSON reader (clients read `revEpoch` as a
    /// double) holds it exactly; and it leaves `Int64` room, so the `+ 1` taken on an accepted value never
    /// overflows. A peer's larger value (9223372036854775807 made the next claim trap, and a promise of it,
    /// persisted, made the node refuse every config for good) is refused before anything is persisted.
    public static let maxClusterEpoch: Int64 = 1 << 53
    /// Highest cluster config revision (`lastRev`, a bucket's `rev`) a node accepts or takes: 2^53, for the reasons
    /// `maxClusterEpoch` gives (one revision per config change).
    public static let maxConfigRevision: Int64 = 1 << 53
    /// Most members one cluster document may list: far above any real cluster, small enough that
    /// checking a document and polling every peer each second stays cheap.
    public static let maxClusterMembers = 256
    /// Longest node name (`n_0@host`) or host name: a DNS name is at most 253 characters.
    public static let maxNodeNameLength = 300
    /// Most local RBAC users a cluster document may hold (each costs a PBKDF2 key set in memory).
    public static let maxLocalUsers = 10_000
    /// Longest bucket UUID accepted (ours are 32 hex characters); it is part of the bucket's directory name.
    public static let maxBucketUUIDLength = 64
    /// Longest piece of client text (key, user name, path) one log value keeps; the rest is cut, so a
    /// 250-byte key shows whole but a 20 MiB body cannot become a 20 MiB log line.
    public static let maxLoggedValueLength = 512
    /// Largest cluster document a node reads from a peer: 30 buckets of 1,024 vBucket chains and
    /// thousands of users' keys fit in a few MiB; this leaves room without letting a peer exhaust memory.
    public static let maxClusterDocumentBytes = 64 << 20
    /// Peers' pinned TLS configurations a node keeps (`PinnedPeerTrust`, one per certificate fingerprint in its
    /// cluster document): twice the most members, so certificates replaced during a cluster's life fit too.
    public static let maxPinnedPeerCertificates = 2 * maxClusterMembers
    /// Trusted CA certificates a cluster document holds (`POST /node/controller/loadTrustedCAs`, ADR 0047): each is
    /// parsed per peer verification, so a handful (Couchbase clusters rarely carry more than a few roots).
    public static let maxTrustedCAs = 16
    /// Trusted-CA chain checks a node runs at once for TLS handshakes whose peer showed another leaf than its pin
    /// (`ClusterAuthorities.verifyBounded`, ADR 0047): each is a task verifying a chain, started by a peer's
    /// handshake, so a peer that keeps showing unknown leaves cannot make a node start unbounded work. A handshake
    /// beyond the bound is refused at once (the caller's retry finds a free slot).
    public static let maxConcurrentCAChecks = 16
    /// Trusted-CA chain checks a node runs at once for its own calls to peers (`CertificatePin.fetchChain(trustedBy:)`:
    /// the admin API's and the views port's node-to-node calls, `addNode`), counted apart from
    /// `maxConcurrentCAChecks` so peers filling that bound with handshakes cannot make this node's own calls fail
    /// (ADR 0047 amendment). A trusted peer's configuration is kept after its first check, so few run at once.
    public static let maxConcurrentOwnCAChecks = 8
    /// Largest PEM text of one trusted CA certificate in the cluster document (an RSA-4096 root is ~2 KiB).
    public static let maxTrustedCAPEMBytes = 16 << 10
    /// Largest file read from a node's `inbox/CA` directory, and the most files read there per load.
    public static let maxTrustedCAFileBytes = 256 << 10
    public static let maxTrustedCAFiles = 64
    /// Largest reply a node reads from another node's admin API (a cluster document, a relayed documents page
    /// or view answer): bounded like the cluster document, with room for relayed console pages.
    public static let maxPeerReplyBytes = 256 << 20
    /// How long a call to another node's admin API may take to deliver its reply's body once the head came, when the
    /// call names no deadline of its own (`PeerClient.call`): the head has its own timeout, and without this a member
    /// sending its body a byte at a time held the call (only AsyncHTTPClient's read timeout, 30 s between two
    /// reads, bounded it). 120 s carries `maxPeerReplyBytes` at 2.2 MB/s, far below a cluster's network.
    public static let peerReplyBodySeconds: Int64 = 120
}

// Connections and timeouts of every listening port: descriptors stay bounded whatever clients do.
extension Limits {
    /// Concurrent connections on a node's admin port. At the cap the port stops accepting (new clients wait
    /// in the listen backlog) until one closes: SDKs and the console use a handful each, so 1,000 is far
    /// above honest use while keeping the node's descriptors for KV.
    public static let maxAdminConnections = 1_000
    /// Concurrent connections on a node's views port (same reasoning as the admin port).
    public static let maxViewsConnections = 1_000
    /// Threads of a node's one pool for blocking work from its admin and views ports (`BlockingPool`).
    /// Most of that work is CPU (PBKDF2, JavaScript) or short file I/O, for which the machine's cores would
    /// do; but a `stale=false` view query holds its thread while it waits for the index (up to
    /// `viewStaleFalseTimeoutSeconds`), so 16 lets a dozen such waits run while logins still get threads,
    /// and keeps the node at 16 threads instead of one per waiting call under a flood of requests.
    public static let blockingPoolThreads = 16
    /// Concurrent connections on a gateway's public port: every Lite client holds one or two (a feed and
    /// requests), so this is the number of devices one gateway serves at once.
    public static let gatewayMaxPublicConnections = 10_000
    /// Concurrent connections on a gateway's admin port (operators and app servers only).
    public static let gatewayMaxAdminConnections = 500
    /// Seconds an HTTP connection may go without completing a request head or body part while no response
    /// is being written: closes idle keep-alive connections and slowloris clients that dribble a header.
    /// Long-lived feeds are unaffected (a response is in progress). Flags override it for tests.
    public static let httpIdleTimeoutSeconds: Int64 = 60
    /// Seconds an HTTP client has to send a complete request head, from its connection's start for the first one and
    /// from its first bytes for later ones (nginx's client_header_timeout, Go's ReadHeaderTimeout): a slowloris client
    /// dribbling a head is closed then (408 if nothing was answered yet), not at the idle timeout (ADR 0042).
    public static let httpHeadDeadlineSeconds: Int64 = 10
    /// Seconds a request body may take before it must keep up `httpMinBodyBytesPerSecond`: the body of a request
    /// is due `httpBodyGraceSeconds + bytes received / httpMinBodyBytesPerSecond` seconds after its head, or the
    /// request is answered 408 and its connection closed (Apache's mod_reqtimeout defaults, `body=20,MinRate=500`).
    /// A client trickling a body under a huge `Content-Length` held a connection and its buffers for as long as it
    /// liked, since every byte reset the idle timeout (issue 72).
    public static let httpBodyGraceSeconds: Int64 = 20
    /// Bytes per second a request body must average past `httpBodyGraceSeconds` (each 500 bytes buy one more second).
    public static let httpMinBodyBytesPerSecond: Int64 = 500
    /// Seconds a connection answered with a fixed 408/400 before its close may wait for that answer's write: past
    /// it the connection is closed unanswered (a TLS client that never finished its handshake, a client that does
    /// not read).
    public static let httpAnswerThenCloseGraceSeconds: Int64 = 2
    /// Largest HTTP request header block (all fields together) any port accepts; beyond it the request is
    /// answered 400 and the connection closed. Couchbase Lite and SDK requests stay under 8 KiB.
    public static let maxHTTPHeaderBytes = 64 * 1024
    /// Descriptors a process keeps aside from its connection caps: bucket files, SQLite WAL and journal
    /// files, node-to-node and gateway-to-node connections, logs.
    public static let reservedDescriptors = 512
}

/// Failed-login throttling (`LoginThrottle`): every port that checks passwords.
extension Limits {
    /// Failures of one user name from one source address within the window before further attempts of that user from
    /// that address are refused unchecked (CouchDB's lockout `threshold`): enough for a person who mistypes, far too
    /// few to guess a password. Failures elsewhere, or in other names, never count (ADR 0144).
    public static let loginFailuresBeforeThrottle = 5
    /// Seconds a failure is remembered, and how long a throttled (user, source) pair waits after its last failure.
    public static let loginFailureWindowSeconds = 60
    /// (User, source) pairs with failures remembered at most (the oldest are forgotten first): bounded memory
    /// whatever names and addresses an attacker tries.
    public static let loginThrottleMaxKeys = 10_000
    /// Delay before a failed or throttled login is answered, so one connection cannot try passwords faster than
    /// this (a KV client waits on its connection; the HTTP reply waits too).
    public static let loginFailureDelayMs = 250
    /// Longest a login waits in line (`LoginThrottle.beginCheckOrWait`) while its user's running checks at its source
    /// fill the allowance before it is refused; checks end within a PBKDF2 run and the pool's
    /// queue, so only a flood waits this long.
    public static let loginBusyWaitMs = 5_000
    /// Logins waiting in line at most, over all sources and users (one small record each); one more is refused
    /// at once as throttled, so a flood cannot grow the list.
    public static let loginMaxWaiters = 1_000
    /// Logins waiting in line at most that one key holds back (one user name at one source address); one more is
    /// refused at once as throttled, so a flood of one pair leaves the rest of `loginMaxWaiters` to other clients.
    /// Beside the `loginFailuresBeforeThrottle` (5) checks running, 37 logins of one user from one NAT address or
    /// one SDK's connection pool proceed without a refusal: a few dozen is what one address legitimately starts at
    /// once (ADR 0042, "each key has a share of the line").
    public static let loginMaxWaitersPerKey = 32
    /// Principals (the admin and local users) whose last verified credentials a node remembers, so a repeated
    /// HTTP Basic or PLAIN login costs one HMAC instead of a 4,096-round PBKDF2 (`VerifiedCredentials`). Only a
    /// successful check adds an entry, so the count is bounded by the users that exist; this bounds it below
    /// that too (one more drops another entry, whose next login runs PBKDF2 again).
    public static let verifiedCredentialsMaxEntries = 1_024
}

/// Sub-document operations (`SetteeSubdoc`): kv_engine's limits, so a request Couchbase accepts is accepted here.
extension Limits {
    /// Longest path in bytes (memcached's `SUBDOC_MAX_PATH_LENGTH`); beyond it PATH_E2BIG.
    public static let subdocMaxPathLength = 1024
    /// Most components in a path (subjson's `MAX_COMPONENTS`); beyond it PATH_E2BIG.
    public static let subdocMaxPathComponents = 32
    /// Deepest container nesting a document may have for sub-document access (DOC_E2DEEP), and an edit may
    /// create (VALUE_ETOODEEP). It also bounds the scanner's recursion.
    public static let subdocMaxDocumentDepth = 32
    /// Most specs in one MULTI_LOOKUP or MULTI_MUTATION (memcached's `SUBDOC_MULTI_MAX_PATHS`).
    public static let subdocMaxMultiPaths = 16
    /// Times a sub-document mutation without a client CAS re-reads and re-applies itself when another
    /// write changed the document between its read and its CAS-checked store (kv_engine retries too).
    public static let subdocCASRetries = 100
    /// Longest extended attribute name in bytes (kv_engine `docs/ExtendedAttributes.md`: an X-Key is at most
    /// 16 bytes); a longer one is PATH_EINVAL.
    public static let subdocMaxXattrKeyLength = 16
    /// Largest total of one document's user extended attributes (names not starting with `_`), in bytes, each
    /// counted as stored (length u32, name, 0, value, 0). kv_engine's 1 MiB XATTR limit: XATTRs are metadata, so
    /// a document's attributes cannot grow into a second body. Past it a mutation is E2BIG.
    public static let subdocMaxUserXattrSize = 1_048_576
    /// The same for system attributes (`_…`), counted apart, as kv_engine does, so an application's attributes
    /// can never crowd out the gateway's `_sync` (nor the reverse).
    public static let subdocMaxSystemXattrSize = 1_048_576
    /// Largest XATTR section of one document (both kinds at their limits): what a stored value's section may
    /// hold when it is parsed.
    public static let subdocMaxXattrSize = subdocMaxUserXattrSize + subdocMaxSystemXattrSize
    /// Largest reply body of a MULTI_LOOKUP: the item once (its largest value and XATTR section) with each spec's
    /// 6-byte header. A request whose answers would pass it gets E2BIG: 16 whole-document GETs of a 20 MiB document
    /// would otherwise make one connection hold 320 MiB, where every other reply holds the item at most once.
    public static let subdocMaxLookupResponseBytes = maxValueSize + subdocMaxXattrSize + 6 * subdocMaxMultiPaths
}

/// Gateway webhooks (`event_handlers.document_changed`).
extension Limits {
    /// Largest `max_processes` accepted: Sync Gateway's default is 500; more concurrent POSTs than this from one
    /// gateway would only exhaust descriptors.
    public static let webhookMaxProcesses = 1_000
    /// Lanes that post at once, whatever `max_processes` says: each lane is a task with one POST in flight, and a
    /// handful keeps a slow endpoint from stalling the others without thousands of idle tasks.
    public static let webhookMaxLanes = 16
    /// Largest `wait_for_process` (ms): a writer waits at most this long for room in a full event queue.
    public static let webhookMaxWaitForProcessMs = 60_000
    /// Webhook handlers per database.
    public static let webhookMaxHandlers = 16
    /// Largest per-POST `timeout` (seconds).
    public static let webhookMaxTimeoutSeconds = 300
    /// Events queued per handler, all lanes together: about a minute of a busy database's changes; beyond it,
    /// after `wait_for_process`, events are dropped and counted rather than held in memory without bound.
    public static let webhookQueueCapacity = 10_000
    /// Attempts per event (the first and two retries): an endpoint that fails three times in a row is down, and
    /// retrying longer would hold later events of the same document behind it.
    public static let webhookMaxAttempts = 3
    /// First retry delay (ms), doubled per retry.
    public static let webhookRetryBaseMs = 200
    /// Bytes of a document body posted; a larger one is dropped and counted (a webhook is a notification).
    public static let webhookMaxBodyBytes = 20 * 1024 * 1024
}

/// BLIP 3, Couchbase Lite's replication transport (`SetteeBLIP`, ADR 0123). The protocol numbers (frame sizes, ACK
/// interval, window) are LiteCore's and go-blip's, so a peer sees the pacing it expects; the rest bound what one
/// peer can make this side hold.
extension Limits {
    /// Bytes of message data a normal frame carries when an urgent message waits behind it (LiteCore's and go-blip's
    /// `kDefaultFrameSize`): a long normal message then yields to urgent ones every 4 KiB.
    public static let blipSmallFrameBytes = 4096
    /// Bytes of message data a frame carries otherwise (`kBigFrameSize` in both): 16 KiB.
    public static let blipFrameBytes = 16384
    /// Largest incoming frame (one WebSocket message), header and checksum included. Peers send at most
    /// `blipFrameBytes` of data plus a few header bytes (a deflated frame a few bytes more); pythonblip sends a whole
    /// message in one frame, so the bound is well above that: 1 MiB.
    public static let blipMaxFrameBytes = 1 << 20
    /// Largest encoded property block of an incoming message (LiteCore's `kMaxPropertiesSize`, 100 KiB).
    public static let blipMaxPropertiesBytes = 100 * 1024
    /// Largest incoming message, properties and decompressed body together: a document at `maxValueSize` (20 MiB)
    /// with its properties and JSON escaping to spare. Past it the connection closes (WebSocket code 1009).
    public static let blipMaxIncomingMessageBytes = 24 * 1024 * 1024
    /// Incoming messages (requests and responses) whose first frame has come and whose last has not. LiteCore keeps
    /// a handful in flight; a peer opening more is not replicating.
    public static let blipMaxIncompleteIncomingMessages = 64
    /// Bytes all incomplete incoming messages of one connection hold together, so 64 half-sent messages cannot make
    /// it hold 64 × 24 MiB.
    public static let blipMaxIncompleteIncomingBytes = 48 * 1024 * 1024
    /// Most bytes one compressed frame may inflate to. Deflate cannot exceed about 1,032:1, so a frame of
    /// `blipFrameBytes` compressed bytes inflates to at most ~16.1 MiB; past that the frame is a decompression bomb.
    /// (The message and connection bounds above apply to the inflated bytes as well.)
    public static let blipMaxInflatedFrameBytes = 17 * 1024 * 1024
    /// Received bytes of one message between two ACKs the receiver sends (`kAckInterval` / `kIncomingAckThreshold`).
    public static let blipAckIntervalBytes = 50_000
    /// Bytes of one outgoing message sent and not yet acknowledged past which its frames stop until an ACK comes
    /// (`kMaxUnackedBytes`, 128,000 in LiteCore and go-blip).
    public static let blipMaxUnackedBytes = 128_000
    /// Bytes of outgoing messages queued and not yet framed, per connection; a sender past it waits for room (one
    /// message larger than this is still accepted into an empty queue).
    public static let blipMaxQueuedOutgoingBytes = 32 * 1024 * 1024
    /// Incoming requests handled at once per connection (`BLIPRequestHandler.handle` calls running).
    public static let blipMaxConcurrentRequests = 16
    /// Complete incoming requests waiting for a handler slot; a peer that gets this far ahead of the handlers is
    /// not pacing itself as Couchbase Lite does, and the connection closes (WebSocket code 1008).
    public static let blipMaxWaitingRequests = 1024
}

/// The gateway's BLIP replication handler (`/db/_blipsync`, SetteeGateway/BLIP): what one Couchbase Lite connection
/// may make the gateway hold besides the transport's own bounds (`blip*`).
extension Limits {
    /// Changes a `changes` message the gateway sends carries at most, whatever `batch` a `subChanges` asks
    /// (Sync Gateway's default is 200, its minimum 10; a larger batch only makes one answer hold more revisions).
    public static let gatewayBLIPMaxChangesBatch = 1_000
    /// `batch` of a `subChanges` that names none (Sync Gateway's `BlipDefaultBatchSize`).
    public static let gatewayBLIPDefaultChangesBatch = 200
    /// Smallest `batch` honoured (Sync Gateway's `BlipMinimumBatchSize`).
    public static let gatewayBLIPMinChangesBatch = 10
    /// Entries of one `changes` or `proposeChanges` request a client may send: each costs a document read.
    public static let gatewayBLIPMaxProposedChanges = 10_000
    /// `docIDs` of one `subChanges`.
    public static let gatewayBLIPMaxDocIDs = 10_000
    /// Attachments a connection may fetch with `getAttachment` (`docID` + digest of revisions it was sent): the
    /// oldest grant is forgotten past this, so a long continuous pull holds a bounded set.
    public static let gatewayBLIPAttachmentGrants = 10_000
    /// Collections one `getCollections` may name (only `_default` exists before scopes and collections).
    public static let gatewayBLIPMaxCollections = 1_000
    /// Attachments one pushed `rev` may carry (each may cost a `getAttachment` round trip to the client).
    public static let gatewayBLIPMaxAttachmentsPerRevision = 1_000
    /// Bytes of one `proveAttachment` nonce (the protocol's 16 to 255; its length travels as one byte).
    public static let gatewayBLIPMaxNonceBytes = 255
    /// Values of one message body the handler parses as JSON (the REST body bound).
    public static let gatewayBLIPMaxJSONValues = 1 << 22
    /// Longest a continuous `subChanges` feed waits for a change before looking again (it also ends sooner when the
    /// connection closes: the wait is cancelled).
    public static let gatewayBLIPFeedWaitSeconds = 30
    /// `rev` messages sent as a delta whose answer a connection's feed still waits for (a 422 or 404 answer makes it
    /// send the revision whole, as Sync Gateway does); past it revisions go whole, so a client that never answers
    /// cannot make the gateway hold more than this many waits and their full bodies.
    public static let gatewayBLIPDeltaAnswersAwaited = 64
    /// `subChanges` feeds of one connection still running: the current subscription plus the ones `unsubChanges`
    /// ended that have not returned yet (a feed cancelled while it waits for room in the outgoing queue, because the
    /// client does not read, returns only once there is room or the connection closes). Past it a `subChanges` is
    /// refused (429), so a client alternating `subChanges` and `unsubChanges` cannot pile up feeds.
    public static let gatewayBLIPMaxLiveFeeds = 4
    /// `subChanges` feeds of one connection running or still ending, over all its collection indexes (ADR 0149): one
    /// current subscription per collection a database may serve (`gatewayMaxCollectionsPerDatabase`) plus
    /// `gatewayBLIPMaxLiveFeeds` ending ones. Past it a `subChanges` is refused (429), so a client naming the same
    /// collection under many indexes cannot open a feed per index.
    public static let gatewayBLIPMaxLiveFeedsPerConnection = gatewayMaxCollectionsPerDatabase + gatewayBLIPMaxLiveFeeds
    /// Bytes of one `setCheckpoint` body (Couchbase Lite's checkpoints are a few hundred bytes: `{"local":N}`,
    /// `{"remote":M}`, or a short list of pending sequences); a larger one is refused with 413 before it is stored.
    public static let gatewayBLIPMaxCheckpointBytes = 1 << 20

    // MARK: backup repositories (ADR 0147): a backup file is input too, read with these bounds

    /// Uncompressed bytes of records a backup segment file gathers into one LZ4 block before writing it; a single
    /// record larger than this goes in a block of its own.
    public static let backupBlockTargetBytes = 1 << 20
    /// Largest uncompressed block a segment reader accepts: one record of the largest document (`maxValueSize`), its
    /// XATTRs (`subdocMaxXattrSize`), its key and record header, or a full block of smaller ones.
    public static let backupMaxBlockBytes = maxValueSize + subdocMaxXattrSize + maxKeyLength + 4096
    /// Largest stored (compressed) block a reader accepts: LZ4's worst case for `backupMaxBlockBytes`.
    public static let backupMaxStoredBlockBytes = backupMaxBlockBytes + backupMaxBlockBytes / 255 + 16
    /// Bytes of one backup's `backup.json` (its per-collection, per-vBucket positions: ~100 B per vBucket).
    public static let backupMaxManifestBytes = 64 << 20
    /// Collections one backup covers (a bucket's manifest holds at most this many; Couchbase allows 1,000).
    public static let backupMaxCollections = 1_000
    /// Longest a backup waits for one collection's streams to reach the seqnos observed at its start before it
    /// fails naming the vBuckets behind (never a silently short backup).
    public static let backupStreamDeadlineSeconds = 600
    /// Restore writes in flight at once.
    public static let restoreWritesInFlight = 64
    /// Times restore's newer-CAS policy reads a key's version again after it changed between the read and the
    /// guarded write (an application writing the key as fast as restore compares), before it fails naming the key.
    public static let restoreConflictRereads = 8
    /// Backup and restore tasks the orchestrator keeps as their CLIs report them (`POST /controller/reportBackupTask`,
    /// `ReportedTasks`); a report past it replaces the least recently reported one, finished ones first.
    public static let reportedTasksKept = 32
    /// Seconds a reported task is shown after its last report.
    public static let reportedTaskKeptSeconds = 600
    /// Seconds without a report after which a running task is shown as stale (its process may have died).
    public static let reportedTaskStaleSeconds = 30
    /// Longest failure message a reported task keeps.
    public static let reportedTaskMessageBytes = 1024
    // MARK: Audit log and diagnostics (ADR 0148)

    /// Largest `rotateSize` of `/settings/audit` (Couchbase's 500 MiB): the live audit file is renamed aside before
    /// a line would take it past the configured size, so no audit file grows past this.
    public static let maxAuditFileBytes = 500 * 1024 * 1024
    /// Default `rotateSize` (Couchbase's 20 MiB).
    public static let defaultAuditFileBytes = 20 * 1024 * 1024
    /// Rotated audit files a node keeps; the oldest is removed past it, so the audit directory holds at most
    /// `(auditRetainedFiles + 1) × rotateSize` bytes.
    public static let auditRetainedFiles = 50
    /// `rotateInterval` of `/settings/audit` in seconds: Couchbase's 15 minutes to 7 days, default 1 day.
    public static let auditRotateIntervalRange = 900...604_800
    public static let defaultAuditRotateIntervalSeconds = 86_400
    /// Events waiting for the audit writer. A request only appends to this queue (never waits for disk); past it an
    /// event is dropped, counted (`AuditLog.droppedEvents`, the `settee_audit_events_dropped_total` metric) and
    /// reported by one `audit events dropped` record once the writer catches up.
    public static let auditQueueEvents = 10_000
    /// Event ids one `/settings/audit` `disabled` list may name.
    public static let maxAuditDisabledIds = 256
    /// Users one `/settings/audit` `disabledUsers` list may name.
    public static let maxAuditDisabledUsers = 256
    /// Bytes of one `disabledUsers` entry's name (Couchbase's user names are at most 128 characters).
    public static let maxAuditDisabledUserNameBytes = 512
    /// Bytes of one node's part of a logs collection (its logs, stats and cluster document, before compression):
    /// a file past what is left is cut, and the cut is noted in the archive.
    public static let maxCollectedBytesPerNode = 64 * 1024 * 1024
    /// Log lines a node keeps in memory for `/logs` and logs collection (its standard error goes wherever the
    /// operator sent it; this ring is what the node can hand over itself).
    public static let recentLogLines = 10_000
    /// Logs collections a node keeps in its collection directory; the oldest archive is removed past it.
    public static let retainedLogsCollections = 5

    // MARK: Compaction of bucket files and view indexes (ADR 0154)

    /// Free pages one compaction step gives back (`PRAGMA incremental_vacuum(N)`: one transaction, one fsync): 4 MiB
    /// of a bucket's 4 KiB pages. The flusher runs a step between its batches, so a write waits at most one step.
    public static let compactionPagesPerStep = 1024
    /// Rows one repack step moves to the end of a bucket's table (ADR 0158): about 2-4 MiB of rows of the sizes a
    /// gateway writes, a few tens of milliseconds of the flusher's time.
    public static let compactionRowsPerStep = 2048
    /// A compaction repacks a bucket's rows when at least this share of its table's page bytes is unused (percent):
    /// Couchbase's default database fragmentation threshold (`databaseFragmentationThreshold[percentage]`, 30).
    public static let compactionRepackUnusedPercent = 30
    /// Pause between two steps of one compaction, so a compaction of a large file leaves the disk to the flusher
    /// (at most `compactionPagesPerStep` pages per pause: 4 MiB per 20 ms, about 200 MiB/s of file given back).
    public static let compactionStepPauseMilliseconds = 20
    /// Steps one compaction of one file runs at most, whatever its file does meanwhile (a writer freeing pages as
    /// fast as they are given back): 1024 steps of 4 MiB is 4 GiB; a larger free list is left to the next run.
    public static let compactionMaxStepsPerFile = 1024

    // MARK: Auto-compaction (ADR 0159)

    /// Seconds between two auto-compaction checks of a node's buckets (ns_server's compaction daemon: 30).
    public static let autoCompactionCheckSeconds = 30
    /// A file below this size is never auto-compacted: a new bucket's file is mostly fixed overhead (vBucket state
    /// rows, the index's root pages), whose share would read as fragmentation.
    public static let autoCompactionMinFileBytes = 128 * 1024
    /// The item pages' fill (a walk of every page of the table) is measured again only once the data file has grown
    /// by this percent of its pages since the last measure: without growth the unused share cannot have risen.
    public static let autoCompactionFillGrowthPercent = 10
}
