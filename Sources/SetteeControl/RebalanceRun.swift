import SetteeClusterMap
import SetteeCore

// The rebalance of one bucket as a pure value: the planner's moves and events in, directives out, time injected (the
// shape of `SWIM.Instance` in apple/swift-cluster-membership, as `ClusterBrain`). `ClusterBrain` owns the run of its
// node and routes its events (`ClusterBrain+Rebalance.swift`); `ClusterManager+Rebalance.swift` (SetteeAdmin) only
// performs the directives (commits, seqnos calls, sleeps) and reports what came back; `RebalanceSimulationTests`
// runs it against simulated nodes. See docs/adr/0119-the-second-chain-counts-from-the-hand-over.md for the protocol
// and docs/adr/0126-rebalance-a-pure-run-owned-by-the-brain.md for this value.
//
// The moves run in batches of at most `batchSize`. Per batch:
//
//   start ──▶ forwarding ──committed──▶ sampling(catch-up) ──every source answered──▶ waiting(catch-up) ──┐
//             commit(.forward)          requestSeqnos(source)                         requestSeqnos(copy,   │
//                                       (the sources' high seqnos now)                persist:) per round,  │
//                                                                                     pollInterval apart    │
//   ┌──────────────────────────────────── every new copy (and a new active) persisted its target ◀───────────┘
//   ▼
//   handingOver ──committed──▶ sampling(hand-over) ──▶ waiting(hand-over) ──all persisted──▶ switching ──committed─┐
//   commit(.handOver)          a takeover's source                                         commit(.switchChains)  │
//                              must report `pending`                                                              │
//   progress(done, total), then the next batch's forwarding, or finished ◀────────────────────────────────────────┘
//
//   a failure inside a batch (a commit failed, a seqnos call failed or answered short, a takeover's source not
//   pending, a wait past `catchUpTimeout`, a stop) ──▶ reverting: commit(.revert) ──committed──▶ failed(reason)
//                                                      ──commitFailed──▶ wait(revertRetry), commit(.revert) again,
//                                                      until `revertTimeout` or a stop: failed(reason; not reverted)
//   a stop or a lost quorum between batches ──▶ failed(reason) (nothing of the next batch was published)
//
// Why the steps (ADR 0119): the catch-up samples the sources after the forward publish, so the hand-over's wait, while
// a takeover's vBucket refuses writes, is only for what came since. The hand-over is one publish: moves that change
// the active go to `takeover` (the old active turns pending and refuses writes with NOT_MY_VBUCKET, so its high seqno
// stops), moves that keep it go to `dual` (its durable writes need a majority of the forward chain too, kv_engine's
// second chain). The sources are sampled again after that publish and every copy the new chain adds (and a new
// active) must persist that seqno before the switch. So a write the source took before the second sample is persisted
// on every copy the new chain adds, and one after it either was refused (takeover) or needed the second chain. The
// second chain counts only from the hand-over, after the copies caught up: counted from the forward publish, every
// durable write to a moving vBucket waited for the new copy's backfill.
//
// Invariants:
// 1. At most one directive awaits an answer at a time (one commit, or one seqnos request), so the shell performs them
//    in order; an answer that is not the awaited one is ignored.
// 2. `commit(.switchChains)` of a batch only after its hand-over commit, and after every node in the batch's waits
//    answered a persisted seqno at or above its target, sampled from the source after the hand-over commit.
// 3. A takeover's target is taken only from a source that reports the vBucket `pending`.
// 4. Once a batch's forward commit was asked for, the run ends only after that batch's switch was committed or its
//    revert was asked for (and committed, or retried until `revertTimeout` or a stop).
// 5. Nothing a peer reports can trap: a missing row is a failed answer, seqnos are compared, never computed with.
// 6. After `finished` or `failed` the run answers nothing (`isOver`).

