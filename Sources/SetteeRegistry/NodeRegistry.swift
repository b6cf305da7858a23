import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeStorage
import Synchronization

/// The node's buckets, admin credentials and cluster identity: the one object the KV server and the
/// admin HTTP API share. Engine layer: it touches disk, never the network.
///
/// A façade over three stores, each owning its state under its own lock (issue 69 item 2, ADR 0139):
/// `ClusterSnapshotStore` (`snapshots`: the committed node metadata, its derived configs, the fence and the lease),
/// `BucketStore` (`buckets`: open engines, failed buckets, directories) and `CredentialStore` (`credentials`:
/// verified passwords, the internal user's keys, the login guard). Its methods, grouped by owner in
/// `NodeRegistry+Buckets.swift`, `+Credentials`, `+Users`, `+Secret`, `+Cluster` and the rest, edit the metadata
/// and commit it through them.
///
/// Concurrency:
/// 1. Reads (`bucket(named:)`, configs, `authenticate`) take one store's lock, briefly; they never wait for disk.
/// 2. Mutations (create/delete/flush/initialise/settings) are serialised by `mutations`, which is held
///    across their disk work (engine open, metadata fsync). They block: call them off event loops.
/// 3. `snapshots.metadata` always equals what the metadata file last durably said, except between a
///    successful file write and the publish that follows it under the same `mutations` hold (`commit`).
/// 4. Lock order: the snapshot store's, then the bucket store's; the credential store's, then the snapshot store's.
///
/// Files: `<dataDir>/node-metadata.json` (see `NodeMetadata`), `<dataDir>/buckets/<name>-<uuid>/` per
/// bucket. Data is never deleted on a guess: a bucket directory the metadata does not list is removed at
/// start only if it carries the deletion marker `deleteBucket` writes before unlisting it; any other is
/// left in place with a warning. A missing metadata file next to bucket directories stops the start
/// (`RegistryError.metadataMissing`). A listed bucket whose file fails to open or verify stays listed
/// as failed (`bucketFailure(named:)`), never opened as a new empty bucket.
public final class NodeRegistry: Sendable {
    /// Called after a config changed (its revision grew): with the bucket's name, or nil when every
    /// config changed (cluster-wide settings). Runs on the mutating thread: it must not block nor call
    /// the registry's mutating methods. The KV server uses it to push ClustermapChangeNotification.
    public typealias ConfigObserver = @Sendable (_ bucket: String?) -> Void

    /// Who a set of credentials belongs to.
    public enum Principal: Sendable, Equatable {
        case admin
        case bucket(String)
        /// A local RBAC user and its roles at login.
        case user(String, roles: [Role])
    }

    public let dataDirectory: String
    /// This node's audit log (ADR 0148): written to `<dataDir>/logs` (or the settings' `logPath`), its settings the
    /// cluster document's, applied at every commit.
    public let audit: AuditLog
    /// The committed node metadata and what derives from it (`ClusterSnapshotStore`).
    let snapshots: ClusterSnapshotStore
    /// Open engines and failed buckets (`BucketStore`).
    @usableFromInline let buckets: BucketStore
    /// Verified passwords, the internal user's keys, the login guard (`CredentialStore`).
    @usableFromInline let credentials: CredentialStore
    /// Failed-login throttling shared by this node's KV port and admin API.
    public var loginGuard: LoginGuard { credentials.loginGuard }
    /// This node as it describes itself. Fixed at start but for `tlsFingerprint`, which follows the certificate
    /// the TLS ports serve (`setServedTLSFingerprint`, after a reload without restart).
    public var node: NodeInfo { liveNode.withLock { $0 } }
    let liveNode: Mutex<NodeInfo>
    /// Whether this node may serve as an active vBucket's node now (ADR 0124): the cluster manager sets it from the
    /// brain's lease after every event, the KV port checks it on every request an active vBucket would answer.
    public var servingLease: ServingLease { snapshots.servingLease }
    let clock: any WallClock
    let engineOptions: EngineOptions
    let logger: Logger
    /// Orders every write of the metadata file (and the engine opens and closes that go with it).
    let mutations = Mutex<Void>(())
    private let directoryLock: DirectoryLock

