import SetteeCore
import Synchronization

/// Majority durability for the active vBuckets of one bucket on this node.
///
/// A durable write at seqno `s` of vBucket `v` waits until a majority of `v`'s copies hold `s`:
/// - the active holds it at once (level majority) or once persisted locally (majorityAndPersistActive,
///   persistToMajority);
/// - a replica holds it once it acknowledged (SEQNO_ACKNOWLEDGED) `s` in memory (levels 1, 2) or
///   persisted (level 3). Replicas acknowledge only the ends of consistent snapshots, so an acknowledged
///   seqno means the replica's copy equals the active's as of that seqno.
///
/// The write at `s` is a prepare (docs/internals/sync-writes.md): the completion decides its fate, the
/// connection handler commits it on `.satisfied` and aborts it on `.failed`, on timeout or when persistence fails.
/// A vBucket that stops being active here (`handOver`) answers its waiters `.handedOver` at once: ambiguous, and
/// the prepare is left to the vBucket's new active, which commits or aborts it.
///
/// `majority = (replicaNumber + 1) / 2 + 1` copies. Only copies in the vBucket's current duty count; when
/// the duty lists fewer copies than that, the write is impossible (0xa1) before it is applied.
/// Invariants: (1) a waiter completes exactly once (success, or timeout / shutdown by its owner);
/// (2) acknowledgements only grow per (vBucket, replica) while the replica set is unchanged.
final class DurabilityMonitor: Sendable {
    /// How a durable write's wait ended.
    enum Outcome: Sendable, Equatable {
        /// A majority of the copies hold it: commit it.
        case satisfied
        /// Shut down (the owner aborts it).
        case failed
        /// Its vBucket stopped being active on this node first: nothing here can satisfy it any more (replicas
        /// acknowledge to the new active), so it is answered ambiguous and its prepare is left to the new active.
        case handedOver
    }

    struct Waiter {
        var id: UInt64
        var seqno: SeqNo
        var majority: Int
        var persistReplicas: Bool
        var activeHolds: Bool
        /// The active's history the prepare was written under: only acknowledgements of it count.
        var history: VBucketUUID
        var completion: @Sendable (Outcome) -> Void
    }

    /// The chain a rebalance is moving a vBucket to, as the active counts it (kv_engine's second chain): until the
    /// switch a durable write needs a majority of it as well, so the copies the new chain keeps hold it.
    struct SecondChain: Equatable {
        /// Whether the active's own copy is in it (a move that keeps the active).
        var includesActive: Bool
        /// Its other copies.
        var others: [NodeID]
        /// A majority of its slots (empty ones count, as the first chain's configured replicas do).
        var majority: Int

        /// Its copies that `holds` (the active's own counted when it is in the chain).
        func copies(where holds: (NodeID) -> Bool = { _ in true }) -> Int {
            (includesActive ? 1 : 0) + others.count(where: holds)
        }
    }

    struct VB {
        /// False from `handOver` until `setReplicas` makes the vBucket active here again: waits end at once.
        var active = true
        var replicas: [NodeID] = []
        var second: SecondChain?
        var memory: [NodeID: SeqNo] = [:]
        var persisted: [NodeID: SeqNo] = [:]
        var waiters: [Waiter] = []
        /// The active's history the acknowledgements belong to: a bucket flush restarts seqnos at 0 under a
        /// new history, and acknowledgements of the old one must not count for the new writes.
        var history: VBucketUUID?

        /// Acknowledgements and waiters belong to `history` from now on: what was acknowledged under another one
        /// (before a bucket flush restarted the seqnos) no longer counts.
        mutating func follow(_ history: VBucketUUID) {
            guard self.history != history else { return }
            self.history = history
            memory = [:]
            persisted = [:]
        }
    }

    private let state: Mutex<[Int: VB]>
    private let nextID = Atomic<UInt64>(1)

    init() { state = Mutex([:]) }

