import Foundation
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import Synchronization

/// Rebalance: plan with `RebalancePlanner`, then execute the moves in batches. Per batch:
/// ```
///   1. forward   publish the target chains as `forward`: nodes gaining a copy start following the active
///   2. catch up  wait until every new copy has persisted the source's high seqno as sampled after step 1
///   3. hand over one publish: moves that change the active go to `takeover` (the old active turns pending and
///                refuses writes with NOT_MY_VBUCKET, so its high seqno stops); moves that keep it go to `dual`
///                (its durable writes need a majority of the forward chain too, kv_engine's second chain).
///                Then wait until every new copy, and a new active, has persisted the source's high seqno as
///                sampled after this publish
///   4. switch    publish the new chains; forward/takeover/dual entries of the batch are removed
/// ```
/// Step 3 is what keeps a write acknowledged before the switch: one the source took before it was sampled is
/// persisted on every copy the new chain adds, and one after it either was refused (takeover) or needed the second
/// chain. The second chain is counted only from step 3, after the copies caught up, as ns_server sets it in a
/// move's later stages: counted from step 1, every durable write to a moving vBucket waited for the new copy's
/// backfill, and on a connection that answers in order so did every later answer (ADR 0119).
/// A failing batch (timeout, a node not acknowledging, a stop request) is reverted: its forward, takeover and dual
/// entries are removed and published, so the old owners stay active. Finished batches stay published.
extension ClusterManager {
    /// Validates and starts a rebalance in the background (Couchbase's `/controller/rebalance`).
    func startRebalance(knownNodes: [String], ejectedNodes: [String]) async -> Result<Void, ClusterRequestError> {
        await topologyLock.withLock { () async -> Result<Void, ClusterRequestError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            let snapshot = self.registry.clusterSnapshot
            let known = Set(knownNodes.filter { !$0.isEmpty })
            guard !known.isEmpty else { return .failure(.emptyKnownNodes) }
            guard known == Set(snapshot.members.map(\.id.rawValue)) else { return .failure(.mismatch) }
            let ejected = Set(ejectedNodes.filter { !$0.isEmpty })
            guard ejected.isSubset(of: known) else { return .failure(.mismatch) }
            let keep = snapshot.members.filter { m in
                !ejected.contains(m.id.rawValue) && (m.membership != .inactiveFailed || m.recoveryType != nil)
            }
            guard !keep.isEmpty else { return .failure(.badRequest(["Cannot eject every node of the cluster."])) }
            self.rebalance.withLock {
                $0 = RebalanceStatus(running: true, movesDone: 0, movesTotal: 0, nodes: keep.map(\.id))
            }
            Task<Void, Never> {
                await self.runRebalance(keep: keep.map(\.id), ejected: Set(ejected.map { NodeID($0) }))
            }
            return .success(())
        }
    }

    /// `/controller/stopRebalance`.
    func stopRebalance() {
        rebalance.withLock { $0.stopRequested = true }
    }

    private func runRebalance(keep: [NodeID], ejected: Set<NodeID>) async {
        let started = ContinuousClock.now
        logger.notice("rebalance started", metadata: ["nodes": "\(keep)", "ejected": "\(ejected)"])
        var failure: String? = nil
        do {
            try await prepareRecoveredNodes(keep)
            // Members taking part become active first, so the map lists them (they hold nothing yet).
            try await commit { members, _ in
                for i in members.indices where keep.contains(members[i].id) {
                    members[i].membership = .active
                    members[i].recoveryType = nil
                }
            }
            for bucket in registry.clusterSnapshot.buckets.map(\.settings.name) {
                try await rebalanceBucket(bucket, keep: keep)
            }
            // Drop ejected and failed-over members from the config, then tell the live ejected ones to leave.
            let leaving = registry.clusterSnapshot.members.filter { !keep.contains($0.id) }
            try await commit { members, _ in members.removeAll { !keep.contains($0.id) } }
            for m in leaving where m.membership != .inactiveFailed {
                _ = try? await peers.call(m.node, .POST, "/settee/internal/leave", credentials: internalCredentials)
            }
        } catch {
            failure = "\(error)"
        }
        let seconds = (ContinuousClock.now - started).components.seconds
        if let failure {
            logger.error("rebalance failed", metadata: ["error": "\(failure)", "seconds": "\(seconds)"])
        } else {
            logger.notice("rebalance completed", metadata: ["seconds": "\(seconds)"])
        }
        rebalance.withLock {
            $0.running = false
            $0.stopRequested = false
            $0.lastError = failure
        }
    }

    /// Full recovery: a failed-over node coming back drops what it held and joins afresh.
    private func prepareRecoveredNodes(_ keep: [NodeID]) async throws {
        let recovering = registry.clusterSnapshot.members.filter {
            keep.contains($0.id) && $0.membership == .inactiveFailed
        }
        for m in recovering {
            let creds = internalCredentials
            let leave = try await peers.call(m.node, .POST, "/settee/internal/leave", credentials: creds)
            guard leave.ok else { throw RebalanceError("\(m.id) refused to reset for recovery (\(leave.status))") }
            let doc = try registry.clusterDocument()
            // After leaving, the node is uninitialised: it joins when the caller proves it knows the document's
            // internal secret.
            let join = try await peers.call(
                m.node, .POST, "/settee/internal/join", body: doc, credentials: creds, timeout: .seconds(60))
            guard join.ok else { throw RebalanceError("\(m.id) did not rejoin for recovery (\(join.status))") }
        }
    }