    var metadataPath: String { dataDirectory + "/" + NodeMetadata.fileName }
    /// Written into a bucket's directory before it is unlisted: a directory that carries it is a deletion
    /// to finish at start, never data to keep.
    public static let deletedMarker = BucketStore.deletedMarker

    /// The directory of a bucket's engine files.
    public func directory(for settings: BucketSettings) -> String { buckets.directory(for: settings) }

    /// Loads the persisted metadata (or creates it on first start) and opens every persisted bucket,
    /// warming it up. Blocks for the warmups: call it before starting servers, off any event loop.
    /// A bucket whose engine fails to open is logged and stays listed as failed (`bucketFailure(named:)`),
    /// and `bucket(named:)` is nil for it. Buckets named in `repairBuckets` warm up in repair mode
    /// (`EngineOptions.repair`: corrupt rows skipped and reported). Throws `.metadataMissing` when the
    /// metadata file is absent but bucket directories exist.
    public init(
        dataDirectory: String, node: NodeInfo, clock: any WallClock = SystemWallClock(),
        engineOptions: EngineOptions = EngineOptions(), repairBuckets: Set<String> = [], logger: Logger
    ) throws {
        self.dataDirectory = dataDirectory
        self.clock = clock
        self.engineOptions = engineOptions
        self.logger = logger
        self.credentials = CredentialStore()
        self.buckets = BucketStore(directory: dataDirectory + "/buckets")

        try DataDirectory.makeDirectory(dataDirectory)
        // Released by `shutdown()`, or by deinit of the lock object if this init throws below.
        self.directoryLock = try DirectoryLock(directory: dataDirectory)
        try DataDirectory.makeDirectory(dataDirectory + "/buckets")
        let path = dataDirectory + "/" + NodeMetadata.fileName
        var metadata: NodeMetadata
        var repaired = false
        if let bytes = try DataDirectory.read(path) {
            metadata = try NodeMetadata.decode(file: bytes)
            // A file written by an older version may hold a chain naming a node twice (it adopted such a document
            // from a peer, then trapped building the map): repaired here, not refused, so the node starts again.
            repaired = Self.dropRepeatedChainNodes(&metadata, logger: logger)
            // Bucket names become directory names: a tampered file must not reach outside the data dir.
            try metadata.validate()
        } else {
            // Bucket data without the metadata that names it: a partial restore or an operator's mistake.
            // Starting would make a new node identity and treat that data as leftovers; refuse instead.
            let existing = DataDirectory.listDirectory(dataDirectory + "/buckets").filter { !$0.hasPrefix(".") }
            if !existing.isEmpty {
                throw RegistryError.metadataMissing(
                    "\(path) is missing but \(dataDirectory)/buckets holds \(existing.count) bucket "
                        + "director\(existing.count == 1 ? "y" : "ies") (\(existing.sorted().prefix(5).joined(separator: ", "))). "
                        + "Refusing to start: restore node-metadata.json from a backup, or move the bucket "
                        + "directories out of the data directory to start this node empty. Nothing was deleted.")
            }
            metadata = NodeMetadata(
                nodeUUID: node.nodeUUID.isEmpty ? RandomID.hex128() : node.nodeUUID,
                cluster: ClusterIdentity(uuid: RandomID.hex128(), name: ""), memoryQuotaMB: 0, services: ["kv"],
                admin: nil, buckets: [], revEpoch: 1, lastRev: 1)
            try DataDirectory.writeAtomically(try metadata.encodedFile(), to: path)
            logger.info("created node metadata", metadata: ["dataDirectory": "\(dataDirectory)"])
        }
        // The node UUID is fixed by the data directory, whatever the caller passed.
        var node = node
        node.nodeUUID = metadata.nodeUUID
        self.liveNode = Mutex(node)
        let normalized = Self.normalized(metadata, node: node)
        if normalized != metadata || repaired {
            try DataDirectory.writeAtomically(try normalized.encodedFile(), to: path)
            metadata = normalized
        }
        self.snapshots = ClusterSnapshotStore(path: path, metadata: metadata, node: node)
        self.audit = AuditLog(
            defaultDirectory: dataDirectory + "/logs", settings: metadata.audit ?? AuditSettings(), clock: clock,
            logger: logger)

        buckets.removeOrphanDirectories(
            known: Set(metadata.buckets.map { $0.settings.name + "-" + $0.settings.uuid }), logger: logger)
        for bucket in metadata.buckets {
            let name = bucket.settings.name
            let dir = directory(for: bucket.settings)
            var options = engineOptions
            options.expectExistingData = true
            options.repair = repairBuckets.contains(name)
            do {
                let engine = try BucketEngine(
                    settings: bucket.settings, directory: dir, clock: clock, options: options, logger: logger)
                buckets.update { $0[name] = engine }
                buckets.bumpGeneration()
                logger.info("bucket warmed up", metadata: ["bucket": "\(name)"])
            } catch {
                let reason = "\(error)"
                buckets.setFailure(reason, named: name)
                logger.critical(
                    "bucket failed warmup; it is reported as failed and not served. Start with --repair-bucket \(name) to skip the bad rows",
                    metadata: ["bucket": "\(name)", "error": "\(reason)"])
            }
        }
        for name in metadata.buckets.map(\.settings.name) { applyVBucketStates(bucket: name) }
    }