    /// The replica copies of `vb` that count, from the vBucket's duty: `replicas`, and while a rebalance moves it
    /// the chain `moving` it moves to (this node is `me`). Waiters the new sets satisfy complete (a finished move
    /// leaves one chain to satisfy).
    func setReplicas(_ vb: VBucketID, _ replicas: [NodeID], moving: [NodeID?]? = nil, me: NodeID? = nil) {
        let second = moving.map { chain in
            SecondChain(
                includesActive: me.map { chain.contains($0) } ?? false,
                others: chain.compactMap { $0 }.filter { $0 != me }, majority: chain.count / 2 + 1)
        }
        let done = state.withLock { s -> [Waiter] in
            var v = s[vb.index] ?? VB()
            guard !v.active || v.replicas != replicas || v.second != second else { return [] }
            v.active = true
            v.replicas = replicas
            v.second = second
            let counted = Set(replicas + (second?.others ?? []))
            v.memory = v.memory.filter { counted.contains($0.key) }
            v.persisted = v.persisted.filter { counted.contains($0.key) }
            let r = Self.collect(&v)
            s[vb.index] = v
            return r
        }
        for w in done { w.completion(.satisfied) }
    }

    /// `vb` stopped being active on this node (it went pending, replica or dead): every write waiting in it ends
    /// `.handedOver` now, and so does every wait registered until `setReplicas` makes it active again (a write
    /// applied just before the switch registers just after it). Before, they waited out their durability timeout
    /// (30 s unless the client sent one): nothing could satisfy them, and on a connection that answers in order every
    /// later answer, plain GETs included, waited behind them (ADR 0118).
    func handOver(_ vb: VBucketID) {
        let ended = state.withLock { s -> [Waiter] in
            var v = s[vb.index] ?? VB()
            guard v.active || !v.waiters.isEmpty else { return [] }
            let w = v.waiters
            v = VB()
            v.active = false
            s[vb.index] = v
            return w
        }
        for w in ended { w.completion(.handedOver) }
    }

    /// The replica copies of `vb` that can acknowledge, from one look under the lock: its duty's replicas, and
    /// whether the chain a rebalance moves it to (if any) has copies enough for its majority. Nil while `vb` is
    /// handed over: the engine can make it active (the registry applies a new config's states at once) before the
    /// reconcile tells this monitor its copies, and a write in between must be retried, not found impossible.
    func replicaCount(_ vb: VBucketID) -> (replicas: Int, secondChainCanHoldMajority: Bool)? {
        state.withLock { s in
            guard let v = s[vb.index] else { return (0, true) }
            guard v.active else { return nil }
            return (v.replicas.count, v.second.map { $0.copies() >= $0.majority } ?? true)
        }
    }

    /// Registers a durable write; `completion(.satisfied)` once a majority of `majority` copies hold it, at once
    /// `.handedOver` when `vb` is no longer active here.
    /// Returns the waiter id (for `cancel`). `activeHolds` says whether the active's own copy already counts.
    /// `history` is the active's current failover uuid: acknowledgements recorded under another are dropped.
    func wait(
        _ vb: VBucketID, seqno: SeqNo, history: VBucketUUID, majority: Int, persistReplicas: Bool, activeHolds: Bool,
        completion: @escaping @Sendable (Outcome) -> Void
    ) -> UInt64 {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let ended = state.withLock { s -> Outcome? in
            var v = s[vb.index] ?? VB()
            guard v.active else { return .handedOver }
            v.follow(history)
            let w = Waiter(
                id: id, seqno: seqno, majority: majority, persistReplicas: persistReplicas, activeHolds: activeHolds,
                history: history, completion: completion)
            if Self.satisfied(w, v) { return .satisfied }
            v.waiters.append(w)
            s[vb.index] = v
            return nil
        }
        if let ended { completion(ended) }
        return id
    }

    /// The active's copy of waiter `id` is now persisted (levels 2 and 3).
    func activePersisted(_ vb: VBucketID, id: UInt64) {
        let done = state.withLock { s -> [Waiter] in
            guard var v = s[vb.index], let i = v.waiters.firstIndex(where: { $0.id == id }) else { return [] }
            v.waiters[i].activeHolds = true
            let r = Self.collect(&v)
            s[vb.index] = v
            return r
        }
        for w in done { w.completion(.satisfied) }
    }

