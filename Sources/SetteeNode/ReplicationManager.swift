import Logging
import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import Synchronization

/// What the orchestrator sees of one vBucket on this node.
public struct ReplicaStatus: Sendable, Equatable {
    public var state: VBucketState
    public var highSeqno: SeqNo
    public var persistedSeqno: SeqNo
    /// For a replica: its stream from the active is open (accepted and not ended).
    public var streamConnected: Bool
    public init(state: VBucketState, highSeqno: SeqNo, persistedSeqno: SeqNo, streamConnected: Bool) {
        self.state = state
        self.highSeqno = highSeqno
        self.persistedSeqno = persistedSeqno
        self.streamConnected = streamConnected
    }
}

/// Counters of one manager (stats, tests).
public final class ReplicationCounters: Sendable {
    /// Items received on replica streams (staged), since start.
    public let itemsReceived = Atomic<Int>(0)
    /// Snapshots applied to replica vBuckets.
    public let snapshotsApplied = Atomic<Int>(0)
    /// Rollbacks a producer asked for and storage performed.
    public let rollbacks = Atomic<Int>(0)
    /// Replica streams closed (and reopened) because the engine refused a snapshot past the retry bound.
    public let applyRetriesExhausted = Atomic<Int>(0)
    public init() {}
}

/// Makes this node's vBuckets match their duties: engine states, consumer streams from each active
/// (one DCP connection per source node and bucket), and the replica sets majority durability counts.
public final class ReplicationManager: Sendable {
    struct BucketState {
        var duties: [VBucketDuty] = []
        var connections: [NodeID: ConsumerConnection] = [:]
        let durability = DurabilityMonitor()
    }

    let registry: NodeRegistry
    let node: NodeInfo
    let group: any EventLoopGroup
    let credentials: @Sendable () -> (username: String, password: String)?
    let logger: Logger
    let pool: NIOThreadPool
    public let counters = ReplicationCounters()
    private let buckets = Mutex<[String: BucketState]>([:])
    /// The cluster document's trusted CAs (ADR 0047), for the sources' KV TLS ports.
    let authorities: ClusterAuthorities

    public init(
        registry: NodeRegistry, node: NodeInfo, group: any EventLoopGroup,
        credentials: @escaping @Sendable () -> (username: String, password: String)?, logger: Logger
    ) {
        self.registry = registry
        self.authorities = ClusterAuthorities { [registry] in registry.trustedCAs }
        self.node = node
        self.group = group
        self.credentials = credentials
        self.logger = logger
        self.pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
    }

    /// Idempotent, non-blocking: makes this node's vBuckets of `bucket` match `duties` (one per vBucket):
    /// engine states, consumer streams (resuming from the persisted position, rolling back as the
    /// producer's failover log demands), and each active vBucket's replica set for durability.
    /// Where replication reaches a source: its KV TLS port pinned to the certificate fingerprint the cluster
    /// document carries when it serves TLS (the internal credentials and the data then never cross the network
    /// in clear), else its plain KV port.
    static func replicationEndpoint(_ node: NodeInfo) -> (port: Int, tlsPin: String?) {
        if let port = node.kvTLSPort, let pin = node.tlsFingerprint { return (port, pin) }
        return (node.kvPort, nil)
    }

