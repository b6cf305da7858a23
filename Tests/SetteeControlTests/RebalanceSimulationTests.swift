import Foundation
import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// A seeded simulation of `RebalanceRun` (the rebalance batch protocol, ADR 0119) against simulated data nodes.
///
/// The world: 2–4 nodes holding one bucket of 8 vBuckets with 0–2 replicas; the rebalance adds nodes, ejects nodes, or
/// both (`RebalancePlanner.plan`, 1–4 moves per batch). Every node keeps, per vBucket, a log of write IDs (seqno =
/// position) and a persisted prefix, and acts by its own adopted config through `VBucketDuty.duty`, as a data node's
/// reconcile does: an active takes clients' writes, a pending copy refuses them, a replica (or a copy in a forward
/// chain) streams from the chain's active, rolling back to the common prefix when its source's history diverged. A
/// flusher persists each copy's log now and then, and at once for vBuckets a seqnos poll names (`persist`); it can
/// stall or fail for a while. Clients write to whichever node is active by its own config: plain writes are
/// acknowledged at once; durable ones (persistToMajority here) once the active and a majority of its chain persisted
/// them and, while the vBucket is in `dual`, a majority of the forward chain too (kv_engine's second chain). The
/// interpreter performs the run's directives: a commit is refused while the orchestrator reaches no majority,
/// otherwise applied at the orchestrator and published to every member it reaches (a publish can be lost); a node
/// that missed one pulls the newer config later. Faults: a node crashes (its unpersisted log is lost) and restarts, a
/// node or the orchestrator is cut off, one link is cut, a flusher stalls or fails, publishes to a node are lost, the
/// operator stops the rebalance: one at a chosen step of a chosen batch (every step is covered, see the printed
/// counts), and others at random times. The orchestrator itself never crashes (its run's state is in memory).
///
/// Invariants:
/// 1. a moving vBucket's acknowledged writes survive every batch: after the run and a settling time, every write
///    acknowledged for a vBucket of the plan is in the log of the vBucket's final active (whether its batch switched
///    or reverted), unless the node that acknowledged it lost it in its own crash while it served the vBucket
///    (plain writes are acknowledged from memory); and when a batch switches, every durable write acknowledged so far
///    for its vBuckets is persisted on a majority of the new chain (a failover could then promote a copy holding it);
/// 2. a batch cut by a partition or a crash reverts cleanly: at the end no forward, takeover or dual entry is left,
///    each vBucket's chain is its new chain if its batch switched and its old chain otherwise, and no vBucket is
///    without an active;
/// 3. no vBucket ever has two nodes taking writes for it.
///
/// `REBALANCE_SEED=S` replays one schedule with its trace; `REBALANCE_SCHEDULES=N` sets how many run (default 500).
/// The `…Without…` tests run the same schedules with one rule of the protocol taken out by the interpreter (`Broken`)
/// and show the invariants fail.
@Suite struct RebalanceSimulationTests {
    static let vbuckets = 8
    /// The world's step, ms.
    static let stepMs = 5

    /// How the interpreter departs from the real one, taking one rule of the protocol out.
    enum Broken: Sendable, Equatable {
        case none
        /// The hand-over's wait is answered as done at once: the switch follows the hand-over without waiting for
        /// the copies to persist what the source took before it stopped.
        case noHandOverWait
        /// The hand-over publishes no `dual`: the second chain never counts.
        case noSecondChain
        /// The waits read the copies' seqnos in memory, not persisted (as before ADR 0119).
        case waitsInMemory
        /// A revert whose commit failed is not retried (as before the run existed).
        case revertOnce
    }

    struct Copy: Equatable {
        /// Write IDs in seqno order (seqno = index + 1).
        var log: [Int] = []
        var persisted = 0
    }

    enum Flusher: Equatable {
        case ok
        case stalled(until: Int)
        case failed(until: Int)
    }

    /// A class, so the world's steps reach a node without copying it (this runs in the debug build).
    final class Node {
        let name: NodeID
        var alive = true
        var restartAt = 0
        var config: BucketPlacement {
            didSet { duties = Self.duties(name, config) }
        }
        /// Its duty per vBucket by `config` (`VBucketDuty.duty`, as a node's reconcile applies it).
        var duties: [VBucketDuty]
        var version = 0
        var copies: [Copy]
        var flusher = Flusher.ok
        var nudged: Set<Int> = []
        var dropPublishesUntil = 0
        /// Until when its incoming streams make no progress (a slow backfill, a loaded node).
        var streamsPausedUntil = 0