    /// Applies `edit` to the cluster config at a newly claimed epoch (`claimedUpdate`: a majority promised it, so
    /// an orchestrator cut off from the majority commits nothing) and publishes it. Throws if the claim was refused
    /// or not every active member acknowledged.
    func commit(
        _ edit: @escaping @Sendable (inout [ClusterMember], inout [String: BucketPlacement]) throws -> Void
    ) async throws {
        let registry = self.registry
        do {
            try await claimedUpdate(edit)
        } catch let refused as ClusterRequestError {
            throw RebalanceError("\(refused)")
        }
        let acked = await publish()
        let needed = registry.clusterSnapshot.members.filter { $0.membership == .active }.map(\.id)
        let missing = needed.filter { !acked.contains($0) }
        if !missing.isEmpty { throw RebalanceError("config not acknowledged by \(missing)") }
    }

    private func rebalanceBucket(_ bucket: String, keep: [NodeID]) async throws {
        let snapshot = registry.clusterSnapshot
        guard let entry = snapshot.buckets.first(where: { $0.settings.name == bucket }) else { return }
        let replicas = entry.settings.replicaNumber
        // Nodes the current chains may name: every member that is not failed over.
        let oldNodes = snapshot.members.filter { $0.membership == .active }.map(\.id)
        let current = entry.placement.indexMap(over: oldNodes, numReplicas: replicas)
        let plan = RebalancePlanner.plan(current: current, oldNodes: oldNodes, newNodes: keep)
        rebalance.withLock { $0.movesTotal += plan.moves.count }
        logger.info("rebalance plan", metadata: ["bucket": "\(bucket)", "moves": "\(plan.moves.count)"])
        var index = 0
        while index < plan.moves.count {
            if rebalance.withLock({ $0.stopRequested }) { throw RebalanceError("rebalance stopped") }
            // Cut off from the majority, this node may be failed over by it: it publishes nothing more.
            if let problem = quorumProblem() { throw RebalanceError(problem) }
            let batch = Array(plan.moves[index..<min(index + Self.movesPerBatch, plan.moves.count)])
            do {
                try await executeBatch(bucket, batch)
            } catch {
                await revertBatch(bucket, batch)
                throw error
            }
            index += batch.count
            rebalance.withLock { $0.movesDone += batch.count }
        }
    }

    private func executeBatch(_ bucket: String, _ batch: [VBucketMove]) async throws {
        let began = ContinuousClock.now
        var marks: [String] = []
        func mark(_ phase: String) { marks.append("\(phase) \(ContinuousClock.now - began)") }
        defer { logger.info("rebalance batch", metadata: ["moves": "\(batch.count)", "phases": "\(marks)"]) }
        // 1. forward
        try await commit { _, placements in
            guard var p = placements[bucket] else { return }
            for move in batch { p.forward[move.vbucket.index] = move.to }
            placements[bucket] = p
        }
        mark("forward")
        // 2. catch up: each new copy persists the source's high seqno as sampled now (so that the takeover's own
        // wait, while the vBucket refuses writes, is for what came since).
        let members = Dictionary(uniqueKeysWithValues: registry.clusterSnapshot.members.map { ($0.id, $0.node) })
        let copying = batch.filter { $0.source != nil && !$0.newCopies.isEmpty }
        if !copying.isEmpty {
            let sources = Set(copying.compactMap(\.source))
            var targets: [Int: SeqNo] = [:]
            for source in sources {
                guard let node = members[source] else { throw RebalanceError("source \(source) is not a member") }
                let seqnos = try await fetchSeqnos(node, bucket: bucket)
                for move in copying where move.source == source {
                    targets[move.vbucket.index] = seqnos[move.vbucket.index].high
                }
            }
            try await waitForCopies(bucket, copying, members: members) { vb in targets[vb] ?? .zero }
        }
        mark("caught up")
        // 3. hand over: takeover for moves whose active changes (and had a copy to take over from), the second
        // chain for moves that keep their active and add copies.
        let takeovers = batch.filter { $0.changesActive && $0.source != nil && ($0.to.first ?? nil) != nil }
        let taken = Set(takeovers.map(\.vbucket))
        let seconds = copying.filter { !taken.contains($0.vbucket) }
        let handed = takeovers + seconds
        if !handed.isEmpty {
            try await commit { _, placements in
                guard var p = placements[bucket] else { return }
                for move in takeovers { p.takeover.insert(move.vbucket.index) }
                for move in seconds { p.dual.insert(move.vbucket.index) }
                placements[bucket] = p
            }
            var finals: [Int: SeqNo] = [:]
            for source in Set(handed.compactMap(\.source)) {
                guard let node = members[source] else { throw RebalanceError("source \(source) is not a member") }
                let seqnos = try await fetchSeqnos(node, bucket: bucket)
                for move in handed where move.source == source {
                    let s = seqnos[move.vbucket.index]
                    if taken.contains(move.vbucket) && s.state != "pending" {
                        throw RebalanceError("vb \(move.vbucket.index) on \(source) is \(s.state), not pending")
                    }
                    finals[move.vbucket.index] = s.high
                }
            }
            try await waitForCopies(bucket, handed, members: members) { vb in finals[vb] ?? .zero }
        }
        mark("taken over")
        // 4. switch
        try await commit { _, placements in
            guard var p = placements[bucket] else { return }
            for move in batch {
                p.chains[move.vbucket.index] = move.to
                p.forward.removeValue(forKey: move.vbucket.index)
                p.takeover.remove(move.vbucket.index)
                p.dual.remove(move.vbucket.index)
            }
            placements[bucket] = p
        }
    }

