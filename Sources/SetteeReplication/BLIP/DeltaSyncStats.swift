import Synchronization

/// Sync Gateway's `per_db.delta_sync` counters for one database (the gateway shows them in `/_expvar` and
/// `/_metrics`; a Lite P2P listener keeps one for all its BLIP connections, `PeerListener.deltaStats`):
/// - `deltas_requested`: revisions a puller asked for naming a revision it has, with deltas on (a delta was tried);
/// - `deltas_sent`: of those, sent as a delta (the others went whole: no source body in the window, the delta no
///   smaller, a removal, or too many delta answers awaited);
/// - `delta_pull_replication_count`: connections whose client said it takes deltas (`deltas=true` on its first
///   `changes` answer) while they are on;
/// - `delta_push_doc_count`: pushed revisions that came as a delta and were applied.
public final class DeltaSyncStats: Sendable {
    private let requested = Atomic<Int>(0)
    private let sent = Atomic<Int>(0)
    private let pullReplications = Atomic<Int>(0)
    private let pushed = Atomic<Int>(0)

    public init() {}

    public func deltaRequested() { requested.add(1, ordering: .relaxed) }
    public func deltaSent() { sent.add(1, ordering: .relaxed) }
    public func pullReplicationUsesDeltas() { pullReplications.add(1, ordering: .relaxed) }
    public func deltaPushed() { pushed.add(1, ordering: .relaxed) }

    public var deltasRequested: Int { requested.load(ordering: .relaxed) }
    public var deltasSent: Int { sent.load(ordering: .relaxed) }
    public var deltaPullReplicationCount: Int { pullReplications.load(ordering: .relaxed) }
    public var deltaPushDocCount: Int { pushed.load(ordering: .relaxed) }
}