        init(name: NodeID, config: BucketPlacement, copies: [Copy]) {
            self.name = name
            self.config = config
            self.copies = copies
            duties = Self.duties(name, config)
        }

        static func duties(_ name: NodeID, _ config: BucketPlacement) -> [VBucketDuty] {
            (0..<RebalanceSimulationTests.vbuckets).map { VBucketDuty.duty(of: name, vb: $0, in: config) }
        }
    }

    struct Write {
        var id: Int
        var vb: Int
        var seqno: Int
        var by: Int
        var durable: Bool
        var excused = false
    }

    struct PendingDurable {
        var id: Int
        var vb: Int
        var seqno: Int
        var by: Int
        var deadline: Int
    }

    enum Fault: CaseIterable {
        case crash, isolate, isolateOrchestrator, cutLink, stallFlusher, failFlusher, dropPublishes, stop
    }

    static let steps = [
        "forward", "catch-up sample", "catch-up wait", "hand over", "hand-over sample", "hand-over wait", "switch",
        "revert",
    ]

    struct Sim {
        let seed: UInt64
        let broken: Broken
        let tracing: Bool
        var rng: SplitMix64
        var nodes: [Node] = []
        let orchestrator = 0
        var run: RebalanceRun
        let numReplicas: Int
        let moves: [VBucketMove]
        var now = 0
        var indexOf: [NodeID: Int] = [:]
        var nextWrite = 1
        var acked: [Write] = []
        var pending: [PendingDurable] = []
        /// Symmetric cut links, each with when it heals.
        var cut: [Set<Int>: Int] = [:]
        var switched: Set<Int> = []
        /// Durable writes below a majority of a shrunk chain at its switch (not a violation: see the check).
        var shrunkShort = 0
        var violations: [String] = []
        var trace: [String] = []
        var outcome = ""
        /// The planned fault: at which step of which batch, which kind.
        let faultStep: String?
        let faultBatch: Int
        let faultKind: Fault
        var faultDone = false
        var batchIndex = 0
        var randomFaultRate: Int  // per mille per world step
        var faultsAt: [String: Int] = [:]
        var stopSent = false

