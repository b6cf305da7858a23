import Foundation
import Prometheus
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import Synchronization

/// `/metrics`: the node's figures in Prometheus text format (swift-prometheus), sampled when scraped.
///
/// Gauges are set and counters advanced from the engines' and the KV server's own counters at each scrape, so
/// nothing is added to the data path. Names:
///
///     settee_kv_connections                     open KV connections
///     settee_kv_ops_total{op="get"|"set"}       KV gets and mutations since start
///     settee_process_resident_bytes             resident memory of this process
///     settee_bucket_items{bucket}               live items in this node's active vBuckets
///     settee_bucket_mem_used_bytes{bucket}      memory the bucket accounts for
///     settee_bucket_ram_quota_bytes{bucket}
///     settee_bucket_disk_used_bytes{bucket}
///     settee_bucket_flusher_queue_items{bucket} mutations waiting for the flusher (ep_queue_size)
///     settee_bucket_mutations_total{bucket}     sum of the active vBuckets' high seqnos (ops/s = its rate)
///     settee_bucket_persistence_failing{bucket} 1 while the bucket's disk refuses commits (retried), else 0
///     settee_bucket_unpersisted_items{bucket}   mutations not yet on disk (queued + being written)
///     settee_bucket_held_vbuckets{bucket}       vBuckets held after an unclean shutdown: not served until the
///                                               cluster compared them with their replicas (ADR 0033)
///     settee_bucket_unsettled_vbuckets{bucket}  vBuckets not yet settled after an unclean shutdown (held ones
///                                               included); while above 0 a clean shutdown keeps the unclean marker
///     settee_bucket_sync_writes_total{bucket,state="active",outcome="accepted"|"committed"|"aborted"}
///     settee_bucket_sync_writes_total{bucket,state="replica",outcome="accepted"}
///                                               durable writes (prepares) since start, kv_engine's
///                                               vb_{state}_sync_write_{outcome}_count (`SyncWriteCounts`)
///     settee_bucket_collection_items_to_purge{bucket}  items of dropped collections not purged yet (ADR 0138)
///     couch_docs_data_size{bucket}              bytes of the data file's pages in use (ADR 0154)
///     couch_docs_actual_disk_size{bucket}       bytes of the data file and its WAL on disk
///     couch_docs_fragmentation{bucket}          free pages' share of the data file's pages, percent
///     couch_views_data_size{bucket}             the same for the bucket's view index files, summed
///     couch_views_actual_disk_size{bucket}
///     couch_views_fragmentation{bucket}
///     settee_buckets_failed                     listed buckets not served: their warmup failed
///     settee_peer_calls_total{transport="tls"|"plain"}  calls to other nodes' admin APIs (ADR 0030)
///     settee_peer_calls_refused_total           of those, refused: the peer's certificate was not the pinned one
///     settee_peer_tls_verified_total{api="admin"|"views",via="ca"|"pin"}  peer calls over TLS given a configuration,
///                                               by the trust that admitted the peer: the cluster's CAs or its pin
///                                               (`PinnedPeerTrust.counts`, ADR 0057)
///     settee_password_checks_total              password checks (PBKDF2) the KV port and admin API ran since start
///                                               (`LoginGuard.passwordChecks`; throttled logins run none)
///     settee_login_throttled_total              logins the KV port and admin API refused unchecked as throttled: too
///                                               many failures of that user from that address (`LoginGuard`, ADR 0144)
///     settee_http_closed_without_response_total{port,reason}  connections an HTTP port (admin, admin_tls, views,
///                                               views_tls) closed without answering them (`UnansweredClose`)
public final class NodeMetrics: Sendable {
    /// What the KV server counts, read at each scrape.
    public struct KVSample: Sendable {
        public var connections: Int
        public var gets: Int
        public var sets: Int
        public init(connections: Int, gets: Int, sets: Int) {
            self.connections = connections
            self.gets = gets
            self.sets = sets
        }
    }

    struct BucketSeries: Sendable {
        let items: Gauge
        let memUsed: Gauge
        let quota: Gauge
        let disk: Gauge
        let queue: Gauge
        let mutations: Counter
        var lastMutations: Int64 = 0
        let persistenceFailing: Gauge
        let unpersisted: Gauge
        let held: Gauge
        let unsettled: Gauge
        let itemsToPurge: Gauge
        /// One gauge per `couchSeries` entry, in its order (Couchbase's names, ADR 0154).
        let couch: [Gauge]
        /// One counter per `syncWriteSeries` entry, in its order.
        let syncWrites: [Counter]
        var lastSyncWrites: [Int] = []

