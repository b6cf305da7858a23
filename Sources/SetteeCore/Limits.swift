/// Every bound of the system, named once. Checked at the edge (decoder, admin API, storage entry
/// points); the rest of the code may assume them.
public enum Limits {
    /// vBuckets per bucket. Never changes for a bucket: clients ignore configs with another count.
    public static let numVBuckets = 1024
    /// Longest document key in bytes (memcached's and Couchbase's limit).
    public static let maxKeyLength = 250
    /// Largest document value; bigger ones are refused with E2BIG (kv_engine's `max_item_size`).
    public static let maxValueSize = 20 * 1024 * 1024
    /// Largest extras section a request may carry.
    public static let maxExtrasLength = 64
    /// Largest framing-extras section.
    public static let maxFramingExtrasLength = 255
    /// Largest body (extras + key + value) a frame may declare. Bigger frames close the connection:
    /// the stream cannot be resynchronised without reading the body, and we refuse to buffer it.
    public static let maxFrameBodySize = maxValueSize + maxKeyLength + maxExtrasLength + maxFramingExtrasLength + 1024
    /// Responses buffered per connection before it stops reading (backpressure for pipelining clients).
    public static let maxPendingResponsesPerConnection = 4096
    /// Times one operation re-fetches an evicted value that the item pager evicted again before the
    /// operation could use it; after that the client gets TMPFAIL and retries itself.
    public static let backgroundFetchAttempts = 8
    /// Concurrent KV connections per node.
    public static let maxConnections = 10_000
    /// Items written by the flusher in one SQLite transaction.
    public static let flusherBatchMaxItems = 10_000
    /// Bytes (uncompressed values) written by the flusher in one transaction.
    public static let flusherBatchMaxBytes = 64 * 1024 * 1024
    /// Dirty items queued in a bucket before writes get TMPFAIL (the flusher is behind).
    public static let maxDirtyQueueItems = 2_000_000
    /// Expiries below this many seconds are relative to now; above, absolute Unix time (memcached rule).
    public static let relativeExpiryLimitSeconds: UInt32 = 30 * 24 * 60 * 60
    /// Buckets per cluster (Couchbase's limit).
    public static let maxBuckets = 30
    /// Longest bucket name.
    public static let maxBucketNameLength = 100
    /// Smallest bucket RAM quota in MiB.
    public static let minBucketRamQuotaMB = 100
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
    /// Admin console: a session cookie unused this long is expired (seconds; `--ui-session-timeout` overrides).
    public static let consoleSessionIdleTimeoutSeconds = 1800
    /// Admin console: live sessions per node; logging in beyond it drops the least recently used one.
    public static let consoleMaxSessions = 256
    /// Documents endpoint: most keys one listing scans per node (a page is cut from these; beyond it the
    /// listing says `truncated`).
    public static let consoleMaxListedKeys = 100_000
    /// Documents endpoint: largest `limit` of one page.
    public static let consoleMaxPageSize = 1000
}
