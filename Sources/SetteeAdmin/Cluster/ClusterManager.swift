import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import Synchronization

/// Membership, config distribution, rebalance and failover: the cluster manager every node runs.
///
/// Rules (docs/adr/0004-cluster-metadata-ordering.md):
/// 1. The orchestrator is the healthy active member whose name sorts lowest. Topology requests reaching any
///    other node are forwarded to it (`AdminAPI` does that), so one node orders every change.
/// 2. Every change claims a new epoch from a majority (`claimedUpdate`, ADR 0034; a failover through the brain,
///    ADR 0023), is committed with `NodeRegistry.updateCluster` (persisted, revision + 1) and pushed whole to every
///    member (`publish()`). Nodes adopt only strictly newer documents, never one below an epoch they promised: the
///    brain decides adoptions and promises, the registry stores what it decided (`ClusterManager+Store.swift`,
///    ADR 0130).
/// 3. Every node polls every peer's revision each second (`heartbeat`); a newer one is fetched and adopted, so
///    a node that missed a push catches up, and a peer silent for `unhealthyAfter` is reported unhealthy.
///    Health, quorum, the orchestrator, self-fencing, epoch claims and failovers are `ClusterBrain`'s decisions
///    (pure, SetteeClusterMap); `ClusterManager+Brain.swift` interprets them (ADR 0023).
/// 4. One topology change at a time: while a rebalance runs, others get 503 "Rebalance running."; a failover
///    stops the rebalance first (its unfinished moves are reverted, finished ones stay published).
public final class ClusterManager: Sendable {
    /// How long a peer may be silent before it is reported unhealthy.
    static let unhealthyAfter: Duration = .seconds(4)
    /// Pause between heartbeat rounds.
    static let heartbeatInterval: Duration = .seconds(1)
    /// How long one heartbeat call may take.
    static let heartbeatCallTimeout: Duration = .seconds(2)
    /// The heartbeat loop's shortest sleep: how often it looks for a peer whose next call is due.
    static let heartbeatPoll: Duration = .milliseconds(50)
    /// How often the brain's tick runs (fence and failover timing are at most this late).
    static let tickInterval: Duration = .milliseconds(250)
    /// Moves executed together in one rebalance step.
    static let movesPerBatch = 64
    /// How long one batch may wait for its new copies to catch up.
    static let catchUpTimeout: Duration = .seconds(300)
    /// Pause between two polls of a rebalance batch's copies.
    static let rebalancePoll: Duration = .milliseconds(20)
    /// How much longer than a promise round a change waits for the brain's verdict on its epoch claim.
    static let changeClaimMargin: Duration = .seconds(5)
    /// How long an operator's config change waits for another claim (a failover, a rebalance step, another change)
    /// to finish before it is refused (ADR 0039).
    static let changeClaimBusyWait: Duration = .seconds(10)
    /// Pause between two attempts of a change whose claim found another one under way.
    static let changeClaimBusyRetry: Duration = .milliseconds(100)

    /// What `/pools/default/rebalanceProgress` and `/pools/default/tasks` report.
    public struct RebalanceStatus: Sendable {
        public var running = false
        public var movesDone = 0
        public var movesTotal = 0
        public var nodes: [NodeID] = []
        public var lastError: String? = nil
        public var stopRequested = false
        /// The task's `statusId` in `/pools/default/tasks`: 32 hex digits, new for each rebalance started.
        public var statusID = RandomID.hex128()
    }

    let registry: NodeRegistry
    let logger: Logger
    let peers: PeerClient
    private let http: HTTPClient
    let rebalance = Mutex(RebalanceStatus())
    /// The cluster's last logs collection started on this node (`/controller/startLogsCollection`, ADR 0148).
    let logsCollection = Mutex(LogsCollectionStatus())
    /// Serialises topology changes on this node (add node, failover, recovery, bucket create/delete, the
    /// commit steps of a rebalance).
    let topologyLock = TopologyLock()
    let startedAt: ContinuousClock.Instant
    /// The cluster's decisions (`ClusterBrain`), fed and interpreted by `ClusterManager+Brain.swift`.
    let brain: Mutex<ClusterBrain>
    /// Held while a brain decision and its persistence run together, and while this node's own writes of the cluster
    /// document commit and load into the brain (`ClusterManager+Store.swift`): taken before `brain`, never inside it.
    let storeOrder = Mutex<Void>(())
    /// Failover requests waiting for the brain's verdict, by victim.
    let failoverWaiters = Mutex<[NodeID: [CheckedContinuation<Result<Void, ClusterRequestError>, Never>]]>([:])
    /// Config changes waiting for the brain's verdict on their epoch claim, by claim id
    /// (`ClusterManager+ChangeClaim.swift`).
    let changeWaiters = Mutex<[UInt64: CheckedContinuation<Result<Int64, ClusterBrain.Refusal>, Never>]>([:])
    /// The last change claim id handed out.
    let changeIDs = Mutex<UInt64>(0)
    /// Which peer gets its next heartbeat when (`runHeartbeats`).
    let heartbeats = Mutex(HeartbeatSchedule(interval: ClusterManager.heartbeatInterval))
    /// When held vBuckets were last logged as still waiting (`ClusterManager+HeldVBuckets.swift`).
    let heldLogAt = Mutex<ContinuousClock.Instant?>(nil)