        /// The disk figures' series: Couchbase's stat names, help, and the figure of the data file's or the views'.
        static let couchSeries: [(name: String, help: String, views: Bool, figure: @Sendable (DiskFigures) -> Int)] =
            [
                ("couch_docs_data_size", "Bytes of the data file's pages in use", false, { $0.dataSize }),
                (
                    "couch_docs_actual_disk_size", "Bytes of the data file and its WAL on disk", false,
                    { $0.actualDiskSize }
                ),
                ("couch_docs_fragmentation", "Free pages of the data file, percent", false, { $0.fragmentation }),
                ("couch_views_data_size", "Bytes of the view index files' pages in use", true, { $0.dataSize }),
                (
                    "couch_views_actual_disk_size", "Bytes of the view index files and WALs on disk", true,
                    { $0.actualDiskSize }
                ),
                (
                    "couch_views_fragmentation", "Free pages of the view index files, percent", true,
                    { $0.fragmentation }
                ),
            ]

        /// `settee_bucket_sync_writes_total`'s series: its labels and the count each follows.
        static let syncWriteSeries:
            [(state: String, outcome: String, count: any KeyPath<SyncWriteCounts, Int> & Sendable)] = [
                ("active", "accepted", \.accepted), ("active", "committed", \.committed),
                ("active", "aborted", \.aborted),
                ("replica", "accepted", \.replicaAccepted),
            ]
    }

    struct State: Sendable {
        var buckets: [String: BucketSeries] = [:]
        var lastGets = 0
        var lastSets = 0
        var lastPeer = (tls: 0, plain: 0, refused: 0)
        var lastPasswordChecks = 0
        var lastThrottledLogins = 0
        var lastAuditDropped = 0
        var lastCloses: [Int] = []
        var lastTrust: [Int] = []
    }

    private let registry: NodeRegistry
    private let views: (any ViewIndexFiles)?
    private let kv: @Sendable () -> KVSample
    private let prometheus = PrometheusCollectorRegistry()
    private let connections: Gauge
    private let gets: Counter
    private let sets: Counter
    private let resident: Gauge
    private let failedBuckets: Gauge
    private let peerCalls: PeerCallCounts?
    private let peerTLS: Counter
    private let peerPlain: Counter
    private let peerRefused: Counter
    private let passwordChecks: Counter
    private let throttledLogins: Counter
    private let auditDropped: Counter
    /// Per HTTP port, its counts and one counter per `UnansweredCloseReason` (in `allCases` order).
    private let closeSeries: [(counts: UnansweredCloseCounts, counters: [Counter])]
    /// Per peer trust (`api` label), its counts and one counter per `PeerTrustPath` (in `allCases` order).
    private let trustSeries: [(counts: PeerTrustCounts, counters: [Counter])]
    private let state = Mutex(State())

    /// `peerCalls`: the cluster manager's counts of calls to other nodes (`ClusterManager.peerCalls`).
    /// `httpCloses`: each HTTP port's name (`port` label) and its count of connections closed unanswered.
    /// `peerTrust`: each peer trust's API (`api` label: the admin calls' and the views port's) and its counts.
    public init(
        registry: NodeRegistry, peerCalls: PeerCallCounts? = nil,
        httpCloses: [(port: String, counts: UnansweredCloseCounts)] = [],
        peerTrust: [(api: String, counts: PeerTrustCounts)] = [], views: (any ViewIndexFiles)? = nil,
        kv: @escaping @Sendable () -> KVSample
    ) {
        self.registry = registry
        self.views = views
        self.kv = kv
        self.peerCalls = peerCalls
        let peerDescriptor = Self.descriptor("settee_peer_calls_total", "Calls to other nodes' admin APIs")
        peerTLS = prometheus.makeCounter(descriptor: peerDescriptor, labels: [("transport", "tls")])
        peerPlain = prometheus.makeCounter(descriptor: peerDescriptor, labels: [("transport", "plain")])
        peerRefused = prometheus.makeCounter(
            descriptor: Self.descriptor(
                "settee_peer_calls_refused_total", "Peer calls refused: the certificate was not the pinned one"))
        passwordChecks = prometheus.makeCounter(
            descriptor: Self.descriptor(
                "settee_password_checks_total", "Password checks the KV port and admin API ran since start"))
        throttledLogins = prometheus.makeCounter(
            descriptor: Self.descriptor(
                "settee_login_throttled_total", "Logins the KV port and admin API refused as throttled since start"))
        auditDropped = prometheus.makeCounter(
            descriptor: Self.descriptor(
                "settee_audit_events_dropped_total",
                "Audit events dropped: the writer's queue was full or the file could not be written (ADR 0148)"))
        let closeDescriptor = Self.descriptor(
            "settee_http_closed_without_response_total", "HTTP connections the node closed without answering them")
        closeSeries = httpCloses.map { [prometheus] port in
            let counters = UnansweredCloseReason.allCases.map {
                prometheus.makeCounter(
                    descriptor: closeDescriptor, labels: [("port", port.port), ("reason", $0.rawValue)])
            }
            return (port.counts, counters)
        }
        let trustDescriptor = Self.descriptor(
            "settee_peer_tls_verified_total", "Peer calls over TLS by the trust that admitted the peer: CA or pin")
        trustSeries = peerTrust.map { [prometheus] trust in
            let counters = PeerTrustPath.allCases.map {
                prometheus.makeCounter(descriptor: trustDescriptor, labels: [("api", trust.api), ("via", $0.rawValue)])
            }
            return (trust.counts, counters)
        }
        connections = prometheus.makeGauge(descriptor: Self.descriptor("settee_kv_connections", "Open KV connections"))
        gets = prometheus.makeCounter(
            descriptor: Self.descriptor("settee_kv_ops_total", "KV operations since start"), labels: [("op", "get")])
        sets = prometheus.makeCounter(
            descriptor: Self.descriptor("settee_kv_ops_total", "KV operations since start"), labels: [("op", "set")])
        resident = prometheus.makeGauge(
            descriptor: Self.descriptor("settee_process_resident_bytes", "Resident memory of this process"))
        failedBuckets = prometheus.makeGauge(
            descriptor: Self.descriptor("settee_buckets_failed", "Listed buckets not served: their warmup failed"))
    }