    /// Drops waiter `id` (timed out); true when it was still waiting.
    func cancel(_ vb: VBucketID, id: UInt64) -> Bool {
        return state.withLock { s -> Bool in
            guard var v = s[vb.index], let i = v.waiters.firstIndex(where: { $0.id == id }) else { return false }
            v.waiters.remove(at: i)
            s[vb.index] = v
            return true
        }
    }

    /// A replica acknowledged seqnos of `vb` on a stream that follows the active's history `history`.
    ///
    /// An acknowledgement may arrive before the write it acknowledges registered its waiter (the prepare reached
    /// the replica and its acknowledgement came back while the writer's event loop had not run `wait` yet), so it
    /// is kept under its own history: `wait` finds it there and completes at once. Before, the first `wait` of a
    /// vBucket adopted the history by dropping what had been acknowledged, so such a write waited for the next
    /// prepare of its vBucket; with every writer waiting, none came until the clients timed out (ADR 0078).
    func acknowledged(
        _ vb: VBucketID, replica: NodeID, memory: SeqNo, persisted: SeqNo, history: VBucketUUID
    ) {
        let done = state.withLock { s -> [Waiter] in
            guard var v = s[vb.index], v.replicas.contains(replica) || (v.second?.others.contains(replica) ?? false)
            else { return [] }
            v.follow(history)
            if memory > v.memory[replica] ?? .zero { v.memory[replica] = memory }
            if persisted > v.persisted[replica] ?? .zero { v.persisted[replica] = persisted }
            let r = Self.collect(&v)
            s[vb.index] = v
            return r
        }
        for w in done { w.completion(.satisfied) }
    }

    /// What `vb`'s durability is waiting on, for the log line of a write that timed out: its copies, the second
    /// chain, and what each copy acknowledged under which history.
    func describe(_ vb: VBucketID) -> String {
        state.withLock { s in
            guard let v = s[vb.index] else { return "no state" }
            let second =
                v.second.map { "\($0.includesActive ? "active+" : "")\($0.others) of \($0.majority)" } ?? "none"
            return "active=\(v.active) replicas=\(v.replicas) second=\(second) memory=\(v.memory) "
                + "persisted=\(v.persisted) history=\(v.history.map { "\($0)" } ?? "none") waiting=\(v.waiters.count)"
        }
    }

    /// Fails every waiter (shutdown, bucket removed).
    func failAll() {
        let all = state.withLock { s -> [Waiter] in
            let w = s.values.flatMap(\.waiters)
            for k in s.keys { s[k]!.waiters = [] }
            return w
        }
        for w in all { w.completion(.failed) }
    }

    private static func collect(_ v: inout VB) -> [Waiter] {
        guard !v.waiters.isEmpty else { return [] }
        var done: [Waiter] = []
        let snapshot = v
        v.waiters.removeAll { w in
            if satisfied(w, snapshot) {
                done.append(w)
                return true
            }
            return false
        }
        return done
    }

    private static func satisfied(_ w: Waiter, _ v: VB) -> Bool {
        // The active is always one of the copies that meet a level, as in kv_engine's durability monitor: with two
        // replicas their two acknowledgements were a majority of 2 on their own, so majorityAndPersistActive and
        // persistToMajority succeeded with the active's copy unpersisted (its flusher slow or failing).
        guard w.activeHolds else { return false }
        // Acknowledgements of another history say nothing of this prepare (only the active's own copy counts).
        let sameHistory = v.history == w.history
        func holds(_ r: NodeID) -> Bool {
            sameHistory && ((w.persistReplicas ? v.persisted[r] : v.memory[r]) ?? .zero) >= w.seqno
        }
        guard 1 + v.replicas.count(where: holds) >= w.majority else { return false }
        // While a rebalance moves the vBucket, a majority of the chain it moves to as well.
        guard let second = v.second else { return true }
        return second.copies(where: holds) >= second.majority
    }
}