/// The rebalance of one bucket, batch by batch: forward, catch up, hand over, switch (see the file's header).
public struct RebalanceRun: Sendable, Equatable {
    /// The run's timing, all of it injected.
    public struct Timing: Sendable, Equatable {
        /// Pause between two rounds of polls of the copies' persisted seqnos.
        public var pollInterval: Duration
        /// How long one wait (the catch-up, or the hand-over's) may take before the batch is reverted.
        public var catchUpTimeout: Duration
        /// Pause before a revert whose commit failed is tried again.
        public var revertRetry: Duration
        /// How long a revert is retried before the run gives up on it (a failover by the majority, or the next
        /// rebalance, clears what it left).
        public var revertTimeout: Duration

        public init(
            pollInterval: Duration = .milliseconds(20), catchUpTimeout: Duration = .seconds(300),
            revertRetry: Duration = .seconds(1), revertTimeout: Duration = .seconds(60)
        ) {
            self.pollInterval = pollInterval
            self.catchUpTimeout = catchUpTimeout
            self.revertRetry = revertRetry
            self.revertTimeout = revertTimeout
        }
    }

    /// A change to the bucket's placement for one batch: what one commit publishes.
    public enum Edit: Sendable, Equatable {
        /// Step 1: the batch's target chains become forward chains (nodes gaining a copy start following the
        /// active).
        case forward([VBucketID: [NodeID?]])
        /// Step 3: `takeover` for moves whose active changes, `dual` (the second chain counts) for moves that keep it
        /// and add copies.
        case handOver(takeover: Set<VBucketID>, dual: Set<VBucketID>)
        /// Step 4: the new chains; the batch's forward, takeover and dual entries are removed.
        case switchChains([VBucketID: [NodeID?]])
        /// A failed batch: its forward, takeover and dual entries are removed, so the old owners stay active.
        case revert(Set<VBucketID>)

        /// The edit applied to `p` (a vBucket past its chains is skipped: the bucket was replaced meanwhile).
        public func apply(to p: inout BucketPlacement) {
            func clear(_ vb: VBucketID) {
                p.forward.removeValue(forKey: vb.index)
                p.takeover.remove(vb.index)
                p.dual.remove(vb.index)
            }
            switch self {
            case .forward(let chains):
                for (vb, chain) in chains { p.forward[vb.index] = chain }
            case .handOver(let takeover, let dual):
                for vb in takeover { p.takeover.insert(vb.index) }
                for vb in dual { p.dual.insert(vb.index) }
            case .switchChains(let chains):
                for (vb, chain) in chains {
                    if p.chains.indices.contains(vb.index) { p.chains[vb.index] = chain }
                    clear(vb)
                }
            case .revert(let vbs):
                for vb in vbs { clear(vb) }
            }
        }

        /// The step's name, for logs.
        public var name: String {
            switch self {
            case .forward: return "forward"
            case .handOver: return "hand over"
            case .switchChains: return "switch"
            case .revert: return "revert"
            }
        }
    }

    public enum Event: Sendable, Equatable {
        /// Begin the first batch.
        case start
        /// The last `commit` was claimed and acknowledged by every active member.
        case committed
        /// The last `commit` failed (its claim was refused, or a member did not acknowledge it), with why.
        case commitFailed(String)
        /// `node` answered the last `requestSeqnos` with one row per vBucket of the bucket.
        case seqnosAnswered(from: NodeID, [SeqnoReport.Row])
        /// The last `requestSeqnos` of `node` failed (no answer, an error status, a report that does not parse).
        case seqnosFailed(from: NodeID, String)
        /// Time passed (a `wait` is due).
        case tick
        /// The operator (or a failover) asked the rebalance to stop.
        case stopRequested
    }

    public enum Directive: Sendable, Equatable {
        /// Claim an epoch and publish `edit` to the bucket's placement; answer `committed` or `commitFailed`.
        case commit(Edit)
        /// Ask `node` for its seqnos of the bucket, with `persist` (its flusher writes those vBuckets soon);
        /// answer `seqnosAnswered` or `seqnosFailed`.
        case requestSeqnos(from: NodeID, persist: [VBucketID])
        /// Nothing to do until `until`: feed `tick` then.
        case wait(until: Duration)
        /// `done` of the bucket's `total` moves are switched.
        case progress(done: Int, total: Int)
        case finished
        case failed(String)
    }

