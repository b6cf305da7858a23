import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeDiagnostics
import SetteeStorage
import Synchronization

/// The registry's cluster side: members, bucket placements, the config document nodes exchange, and the
/// vBucket states a placement implies for this node. See docs/adr/0004-cluster-metadata-ordering.md.
///
/// The cluster config is the part of `NodeMetadata` every node holds identically: identity, admin
/// credential, internal secret, members, buckets with their placements, and its revision
/// `(revEpoch, lastRev)`. The registry stores and loads it; it decides nothing about it: which peer document this
/// node adopts and which epoch it promises are `ClusterBrain`'s decisions (`EpochRules`), and the cluster manager
/// stores what the brain decided (`storeClusterDocument`, `storePromise`), in the order it decided (ADR 0130).
extension NodeRegistry {
    /// What this node holds of the cluster config.
    public struct ClusterSnapshot: Sendable {
        public var revision: MapRevision
        public var identity: ClusterIdentity
        public var members: [ClusterMember]
        public var buckets: [(settings: BucketSettings, placement: BucketPlacement)]
        /// The member that made the last topology change.
        public var orchestrator: NodeID?
    }

    /// The cluster config this node holds.
    public var clusterSnapshot: ClusterSnapshot {
        let node = self.node
        return snapshots.read { Self.snapshot($0, node: node) }
    }

    /// `m`'s cluster config; a bucket with no placement yet gets the initial one over the active members.
    static func snapshot(_ m: NodeMetadata, node: NodeInfo) -> ClusterSnapshot {
        ClusterSnapshot(
            revision: MapRevision(epoch: m.revEpoch, rev: m.lastRev), identity: m.cluster,
            members: m.members ?? [],
            buckets: m.buckets.map { b in
                (
                    b.settings,
                    b.placement
                        ?? .initial(
                            numVBuckets: b.settings.numVBuckets, numReplicas: b.settings.replicaNumber,
                            nodes: Self.activeMemberNames(m, node: node))
                )
            }, orchestrator: m.orchestrator)
    }

    /// The cluster config document (JSON). It carries the admin credential's salted keys and the internal
    /// secret: serve it only to authenticated admins/nodes.
    public func clusterDocument() throws -> [UInt8] {
        let m = snapshots.metadata
        return Array(try JSONEncoder().encode(m))
    }

    /// The revision of a cluster document, without adopting it.
    public static func documentRevision(_ bytes: [UInt8]) throws -> MapRevision {
        let m = try decodeDocument(bytes)
        return MapRevision(epoch: m.revEpoch, rev: m.lastRev)
    }

    static func decodeDocument(_ bytes: [UInt8]) throws(RegistryError) -> NodeMetadata {
        do { return try JSONDecoder().decode(NodeMetadata.self, from: Data(bytes)) } catch {
            throw .corruptMetadata("cluster document does not decode: \(error)")
        }
    }

    /// A cluster document decoded and checked once (`checkedDocument(_:)`): the snapshot the brain is offered, and
    /// the metadata `storeClusterDocument(_:promise:join:)` stores if the brain adopts it. An adoption decodes the
    /// document's bytes once (JSON of every bucket's placement: milliseconds per document, paid by every member for
    /// every config a rebalance publishes, three per batch; ADR 0139's amendment).
    public struct CheckedDocument: Sendable {
        /// What storing the document would make this node hold.
        public let snapshot: ClusterSnapshot
        let metadata: NodeMetadata
    }

    /// What `bytes` (a cluster document) would make this node hold, without storing it: decoded, checked
    /// (`NodeMetadata.validate`: names, counts, epochs and revisions within `Limits`) and checked against the
    /// buckets open here (a bucket keeps its vBucket count for life). The brain is offered its `snapshot`
    /// (`ClusterManager.offerDocument`) and decides whether `storeClusterDocument` stores it. Throws
    /// `RegistryError.corruptMetadata` for a document that does not decode or fails a check.
    public func checkedDocument(_ bytes: [UInt8]) throws -> CheckedDocument {
        let incoming = try Self.decodeDocument(bytes)
        try incoming.validate()
        try Self.checkVBucketCounts(incoming, against: snapshots.metadata)
        return CheckedDocument(snapshot: Self.snapshot(incoming, node: node), metadata: incoming)
    }

