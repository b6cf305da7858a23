import Foundation
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import Synchronization

/// Rebalance: plan with `RebalancePlanner`, then run each bucket's moves as a `RebalanceRun` (SetteeClusterMap), the
/// pure batch protocol (forward, catch up, hand over, switch; its file's header and ADR 0119 give the steps and why
/// they keep every acknowledged write) owned by this node's `ClusterBrain`. This file only performs the run's
/// directives and feeds back what came of them:
/// ```
///   feed(.rebalanceStarted(run)) ─▶ brain ─▶ .rebalance(directive)
///     commit(edit)              ─▶ `commit` (claim an epoch, apply `edit` to the bucket's placement, publish)
///                                   ─▶ committed / commitFailed(why)
///     requestSeqnos(node, vbs)  ─▶ GET /settee/internal/seqnos?bucket=…&persist=vbs (`fetchSeqnos`)
///                                   ─▶ seqnosAnswered(node, rows) / seqnosFailed(node, why)
///     wait(until)               ─▶ sleep on the brain's clock ─▶ tick
///     progress / finished / failed ─▶ the status `/pools/default/rebalanceProgress` reports
///   a stop request (operator or failover) ─▶ stopRequested
/// ```
/// Finished batches stay published; a failed batch is reverted by the run (its forward, takeover and dual entries
/// removed, so the old owners stay active).
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
        registry.audit.record(
            AuditCaller.event(
                .rebalanceStarted,
                [
                    ("known_nodes", .array(keep.map { .string($0.rawValue) })),
                    (
                        "ejected_nodes",
                        .array(ejected.sorted { $0.rawValue < $1.rawValue }.map { .string($0.rawValue) })
                    ),
                ]))
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
        var ended: [(String, JSON)] = [("completed", .bool(failure == nil)), ("seconds", .int(seconds))]
        if let failure { ended.append(("error", .string(failure))) }
        registry.audit.record(AuditCaller.event(.rebalanceEnded, ended))
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
        let doneBefore = rebalance.withLock { r -> Int in
            r.movesTotal += plan.moves.count
            return r.movesDone
        }
        logger.info("rebalance plan", metadata: ["bucket": "\(bucket)", "moves": "\(plan.moves.count)"])
        let run = RebalanceRun(
            bucket: bucket, moves: plan.moves, batchSize: Self.movesPerBatch, timing: Self.rebalanceTiming)
        var queue = Self.rebalanceDirectives(feed(.rebalanceStarted(run)))
        var stopFed = false
        var batch = BatchLog(began: ContinuousClock.now)
        while true {
            if !stopFed, rebalance.withLock({ $0.stopRequested }) {
                stopFed = true
                queue += Self.rebalanceDirectives(feed(.rebalance(.stopRequested)))
            }
            guard !queue.isEmpty else {
                // Every step of the run ends with a directive; none means its state was lost (a second run replaced
                // it in the brain), and nothing more of this one will be published.
                throw RebalanceError("the rebalance of \(bucket) lost its state")
            }
            let event: RebalanceRun.Event
            switch queue.removeFirst() {
            case .commit(let edit):
                event = await performCommit(edit, bucket: bucket, batch: &batch)
            case .requestSeqnos(let node, let persist):
                event = await performSeqnos(node, bucket: bucket, persist: persist)
            case .wait(let until):
                let left = until - brainNow
                if left > .zero { try? await Task.sleep(for: left) }
                event = .tick
            case .progress(let done, _):
                rebalance.withLock { $0.movesDone = doneBefore + done }
                continue
            case .finished:
                return
            case .failed(let reason):
                throw RebalanceError(reason)
            }
            queue += Self.rebalanceDirectives(feed(.rebalance(event)))
        }
    }

    /// The run's timing: polls `rebalancePoll` apart, each wait bounded by `catchUpTimeout`.
    static var rebalanceTiming: RebalanceRun.Timing {
        RebalanceRun.Timing(pollInterval: rebalancePoll, catchUpTimeout: catchUpTimeout)
    }

    /// The rebalance's directives among the brain's (only the run's own events lead to them).
    static func rebalanceDirectives(_ directives: [ClusterBrain.Directive]) -> [RebalanceRun.Directive] {
        directives.compactMap { d in
            if case .rebalance(let r) = d { return r }
            return nil
        }
    }

    /// When each step of the current batch was committed, for the log line a switch or a revert writes.
    struct BatchLog {
        var began: ContinuousClock.Instant
        var marks: [String] = []
    }

    /// Commits `edit` to `bucket`'s placement; the run's answer.
    private func performCommit(_ edit: RebalanceRun.Edit, bucket: String, batch: inout BatchLog) async
        -> RebalanceRun.Event
    {
        if case .forward(let chains) = edit {
            batch = BatchLog(began: ContinuousClock.now)
            batch.marks.append("\(chains.count) moves")
        }
        do {
            try await commit { _, placements in
                guard var p = placements[bucket] else { return }
                edit.apply(to: &p)
                placements[bucket] = p
            }
        } catch {
            if case .revert = edit {
                logger.error("could not publish the revert of a failed batch", metadata: ["error": "\(error)"])
            }
            return .commitFailed("\(error)")
        }
        batch.marks.append("\(edit.name) \(ContinuousClock.now - batch.began)")
        switch edit {
        case .switchChains, .revert: logger.info("rebalance batch", metadata: ["phases": "\(batch.marks)"])
        case .forward, .handOver: break
        }
        return .committed
    }

    /// Asks `node` for its seqnos of `bucket`; the run's answer.
    private func performSeqnos(_ node: NodeID, bucket: String, persist: [VBucketID]) async -> RebalanceRun.Event {
        guard let info = registry.clusterSnapshot.members.first(where: { $0.id == node })?.node else {
            return .seqnosFailed(from: node, "\(node) is not a member")
        }
        do {
            return .seqnosAnswered(
                from: node, try await fetchSeqnos(info, bucket: bucket, persist: persist.map(\.index)))
        } catch {
            return .seqnosFailed(from: node, "\(error)")
        }
    }

    /// `GET /settee/internal/seqnos?bucket=` on `node`: every vBucket's state and seqnos there, one row per vBucket
    /// of the bucket (callers index them by vBucket); a reply with another row count throws, as a failed call does.
    /// The vBuckets in `persist` the node writes in its flusher's next express batch rather than at the end of its
    /// window, as kv_engine's seqno-persistence request wakes the flusher for the vBucket mover (a rebalance waits
    /// for persisted seqnos, ADR 0119).
    func fetchSeqnos(_ node: NodeInfo, bucket: String, timeout: Duration = .seconds(5), persist: [Int] = [])
        async throws -> [SeqnoReport.Row]
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
        return rows
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

    /// `GET /pools/default/tasks` (Couchbase's "Getting Cluster Tasks"): an array whose first task is always the
    /// rebalance, `{"statusId", "type": "rebalance", "status": "notRunning", "statusIsStale": false,
    /// "masterRequestTimedOut": false}` when none runs (plus `errorMessage` after a failed one), and while one runs
    /// `"status": "running"`, `"subtype": "rebalance"`, `recommendedRefreshPeriod` (seconds), `progress` and each
    /// kept node's `perNode.<otpNode>.progress` as percentages (0-100, where `rebalanceProgress` gives fractions).
    /// Answered by the orchestrator (other nodes forward), as `rebalanceProgress` is.
    func tasksJSON() -> JSON {
        let r = rebalance.withLock { $0 }
        var task: [(String, JSON)] = [("statusId", .string(r.statusID)), ("type", "rebalance")]
        guard r.running else {
            task += [("status", "notRunning"), ("statusIsStale", false), ("masterRequestTimedOut", false)]
            if let e = r.lastError {
                task.append(
                    (
                        "errorMessage",
                        .string("Rebalance failed. See logs for detailed reason. You can try again. (\(e))")
                    ))
            }
            return .array([.object(task)] + logsCollectionTasks())
        }
        let percent = r.movesTotal == 0 ? 0 : 100 * Double(r.movesDone) / Double(r.movesTotal)
        let perNode = JSON.object(r.nodes.map { ($0.rawValue, ["progress": .number(percent)]) })
        task += [
            ("subtype", "rebalance"), ("recommendedRefreshPeriod", .number(0.25)), ("status", "running"),
            ("progress", .number(percent)), ("perNode", perNode),
        ]
        return .array([.object(task)] + logsCollectionTasks())
    }
}

struct RebalanceError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