    private func revertBatch(_ bucket: String, _ batch: [VBucketMove]) async {
        do {
            try await commit { _, placements in
                guard var p = placements[bucket] else { return }
                for move in batch {
                    p.forward.removeValue(forKey: move.vbucket.index)
                    p.takeover.remove(move.vbucket.index)
                    p.dual.remove(move.vbucket.index)
                }
                placements[bucket] = p
            }
        } catch {
            logger.error("could not publish the revert of a failed batch", metadata: ["error": "\(error)"])
        }
    }

    /// Polls the nodes receiving copies (and a new active that held one already) until each has persisted
    /// `target(vb)` for every vBucket of `moves`.
    private func waitForCopies(
        _ bucket: String, _ moves: [VBucketMove], members: [NodeID: NodeInfo], target: (Int) -> SeqNo
    ) async throws {
        let deadline = ContinuousClock.now + Self.catchUpTimeout
        var waiting: [NodeID: [Int]] = [:]
        for move in moves {
            var nodes = move.newCopies
            if move.changesActive, let active = move.to.first ?? nil, !nodes.contains(active) { nodes.append(active) }
            for n in nodes { waiting[n, default: []].append(move.vbucket.index) }
        }
        while !waiting.isEmpty {
            if rebalance.withLock({ $0.stopRequested }) { throw RebalanceError("rebalance stopped") }
            if ContinuousClock.now > deadline { throw RebalanceError("copies did not catch up in time: \(waiting)") }
            for (node, vbs) in waiting {
                guard let info = members[node] else { throw RebalanceError("\(node) is not a member") }
                let seqnos = try await fetchSeqnos(info, bucket: bucket, persist: vbs)
                let left = vbs.filter { seqnos[$0].persisted < target($0) }
                waiting[node] = left.isEmpty ? nil : left
            }
            if !waiting.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    struct VBucketSeqnos: Sendable {
        var state: String
        var high: SeqNo
        var persisted: SeqNo
    }

    /// `GET /settee/internal/seqnos?bucket=` on `node`: every vBucket's state and seqnos there, one row per vBucket
    /// of the bucket (callers index them by vBucket); a reply with another row count throws, as a failed call does.
    /// The vBuckets in `persist` the node writes in its flusher's next express batch rather than at the end of its
    /// window, as kv_engine's seqno-persistence request wakes the flusher for the vBucket mover (a rebalance waits
    /// for persisted seqnos, ADR 0119).
    func fetchSeqnos(_ node: NodeInfo, bucket: String, timeout: Duration = .seconds(5), persist: [Int] = [])
        async throws -> [VBucketSeqnos]
    {
        guard let vBuckets = registry.bucketSettings(named: bucket)?.numVBuckets else {
            throw RebalanceError("no bucket \(bucket) here to ask seqnos of")
        }
        var path = "/settee/internal/seqnos?bucket=\(PercentEncoding.encode(bucket))"
        if !persist.isEmpty { path += "&persist=" + persist.map(String.init).joined(separator: ",") }
        let reply = try await peers.call(node, .GET, path, credentials: internalCredentials, timeout: timeout)
        guard reply.ok, let rows = SeqnoReport.parse(reply.body, vBuckets: vBuckets) else {
            throw RebalanceError("\(node.otpNode) returned \(reply.status) for seqnos of \(bucket)")
        }
        return rows.map { VBucketSeqnos(state: $0.state, high: SeqNo($0.high), persisted: SeqNo($0.persisted)) }
    }

    /// `/pools/default/rebalanceProgress`.
    func rebalanceProgressJSON() -> JSON {
        let r = rebalance.withLock { $0 }
        guard r.running else {
            if let e = r.lastError {
                return [
                    "status": "none",
                    "errorMessage": .string(
                        "Rebalance failed. See logs for detailed reason. You can try again. (\(e))"),
                ]
            }
            return ["status": "none"]
        }
        let progress = r.movesTotal == 0 ? 0 : Double(r.movesDone) / Double(r.movesTotal)
        var members: [(String, JSON)] = [("status", "running")]
        for n in r.nodes { members.append((n.rawValue, ["progress": .number(progress)])) }
        return .object(members)
    }
}

struct RebalanceError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