    /// A bucket keeps its vBucket count for life: its open engine has that many vBuckets, and a larger count in a
    /// document would let clients and the placement name vBuckets the engine does not have.
    static func checkVBucketCounts(_ incoming: NodeMetadata, against current: NodeMetadata) throws(RegistryError) {
        for b in incoming.buckets {
            guard
                let old = current.buckets.first(where: {
                    $0.settings.name == b.settings.name && $0.settings.uuid == b.settings.uuid
                }), old.settings.numVBuckets != b.settings.numVBuckets
            else { continue }
            throw .corruptMetadata(
                "invalid cluster document: bucket \(b.settings.name) numVBuckets \(b.settings.numVBuckets), "
                    + "open here with \(old.settings.numVBuckets)")
        }
    }

    /// Stores a cluster document the brain decided to adopt (`ClusterBrain.Directive.adopt`), or one this node
    /// joins by (`join`: it takes the cluster's identity and revision as they are), with `promise` (the brain's) as
    /// this node's epoch promise: `storeClusterDocument(_:promise:join:)` of `checkedDocument(bytes)`.
    public func storeClusterDocument(_ bytes: [UInt8], promise: EpochPromise?, join: Bool = false) throws {
        try storeClusterDocument(try checkedDocument(bytes), promise: promise, join: join)
    }

    /// Stores `document` (checked by `checkedDocument`, not decoded again) the brain decided to adopt, or one this
    /// node joins by (`join`), with `promise` (the brain's) as this node's epoch promise. A store, not a judge: it
    /// compares no revisions, epochs or cluster identities (the brain's `EpochRules` did, ADR 0130); it refuses
    /// only a document that fails `checkedDocument`'s checks (the vBucket counts checked again against the buckets
    /// open now). Opens engines of buckets it does not have, destroys those the document no longer lists, persists,
    /// applies vBucket states and notifies config observers. Blocking (fsync, engine opening).
    public func storeClusterDocument(_ document: CheckedDocument, promise: EpochPromise?, join: Bool = false) throws {
        // Validated (`NodeMetadata.validate`) before anything in it names a file or sizes a loop.
        let incoming = document.metadata
        let node = self.node
        var removedEngines: [(BucketEngine, BucketSettings)] = []
        try mutations.withLock { _ in
            try checkRunning()
            let current = snapshots.metadata
            try Self.checkVBucketCounts(incoming, against: current)
            var new = incoming
            new.nodeUUID = current.nodeUUID
            new.services = current.services
            // The promise is this node's own word (its brain's), never the sender's.
            new.promise = promise
            // Engines: open what is new (same name and uuid = same bucket), drop what is gone.
            let have = buckets.engines
            var opened: [String: BucketEngine] = [:]
            for b in new.buckets {
                let old = current.buckets.first { $0.settings.name == b.settings.name }
                if let old, old.settings.uuid == b.settings.uuid, let engine = have[b.settings.name] {
                    // The same bucket: settings an edit changes live reach its engine (ADR 0095).
                    engine.setPurgeInterval(days: b.settings.purgeInterval)
                    engine.setCollections(b.settings.collections)
                    continue
                }
                let dir = directory(for: b.settings)
                try DataDirectory.makeDirectory(dir)
                do {
                    opened[b.settings.name] = try BucketEngine(
                        settings: b.settings, directory: dir, clock: clock, options: engineOptions, logger: logger)
                } catch {
                    for (_, e) in opened { try? e.destroy() }
                    throw RegistryError.engine("\(error)")
                }
            }
            for b in current.buckets {
                let kept = new.buckets.contains {
                    $0.settings.name == b.settings.name && $0.settings.uuid == b.settings.uuid
                }
                if !kept, let e = have[b.settings.name] { removedEngines.append((e, b.settings)) }
            }
            try commit(new) { engines in
                for (engine, settings) in removedEngines where engines[settings.name] === engine {
                    engines.removeValue(forKey: settings.name)
                }
                for (name, e) in opened { engines[name] = e }
            }
            credentials.forgetVerified()
            if new.admin != current.admin || new.users != current.users { loginGuard.reset() }
        }
        buckets.bumpGeneration()
        for (engine, settings) in removedEngines {
            try? engine.destroy()
            try? DataDirectory.remove(directory(for: settings))
        }
        logger.notice(
            "stored cluster config",
            metadata: ["revision": "\(clusterSnapshot.revision)", "join": "\(join)", "node": "\(node.otpNode)"])
        notify(nil)
    }