    /// Samples everything and renders the text exposition. Blocking (reads engine state): call off event loops.
    public func render() -> [UInt8] {
        let sample = kv()
        connections.set(Int64(sample.connections))
        resident.set(Int64(Self.residentBytes()))
        let checks = registry.loginGuard.passwordChecks
        let throttled = registry.loginGuard.throttledLogins
        var samples:
            [(String, EngineStats, Int64, (held: Int, unsettled: Int), (docs: DiskFigures, views: DiskFigures))] =
                []
        failedBuckets.set(Int64(registry.bucketNames.filter { registry.bucketFailure(named: $0) != nil }.count))
        for name in registry.bucketNames {
            guard let engine = registry.bucket(named: name), let map = registry.clusterMap(bucket: name) else {
                continue
            }
            var mutations: Int64 = 0
            for i in 0..<map.numVBuckets where map.isActiveHere(VBucketID(UInt16(i))) {
                mutations &+= Int64(truncatingIfNeeded: engine.seqnoInfo(VBucketID(UInt16(i))).highSeqno.rawValue)
            }
            let disk = (engine.diskFigures() ?? DiskFigures(), views?.diskFigures(bucket: name) ?? DiskFigures())
            samples.append((name, engine.stats(), mutations, engine.unsettledCounts(), disk))
        }
        state.withLock { s in
            gets.increment(by: Int64(max(0, sample.gets - s.lastGets)))
            sets.increment(by: Int64(max(0, sample.sets - s.lastSets)))
            s.lastGets = sample.gets
            s.lastSets = sample.sets
            passwordChecks.increment(by: Int64(max(0, checks - s.lastPasswordChecks)))
            s.lastPasswordChecks = checks
            throttledLogins.increment(by: Int64(max(0, throttled - s.lastThrottledLogins)))
            s.lastThrottledLogins = throttled
            let dropped = registry.audit.droppedEvents
            auditDropped.increment(by: Int64(max(0, dropped - s.lastAuditDropped)))
            s.lastAuditDropped = dropped
            Self.advance(
                closeSeries.flatMap(\.counters),
                to: closeSeries.flatMap { port in UnansweredCloseReason.allCases.map { port.counts.count($0) } },
                from: &s.lastCloses)
            Self.advance(
                trustSeries.flatMap(\.counters),
                to: trustSeries.flatMap { trust in PeerTrustPath.allCases.map { trust.counts.count($0) } },
                from: &s.lastTrust)
            if let peerCalls {
                let now = (tls: peerCalls.tls, plain: peerCalls.plain, refused: peerCalls.refused)
                peerTLS.increment(by: Int64(max(0, now.tls - s.lastPeer.tls)))
                peerPlain.increment(by: Int64(max(0, now.plain - s.lastPeer.plain)))
                peerRefused.increment(by: Int64(max(0, now.refused - s.lastPeer.refused)))
                s.lastPeer = now
            }
            let live = Set(samples.map(\.0))
            for (name, series) in s.buckets where !live.contains(name) {
                for g in [
                    series.items, series.memUsed, series.quota, series.disk, series.queue, series.persistenceFailing,
                    series.unpersisted, series.held, series.unsettled, series.itemsToPurge,
                ] + series.couch {
                    prometheus.unregisterGauge(g)
                }
                prometheus.unregisterCounter(series.mutations)
                for c in series.syncWrites { prometheus.unregisterCounter(c) }
                s.buckets[name] = nil
            }
            for (name, stats, mutations, unclean, disk) in samples {
                var series = s.buckets[name] ?? makeSeries(name)
                series.items.set(Int64(stats.currItems))
                series.memUsed.set(Int64(stats.memUsed))
                series.quota.set(Int64(stats.memQuota))
                series.disk.set(Int64(stats.diskUsed))
                series.queue.set(Int64(stats.queueSize))
                series.persistenceFailing.set(Int64(stats.diskFailure == nil ? 0 : 1))
                series.unpersisted.set(Int64(stats.flusherTodo))
                series.held.set(Int64(unclean.held))
                series.unsettled.set(Int64(unclean.unsettled))
                series.itemsToPurge.set(Int64(stats.collectionItemsToPurge))
                for (gauge, c) in zip(series.couch, BucketSeries.couchSeries) {
                    gauge.set(Int64(c.figure(c.views ? disk.views : disk.docs)))
                }
                // A vBucket moving away lowers the sum: a counter never goes down, so only growth is added.
                if mutations > series.lastMutations { series.mutations.increment(by: mutations - series.lastMutations) }
                series.lastMutations = mutations
                Self.advance(
                    series.syncWrites, to: BucketSeries.syncWriteSeries.map { stats.syncWrites[keyPath: $0.count] },
                    from: &series.lastSyncWrites)
                s.buckets[name] = series
            }
        }
        return prometheus.emitToBuffer()
    }