        init(seed: UInt64, broken: Broken, tracing: Bool) {
            self.seed = seed
            self.broken = broken
            self.tracing = tracing
            rng = SplitMix64(seed: seed)
            let old = Int.random(in: 2...4, using: &rng)
            numReplicas = Int.random(in: 0...2, using: &rng)
            var names = (0..<old).map { NodeID("n\($0)") }
            var keep = names
            switch Int.random(in: 0..<4, using: &rng) {
            case 0:  // add one
                names.append(NodeID("n\(old)"))
                keep = names
            case 1:  // add two
                names += [NodeID("n\(old)"), NodeID("n\(old + 1)")]
                keep = names
            case 2:  // eject one (never the orchestrator)
                keep.remove(at: Int.random(in: 1..<old, using: &rng))
            default:  // swap one
                names.append(NodeID("n\(old)"))
                keep = names
                keep.remove(at: Int.random(in: 1..<old, using: &rng))
            }
            let map = VBucketMap.build(
                numVBuckets: RebalanceSimulationTests.vbuckets, nodeCount: old, numReplicas: numReplicas)
            let placement = BucketPlacement.from(map, nodes: Array(names.prefix(old)))
            let plan = RebalancePlanner.plan(current: map, oldNodes: Array(names.prefix(old)), newNodes: keep)
            moves = plan.moves
            let batchSize = Int.random(in: 1...4, using: &rng)
            run = RebalanceRun(
                bucket: "b", moves: plan.moves, batchSize: batchSize,
                timing: RebalanceRun.Timing(
                    pollInterval: .milliseconds(20), catchUpTimeout: .milliseconds(1500),
                    revertRetry: .milliseconds(200), revertTimeout: .seconds(5)))
            // Some history, on every copy and persisted.
            var copies = [Copy](repeating: Copy(), count: RebalanceSimulationTests.vbuckets)
            for vb in 0..<RebalanceSimulationTests.vbuckets {
                for _ in 0..<Int.random(in: 0...6, using: &rng) {
                    copies[vb].log.append(nextWrite)
                    acked.append(
                        Write(
                            id: nextWrite, vb: vb, seqno: copies[vb].log.count, by: 0, durable: false))
                    nextWrite += 1
                }
                copies[vb].persisted = copies[vb].log.count
            }
            nodes = names.map { name in
                Node(
                    name: name, config: placement,
                    copies: (0..<RebalanceSimulationTests.vbuckets).map { vb in
                        placement.chains[vb].contains(name) ? copies[vb] : Copy()
                    })
            }
            indexOf = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, $0) })
            let batches = max(1, (plan.moves.count + batchSize - 1) / batchSize)
            let noFault = Int.random(in: 0..<10, using: &rng) == 0
            faultStep = noFault ? nil : RebalanceSimulationTests.steps.randomElement(using: &rng)
            faultBatch = Int.random(in: 0..<batches, using: &rng)
            faultKind = Fault.allCases.randomElement(using: &rng) ?? .crash
            randomFaultRate = [0, 0, 1, 3].randomElement(using: &rng) ?? 0
        }

        mutating func log(_ s: String) {
            if tracing { trace.append("\(now) ms: \(s)") }
        }

        func linked(_ a: Int, _ b: Int) -> Bool {
            a == b || (nodes[a].alive && nodes[b].alive && cut[[a, b]] == nil)
        }

        func index(_ n: NodeID) -> Int? { indexOf[n] }

        func duty(_ i: Int, _ vb: Int) -> VBucketDuty { nodes[i].duties[vb] }

        /// Whether the orchestrator reaches a strict majority of the members (itself counted).
        var orchestratorHasQuorum: Bool {
            nodes.indices.filter { linked(orchestrator, $0) }.count * 2 > nodes.count
        }

        // MARK: The interpreter

        mutating func simulate() {
            var queue = feed(.start)
            while !queue.isEmpty {
                let d = queue.removeFirst()
                maybePlannedFault()
                let event: RebalanceRun.Event
                switch d {
                case .commit(let edit):
                    advance(Int.random(in: 2...40, using: &rng))
                    event = commit(edit)
                case .requestSeqnos(let node, let persist):
                    advance(Int.random(in: 1...10, using: &rng))
                    event = seqnos(node, persist: persist)
                case .wait(let until):
                    advance(max(0, Int((until / .milliseconds(1)).rounded(.up)) - now))
                    event = .tick
                case .progress(let done, let total):
                    log("progress \(done)/\(total)")
                    continue
                case .finished:
                    outcome = "finished"
                    continue
                case .failed(let why):
                    outcome = "failed: \(why)"
                    continue
                }
                if stopSent == false, faultKind == .stop, faultDone {
                    stopSent = true
                    queue += feed(.stopRequested)
                }
                queue += feed(event)
            }
            settle()
            check()
        }

        mutating func feed(_ e: RebalanceRun.Event) -> [RebalanceRun.Directive] {
            let quorum = orchestratorHasQuorum ? nil : "no quorum"
            let out = run.handle(e, now: .milliseconds(now), quorumProblem: quorum)
            if tracing { trace.append("\(now) ms: \(e) → \(out) [\(run.stepName)]") }
            for d in out {
                if case .commit(.forward) = d { batchIndex += 1 }
            }
            return out
        }

        mutating func commit(_ edit: RebalanceRun.Edit) -> RebalanceRun.Event {
            let event = publish(edit)
            if broken == .revertOnce, case .revert = edit, case .commitFailed = event {
                // As before the run: one attempt, then the rebalance ends failed.
                return .committed
            }
            return event
        }

        mutating func publish(_ edit: RebalanceRun.Edit) -> RebalanceRun.Event {
            guard orchestratorHasQuorum else { return .commitFailed("claim refused: no majority") }
            var edit = edit
            if broken == .noSecondChain, case .handOver(let takeover, _) = edit {
                edit = .handOver(takeover: takeover, dual: [])
            }
            edit.apply(to: &nodes[orchestrator].config)
            nodes[orchestrator].version += 1
            if case .switchChains(let chains) = edit { switchedAtOrchestrator(chains) }
            var missing: [NodeID] = []
            for i in nodes.indices where i != orchestrator {
                if linked(orchestrator, i), nodes[i].dropPublishesUntil <= now {
                    adopt(i)
                } else {
                    missing.append(nodes[i].name)
                }
            }
            return missing.isEmpty ? .committed : .commitFailed("config not acknowledged by \(missing)")
        }

        mutating func adopt(_ i: Int) {
            nodes[i].config = nodes[orchestrator].config
            nodes[i].version = nodes[orchestrator].version
            failPendingDurables(of: i)
        }

        /// Invariant 1, durable half: at a switch every acknowledged durable write of the batch is persisted on a
        /// majority of its new chain.
        mutating func switchedAtOrchestrator(_ chains: [VBucketID: [NodeID?]]) {
            for (vb, chain) in chains {
                switched.insert(vb.index)
                let holders = chain.compactMap { $0 }.compactMap(index)
                let needed = Failover.majority(numReplicas: chain.count - 1)
                for w in acked where w.vb == vb.index && w.durable && !w.excused {
                    let have = holders.filter { Self.persists(nodes[$0].copies[w.vb], w) }.count
                    if have < needed, chain.contains(nil) {
                        // A chain shrunk below the bucket's copies (nodes ejected): the protocol adds no copy there,
                        // so it waits for none, and a kept copy may not hold what a dropped one did (a known gap).
                        shrunkShort += 1
                    } else if have < needed {
                        violations.append(
                            "switch of vb \(vb.index) to \(chain.map { $0?.rawValue ?? "-" }): durable write \(w.id) "
                                + "(seqno \(w.seqno)) persisted on \(have) of its copies, \(needed) needed")
                    }
                }
            }
        }

        static func persists(_ c: Copy, _ w: Write) -> Bool {
            c.persisted >= w.seqno && c.log.count >= w.seqno && c.log[w.seqno - 1] == w.id
        }

        mutating func seqnos(_ node: NodeID, persist: [VBucketID]) -> RebalanceRun.Event {
            guard let i = index(node), linked(orchestrator, i) else {
                return .seqnosFailed(from: node, "\(node) did not answer")
            }
            let inHandOverWait = run.stepName == "hand-over wait"
            var rows: [SeqnoReport.Row] = []
            for vb in 0..<RebalanceSimulationTests.vbuckets {
                let c = nodes[i].copies[vb]
                let state: SeqnoReport.State
                switch duty(i, vb) {
                case .active: state = .active
                case .replica: state = .replica
                case .pending: state = .pending
                case .dead: state = .dead
                }
                var persisted = UInt64(c.persisted)
                if broken == .waitsInMemory { persisted = UInt64(c.log.count) }
                if broken == .noHandOverWait && inHandOverWait { persisted = .max }
                rows.append(.init(state: state, high: UInt64(c.log.count), persisted: persisted))
            }
            for vb in persist { nodes[i].nudged.insert(vb.index) }
            return .seqnosAnswered(from: node, rows)
        }

        // MARK: Faults

        mutating func maybePlannedFault() {
            guard !faultDone, let step = faultStep, run.stepName == step, batchIndex - 1 == faultBatch else {
                return
            }
            faultDone = true
            faultsAt[step, default: 0] += 1
            inject(faultKind)
        }

        mutating func inject(_ kind: Fault) {
            let others = Array(nodes.indices.dropFirst())
            let victim = others.randomElement(using: &rng) ?? 1
            let length = Int.random(in: 50...1500, using: &rng)
            log("fault \(kind) on \(nodes[victim].name) for \(length) ms")
            switch kind {
            case .crash:
                crash(victim, restartAt: now + length)
            case .isolate:
                for j in nodes.indices where j != victim { cut[[victim, j]] = now + length }
            case .isolateOrchestrator:
                for j in nodes.indices where j != orchestrator { cut[[orchestrator, j]] = now + length }
            case .cutLink:
                let other = nodes.indices.filter { $0 != victim }.randomElement(using: &rng) ?? 0
                cut[[victim, other]] = now + length
            case .stallFlusher:
                nodes[victim].flusher = .stalled(until: now + length)
            case .failFlusher:
                nodes[victim].flusher = .failed(until: now + 2 * length)
            case .dropPublishes:
                nodes[victim].dropPublishesUntil = now + length
            case .stop:
                break  // fed by the interpreter after this directive
            }
        }

        mutating func crash(_ i: Int, restartAt: Int) {
            guard nodes[i].alive else { return }
            for vb in 0..<RebalanceSimulationTests.vbuckets {
                let c = nodes[i].copies[vb]
                let serving: Bool
                switch duty(i, vb) {
                case .active, .pending: serving = true
                default: serving = false
                }
                if serving {
                    let lost = Set(c.log[c.persisted...])
                    for k in acked.indices where acked[k].vb == vb && acked[k].by == i && lost.contains(acked[k].id) {
                        acked[k].excused = true
                    }
                }
                nodes[i].copies[vb].log.removeLast(c.log.count - c.persisted)
            }
            nodes[i].alive = false
            nodes[i].restartAt = restartAt
            nodes[i].nudged = []
            pending.removeAll { $0.by == i }
        }

        // MARK: The world

        mutating func advance(_ ms: Int) {
            let end = now + ms
            while now < end {
                now += min(RebalanceSimulationTests.stepMs, end - now)
                step()
            }
        }

        mutating func step() {
            // Heals and restarts.
            cut = cut.filter { $0.value > now }
            for i in nodes.indices where !nodes[i].alive && nodes[i].restartAt <= now { nodes[i].alive = true }
            if randomFaultRate > 0, Int(rng.next() % 1000) < randomFaultRate {
                let kinds: [Fault] = [.crash, .isolate, .cutLink, .stallFlusher, .dropPublishes]
                inject(kinds.randomElement(using: &rng) ?? .crash)
            }
            writes()
            stream()
            flush()
            ackDurables()
            pulls()
        }

        mutating func writes() {
            guard rng.next() % 2 == 0 else { return }
            let vb = Int.random(in: 0..<RebalanceSimulationTests.vbuckets, using: &rng)
            var actives: [Int] = []
            for i in nodes.indices where nodes[i].alive {
                if case .active = nodes[i].duties[vb] { actives.append(i) }
            }
            if actives.count > 1 {
                violations.append("vb \(vb) taken writes on \(actives.map { nodes[$0].name.rawValue }) at \(now) ms")
            }
            guard let i = actives.first else { return }
            nodes[i].copies[vb].log.append(nextWrite)
            let w = Write(
                id: nextWrite, vb: vb, seqno: nodes[i].copies[vb].log.count, by: i,
                durable: Int.random(in: 0..<3, using: &rng) == 0)
            nextWrite += 1
            if w.durable {
                pending.append(PendingDurable(id: w.id, vb: vb, seqno: w.seqno, by: i, deadline: now + 3000))
            } else {
                acked.append(w)
            }
        }

        /// A durable write is acknowledged once the active and a majority of its chain persisted it, and of the
        /// forward chain too while the vBucket is in `dual` (`VBucketDuty`'s `moving`).
        mutating func ackDurables() {
            guard !pending.isEmpty else { return }
            var left: [PendingDurable] = []
            let nodes = self.nodes
            let indexOf = self.indexOf
            for p in pending {
                let i = p.by
                guard nodes[i].alive, p.deadline > now, case .active(_, let moving) = nodes[i].duties[p.vb],
                    nodes[i].copies[p.vb].log.count >= p.seqno, nodes[i].copies[p.vb].log[p.seqno - 1] == p.id
                else { continue }
                let w = Write(id: p.id, vb: p.vb, seqno: p.seqno, by: i, durable: true)
                let chain = nodes[i].config.chains[p.vb]
                func enough(_ chain: [NodeID?]) -> Bool {
                    var have = 0
                    for case let n? in chain {
                        if let j = indexOf[n], Self.persists(nodes[j].copies[p.vb], w) { have += 1 }
                    }
                    return have >= Failover.majority(numReplicas: chain.count - 1)
                }
                if Self.persists(nodes[i].copies[p.vb], w), enough(chain), moving.map(enough) ?? true {
                    acked.append(w)
                } else {
                    left.append(p)
                }
            }
            pending = left
        }

        /// A node no longer active for a vBucket answers its waiting durable writes ambiguous (not acknowledged).
        mutating func failPendingDurables(of i: Int) {
            let node = nodes[i]
            pending.removeAll { p in
                guard p.by == i else { return false }
                if case .active = node.duties[p.vb] { return false }
                return true
            }
        }

        mutating func stream() {
            // Locals, not methods on `self`: the debug build copies `self` for those, and this runs every step.
            let duties = nodes.map(\.duties)
            let alive = nodes.map(\.alive)
            let cut = self.cut
            let indexOf = self.indexOf
            for i in nodes.indices where alive[i] {
                if nodes[i].streamsPausedUntil > now { continue }
                if rng.next() % 100 == 0 {
                    nodes[i].streamsPausedUntil = now + 50 + Int(rng.next() % 400)
                    continue
                }
                for vb in 0..<RebalanceSimulationTests.vbuckets {
                    guard case .replica(let source) = duties[i][vb], let s = indexOf[source], s != i, alive[s],
                        cut[[i, s]] == nil
                    else { continue }
                    // A source streams what it holds while it serves the vBucket (active or pending).
                    switch duties[s][vb] {
                    case .active, .pending: break
                    default: continue
                    }
                    let from = nodes[s].copies[vb].log
                    let have = nodes[i].copies[vb].log.count
                    if have > 0, have > from.count || from[have - 1] != nodes[i].copies[vb].log[have - 1] {
                        // Rollback to the common prefix (a write's ID fixes everything before it).
                        var k = min(have, from.count)
                        while k > 0, nodes[i].copies[vb].log[k - 1] != from[k - 1] { k -= 1 }
                        nodes[i].copies[vb].log.removeLast(have - k)
                        nodes[i].copies[vb].persisted = min(nodes[i].copies[vb].persisted, k)
                    }
                    let at = nodes[i].copies[vb].log.count
                    let take = min(from.count - at, Int(rng.next() % 4))
                    if take > 0 { nodes[i].copies[vb].log += from[at..<(at + take)] }
                }
            }
        }

        mutating func flush() {
            for i in nodes.indices where nodes[i].alive {
                switch nodes[i].flusher {
                case .stalled(let until), .failed(let until):
                    if until > now { continue }
                    nodes[i].flusher = .ok
                case .ok: break
                }
                // About one vBucket in 20 a step, and those a seqnos poll named.
                let any = Int(rng.next() % 20)
                if any < RebalanceSimulationTests.vbuckets {
                    nodes[i].copies[any].persisted = nodes[i].copies[any].log.count
                }
                for vb in nodes[i].nudged { nodes[i].copies[vb].persisted = nodes[i].copies[vb].log.count }
                nodes[i].nudged = []
            }
        }

        /// A node that missed a publish fetches the newer config later (its heartbeats show it).
        mutating func pulls() {
            let latest = nodes[orchestrator].version
            for i in nodes.indices where i != orchestrator && nodes[i].version < latest && nodes[i].alive {
                guard cut[[orchestrator, i]] == nil, nodes[i].dropPublishesUntil <= now, rng.next() % 50 == 0
                else { continue }
                adopt(i)
            }
        }

        // MARK: The end

        /// The faults heal and every node takes the orchestrator's last config (an active's log no longer changes,
        /// so nothing needs to run after that for the checks).
        mutating func settle() {
            cut = [:]
            for i in nodes.indices {
                nodes[i].alive = true
                if i != orchestrator { adopt(i) }
            }
        }

        mutating func check() {
            let final = nodes[orchestrator].config
            if !final.forward.isEmpty || !final.takeover.isEmpty || !final.dual.isEmpty {
                violations.append(
                    "left published: forward \(final.forward.keys.sorted()), takeover \(final.takeover.sorted()), "
                        + "dual \(final.dual.sorted()) (\(outcome))")
            }
            for move in moves {
                let vb = move.vbucket.index
                let expected = switched.contains(vb) ? move.to : move.from
                if final.chains[vb] != expected {
                    violations.append("vb \(vb) ended on \(final.chains[vb]), not \(expected)")
                }
            }
            for vb in 0..<RebalanceSimulationTests.vbuckets {
                guard let active = final.chains[vb].first ?? nil, let a = index(active) else {
                    violations.append("vb \(vb) has no active")
                    continue
                }
                let holds = Set(nodes[a].copies[vb].log)
                let lost = acked.filter { $0.vb == vb && !$0.excused && !holds.contains($0.id) }
                if let w = lost.first {
                    violations.append(
                        "vb \(vb): \(lost.count) acknowledged writes not on its final active \(active), first \(w.id) "
                            + "(seqno \(w.seqno), \(w.durable ? "durable" : "plain"), by \(nodes[w.by].name)) "
                            + "(\(outcome))")
                }
            }
        }
    }

    /// Runs `count` schedules (or the one `REBALANCE_SEED` names) with `broken`; returns the failed seeds and totals.
    static func runSchedules(_ broken: Broken, count: Int) -> (failed: [UInt64], first: String, summary: String) {
        let env = ProcessInfo.processInfo.environment
        let seeds: [UInt64]
        if let one = env["REBALANCE_SEED"].flatMap(UInt64.init) {
            seeds = [one]
        } else {
            seeds = Array(1...UInt64(max(1, count)))
        }
        var failed: [UInt64] = []
        var first = ""
        var finished = 0
        var reverted = 0
        var moves = 0
        var writes = 0
        var simulated = 0
        var shrunkShort = 0
        var faultsAt: [String: Int] = [:]
        for seed in seeds {
            var sim = Sim(seed: seed, broken: broken, tracing: seeds.count == 1)
            sim.simulate()
            if seeds.count == 1 { print(sim.trace.joined(separator: "\n")) }
            if sim.outcome == "finished" { finished += 1 } else { reverted += 1 }
            moves += sim.moves.count
            simulated += sim.now
            shrunkShort += sim.shrunkShort
            writes += sim.acked.count
            for (k, v) in sim.faultsAt { faultsAt[k, default: 0] += v }
            if !sim.violations.isEmpty {
                failed.append(seed)
                if first.isEmpty { first = "seed \(seed): \(sim.violations.prefix(2).joined(separator: "; "))" }
            }
        }
        let steps = RebalanceSimulationTests.steps.map { "\($0) \(faultsAt[$0] ?? 0)" }.joined(separator: ", ")
        let summary =
            "\(seeds.count) schedules (\(broken)): \(finished) finished, \(reverted) failed and reverted, \(moves) moves, "
            + "\(writes) acknowledged writes, \(simulated / 1000) s simulated; planned faults by step: \(steps); \(shrunkShort) durable writes short of a shrunk chain's majority at its switch; "
            + "\(failed.count) broke an invariant"
            + (failed.isEmpty ? "" : " (seeds \(failed.prefix(10)))")
        return (failed, first, summary)
    }

    /// Proves the three invariants above over `REBALANCE_SCHEDULES` seeded schedules (500 by default).
    @Test func invariantsHoldUnderFaultsAtEveryStep() {
        let count = ProcessInfo.processInfo.environment["REBALANCE_SCHEDULES"].flatMap(Int.init) ?? 500
        let started = ContinuousClock.now
        let r = Self.runSchedules(.none, count: count)
        print("RebalanceSimulation: \(r.summary) in \(ContinuousClock.now - started)")
        #expect(r.failed.isEmpty, "\(r.first)")
    }

    /// Proves the hand-over's wait is needed: switching right after the hand-over loses writes the old active took
    /// before it turned pending.
    @Test func switchingWithoutTheHandOverWaitLosesWrites() {
        let r = Self.runSchedules(.noHandOverWait, count: 300)
        print("RebalanceSimulation without the hand-over wait: \(r.summary); \(r.first)")
        #expect(!r.failed.isEmpty)
    }

    /// Proves the second chain is needed: without `dual`, a durable write acknowledged by the old chain between the
    /// hand-over's sample and the switch is not on a majority of the new chain.
    @Test func durableWritesWithoutTheSecondChainMissTheNewChain() {
        let r = Self.runSchedules(.noSecondChain, count: 300)
        print("RebalanceSimulation without the second chain: \(r.summary); \(r.first)")
        #expect(!r.failed.isEmpty)
    }

    /// Proves the waits must read persisted seqnos: waiting for seqnos in memory switches to copies a crash empties.
    @Test func waitingForSeqnosInMemoryLosesWrites() {
        let r = Self.runSchedules(.waitsInMemory, count: 300)
        print("RebalanceSimulation with waits in memory: \(r.summary); \(r.first)")
        #expect(!r.failed.isEmpty)
    }

    /// Proves a failed revert must be retried: published once, a revert refused while the orchestrator is cut off
    /// leaves the batch's forward and takeover entries (its vBuckets pending) after the partition heals.
    @Test func aRevertTriedOnceLeavesTheBatchPublished() {
        let r = Self.runSchedules(.revertOnce, count: 300)
        print("RebalanceSimulation with one revert attempt: \(r.summary); \(r.first)")
        #expect(!r.failed.isEmpty)
    }
}