    enum Step: Sendable, Equatable {
        case catchUp, handOver
    }

    /// A batch's moves and what its steps need.
    struct Batch: Sendable, Equatable {
        var moves: [VBucketMove]
        /// Moves that build copies from a source: waited for in the catch-up.
        var copying: [VBucketMove]
        /// Moves whose active changes, from a source, to a node: in `takeover` from the hand-over.
        var takeovers: [VBucketMove]
        /// Moves that keep their active and add copies: in `dual` from the hand-over.
        var seconds: [VBucketMove]
        /// The seqno each vBucket's copies must persist, sampled from its source in the current step.
        var targets: [VBucketID: SeqNo] = [:]

        init(_ moves: [VBucketMove]) {
            self.moves = moves
            copying = moves.filter { $0.source != nil && !$0.newCopies.isEmpty }
            takeovers = moves.filter { $0.changesActive && $0.source != nil && ($0.to.first ?? nil) != nil }
            let taken = Set(takeovers.map(\.vbucket))
            seconds = copying.filter { !taken.contains($0.vbucket) }
        }

        var handed: [VBucketMove] { takeovers + seconds }
        func moves(of step: Step) -> [VBucketMove] { step == .catchUp ? copying : handed }
    }

    /// A wait until copies persisted their targets.
    struct Wait: Sendable, Equatable {
        var step: Step
        var deadline: Duration
        /// Per node, the vBuckets it has not yet shown persisted to their target.
        var left: [NodeID: [VBucketID]]
        /// The nodes still to ask in this round, the first one asked; empty between rounds.
        var round: [NodeID] = []
        /// When the next round is due, between rounds.
        var nextRound: Duration?
    }

    enum Phase: Sendable, Equatable {
        case ready
        case forwarding
        /// Asking the step's sources, `left[0]` asked.
        case sampling(Step, left: [NodeID])
        case waiting(Wait)
        case handingOver
        case switching
        /// The batch failed for `reason`; its revert is being committed, or retried at `retryAt`.
        case reverting(reason: String, since: Duration, retryAt: Duration?)
        case over
    }

    /// The bucket the moves are of.
    public let bucket: String
    /// The planner's moves (`RebalancePlanner.plan`), in order.
    public let moves: [VBucketMove]
    public let batchSize: Int
    public let timing: Timing
    /// Moves switched so far.
    public private(set) var done = 0
    public private(set) var now: Duration = .zero
    var phase: Phase = .ready
    var batch: Batch?
    var stopping = false

    /// A run of `moves` of `bucket`, `batchSize` (at least 1) at a time.
    public init(bucket: String, moves: [VBucketMove], batchSize: Int, timing: Timing = Timing()) {
        self.bucket = bucket
        self.moves = moves
        self.batchSize = max(1, batchSize)
        self.timing = timing
    }

    /// Whether the run has finished or failed.
    public var isOver: Bool { phase == .over }

    /// The current step, for logs and traces.
    public var stepName: String {
        switch phase {
        case .ready: return "ready"
        case .forwarding: return "forward"
        case .sampling(.catchUp, _): return "catch-up sample"
        case .sampling(.handOver, _): return "hand-over sample"
        case .waiting(let w): return w.step == .catchUp ? "catch-up wait" : "hand-over wait"
        case .handingOver: return "hand over"
        case .switching: return "switch"
        case .reverting: return "revert"
        case .over: return "over"
        }
    }