    public init(registry: NodeRegistry, logger: Logger) {
        self.registry = registry
        self.logger = logger
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .seconds(2), read: .seconds(30))
        // A refused connection fails the call at once (AsyncHTTPClient would retry until the call's deadline): a
        // peer whose process is gone is then known gone within a heartbeat (`isRefused`), instead of costing every
        // call to it its whole timeout. Every caller retries on its own schedule (heartbeats, pulls, rounds).
        config.connectionPool.retryConnectionEstablishment = false
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        self.peers = PeerClient(http: http, authorities: ClusterAuthorities { [registry] in registry.trustedCAs })
        let start = ContinuousClock.now
        self.startedAt = start
        let snapshot = registry.clusterSnapshot
        let settings = registry.autoFailover
        let brain = ClusterBrain(
            me: registry.node.otpNode, config: Self.brainConfig(snapshot), promise: registry.epochPromise,
            timing: Self.brainTiming(settings), autoFailover: settings.enabled && settings.count < settings.maxCount,
            now: .zero)
        self.brain = Mutex(brain)
        // With three or more active members a node starts with its actives held back: it may have been failed
        // over while it was down, and serves only once it reached a majority holding no newer config.
        if let reason = brain.fence { registry.setFence(reason) }
        // Before the KV port serves: no lease until a majority answered (ADR 0124).
        applyLease(brain.lease)
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
    /// itself, a peer while it is not heard from.
    public func status(of node: NodeID) -> String {
        if node == selfID { return registry.fenceReason == nil ? "healthy" : "unhealthy" }
        return isHeard(node) ? "healthy" : "unhealthy"
    }

    /// Whether `node` answered (or sent) a heartbeat recently; this node always counts as heard. A peer not heard
    /// from since this node started is presumed healthy for a grace period: a node that just started must not
    /// take the orchestrator for dead and act as one.
    func isHeard(_ node: NodeID) -> Bool {
        if node == selfID { return true }
        if brain.withLock({ $0.reachable.contains(node) }) { return true }
        return brainNow < Self.unhealthyAfter && !brain.withLock { $0.hasContact(node) }
    }

    /// The other members this node heard from recently (its view, reported with every heartbeat answer).
    public func reachablePeers() -> Set<NodeID> {
        brain.withLock { $0.reachable }
    }