    /// `nodes` resolves NodeID → host/kvPort.
    public func reconcile(bucket: String, duties: [VBucketDuty], nodes: [NodeInfo]) {
        guard let engine = registry.bucket(named: bucket) else {
            logger.notice("reconcile for a bucket not open here", metadata: ["bucket": "\(bucket)"])
            return
        }
        // The registry refuses a cluster document that changes an open bucket's vBucket count; a mismatch
        // here would come from a peer's document, so it is logged and skipped, never a trap.
        guard duties.count == engine.settings.numVBuckets else {
            logger.error(
                "duties do not match the bucket's vBuckets",
                metadata: [
                    "bucket": "\(bucket)", "duties": "\(duties.count)", "vbuckets": "\(engine.settings.numVBuckets)",
                ])
            return
        }
        var bySource: [NodeID: Set<UInt16>] = [:]
        var handedOver: [VBucketID] = []
        let me = registry.node.otpNode
        // Durability first learns each active vBucket's copies, then the engine states change: a vBucket that becomes
        // active here serves durable writes only once its replica set is known (before, a write in between found none
        // and was DURABILITY_IMPOSSIBLE). Outside the lock: a replica set that changed completes the waiters it now
        // satisfies (a finished move), and a completion commits its write and wakes observers, none of which may need
        // this lock. Reconciles run one at a time (the registry's mutating thread), so the sets apply in order.
        let durability = buckets.withLock { all -> DurabilityMonitor in
            if let b = all[bucket] { return b.durability }
            let b = BucketState()
            all[bucket] = b
            return b.durability
        }
        for (i, duty) in duties.enumerated() {
            if case .active(let replicas, let moving) = duty {
                durability.setReplicas(VBucketID(UInt16(i)), replicas, moving: moving, me: me)
            }
        }
        for (i, duty) in duties.enumerated() {
            let vb = VBucketID(UInt16(i))
            let want: VBucketState
            switch duty {
            case .active:
                want = .active
            case .replica(let source):
                want = .replica
                bySource[source, default: []].insert(UInt16(i))
                handedOver.append(vb)
            case .pending:
                want = .pending
                handedOver.append(vb)
            case .dead:
                want = .dead
                handedOver.append(vb)
            }
            if engine.vbucketState(vb) != want { engine.setVBucketState(vb, want) }
        }
        let addresses = Dictionary(nodes.map { ($0.otpNode, $0) }, uniquingKeysWith: { a, _ in a })
        let stopped = buckets.withLock { all -> [ConsumerConnection] in
            var b = all[bucket] ?? BucketState()
            b.duties = duties
            var gone: [ConsumerConnection] = []
            for (source, conn) in b.connections where bySource[source] == nil || addresses[source] == nil {
                gone.append(conn)
                b.connections.removeValue(forKey: source)
            }
            for (source, vbs) in bySource {
                guard let addr = addresses[source] else { continue }
                let (port, pin) = Self.replicationEndpoint(addr)
                let conn =
                    b.connections[source]
                    ?? ConsumerConnection(
                        bucket: bucket, source: source, selfNode: node.otpNode, host: addr.host, port: port,
                        tlsPin: pin, loop: group.next(), engine: engine, credentials: credentials, pool: pool,
                        counters: counters, logger: logger, authorities: authorities)
                b.connections[source] = conn
                conn.update(wanted: vbs, host: addr.host, port: port, tlsPin: pin)
            }
            all[bucket] = b
            return gone
        }
        // A vBucket no longer active here: its durable writes are answered ambiguous now, not at their timeout.
        for vb in handedOver { durability.handOver(vb) }
        for c in stopped { _ = c.stop() }
    }

    /// Per-vBucket state, high seqno, persisted seqno, and whether its stream is connected.
    public func status(bucket: String, vb: VBucketID) -> ReplicaStatus? {
        guard let engine = registry.bucket(named: bucket), vb.index < engine.settings.numVBuckets else { return nil }
        let info = engine.seqnoInfo(vb)
        let connected = buckets.withLock { all -> Bool in
            guard let b = all[bucket], vb.index < b.duties.count, case .replica(let source) = b.duties[vb.index],
                let conn = b.connections[source]
            else { return false }
            return conn.connectedVBs.withLock { $0.contains(vb.rawValue) }
        }
        return ReplicaStatus(
            state: info.state, highSeqno: info.highSeqno, persistedSeqno: info.persistedSeqno,
            streamConnected: connected)
    }

    /// Stops replication of `name` (bucket deleted here) and fails its durability waiters.
    public func removeBucket(_ name: String) {
        let b = buckets.withLock { $0.removeValue(forKey: name) }
        guard let b else { return }
        b.durability.failAll()
        for c in b.connections.values { _ = c.stop() }
    }

    /// Closes every connection and waits for them.
    public func shutdown() async {
        let all = buckets.withLock { b in
            let x = b
            b = [:]
            return x
        }
        for b in all.values {
            b.durability.failAll()
            for c in b.connections.values { try? await c.stop().get() }
        }
        try? await pool.shutdownGracefully()
    }

    /// Test hook: drops every replication connection of `bucket` (they reconnect and resume).
    func dropConnections(bucket: String) {
        let conns = buckets.withLock { $0[bucket].map { Array($0.connections.values) } ?? [] }
        for c in conns { c.loop.execute { c.channel?.close(promise: nil) } }
    }

    // MARK: durability (called by the KV server)

    func durability(bucket: String) -> DurabilityMonitor? { buckets.withLock { $0[bucket]?.durability } }

    func acknowledged(
        bucket: String, vb: VBucketID, replica: NodeID, memory: SeqNo, persisted: SeqNo, history: VBucketUUID
    ) {
        durability(bucket: bucket)?.acknowledged(
            vb, replica: replica, memory: memory, persisted: persisted, history: history)
    }
}