    /// The config's epoch, revision and publisher (the member that made the last topology change), as the epoch
    /// rules order configs.
    public var clusterStamp: ConfigStamp { snapshots.read { $0.stamp } }

    /// The highest epoch this node promised, and to whom.
    public var epochPromise: EpochPromise? { snapshots.read { $0.promise } }

    /// Persists `promise` (the brain's, `ClusterBrain.Directive.persistPromise`) as this node's epoch promise. A
    /// store, not a judge: it does not ask `EpochRules.grants` (the brain did, ADR 0130). Blocking (fsync).
    public func storePromise(_ promise: EpochPromise) throws {
        try mutations.withLock { _ in
            try checkRunning()
            var m = snapshots.metadata
            guard m.promise != promise else { return }
            m.promise = promise
            try commit(m)
        }
    }

    /// Applies a topology change made by the orchestrator: `edit` may change members and placements. The
    /// config's `rev` grows by one (and `revEpoch` becomes `epoch`, the one the brain claimed, when given), every
    /// bucket's map takes the new rev, and the result is persisted before it is visible. Returns the new revision. Blocking.
    @discardableResult
    public func updateCluster(
        epoch: Int64? = nil,
        _ edit: (_ members: inout [ClusterMember], _ placements: inout [String: BucketPlacement]) throws -> Void
    ) throws -> MapRevision {
        let revision: MapRevision = try mutations.withLock { _ in
            try checkRunning()
            let m = try edited(epoch: epoch, edit)
            try commit(m)
            return MapRevision(epoch: m.revEpoch, rev: m.lastRev)
        }
        notify(nil)
        return revision
    }

    /// The document `updateCluster(epoch:_:)` would commit now, without committing it: a failover tells its victim
    /// first, before this node or anyone else serves the victim's vBuckets. Blocking.
    public func clusterDocumentPreview(
        epoch: Int64?,
        _ edit: (_ members: inout [ClusterMember], _ placements: inout [String: BucketPlacement]) throws -> Void
    ) throws -> [UInt8] {
        try mutations.withLock { _ in
            try checkRunning()
            var m = try edited(epoch: epoch, edit)
            m.promise = nil
            return Array(try JSONEncoder().encode(m))
        }
    }

    /// The metadata after `edit`, at the next revision. Called with `mutations` held.
    private func edited(
        epoch: Int64?,
        _ edit: (_ members: inout [ClusterMember], _ placements: inout [String: BucketPlacement]) throws -> Void
    ) throws -> NodeMetadata {
        let node = self.node
        var m = snapshots.metadata
        var members = m.members ?? []
        var placements: [String: BucketPlacement] = [:]
        for b in m.buckets {
            placements[b.settings.name] =
                b.placement
                ?? .initial(
                    numVBuckets: b.settings.numVBuckets, numReplicas: b.settings.replicaNumber,
                    nodes: Self.activeMemberNames(m, node: node))
        }
        try edit(&members, &placements)
        m.members = members
        m.orchestrator = members.contains { $0.id == node.otpNode } ? node.otpNode : nil
        // An epoch this node claimed (a majority promised it): published in from now on.
        if let epoch, epoch > m.revEpoch {
            guard ConfigStamp.isValidEpoch(epoch) else {
                throw RegistryError.limitReached("cluster epoch \(epoch) is past \(Limits.maxClusterEpoch)")
            }
            m.revEpoch = epoch
        }
        m.lastRev = try Self.nextRevision(after: m.lastRev)
        for i in m.buckets.indices {
            m.buckets[i].placement = placements[m.buckets[i].settings.name]
            m.buckets[i].rev = m.lastRev
        }
        return m
    }

