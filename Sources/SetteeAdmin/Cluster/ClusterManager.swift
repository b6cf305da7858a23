import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeStorage
import Synchronization

/// Membership, config distribution, rebalance and failover: the cluster manager every node runs.
///
/// Rules (docs/adr/0004-cluster-metadata-ordering.md):
/// 1. The orchestrator is the healthy active member whose name sorts lowest. Topology requests reaching any
///    other node are forwarded to it (`AdminAPI` does that), so one node orders every change.
/// 2. Every change is `NodeRegistry.updateCluster` (persisted, revision + 1) followed by `publish()`, a push of
///    the whole config document to every member. Nodes adopt only strictly newer documents.
/// 3. Every node polls every peer's revision each second (`heartbeat`); a newer one is fetched and adopted, so
///    a node that missed a push catches up, and a peer silent for `Limits`-many seconds is reported unhealthy.
/// 4. One topology change at a time: while a rebalance runs, others get 503 "Rebalance running."; a failover
///    stops the rebalance first (its unfinished moves are reverted, finished ones stay published).
public final class ClusterManager: Sendable {
    /// How long a peer may be silent before it is reported unhealthy.
    static let unhealthyAfter: Duration = .seconds(4)
    /// Moves executed together in one rebalance step.
    static let movesPerBatch = 64
    /// How long one batch may wait for its new copies to catch up.
    static let catchUpTimeout: Duration = .seconds(300)

    struct PeerState: Sendable {
        var lastSeen: ContinuousClock.Instant?
        var revision: MapRevision?
        /// The members this peer said it reaches, with its last heartbeat answer (its view, for quorum).
        var sees: Set<NodeID>? = nil
    }

    /// What `/pools/default/rebalanceProgress` reports.
    public struct RebalanceStatus: Sendable {
        public var running = false
        public var movesDone = 0
        public var movesTotal = 0
        public var nodes: [NodeID] = []
        public var lastError: String? = nil
        public var stopRequested = false
    }

    let registry: NodeRegistry
    let logger: Logger
    let peers: PeerClient
    private let http: HTTPClient
    private let health = Mutex<[NodeID: PeerState]>([:])
    let rebalance = Mutex(RebalanceStatus())
    /// Serialises topology changes on this node (add node, failover, recovery, bucket create/delete, the
    /// commit steps of a rebalance).
    let topologyLock = TopologyLock()
    let startedAt = ContinuousClock.now
    /// Auto-failover's judge: who is down by a majority of views, and for how long.
    let detector = Mutex(FailureDetector())
    /// Since when this node has not reached a majority (nil while it does): self-fencing's clock.
    let noQuorumSince = Mutex<ContinuousClock.Instant?>(nil)