    /// Empties every later mention of a node its chain already named (`BucketPlacement.droppingRepeatedNodes`),
    /// logging each bucket repaired; returns whether anything changed. The safest repair: the first mention is
    /// kept, so each vBucket keeps its active and every copy that can exist (one node holds one copy); the emptied
    /// slot is a replica that never existed, and the next rebalance fills it. Refusing the file instead would keep
    /// the node down until an operator edited a checksummed file; dropping the placement would lose every active.
    static func dropRepeatedChainNodes(_ m: inout NodeMetadata, logger: Logger) -> Bool {
        var changed = false
        for i in m.buckets.indices {
            guard let p = m.buckets[i].placement else { continue }
            let (clean, dropped) = p.droppingRepeatedNodes()
            guard dropped > 0 else { continue }
            m.buckets[i].placement = clean
            changed = true
            logger.error(
                "stored placement named a node twice in a chain; the repeated replica slots are now empty",
                metadata: ["bucket": "\(m.buckets[i].settings.name)", "slots": "\(dropped)"])
        }
        return changed
    }

    /// Why a listed bucket is not served: its engine failed to open or verify at start. nil otherwise.
    public func bucketFailure(named name: String) -> String? { buckets.failure(named: name) }

    /// Persists `new`, then publishes it (and the caches derived from it). Caller holds `mutations`.
    /// The engines change with the metadata, under the snapshot store's hold (`publish`); the users generation moves
    /// after it, so a reader that loads the new generation and then reads the metadata sees the new users.
    func commit(_ new: NodeMetadata, engines update: (inout [String: BucketEngine]) -> Void = { _ in }) throws {
        try checkRunning()
        try snapshots.write(new)
        let old = snapshots.publish(new, node: node) { buckets.update(update) }
        credentials.committed(old: old, new: new)
        if old.audit != new.audit { audit.apply(new.audit ?? AuditSettings()) }
        for name in new.buckets.map(\.settings.name) { applyVBucketStates(bucket: name) }
    }

    /// Takes the next config revision in `m` for a change of the cluster document: in `claim`'s epoch, published by
    /// its claimant, when one is given (ADR 0039), else at the current epoch (a node alone in its cluster). A store,
    /// not a judge: whether the claim may still be used is the brain's decision (`ClusterBrain.changeCommitting`),
    /// taken before the write with the store's order held (ADR 0130). Throws `.limitReached` at the revision bound.
    /// Caller holds `mutations`.
    func takeRevision(_ m: inout NodeMetadata, claim: EpochClaim?) throws(RegistryError) {
        if let claim {
            m.revEpoch = claim.epoch
            m.orchestrator = claim.claimant
        }
        m.lastRev = try Self.nextRevision(after: m.lastRev)
    }

    /// `rev + 1`, or `.limitReached` past `Limits.maxConfigRevision` (never an overflow: a stored or adopted revision
    /// is at most the bound, checked by `validate`, so this refuses only at the bound itself).
    static func nextRevision(after rev: Int64) throws(RegistryError) -> Int64 {
        guard let next = EpochRules.nextRevision(after: rev) else {
            throw .limitReached("config revision \(rev) is at \(Limits.maxConfigRevision)")
        }
        return next
    }