    /// Makes this node a cluster of its own again (it was ejected by a rebalance): drops every bucket, takes a
    /// new cluster identity and secret, and forgets the admin credentials (Couchbase's ejected nodes come back
    /// uninitialised). Blocking.
    public func leaveCluster() throws {
        let node = self.node
        var removed: [(BucketEngine, BucketSettings)] = []
        try mutations.withLock { _ in
            try checkRunning()
            var m = snapshots.metadata
            let engines = buckets.engines
            for b in m.buckets { if let e = engines[b.settings.name] { removed.append((e, b.settings)) } }
            m.buckets = []
            m.admin = nil
            // The users are the cluster's, not this node's: an ejected node kept every user's salted SCRAM keys,
            // and whoever initialised it next (its setup endpoints are open) could read them back.
            m.users = nil
            m.cluster = ClusterIdentity(uuid: RandomID.hex128(), name: "")
            m.internalSecret = RandomID.hex128()
            m.previousInternalSecret = nil
            m.previousInternalSecretUntil = nil
            m.members = [ClusterMember(node: node, membership: .active)]
            m.lastRev = try Self.nextRevision(after: m.lastRev)
            try commit(m) { $0.removeAll() }
            credentials.forgetVerified()
        }
        buckets.bumpGeneration()
        for (engine, settings) in removed {
            try? engine.destroy()
            try? DataDirectory.remove(directory(for: settings))
        }
        logger.notice("left the cluster", metadata: ["node": "\(node.otpNode)"])
        notify(nil)
    }

    /// The cluster's auto-failover settings.
    public var autoFailover: AutoFailoverSettings {
        snapshots.read { $0.autoFailover ?? AutoFailoverSettings() }
    }

    /// Changes the auto-failover settings cluster-wide (a new config revision, in `claim`'s epoch when given:
    /// `takeRevision`). Blocking.
    public func updateAutoFailover(claim: EpochClaim? = nil, _ edit: (inout AutoFailoverSettings) -> Void) throws {
        try updateClusterSettings(claim: claim) { m in
            var settings = m.autoFailover ?? AutoFailoverSettings()
            edit(&settings)
            m.autoFailover = settings
        }
    }

    /// A change of cluster-wide settings: `edit` on the document, a new config revision (in `claim`'s epoch when
    /// given: `takeRevision`) for it and every bucket, committed and announced. Blocking.
    private func updateClusterSettings(claim: EpochClaim?, _ edit: (inout NodeMetadata) -> Void) throws {
        try mutations.withLock { _ in
            try checkRunning()
            var m = snapshots.metadata
            edit(&m)
            try takeRevision(&m, claim: claim)
            for i in m.buckets.indices { m.buckets[i].rev = m.lastRev }
            try commit(m)
        }
        notify(nil)
    }

    /// The cluster's audit settings (`/settings/audit`).
    public var auditSettings: AuditSettings {
        snapshots.read { $0.audit ?? AuditSettings() }
    }

    /// Replaces the audit settings cluster-wide (a new config revision, in `claim`'s epoch when given), and puts them
    /// in force on this node (`audit.apply`, at the commit). Blocking.
    public func updateAuditSettings(_ settings: AuditSettings, claim: EpochClaim? = nil) throws {
        try updateClusterSettings(claim: claim) { $0.audit = settings }
    }

    /// The cluster's auto-compaction settings (`/settings/autoCompaction`, ADR 0159).
    public var autoCompaction: AutoCompaction.Settings {
        snapshots.read { $0.autoCompaction ?? AutoCompaction.Settings() }
    }