    public init(registry: NodeRegistry, logger: Logger) {
        self.registry = registry
        self.logger = logger
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .seconds(2), read: .seconds(30))
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        self.peers = PeerClient(http: http)
    }

    public func shutdown() async {
        try? await http.shutdown()
    }

    var selfID: NodeID { registry.node.otpNode }
    var internalCredentials: (String, String) {
        let c = registry.internalCredentials
        return (c.username, c.password)
    }

    // MARK: Health and the orchestrator

    /// "healthy" or "unhealthy" as `/pools/default` reports a node: this node is unhealthy while it fences
    /// itself (`selfFenceRound`), a peer while it is not heard from.
    public func status(of node: NodeID) -> String {
        if node == selfID { return registry.fenceReason == nil ? "healthy" : "unhealthy" }
        return isHeard(node) ? "healthy" : "unhealthy"
    }

    /// Whether `node` answered a heartbeat recently (this node always counts as heard).
    func isHeard(_ node: NodeID) -> Bool {
        if node == selfID { return true }
        let now = ContinuousClock.now
        // A peer not heard from since this node started is presumed healthy for a grace period: a node that just
        // started (or joined) must not think the orchestrator is dead and act as one itself.
        guard let seen = health.withLock({ $0[node]?.lastSeen }) else {
            return now - startedAt < Self.unhealthyAfter
        }
        return now - seen < Self.unhealthyAfter
    }

    func healthLastSeen(_ node: NodeID) -> ContinuousClock.Instant? {
        health.withLock { $0[node]?.lastSeen }
    }

    /// The other members this node heard from recently (its view, reported with every heartbeat answer).
    public func reachablePeers() -> Set<NodeID> {
        Set(registry.clusterSnapshot.members.map(\.id).filter { $0 != selfID && isHeard($0) })
    }

    /// The views this node has: its own, and each peer's as that peer last reported it, for peers reached now
    /// (a peer this node cannot reach gives no view: its last one may be stale).
    func currentViews() -> [NodeID: Set<NodeID>] {
        let reachable = reachablePeers()
        var views: [NodeID: Set<NodeID>] = [selfID: reachable]
        health.withLock { h in
            for peer in reachable { if let sees = h[peer]?.sees { views[peer] = sees } }
        }
        return views
    }

    /// Why this node must not change the cluster now, or nil: it does not reach a strict majority of the active
    /// members (itself counted). On the minority side of a partition it might be failed over itself, and a change
    /// made there would race the majority's.
    public func quorumProblem() -> String? {
        let actives = registry.clusterSnapshot.members.filter { $0.membership == .active }.map(\.id)
        guard actives.count > 1 else { return nil }
        let reachable = reachablePeers()
        if FailureDetector.hasQuorum(members: actives, me: selfID, reachable: reachable) { return nil }
        let seen = actives.filter { $0 == selfID || reachable.contains($0) }.count
        return "No quorum: \(selfID) reaches \(seen) of \(actives.count) active cluster members, not a majority; "
            + "it makes no cluster changes until it does."
    }

    /// The node that orders topology changes now: the healthy active member whose name sorts lowest.
    public func orchestrator() -> ClusterMember? {
        let snapshot = registry.clusterSnapshot
        let actives = snapshot.members.filter { $0.membership == .active }
        let healthy = actives.filter { isHeard($0.id) }
        if let current = snapshot.orchestrator, let member = healthy.first(where: { $0.id == current }) {
            return member
        }
        // With no active member known to be alive (this node just joined and has not heard from them yet), the
        // lowest active member is still presumed to be the orchestrator: silence is not proof of death.
        return (healthy.isEmpty ? actives : healthy).min { $0.id.rawValue < $1.id.rawValue }
    }

    public var isOrchestrator: Bool { orchestrator()?.id == selfID || registry.clusterSnapshot.members.count <= 1 }

    // MARK: Config distribution

    /// Pushes the current config document to every member but this one (failed-over members included, so a
    /// node that comes back learns it is out). Returns the members that acknowledged it.
    @discardableResult
    func publish() async -> Set<NodeID> {
        guard let doc = try? registry.clusterDocument() else { return [] }
        let others = registry.clusterSnapshot.members.filter { $0.id != selfID }
        let creds = internalCredentials
        // Failed-over members are told too, but not waited for: they are usually dead, and a connect timeout
        // per publish would stall every step of a rebalance.
        for m in others where m.membership == .inactiveFailed {
            Task {
                _ = try? await self.peers.call(
                    m.node, .POST, "/settee/internal/config", body: doc, credentials: creds, timeout: .seconds(2))
            }
        }
        let targets = others.filter { $0.membership != .inactiveFailed }
        return await withTaskGroup(of: NodeID?.self) { group in
            for m in targets {
                group.addTask {
                    do {
                        let reply = try await self.peers.call(
                            m.node, .POST, "/settee/internal/config", body: doc, credentials: creds)
                        return reply.ok ? m.id : nil
                    } catch {
                        return nil
                    }
                }
            }
            var acked: Set<NodeID> = [selfID]
            for await id in group { if let id { acked.insert(id) } }
            return acked
        }
    }

    /// Runs the heartbeat loop until the task is cancelled.
    public func run() async {
        while !Task.isCancelled {
            await heartbeat()
            selfFenceRound()
            await autoFailoverRound()
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Self-fencing, with at least three active members: a node that has not reached a majority for about the failover
    /// timeout may be failed over by the majority, automatically or by an operator (who cannot tell this node, cut
    /// off as it is, and whose clients with an old map would keep writing here), so it holds its active vBuckets back
    /// (`NodeRegistry.setFence`) until it reaches a majority again, by which time it has adopted any newer config
    /// (`heartbeat` pulls it first). Two members never fence: neither side can fail the other over automatically.
    func selfFenceRound() {
        let settings = registry.autoFailover
        let actives = registry.clusterSnapshot.members.filter { $0.membership == .active }
        guard actives.count >= 3, actives.contains(where: { $0.id == selfID }),
            let problem = quorumProblem()
        else {
            noQuorumSince.withLock { $0 = nil }
            // Lifted only once no peer is known to hold a newer config (it was pulled this round, or not yet).
            let mine = registry.clusterSnapshot.revision
            let behind = health.withLock { h in h.values.contains { ($0.revision.map { $0 > mine }) ?? false } }
            if registry.fenceReason != nil, !behind { registry.setFence(nil) }
            return
        }
        let now = ContinuousClock.now
        let since = noQuorumSince.withLock { s -> ContinuousClock.Instant in
            if s == nil { s = now }
            return s ?? now
        }
        // Two seconds early: the majority's clock for this node starts no sooner (peers unheard for as long, then
        // their views travel one heartbeat), so the fence is up before the earliest failover of this node.
        if now - since >= .seconds(max(1, settings.timeout - 2)), registry.fenceReason == nil {
            registry.setFence(
                "\(problem) Active vBuckets are held back (NOT_MY_VBUCKET) as the failover timeout "
                    + "(\(settings.timeout) s) nears: the majority may fail this node over.")
        }
    }

    /// One round: ask every peer for its revision; adopt a newer config from whoever has one.
    func heartbeat() async {
        let snapshot = registry.clusterSnapshot
        let creds = internalCredentials
        let targets = snapshot.members.filter { $0.id != selfID }
        let results = await withTaskGroup(of: (NodeID, MapRevision?, String?, Set<NodeID>?, NodeID?).self) { group in
            for m in targets {
                group.addTask {
                    guard
                        let reply = try? await self.peers.call(
                            m.node, .GET, "/settee/internal/heartbeat", credentials: creds, timeout: .seconds(2)),
                        reply.ok,
                        let json = try? JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any],
                        let epoch = (json["epoch"] as? NSNumber)?.int64Value,
                        let rev = (json["rev"] as? NSNumber)?.int64Value
                    else { return (m.id, nil, nil, nil, nil) }
                    let sees = (json["sees"] as? [String]).map { Set($0.map { NodeID($0) }) }
                    let orchestrator = (json["orchestrator"] as? String).map { NodeID($0) }
                    return (m.id, MapRevision(epoch: epoch, rev: rev), json["cluster"] as? String, sees, orchestrator)
                }
            }
            var out: [(NodeID, MapRevision?, String?, Set<NodeID>?, NodeID?)] = []
            for await r in group { out.append(r) }
            return out
        }
        let now = ContinuousClock.now
        var newer: [(NodeID, MapRevision)] = []
        health.withLock { h in
            for (id, revision, cluster, sees, orchestrator) in results {
                guard let revision, cluster == snapshot.identity.uuid else { continue }
                h[id] = PeerState(lastSeen: now, revision: revision, sees: sees)
                if revision > snapshot.revision { newer.append((id, revision)) }
                // Same revision made by another orchestrator: the lower name's change wins (`winsTie`), pull it.
                if revision == snapshot.revision, let theirs = orchestrator, let mine = snapshot.orchestrator,
                    theirs.rawValue < mine.rawValue
                {
                    newer.append((id, revision))
                }
            }
        }
        guard let (source, _) = newer.max(by: { $0.1 < $1.1 }),
            let member = snapshot.members.first(where: { $0.id == source })
        else { return }
        await pull(from: member.node)
    }

    /// Fetches a peer's config document and adopts it if newer.
    func pull(from node: NodeInfo) async {
        guard
            let reply = try? await peers.call(node, .GET, "/settee/internal/config", credentials: internalCredentials),
            reply.ok
        else { return }
        let registry = self.registry
        let body = reply.body
        do {
            try await Blocking.run { _ = try registry.adoptClusterDocument(body) }
        } catch {
            logger.warning(
                "could not adopt a peer's config", metadata: ["peer": "\(node.otpNode)", "error": "\(error)"])
        }
    }

    // MARK: Add node

    /// Couchbase's `/controller/addNode`, on the orchestrator. Returns the new member's name, or a message
    /// for a 400 reply.
    func addNode(hostname: String, username: String, password: String) async -> Result<NodeID, ClusterRequestError> {
        guard let (host, port) = Self.parseHostPort(hostname) else {
            return .failure(.badRequest(["Invalid hostname specified: \(hostname)"]))
        }
        return await topologyLock.withLock { () async -> Result<NodeID, ClusterRequestError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            let creds = (username, password)
            let info: NodeInfo
            do {
                let reply = try await self.peers.call(
                    host: host, port: port, .GET, "/settee/internal/node", credentials: creds)
                if reply.status == 401 {
                    return .failure(
                        .badRequest(["Prepare join failed. Authentication failed. Verify username and password."]))
                }
                guard reply.ok, let decoded = try? JSONDecoder().decode(NodeInfo.self, from: Data(reply.body)) else {
                    return .failure(.badRequest(["Prepare join failed. \(hostname) is not a Settee node."]))
                }
                info = decoded
            } catch {
                return .failure(.badRequest(["Prepare join failed. Could not connect to \(hostname): \(error)"]))
            }
            if self.registry.clusterSnapshot.members.contains(where: {
                $0.id == info.otpNode || $0.node.nodeUUID == info.nodeUUID
            }) {
                return .failure(.badRequest(["Prepare join failed. Node is already part of cluster."]))
            }
            let registry = self.registry
            do {
                _ = try await Blocking.run {
                    try registry.updateCluster { members, _ in
                        members.append(ClusterMember(node: info, membership: .inactiveAdded))
                    }
                }
            } catch {
                return .failure(.internalError("\(error)"))
            }
            // The new node takes the cluster's config (identity, credentials, buckets) from the join call.
            var joined = false
            var failure = ""
            if let doc = try? registry.clusterDocument() {
                do {
                    let reply = try await self.peers.call(
                        host: host, port: port, .POST, "/settee/internal/join", body: doc, credentials: creds,
                        contentType: "application/json", timeout: .seconds(60))
                    joined = reply.ok
                    failure = String(decoding: reply.body, as: UTF8.self)
                } catch {
                    failure = "\(error)"
                }
            }
            guard joined else {
                _ = try? await Blocking.run {
                    try registry.updateCluster { members, _ in members.removeAll { $0.id == info.otpNode } }
                }
                await self.publish()
                return .failure(.badRequest(["Prepare join failed. \(failure)"]))
            }
            await self.publish()
            self.health.withLock { $0[info.otpNode] = PeerState(lastSeen: .now, revision: nil) }
            self.logger.notice("node added", metadata: ["node": "\(info.otpNode)"])
            return .success(info.otpNode)
        }
    }

    static func parseHostPort(_ text: String) -> (String, Int)? {
        var s = text
        for prefix in ["http://", "https://"] where s.hasPrefix(prefix) { s.removeFirst(prefix.count) }
        while s.hasSuffix("/") { s.removeLast() }
        guard !s.isEmpty else { return nil }
        if let colon = s.lastIndex(of: ":"), !s.hasSuffix("]") {
            guard let port = Int(s[s.index(after: colon)...]), (1...65535).contains(port) else { return nil }
            return (String(s[..<colon]), port)
        }
        return (s, 8091)
    }

    // MARK: Failover and recovery

    /// Hard failover of `node`: per vBucket it was active for, the surviving copy holding the most is promoted
    /// (`Failover.decide`, fed the high seqnos every surviving member reports for every bucket), and the config is
    /// published at a new epoch. Refused as unsafe (400, nothing changes) when some vBucket has no surviving copy
    /// that can be shown to hold every majority-acknowledged write, unless `allowUnsafe` (an operator's explicit
    /// choice; auto-failover never passes it).
    func failOver(_ node: NodeID, allowUnsafe: Bool = false) async -> Result<Void, ClusterRequestError> {
        // A failover stops a running rebalance first.
        rebalance.withLock { $0.stopRequested = true }
        while rebalance.withLock({ $0.running }) { try? await Task.sleep(for: .milliseconds(50)) }
        return await topologyLock.withLock { () async -> Result<Void, ClusterRequestError> in
            let snapshot = self.registry.clusterSnapshot
            guard let member = snapshot.members.first(where: { $0.id == node }), member.membership == .active else {
                return .failure(.badRequest(["Unknown server given: \(node)"]))
            }
            let actives = snapshot.members.filter { $0.membership == .active }
            guard actives.count > 1 else {
                return .failure(.badRequest(["Failover would leave no active data nodes."]))
            }
            // Without a majority this node may be the one cut off (and failed over by the others): only an operator's
            // explicit allowUnsafe goes ahead. Two members can never keep a majority after losing one, so there the
            // operator's request is the decision, as before.
            if !allowUnsafe, actives.count > 2, let problem = self.quorumProblem() {
                return .failure(.noQuorum(problem))
            }
            let survivors = actives.filter { $0.id != node }
            var reports: [String: [NodeID: [UInt64]]] = [:]
            for (settings, _) in snapshot.buckets {
                reports[settings.name] = await self.survivorSeqnos(bucket: settings.name, survivors: survivors)
            }
            let seqnoReports = reports
            let names = actives.map(\.id)
            var unsafe: [String] = []
            for (settings, placement) in snapshot.buckets {
                let decision = Self.failoverDecision(
                    placement, names: names, failed: node, reports: reports[settings.name] ?? [:])
                if let decision, !decision.isSafe {
                    let sample = decision.unsafe.prefix(8).map { "\($0.index)" }.joined(separator: ", ")
                    unsafe.append("\(settings.name): \(decision.unsafe.count) vBuckets (\(sample))")
                }
            }
            if !unsafe.isEmpty && !allowUnsafe {
                self.logger.warning(
                    "failover refused as unsafe", metadata: ["node": "\(node)", "vbuckets": "\(unsafe)"])
                return .failure(
                    .badRequest([
                        "Failover of \(node) is unsafe: no surviving copy can be shown to hold every "
                            + "majority-acknowledged write of \(unsafe.joined(separator: "; ")). Too many copies are "
                            + "lost or did not report their seqnos. Pass allowUnsafe=true to fail over anyway."
                    ]))
            }
            let registry = self.registry
            do {
                _ = try await Blocking.run {
                    try registry.updateCluster(newEpoch: true) { members, placements in
                        let names = members.filter { $0.membership == .active }.map(\.id)
                        for (bucket, placement) in placements {
                            guard
                                let decision = Self.failoverDecision(
                                    placement, names: names, failed: node, reports: seqnoReports[bucket] ?? [:])
                            else { continue }
                            // The placement moved under us (a config adopted meanwhile): decide again, same rule.
                            if !decision.isSafe && !allowUnsafe { throw FailoverRefused(bucket: bucket) }
                            placements[bucket] = BucketPlacement.from(decision.map, nodes: names)
                        }
                        for i in members.indices where members[i].id == node {
                            members[i].membership = .inactiveFailed
                            members[i].recoveryType = nil
                        }
                    }
                }
            } catch let refused as FailoverRefused {
                return .failure(.badRequest(["Failover of \(node) is unsafe for bucket \(refused.bucket)."]))
            } catch {
                return .failure(.internalError("\(error)"))
            }
            await self.publish()
            self.logger.notice(
                "node failed over", metadata: ["node": "\(node)", "unsafe": "\(unsafe.isEmpty ? "no" : "\(unsafe)")"])
            return .success(())
        }
    }

    /// The failover of `failed` for one bucket's placement over the active members `names`, or nil when `failed`
    /// is not among them. `reports` are the high seqnos each survivor gave (absent = did not answer).
    static func failoverDecision(
        _ placement: BucketPlacement, names: [NodeID], failed: NodeID, reports: [NodeID: [UInt64]]
    ) -> FailoverDecision? {
        guard let index = names.firstIndex(of: failed) else { return nil }
        let replicas = placement.chains.first.map { $0.count - 1 } ?? 0
        let map = placement.indexMap(over: names, numReplicas: replicas)
        var byIndex: [Int: [UInt64]] = [:]
        for (i, name) in names.enumerated() { if let row = reports[name] { byIndex[i] = row } }
        return Failover.decide(map: map, failed: [index], nodeCount: names.count, seqnos: CopySeqnos(byIndex))
    }

    /// Every survivor's high seqno per vBucket of `bucket`, asked in parallel; a survivor that does not answer in
    /// time is left out (its copies then count as lost when the failover's safety is judged).
    func survivorSeqnos(bucket: String, survivors: [ClusterMember]) async -> [NodeID: [UInt64]] {
        await withTaskGroup(of: (NodeID, [UInt64]?).self) { group in
            for m in survivors {
                group.addTask {
                    let rows = try? await self.fetchSeqnos(m.node, bucket: bucket, timeout: .seconds(3))
                    return (m.id, rows?.map(\.high.rawValue))
                }
            }
            var out: [NodeID: [UInt64]] = [:]
            for await (id, row) in group { if let row { out[id] = row } }
            return out
        }
    }

    /// `/controller/setRecoveryType`: marks a failed-over node to come back (full recovery: its data is
    /// dropped and rebuilt by the next rebalance; "delta" is accepted and treated as full).
    func setRecoveryType(_ node: NodeID, _ type: String) async -> Result<Void, ClusterRequestError> {
        guard type == "full" || type == "delta" else {
            return .failure(.fieldErrors([("recoveryType", "Recovery type must be either 'delta' or 'full'")]))
        }
        return await topologyLock.withLock { () async -> Result<Void, ClusterRequestError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            guard
                self.registry.clusterSnapshot.members.contains(where: {
                    $0.id == node && $0.membership == .inactiveFailed
                })
            else {
                return .failure(
                    .fieldErrors([("otpNode", "invalid node name or node can't be used for delta recovery")]))
            }
            let registry = self.registry
            do {
                _ = try await Blocking.run {
                    try registry.updateCluster { members, _ in
                        for i in members.indices where members[i].id == node { members[i].recoveryType = type }
                    }
                }
            } catch {
                return .failure(.internalError("\(error)"))
            }
            await self.publish()
            return .success(())
        }
    }
}

/// A failover found unsafe when its placement was decided again inside the config update.
struct FailoverRefused: Error {
    var bucket: String
}

/// Errors of cluster requests, rendered by the routes in Couchbase's shapes.
enum ClusterRequestError: Error {
    case badRequest([String])
    case fieldErrors([(String, String)])
    case mismatch
    case emptyKnownNodes
    case rebalanceRunning
    /// This node does not reach a majority of the cluster: 503 with the reason.
    case noQuorum(String)
    case internalError(String)
}

/// An async mutual-exclusion lock for topology changes (held across awaits, unlike `Mutex`).
final class TopologyLock: Sendable {
    private let state = Mutex<(held: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func withLock<T: Sendable>(_ body: @Sendable () async -> T) async -> T {
        await acquire()
        let result = await body()
        release()
        return result
    }

    private func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.held {
                    s.waiters.append(c)
                    return false
                }
                s.held = true
                return true
            }
            if resumeNow { c.resume() }
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}
