import Foundation
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import Synchronization

/// Active vBuckets held back after an unclean shutdown (`HeldVBuckets` decides, this interprets): each round asks
/// the replicas of every held vBucket for their high seqnos, then releases the vBuckets no replica is ahead of and
/// asks the orchestrator to hand the others to the replica furthest ahead. ADR 0033.
extension ClusterManager {
    /// Pause between two rounds while anything is held.
    static let heldRoundInterval: Duration = .seconds(1)
    /// How long a replica's seqnos may take before the round counts it as missing.
    static let heldSeqnoTimeout: Duration = .seconds(3)
    /// How often a vBucket still waiting is logged again.
    static let heldLogInterval: Duration = .seconds(15)

    /// Runs rounds until the task is cancelled; returns early when no bucket holds anything or has an unsettled
    /// vBucket (both arise only from warmup, before this starts).
    func runHeldRounds() async {
        while !Task.isCancelled {
            guard await heldRound() else { return }
            try? await Task.sleep(for: Self.heldRoundInterval)
        }
    }

    /// One round over every bucket; true while something is still held.
    @discardableResult
    func heldRound() async -> Bool {
        var stillHeld = false
        for name in registry.bucketNames {
            guard let engine = registry.bucket(named: name) else { continue }
            // Settling changes no hold, so one reading serves the whole round.
            let held = engine.heldVBuckets()
            if held.isEmpty && !engine.hasUnsettledVBuckets { continue }
            // Fenced, this node's config may be stale (it may have been failed over while it was down): wait.
            if let reason = registry.fenceReason {
                noteHeld(name, count: held.count, why: "fenced: \(reason)")
                stillHeld = true
                continue
            }
            settleUnclean(bucket: name, engine: engine)
            if !held.isEmpty, !(await heldRound(bucket: name, engine: engine, held: held)) { stillHeld = true }
            if engine.hasUnsettledVBuckets { stillHeld = true }
        }
        return stillHeld
    }

    /// Ends the suspicion of every unsettled vBucket the current map makes a replica or nothing here
    /// (`HeldVBuckets.settles` decides): only a copy asked to become active or pending needs comparing, and such a
    /// copy is held by then (the states were applied when the fence lifted). A vBucket the map makes active here but
    /// the engine has not been asked to serve yet stays unsettled for the next round.
    private func settleUnclean(bucket: String, engine: BucketEngine) {
        guard let duties = registry.duties(bucket: bucket) else { return }
        let settled = engine.settleUnclean { vb in HeldVBuckets.settles(vb: vb.index, duties: duties) }
        if settled > 0 {
            logger.info(
                "vBuckets settled after an unclean shutdown: the map makes this copy a replica or nothing",
                metadata: ["bucket": "\(bucket)", "count": "\(settled)"])
        }
    }

    /// True when nothing of `bucket` is held after this round's releases (hand-overs end their holds once the new
    /// map arrives, so they still count as held here).
    private func heldRound(bucket: String, engine: BucketEngine, held: [(vb: VBucketID, high: SeqNo)]) async -> Bool {
        let snapshot = registry.clusterSnapshot
        guard let placement = snapshot.buckets.first(where: { $0.settings.name == bucket })?.placement,
            let desired = registry.desiredVBucketStates(bucket: bucket)
        else { return false }
        let me = selfID
        let members = Dictionary(snapshot.members.map { ($0.id, $0.node) }, uniquingKeysWith: { a, _ in a })
        var asked: Set<NodeID> = []
        for h in held where h.vb.index < placement.chains.count {
            asked.formUnion(HeldVBuckets.replicaNodes(placement.chains[h.vb.index], me: me))
        }
        var reports: [NodeID: [SeqnoReport.Row]] = [:]
        await withTaskGroup(of: (NodeID, [SeqnoReport.Row]?).self) { group in
            for node in asked {
                guard let info = members[node] else { continue }
                group.addTask {
                    (node, try? await self.fetchSeqnos(info, bucket: bucket, timeout: Self.heldSeqnoTimeout))
                }
            }
            for await (node, rows) in group { if let rows { reports[node] = rows } }
        }
        var released: [Int] = []
        var notHere = 0
        var handOvers: [NodeID: [Int]] = [:]
        // A few of the comparisons behind the hand-overs, for the log: vBucket, this copy's high, the replica's.
        var examples: [String] = []
        var waiting: Set<NodeID> = []
        for h in held {
            let vb = h.vb.index
            let chain = vb < placement.chains.count ? placement.chains[vb] : []
            var highs: [NodeID: UInt64?] = [:]
            for r in HeldVBuckets.replicaNodes(chain, me: me) {
                let rows = reports[r]
                highs[r] = rows.flatMap { vb < $0.count ? $0[vb].high : nil }
            }
            let action = HeldVBuckets.decide(me: me, chain: chain, myHigh: h.high.rawValue, replicaHighs: highs)
            switch action {
            case .release, .notActiveHere:
                if vb < desired.count, engine.releaseHold(h.vb, becoming: desired[vb]) {
                    released.append(vb)
                    if action == .notActiveHere { notHere += 1 }
                }
            case .handOver(let to):
                handOvers[to, default: []].append(vb)
                if examples.count < 5 {
                    examples.append("\(vb): \(h.high.rawValue) < \((highs[to] ?? nil).map(String.init) ?? "?")")
                }
            case .wait(let missing):
                waiting.formUnion(missing)
            }
        }
        if released.count > notHere {
            logger.notice(
                "held vBuckets released: no replica is ahead of them",
                metadata: ["bucket": "\(bucket)", "count": "\(released.count - notHere)"])
        }
        if notHere > 0 {
            logger.notice(
                "held vBuckets released as the map says: this node is no longer their active",
                metadata: ["bucket": "\(bucket)", "count": "\(notHere)"])
        }
        if !handOvers.isEmpty { await requestHandOver(bucket: bucket, handOvers, examples: examples) }
        if !waiting.isEmpty {
            noteHeld(
                bucket, count: held.count - released.count,
                why: "replicas did not report their seqnos: \(waiting.map(\.rawValue).sorted())")
        }
        return released.count == held.count
    }