    private func makeSeries(_ bucket: String) -> BucketSeries {
        let l = [("bucket", bucket)]
        return BucketSeries(
            items: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_items", "Live items in active vBuckets"), labels: l),
            memUsed: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_mem_used_bytes", "Memory the bucket accounts for"), labels: l
            ),
            quota: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_ram_quota_bytes", "Bucket RAM quota"), labels: l),
            disk: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_disk_used_bytes", "Bucket files on disk"), labels: l),
            queue: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_flusher_queue_items", "Mutations waiting for the flusher"),
                labels: l),
            mutations: prometheus.makeCounter(
                descriptor: Self.descriptor(
                    "settee_bucket_mutations_total", "Mutations in this node's active vBuckets"), labels: l),
            persistenceFailing: prometheus.makeGauge(
                descriptor: Self.descriptor(
                    "settee_bucket_persistence_failing", "1 while the bucket's disk refuses commits (retried)"),
                labels: l),
            unpersisted: prometheus.makeGauge(
                descriptor: Self.descriptor("settee_bucket_unpersisted_items", "Mutations not yet on disk"), labels: l),
            held: prometheus.makeGauge(
                descriptor: Self.descriptor(
                    "settee_bucket_held_vbuckets", "vBuckets held after an unclean shutdown: not served (ADR 0033)"),
                labels: l),
            unsettled: prometheus.makeGauge(
                descriptor: Self.descriptor(
                    "settee_bucket_unsettled_vbuckets", "vBuckets not yet settled after an unclean shutdown"),
                labels: l),
            itemsToPurge: prometheus.makeGauge(
                descriptor: Self.descriptor(
                    "settee_bucket_collection_items_to_purge", "Items of dropped collections not purged yet"),
                labels: l),
            couch: BucketSeries.couchSeries.map { c in
                prometheus.makeGauge(descriptor: Self.descriptor(c.name, c.help), labels: l)
            },
            syncWrites: BucketSeries.syncWriteSeries.map { series in
                prometheus.makeCounter(
                    descriptor: Self.descriptor(
                        "settee_bucket_sync_writes_total", "Durable writes (prepares) since start, by vBucket state"),
                    labels: l + [("state", series.state), ("outcome", series.outcome)])
            })
    }

    /// Raises each of `counters` by how far its count in `now` moved since `last` (same order; a count that went
    /// back adds nothing), then remembers `now`: a labelled family's counters follow counts kept elsewhere.
    private static func advance(_ counters: [Counter], to now: [Int], from last: inout [Int]) {
        if last.count != now.count { last = Array(repeating: 0, count: now.count) }
        for (i, counter) in counters.enumerated() where i < now.count {
            counter.increment(by: Int64(max(0, now[i] - last[i])))
        }
        last = now
    }

    static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    /// VmRSS from /proc/self/statm (pages × page size); 0 when unknown.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