    /// Handles one event at `now`. `quorumProblem` is why this node must not start a batch now (it reaches no
    /// majority of the active members), or nil: read only when a batch would start.
    public mutating func handle(_ event: Event, now: Duration, quorumProblem: String? = nil) -> [Directive] {
        if now > self.now { self.now = now }
        switch event {
        case .start:
            guard phase == .ready else { return [] }
            return startBatch(quorumProblem)
        case .stopRequested:
            stopping = true
            return []
        case .committed:
            return committed(quorumProblem)
        case .commitFailed(let why):
            return commitFailed(why)
        case .seqnosAnswered(let from, let rows):
            return answered(from, rows)
        case .seqnosFailed(let from, let why):
            return seqnosFailed(from, why)
        case .tick:
            return tick()
        }
    }

    // MARK: Steps

    mutating func startBatch(_ quorumProblem: String?) -> [Directive] {
        batch = nil
        if done >= moves.count { return end(.finished) }
        if stopping { return end(.failed("rebalance stopped")) }
        // Cut off from the majority, this node may be failed over by it: it publishes nothing more.
        if let quorumProblem { return end(.failed(quorumProblem)) }
        let b = Batch(Array(moves[done..<min(done + batchSize, moves.count)]))
        batch = b
        phase = .forwarding
        return [.commit(.forward(Dictionary(b.moves.map { ($0.vbucket, $0.to) }, uniquingKeysWith: { _, l in l })))]
    }

    mutating func committed(_ quorumProblem: String?) -> [Directive] {
        switch phase {
        case .forwarding:
            return sample(.catchUp)
        case .handingOver:
            return sample(.handOver)
        case .switching:
            done += batch?.moves.count ?? 0
            return [.progress(done: done, total: moves.count)] + startBatch(quorumProblem)
        case .reverting(let reason, _, _):
            return end(.failed(reason))
        default:
            return []
        }
    }

    mutating func commitFailed(_ why: String) -> [Directive] {
        switch phase {
        case .forwarding, .handingOver, .switching:
            return revert(why)
        case .reverting(let reason, let since, nil):
            if stopping || now - since >= timing.revertTimeout {
                return end(.failed("\(reason) (its revert was not published: \(why))"))
            }
            let at = now + timing.revertRetry
            phase = .reverting(reason: reason, since: since, retryAt: at)
            return [.wait(until: at)]
        default:
            return []
        }
    }

    /// Samples the high seqno of every source of `step`'s moves, one source at a time.
    mutating func sample(_ step: Step) -> [Directive] {
        guard var b = batch else { return end(.failed("no batch")) }
        b.targets = [:]
        batch = b
        let sources = Set(b.moves(of: step).compactMap(\.source)).sorted { $0.rawValue < $1.rawValue }
        guard let first = sources.first else { return step == .catchUp ? handOver() : switchChains() }
        phase = .sampling(step, left: sources)
        return [.requestSeqnos(from: first, persist: [])]
    }

    mutating func answered(_ from: NodeID, _ rows: [SeqnoReport.Row]) -> [Directive] {
        guard var b = batch else { return [] }
        switch phase {
        case .sampling(let step, var left) where left.first == from:
            for move in b.moves(of: step) where move.source == from {
                let vb = move.vbucket
                guard rows.indices.contains(vb.index) else { return revert("\(from) reported no seqnos for \(vb)") }
                let row = rows[vb.index]
                if step == .handOver, b.takeovers.contains(where: { $0.vbucket == vb }), row.state != .pending {
                    return revert("vb \(vb.index) on \(from) is \(row.state), not pending")
                }
                b.targets[vb] = SeqNo(row.high)
            }
            batch = b
            left.removeFirst()
            guard let next = left.first else { return startWait(step) }
            phase = .sampling(step, left: left)
            return [.requestSeqnos(from: next, persist: [])]
        case .waiting(var w) where w.round.first == from:
            var still: [VBucketID] = []
            for vb in w.left[from] ?? [] {
                guard rows.indices.contains(vb.index) else { return revert("\(from) reported no seqnos for \(vb)") }
                if SeqNo(rows[vb.index].persisted) < (b.targets[vb] ?? .zero) { still.append(vb) }
            }
            w.left[from] = still.isEmpty ? nil : still
            w.round.removeFirst()
            return continueRound(w)
        default:
            return []
        }
    }