    /// Replaces the auto-compaction settings cluster-wide (a new config revision, in `claim`'s epoch when given);
    /// every node's compaction checks read them from its copy of the document. Blocking.
    public func updateAutoCompaction(_ settings: AutoCompaction.Settings, claim: EpochClaim? = nil) throws {
        try updateClusterSettings(claim: claim) { $0.autoCompaction = settings }
    }

    // MARK: Derived

    /// Fills what files from before clustering lack, and refreshes this node's own member entry (its ports
    /// come from the command line). The certificate fingerprint the document pins for this node stays what it
    /// was (ADR 0040): the cluster's peers pin it too, and only the orchestrator changes it, once the node proves
    /// the secret and presents the new certificate (`ClusterManager.keepServedFingerprintPublished` sees the
    /// difference after a start with other certificate files and asks it).
    static func normalized(_ metadata: NodeMetadata, node: NodeInfo) -> NodeMetadata {
        var m = metadata
        if m.internalSecret == nil { m.internalSecret = RandomID.hex128() }
        var members = m.members ?? []
        if let i = members.firstIndex(where: { $0.node.nodeUUID == node.nodeUUID }) {
            let oldName = members[i].node.otpNode
            let pinned = members[i].node.tlsFingerprint
            members[i].node = node
            if let pinned, node.tlsFingerprint != nil { members[i].node.tlsFingerprint = pinned }
            if oldName != node.otpNode {
                for j in m.buckets.indices {
                    guard var p = m.buckets[j].placement else { continue }
                    p.chains = p.chains.map { $0.map { $0 == oldName ? node.otpNode : $0 } }
                    m.buckets[j].placement = p
                }
            }
        } else {
            // Not a member of the cluster this file describes (or a pre-cluster file): a cluster of one.
            members = [ClusterMember(node: node, membership: .active)]
        }
        m.members = members
        let active = members.filter { $0.membership == .active }.map(\.id)
        for j in m.buckets.indices where m.buckets[j].placement == nil {
            let s = m.buckets[j].settings
            m.buckets[j].placement = .initial(
                numVBuckets: s.numVBuckets, numReplicas: s.replicaNumber,
                nodes: active.isEmpty ? [node.otpNode] : active)
        }
        return m
    }

    /// Nodes of every bucket map, in member order: all members but failed-over ones, with this node's live
    /// `NodeInfo` standing in for its entry (and appended if the config does not list it).
    static func mapNodes(_ m: NodeMetadata, node: NodeInfo) -> [NodeInfo] {
        var nodes = (m.members ?? []).filter { $0.membership != .inactiveFailed }.map(\.node)
        if let i = nodes.firstIndex(where: { $0.otpNode == node.otpNode }) {
            nodes[i] = node
        } else {
            nodes.append(node)
        }
        return nodes
    }

    static func activeMemberNames(_ m: NodeMetadata, node: NodeInfo) -> [NodeID] {
        let active = (m.members ?? []).filter { $0.membership == .active }.map(\.id)
        return active.isEmpty ? [node.otpNode] : active
    }

    // MARK: Self-fencing

    /// Why this node holds its active vBuckets back, or nil. While fenced, every vBucket the placement makes
    /// active here is `pending` instead: clients get NOT_MY_VBUCKET, replicas keep their streams.
    public var fenceReason: String? { snapshots.fence.withLock { $0 } }

    /// Fences this node (`reason`) or lifts the fence (nil): a node that cannot reach a majority of the cluster
    /// may have been failed over by it, and must not accept writes the majority's new actives never see.
    /// Applies the vBucket states and notifies config observers (replication reconciles) when it changes.
    public func setFence(_ reason: String?) {
        let changed = snapshots.fence.withLock { current -> Bool in
            guard (current == nil) != (reason == nil) else { return false }
            current = reason
            return true
        }
        guard changed else { return }
        if let reason {
            logger.warning("fenced: active vBuckets held back", metadata: ["reason": "\(reason)"])
        } else {
            logger.notice("fence lifted: active vBuckets serve again")
        }
        for name in bucketNames { applyVBucketStates(bucket: name) }
        notify(nil)
    }