    func checkRunning() throws(RegistryError) {
        if buckets.isShutDown { throw .shutDown }
    }

    // MARK: Cluster settings

    /// The cluster's uuid and name.
    public var clusterIdentity: ClusterIdentity { snapshots.read { $0.cluster } }

    /// The data-service RAM quota in MiB (0 until set).
    public var memoryQuotaMB: Int { snapshots.read { $0.memoryQuotaMB } }

    /// The services this node runs (`setupServices`).
    public var services: [String] { snapshots.read { $0.services } }

    /// Updates cluster-wide settings; nil leaves a value unchanged. A name change bumps every config's
    /// revision (configs carry `clusterName`), in `claim`'s epoch when given (`takeRevision`). Blocking (fsync).
    public func updateClusterSettings(
        clusterName: String? = nil, memoryQuotaMB: Int? = nil, services: [String]? = nil, claim: EpochClaim? = nil
    ) throws {
        let renamed = try mutations.withLock { _ in
            var metadata = snapshots.metadata
            var renamed = false
            if let clusterName, clusterName != metadata.cluster.name {
                metadata.cluster.name = clusterName
                try takeRevision(&metadata, claim: claim)
                for i in metadata.buckets.indices { metadata.buckets[i].rev = metadata.lastRev }
                renamed = true
            }
            if let memoryQuotaMB { metadata.memoryQuotaMB = memoryQuotaMB }
            if let services { metadata.services = services }
            try commit(metadata)
            return renamed
        }
        if renamed { notify(nil) }
    }

    // MARK: Configs

    /// Registers `observer`; returns a token for `removeConfigObserver`.
    @discardableResult
    public func addConfigObserver(_ observer: @escaping ConfigObserver) -> UInt64 {
        snapshots.addObserver(observer)
    }

    public func removeConfigObserver(_ token: UInt64) {
        snapshots.removeObserver(token)
    }

    func notify(_ bucket: String?) {
        snapshots.notify(bucket)
    }

    /// The bucket's cluster map.
    public func clusterMap(bucket: String) -> ClusterMap? { snapshots.clusterMap(bucket: bucket) }

    /// The terse bucket config with `$HOST` for this node, cached: the KV server's GET_CLUSTER_CONFIG and
    /// NOT_MY_VBUCKET bodies.
    public func terseConfigJSON(bucket: String) -> [UInt8]? { snapshots.terseConfigJSON(bucket: bucket) }

    /// The cluster-level config (no bucket) for GCCCP, cached.
    public func globalConfigJSON() -> [UInt8] { snapshots.globalConfigJSON() }

    /// The bucket config's current revision.
    public func configRevision(bucket: String) -> MapRevision? { snapshots.clusterMap(bucket: bucket)?.revision }

    /// The global config's current revision.
    public var globalConfigRevision: MapRevision {
        snapshots.read { MapRevision(epoch: $0.revEpoch, rev: $0.lastRev) }
    }

    /// Shuts every open engine down (flushing what is dirty) and releases the data directory. Blocks (while a
    /// disk fails, up to `EngineOptions.shutdownPersistTimeout` per bucket). Afterwards `bucket(named:)` is
    /// nil for every bucket and mutations throw `.shutDown`. Idempotent. Returns the unpersisted items each
    /// bucket gave up (only buckets that lost any).
    @discardableResult
    public func shutdown() -> [String: Int] {
        var lost: [String: Int] = [:]
        defer { buckets.bumpGeneration() }
        mutations.withLock { _ in
            let engines = buckets.shutDown()
            for (name, engine) in engines {
                let n = engine.shutdown()
                if n > 0 {
                    lost[name] = n
                    logger.critical(
                        "bucket shut down with unpersisted items lost",
                        metadata: ["bucket": "\(name)", "lostItems": "\(n)"])
                } else {
                    logger.info("bucket shut down", metadata: ["bucket": "\(name)"])
                }
            }
            directoryLock.release()
        }
        audit.shutdown()
        return lost
    }
}