    mutating func seqnosFailed(_ from: NodeID, _ why: String) -> [Directive] {
        switch phase {
        case .sampling(_, let left) where left.first == from: return revert(why)
        case .waiting(let w) where w.round.first == from: return revert(why)
        default: return []
        }
    }

    /// Waits until every copy the step's moves add, and a new active, persisted its vBucket's target.
    mutating func startWait(_ step: Step) -> [Directive] {
        guard let b = batch else { return end(.failed("no batch")) }
        var left: [NodeID: [VBucketID]] = [:]
        for move in b.moves(of: step) {
            var nodes = move.newCopies
            if move.changesActive, let active = move.to.first ?? nil, !nodes.contains(active) { nodes.append(active) }
            for n in nodes { left[n, default: []].append(move.vbucket) }
        }
        if left.isEmpty { return afterWait(step) }
        return startRound(Wait(step: step, deadline: now + timing.catchUpTimeout, left: left))
    }

    /// A round asks every node still waited for, one after the other; a stop or the deadline ends the wait first.
    mutating func startRound(_ wait: Wait) -> [Directive] {
        if stopping { return revert("rebalance stopped") }
        if now > wait.deadline { return revert("copies did not catch up in time: \(Self.describe(wait.left))") }
        var w = wait
        w.round = w.left.keys.sorted { $0.rawValue < $1.rawValue }
        w.nextRound = nil
        return continueRound(w)
    }

    mutating func continueRound(_ wait: Wait) -> [Directive] {
        var w = wait
        if let next = w.round.first {
            phase = .waiting(w)
            return [.requestSeqnos(from: next, persist: w.left[next] ?? [])]
        }
        if w.left.isEmpty { return afterWait(w.step) }
        let at = now + timing.pollInterval
        w.nextRound = at
        phase = .waiting(w)
        return [.wait(until: at)]
    }

    mutating func afterWait(_ step: Step) -> [Directive] {
        step == .catchUp ? handOver() : switchChains()
    }

    mutating func handOver() -> [Directive] {
        guard let b = batch else { return end(.failed("no batch")) }
        if b.handed.isEmpty { return switchChains() }
        phase = .handingOver
        return [.commit(.handOver(takeover: Set(b.takeovers.map(\.vbucket)), dual: Set(b.seconds.map(\.vbucket))))]
    }

    mutating func switchChains() -> [Directive] {
        guard let b = batch else { return end(.failed("no batch")) }
        phase = .switching
        return [
            .commit(.switchChains(Dictionary(b.moves.map { ($0.vbucket, $0.to) }, uniquingKeysWith: { _, l in l })))
        ]
    }

    mutating func revert(_ reason: String) -> [Directive] {
        guard let b = batch else { return end(.failed(reason)) }
        phase = .reverting(reason: reason, since: now, retryAt: nil)
        return [.commit(.revert(Set(b.moves.map(\.vbucket))))]
    }

    mutating func tick() -> [Directive] {
        switch phase {
        case .waiting(let w) where w.round.isEmpty:
            guard let at = w.nextRound, at > now else { return startRound(w) }
            return [.wait(until: at)]
        case .reverting(let reason, let since, let retryAt?):
            guard retryAt <= now else { return [.wait(until: retryAt)] }
            if stopping { return end(.failed("\(reason) (its revert was not published: rebalance stopped)")) }
            let out = revert(reason)
            // The retry keeps the first failure's time, so `revertTimeout` bounds all of them.
            phase = .reverting(reason: reason, since: since, retryAt: nil)
            return out
        default:
            return []
        }
    }

    mutating func end(_ d: Directive) -> [Directive] {
        phase = .over
        batch = nil
        return [d]
    }

    static func describe(_ left: [NodeID: [VBucketID]]) -> String {
        left.keys.sorted { $0.rawValue < $1.rawValue }.map { n in
            "\(n): \((left[n] ?? []).map(\.index))"
        }.joined(separator: ", ")
    }
}