    /// What the placement asks of this node for `vb`.
    static func localState(_ p: BucketPlacement, vb: Int, node: NodeID, fenced: Bool = false) -> VBucketState {
        let chain = vb < p.chains.count ? p.chains[vb] : []
        if chain.first == node { return p.takeover.contains(vb) || fenced ? .pending : .active }
        if chain.dropFirst().contains(node) { return .replica }
        if let f = p.forward[vb], f.contains(node) { return .replica }
        return .dead
    }

    /// `bucket`'s record and its placement (the initial one over the active members when none was published).
    private static func placement(of bucket: String, in metadata: NodeMetadata, node: NodeInfo)
        -> (NodeMetadata.Bucket, BucketPlacement)?
    {
        guard let b = metadata.buckets.first(where: { $0.settings.name == bucket }) else { return nil }
        let p =
            b.placement
            ?? .initial(
                numVBuckets: b.settings.numVBuckets, numReplicas: b.settings.replicaNumber,
                nodes: activeMemberNames(metadata, node: node))
        return (b, p)
    }

    /// The state every vBucket of `bucket` should have here, per the current placement.
    public func desiredVBucketStates(bucket: String) -> [VBucketState]? {
        let node = self.node
        let fenced = fenceReason != nil
        return snapshots.read { m -> [VBucketState]? in
            guard let (b, p) = Self.placement(of: bucket, in: m, node: node) else { return nil }
            return (0..<b.settings.numVBuckets).map { Self.localState(p, vb: $0, node: node.otpNode, fenced: fenced) }
        }
    }

    /// This node's duty for every vBucket of `bucket` (replication and durability), per the placement:
    /// `pending` for vBuckets in takeover; nil for an unknown bucket.
    public func duties(bucket: String) -> [VBucketDuty]? {
        let node = self.node
        let fenced = fenceReason != nil
        return snapshots.read { m -> [VBucketDuty]? in
            guard let (b, p) = Self.placement(of: bucket, in: m, node: node) else { return nil }
            return (0..<b.settings.numVBuckets).map {
                VBucketDuty.duty(of: node.otpNode, vb: $0, in: p, fenced: fenced)
            }
        }
    }

    /// vBuckets of `bucket` this node holds no copy of in the placement (not in the chain, not incoming):
    /// data still held for them is garbage left by a move or a failover, to be dropped.
    public func unownedVBuckets(bucket: String) -> [VBucketID] {
        let node = self.node
        return snapshots.read { m -> [VBucketID] in
            guard let b = m.buckets.first(where: { $0.settings.name == bucket }), let p = b.placement else {
                return []
            }
            return p.chains.indices.filter { vb in
                !p.chains[vb].contains(node.otpNode) && !(p.forward[vb]?.contains(node.otpNode) ?? false)
            }.map { VBucketID(UInt16($0)) }
        }
    }

    /// Every node the bucket maps may name (members not failed over), with this node's live info.
    public var mapNodes: [NodeInfo] {
        let node = self.node
        return snapshots.read { Self.mapNodes($0, node: node) }
    }

    /// Sets the engine's vBucket states to what the placement asks of this node.
    func applyVBucketStates(bucket: String) {
        guard let engine = self.bucket(named: bucket), let desired = desiredVBucketStates(bucket: bucket) else {
            return
        }
        for (i, want) in desired.enumerated() {
            let vb = VBucketID(UInt16(i))
            if engine.vbucketState(vb) != want { engine.setVBucketState(vb, want) }
        }
    }
}

extension NodeMetadata {
    /// The config's epoch, revision and publisher, as `EpochRules` orders configs.
    var stamp: ConfigStamp { ConfigStamp(epoch: revEpoch, rev: lastRev, publisher: orchestrator) }
}