    /// Logs that `count` vBuckets of `bucket` stay held, at most once per `heldLogInterval`.
    private func noteHeld(_ bucket: String, count: Int, why: String) {
        let now = ContinuousClock.now
        let due = heldLogAt.withLock { last -> Bool in
            if let last, now - last < Self.heldLogInterval { return false }
            last = now
            return true
        }
        guard due else { return }
        logger.warning(
            "vBuckets held back after an unclean shutdown: they serve nothing until their replicas are compared",
            metadata: ["bucket": "\(bucket)", "count": "\(count)", "reason": "\(why)"])
    }

    /// Asks the orchestrator (this node, or over the internal API) to hand `vbs` to the replica named for each.
    /// `examples` name a few of the comparisons behind them (vBucket: this copy's high < the replica's), for the log.
    private func requestHandOver(bucket: String, _ moves: [NodeID: [Int]], examples: [String]) async {
        let pairs = moves.flatMap { to, vbs in vbs.map { (vb: $0, to: to) } }.sorted { $0.vb < $1.vb }
        logger.notice(
            "held vBuckets: replicas are ahead, asking for a hand-over",
            metadata: ["bucket": "\(bucket)", "count": "\(pairs.count)", "examples": "\(examples)"])
        guard let orchestrator = orchestrator() else { return }
        if orchestrator.id == selfID {
            _ = await handOver(bucket: bucket, from: selfID, moves: pairs)
            return
        }
        let body = JSON.object([
            ("bucket", .string(bucket)), ("from", .string(selfID.rawValue)),
            ("moves", .array(pairs.map { JSON.object([("vb", .int($0.vb)), ("to", .string($0.to.rawValue))]) })),
        ])
        do {
            let reply = try await peers.call(
                orchestrator.node, .POST, "/settee/internal/handover", body: body.serialized(),
                credentials: internalCredentials, timeout: .seconds(30))
            if !reply.ok {
                logger.warning(
                    "hand-over refused",
                    metadata: ["status": "\(reply.status)", "body": "\(String(decoding: reply.body, as: UTF8.self))"])
            }
        } catch {
            logger.warning("hand-over request failed", metadata: ["error": "\(error)"])
        }
    }

    /// On the orchestrator: makes each named replica the active of its vBucket in place of `from`, which becomes
    /// its replica (`HeldVBuckets.handedOver`), in one published config. Moves that no longer apply are skipped.
    /// Returns how many were applied.
    func handOver(bucket: String, from: NodeID, moves: [(vb: Int, to: NodeID)]) async
        -> Result<Int, ClusterRequestError>
    {
        await topologyLock.withLock { () async -> Result<Int, ClusterRequestError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            if let problem = self.quorumProblem() { return .failure(.noQuorum(problem)) }
            let registry = self.registry
            guard
                let placement = registry.clusterSnapshot.buckets.first(where: { $0.settings.name == bucket })?.placement
            else { return .success(0) }
            // Nothing to hand over: no epoch is claimed for an unchanged config.
            let applicable = moves.filter {
                HeldVBuckets.handOverRefusal(placement, vb: $0.vb, from: from, to: $0.to) == nil
            }
            if applicable.isEmpty { return .success(0) }
            do {
                // A chain change: claimed from a majority like any other (ADR 0034).
                try await self.claimedUpdate { _, placements in
                    guard var p = placements[bucket] else { return }
                    for m in moves where HeldVBuckets.handOverRefusal(p, vb: m.vb, from: from, to: m.to) == nil {
                        p.chains[m.vb] = HeldVBuckets.handedOver(p.chains[m.vb], from: from, to: m.to)
                    }
                    placements[bucket] = p
                }
            } catch let refused as ClusterRequestError {
                return .failure(refused)
            } catch {
                return .failure(.internalError("\(error)"))
            }
            let after = registry.clusterSnapshot.buckets.first(where: { $0.settings.name == bucket })?.placement
            let count = applicable.filter { m in
                m.vb < (after?.chains.count ?? 0) && after?.chains[m.vb].first == m.to
            }.count
            self.logger.notice(
                "held vBuckets handed over to replicas ahead of them",
                metadata: [
                    "bucket": "\(bucket)", "from": "\(from)", "applied": "\(count)", "asked": "\(moves.count)",
                ])
            _ = await self.publish()
            return .success(count)
        }
    }
}