    /// A peer's heartbeat reached this node: contact, seen from this side.
    public func heartbeatReceived(from node: NodeID) {
        feed(.heartbeatReceived(from: node))
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

    /// The node that orders topology changes now (`ClusterBrain.orchestrator`): the member that published the
    /// config while it is heard, else the heard active member whose name sorts lowest.
    public func orchestrator() -> ClusterMember? {
        let snapshot = registry.clusterSnapshot
        guard let id = brain.withLock({ $0.orchestrator }) else { return nil }
        return snapshot.members.first { $0.id == id }
    }

    public var isOrchestrator: Bool { orchestrator()?.id == selfID || registry.clusterSnapshot.members.count <= 1 }

    // MARK: Config distribution

    /// Pushes the current config document to every member but this one (failed-over members included, so a
    /// node that comes back learns it is out). Returns the members that acknowledged it.
    @discardableResult
    func publish() async -> Set<NodeID> {
        await claimOutstandingEpoch()
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

    /// Runs the heartbeat loop, and the brain's tick loop beside it (a heartbeat round may take a whole call
    /// timeout; the fence must not wait for it), until the task is cancelled.
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.runTicks() }
            group.addTask { await self.runHeldRounds() }
            group.addTask { await self.runHeartbeats() }
        }
    }

    /// Fetches a peer's config document and offers it to the brain (`offerDocument`), which adopts it if newer.
    func pull(from node: NodeInfo) async {
        guard
            let reply = try? await peers.call(node, .GET, "/settee/internal/config", credentials: internalCredentials),
            reply.ok
        else { return }
        let body = reply.body
        do {
            if try await BlockingPool.run({ try self.offerDocument(body) }) { await tickOnce() }
        } catch {
            logger.warning(
                "could not adopt a peer's config", metadata: ["peer": "\(node.otpNode)", "error": "\(error)"])
        }
    }

    // MARK: Add node

    /// Whether the cluster document holds trusted CAs that still load (`addNode` over HTTPS without a fingerprint).
    var trustsCAs: Bool { peers.trust.authorities?.roots() != nil }

    /// Couchbase's `/controller/addNode`, on the orchestrator. Returns the new member's name, or a message
    /// for a 400 reply. Every call to the target goes to `target.endpoint` (pinned TLS, or plain HTTP where
    /// `AddNodeTarget.parse` allowed it); a target `viaAuthorities` is first checked against the trusted CAs in a
    /// handshake that sends nothing, then pinned to the leaf it showed (ADR 0047).
    func addNode(
        _ requested: AddNodeTarget, username: String, password: String
    ) async -> Result<NodeID, ClusterRequestError> {
        let hostname = requested.hostname
        if rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
        // The CA handshake (up to 5 s against a target that never answers) runs before the topology lock, so it
        // holds up no other topology change; under the lock the CAs it was checked against must still be the
        // cluster's (fenced like the rest: rebalance and membership are checked there too).
        let checkedAgainst = peers.trust.authorities?.roots()?.key
        let target: AddNodeTarget
        switch await pinnedThroughAuthorities(requested) {
        case .success(let pinned): target = pinned
        case .failure(let refused): return .failure(refused)
        }
        return await topologyLock.withLock { () async -> Result<NodeID, ClusterRequestError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            if requested.viaAuthorities && self.peers.trust.authorities?.roots()?.key != checkedAgainst {
                return .failure(
                    .badRequest([
                        "Prepare join failed. The cluster's trusted CAs changed while \(hostname) was checked; retry."
                    ]))
            }
            let creds = (username, password)
            let info: NodeInfo
            do {
                let reply = try await self.peers.call(
                    target.endpoint, .GET, "/settee/internal/node", credentials: creds)
                if reply.status == 401 {
                    return .failure(
                        .badRequest(["Prepare join failed. Authentication failed. Verify username and password."]))
                }
                guard reply.ok, let decoded = try? JSONDecoder().decode(NodeInfo.self, from: Data(reply.body)) else {
                    return .failure(.badRequest(["Prepare join failed. \(hostname) is not a Settee node."]))
                }
                // Pinned: the node must advertise the certificate it presented, or later calls would pin another.
                if let pin = target.endpoint.tlsFingerprint, decoded.tlsFingerprint?.lowercased() != pin {
                    return .failure(
                        .badRequest(["Prepare join failed. \(hostname) advertises another certificate than \(pin)."]))
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
                try await self.claimedUpdate { members, _ in
                    members.append(ClusterMember(node: info, membership: .inactiveAdded))
                }
            } catch let refused as ClusterRequestError {
                return .failure(refused)
            } catch {
                return .failure(.internalError("\(error)"))
            }
            // The new node takes the cluster's config (identity, credentials, buckets) from the join call.
            var joined = false
            var failure = ""
            if let doc = try? registry.clusterDocument() {
                do {
                    let reply = try await self.peers.call(
                        target.endpoint, .POST, "/settee/internal/join", body: doc, credentials: creds,
                        contentType: "application/json", timeout: .seconds(60))
                    joined = reply.ok
                    failure = String(decoding: reply.body, as: UTF8.self)
                } catch {
                    failure = "\(error)"
                }
            }
            guard joined else {
                _ = try? await self.claimedUpdate { members, _ in members.removeAll { $0.id == info.otpNode } }
                await self.publish()
                return .failure(.badRequest(["Prepare join failed. \(failure)"]))
            }
            await self.publish()
            self.heartbeatReceived(from: info.otpNode)
            self.logger.notice("node added", metadata: ["node": "\(info.otpNode)"])
            return .success(info.otpNode)
        }
    }

    /// `target` as is when it names its pin; for one `viaAuthorities`, pinned to the leaf it shows once the
    /// cluster's trusted CAs vouched for that leaf at the address dialled (nothing is sent before; another CA's
    /// leaf, or one without the address among its names, is refused).
    func pinnedThroughAuthorities(_ target: AddNodeTarget) async -> Result<AddNodeTarget, ClusterRequestError> {
        guard target.viaAuthorities else { return .success(target) }
        let host = target.endpoint.host
        guard let authorities = peers.trust.authorities, authorities.roots() != nil else {
            return .failure(.badRequest([AddNodeTarget.Refusal.httpsNeedsFingerprint(target.hostname).message]))
        }
        do {
            let chain = try await CertificatePin.fetchChain(
                host: host, port: target.endpoint.port, trustedBy: authorities, timeout: .seconds(5))
            guard let leaf = try chain.first?.toDERBytes() else {
                return .failure(.badRequest(["Prepare join failed. \(target.hostname) presented no certificate."]))
            }
            var pinned = target
            pinned.endpoint.tlsFingerprint = SelfSignedIdentity.fingerprint(ofDER: leaf)
            pinned.viaAuthorities = false
            return .success(pinned)
        } catch let untrusted as ClusterAuthorities.Untrusted {
            peers.counts.countRefusal()
            return .failure(
                .badRequest([
                    "Prepare join failed. \(target.hostname) is not vouched for by the cluster's trusted CAs "
                        + "(\(untrusted)); pass tlsFingerprint=sha256:<hex> to pin its certificate instead."
                ]))
        } catch {
            return .failure(
                .badRequest(["Prepare join failed. Could not connect to \(target.hostname): \(error)"]))
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
            do {
                try await self.claimedUpdate { members, _ in
                    for i in members.indices where members[i].id == node { members[i].recoveryType = type }
                }
            } catch let refused as ClusterRequestError {
                return .failure(refused)
            } catch {
                return .failure(.internalError("\(error)"))
            }
            await self.publish()
            return .success(())
        }
    }
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
