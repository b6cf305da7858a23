import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeJSON
import SetteeStorage
import Synchronization

/// The node's buckets, admin credentials and cluster identity: the one object the KV server and the
/// admin HTTP API share. Engine layer: it touches disk, never the network.
///
/// Concurrency:
/// 1. Reads (`bucket(named:)`, configs, `authenticate`) take only `state`, briefly; they never wait for disk.
/// 2. Mutations (create/delete/flush/initialise/settings) are serialised by `mutations`, which is held
///    across their disk work (engine open, metadata fsync). They block: call them off event loops.
/// 3. `state.metadata` always equals what the metadata file last durably said, except between a
///    successful file write and the state update that follows it under the same `mutations` hold.
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

    /// Whose credentials an entry of `State.verified` holds.
    enum VerifiedPrincipal: Hashable, Sendable {
        case admin
        case user(String)
    }

    /// Who a set of credentials belongs to.
    public enum Principal: Sendable, Equatable {
        case admin
        case bucket(String)
        /// A local RBAC user and its roles at login.
        case user(String, roles: [Role])
    }

    struct State: Sendable {
        var metadata: NodeMetadata
        var engines: [String: BucketEngine] = [:]
        var maps: [String: ClusterMap] = [:]
        var terseCache: [String: [UInt8]] = [:]
        var globalCache: [UInt8] = []
        /// Credentials verified by PBKDF2, so repeated HTTP Basic and PLAIN logins skip it. Cleared when the
        /// admin or the users change.
        var verified = VerifiedCredentials<VerifiedPrincipal>(capacity: Limits.verifiedCredentialsMaxEntries)
        var isShutDown = false
        /// Listed buckets whose engine failed to open at start, with the reason.
        var failedBuckets: [String: String] = [:]
    }

    public let dataDirectory: String
    /// Password checks that ran PBKDF2 (`verifyCached` found no entry), since start.
    let slowChecks = Atomic<Int>(0)
    /// Failed-login throttling shared by this node's KV port and admin API.
    public let loginGuard = LoginGuard(sourceOnlyUsers: [NodeRegistry.internalUsername])
    /// This node as it describes itself. Fixed at start but for `tlsFingerprint`, which follows the certificate
    /// the TLS ports serve (`setServedTLSFingerprint`, after a reload without restart).
    public var node: NodeInfo { liveNode.withLock { $0 } }
    let liveNode: Mutex<NodeInfo>
    /// Why this node holds its active vBuckets back (pending: no client reads or writes), nil when it does not.
    /// Set by the cluster manager when the node cannot reach a majority (NodeRegistry+Cluster.swift).
    let clusterFence = Mutex<String?>(nil)
    /// Whether this node may serve as an active vBucket's node now (ADR 0124): the cluster manager sets it from the
    /// brain's lease after every event, the KV port checks it on every request an active vBucket would answer.
    public let servingLease = ServingLease()
    let clock: any WallClock
    let engineOptions: EngineOptions
    let logger: Logger
    let state: Mutex<State>
    /// Bumped after every change of the bucket set or a bucket's settings, so connections can cache
    /// their bucket lookup and re-resolve only when this moves (one relaxed load per operation).
    @usableFromInline let bucketGeneration = Atomic<Int>(0)
    /// Bumped whenever a committed metadata change can have changed who the local users are or what roles they
    /// hold (`commit` compares the users and the admin's name), so KV connections logged in as a local user can
    /// re-resolve their roles before their next operation, and only then (`usersGeneration`; ADR 0008, decision 4).
    @usableFromInline let localUsersGeneration = Atomic<Int>(0)
    let mutations = Mutex<Void>(())
    private let directoryLock: DirectoryLock
    private let observers = Mutex<(next: UInt64, all: [UInt64: ConfigObserver])>((0, [:]))
    /// The internal user's SCRAM keys, derived from the current and previous secret with one process-local salt
    /// (so one challenge serves both during a rotation's grace): secret → hash → keys.
    let internalKeys = Mutex<[String: [ScramHash: ScramKeys]]>([:])
    let internalSalt: [UInt8]

    var metadataPath: String { dataDirectory + "/" + NodeMetadata.fileName }
    /// Written into a bucket's directory before it is unlisted: a directory that carries it is a deletion
    /// to finish at start, never data to keep.
    public static let deletedMarker = ".settee-bucket-deleted"
    var bucketsDirectory: String { dataDirectory + "/buckets" }

    /// The directory of a bucket's engine files.
    public func directory(for settings: BucketSettings) -> String {
        bucketsDirectory + "/" + settings.name + "-" + settings.uuid
    }

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
        var rng = SystemRandomNumberGenerator()
        self.internalSalt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }

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
        self.state = Mutex(State(metadata: metadata))

        removeOrphanDirectories(metadata)
        for bucket in metadata.buckets {
            let name = bucket.settings.name
            let dir = directory(for: bucket.settings)
            var options = engineOptions
            options.expectExistingData = true
            options.repair = repairBuckets.contains(name)
            do {
                let engine = try BucketEngine(
                    settings: bucket.settings, directory: dir, clock: clock, options: options, logger: logger)
                state.withLock { $0.engines[name] = engine }
                bucketGeneration.wrappingAdd(1, ordering: .releasing)
                logger.info("bucket warmed up", metadata: ["bucket": "\(name)"])
            } catch {
                let reason = "\(error)"
                state.withLock { $0.failedBuckets[name] = reason }
                logger.critical(
                    "bucket failed warmup; it is reported as failed and not served. Start with --repair-bucket \(name) to skip the bad rows",
                    metadata: ["bucket": "\(name)", "error": "\(reason)"])
            }
        }
        state.withLock { Self.rebuildCaches(&$0, node: node) }
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

    private func removeOrphanDirectories(_ metadata: NodeMetadata) {
        let known = Set(metadata.buckets.map { $0.settings.name + "-" + $0.settings.uuid })
        let entries = DataDirectory.listDirectory(bucketsDirectory)
        for entry in entries where !known.contains(entry) && !entry.hasPrefix(".") {
            let dir = bucketsDirectory + "/" + entry
            guard FileManager.default.fileExists(atPath: dir + "/" + Self.deletedMarker) else {
                logger.warning(
                    "bucket directory not listed in the node metadata; left in place (remove it by hand once it is not needed)",
                    metadata: ["directory": "\(dir)"])
                continue
            }
            do {
                try DataDirectory.remove(dir)
                logger.notice("finished deleting a deleted bucket's directory", metadata: ["directory": "\(entry)"])
            } catch {
                logger.error("cannot remove a deleted bucket's directory", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Marks a bucket's directory as deleted before the bucket is unlisted, so a crash before its files
    /// are gone lets the next start finish the deletion (and only such directories are ever removed).
    func markBucketDirectoryDeleted(_ settings: BucketSettings) {
        let dir = directory(for: settings)
        guard FileManager.default.fileExists(atPath: dir) else { return }
        do { try DataDirectory.writeAtomically([], to: dir + "/" + Self.deletedMarker) } catch {
            logger.warning("cannot mark a deleted bucket's directory", metadata: ["error": "\(error)"])
        }
    }

    /// Why a listed bucket is not served: its engine failed to open or verify at start. nil otherwise.
    public func bucketFailure(named name: String) -> String? { state.withLock { $0.failedBuckets[name] } }

    // MARK: Derived documents

    /// Recomputes every map and cached JSON document from `metadata` (cheap: few buckets, run on change).
    static func rebuildCaches(_ s: inout State, node: NodeInfo) {
        s.maps.removeAll()
        s.terseCache.removeAll()
        let cluster = s.metadata.cluster
        let nodes = Self.mapNodes(s.metadata, node: node)
        let names = nodes.map(\.otpNode)
        let thisNode = names.firstIndex(of: node.otpNode) ?? 0
        let active = Self.activeMemberNames(s.metadata, node: node)
        for b in s.metadata.buckets {
            let placement =
                b.placement
                ?? BucketPlacement.initial(
                    numVBuckets: b.settings.numVBuckets, numReplicas: b.settings.replicaNumber, nodes: active)
            let map = ClusterMap(
                bucket: b.settings, revision: MapRevision(epoch: s.metadata.revEpoch, rev: b.rev), nodes: nodes,
                thisNode: thisNode,
                vbucketMap: placement.indexMap(over: names, numReplicas: b.settings.replicaNumber))
            s.maps[b.settings.name] = map
            s.terseCache[b.settings.name] =
                ConfigJSON.terseBucket(map, cluster: cluster, selfAddress: .placeholder).serialized()
        }
        s.globalCache = ConfigJSON.global(
            revision: MapRevision(epoch: s.metadata.revEpoch, rev: s.metadata.lastRev), nodes: nodes,
            thisNode: thisNode, selfAddress: .placeholder
        ).serialized()
    }

    /// Persists `new`, then publishes it (and the caches derived from it). Caller holds `mutations`.
    func commit(_ new: NodeMetadata, engines update: (inout [String: BucketEngine]) -> Void = { _ in }) throws {
        try checkRunning()
        try DataDirectory.writeAtomically(try new.encodedFile(), to: metadataPath)
        let node = self.node
        state.withLock { s in
            // Every path that changes users ends here: a local put or delete, an adopted cluster document,
            // leaving the cluster, and new admin credentials (a user's name may now be the admin's).
            let usersChanged = s.metadata.users != new.users || s.metadata.admin?.username != new.admin?.username
            s.metadata = new
            update(&s.engines)
            Self.rebuildCaches(&s, node: node)
            // Under the lock: a reader that loads the new value and then takes the lock sees the new users.
            if usersChanged { localUsersGeneration.wrappingAdd(1, ordering: .relaxed) }
        }
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
        if state.withLock({ $0.isShutDown }) { throw .shutDown }
    }

    // MARK: Credentials

    /// Whether admin credentials have been set (`POST /settings/web`, `/clusterInit`).
    public var isInitialized: Bool { state.withLock { $0.metadata.admin != nil } }

    /// Sets (or replaces) the admin credentials. The password is stored only as salted SCRAM keys.
    /// Slow (PBKDF2) and blocking: call it off event loops. Throws `.invalidCredentials` for an empty
    /// username or a password under 6 characters (Couchbase's rule). Replacing existing credentials also rotates
    /// the internal node secret (`rotateInternalSecret`) and takes a new cluster revision, so the change reaches
    /// every member; returns whether it did (the caller publishes the document then). `claim`: the epoch that
    /// revision is committed in (`takeRevision`).
    @discardableResult
    public func initialize(username: String, password: String, claim: EpochClaim? = nil) throws -> Bool {
        guard !username.isEmpty else { throw RegistryError.invalidCredentials("Username must not be empty.") }
        guard password.count >= 6 else {
            throw RegistryError.invalidCredentials("The password must be at least 6 characters long.")
        }
        let credential = StoredAdminCredential.make(username: username, password: password)
        let changed = try mutations.withLock { _ in
            var metadata = state.withLock { $0.metadata }
            let changed = metadata.admin != nil
            metadata.admin = credential
            if changed {
                rotateSecret(&metadata, graceSeconds: Limits.internalSecretGraceSeconds)
                try takeRevision(&metadata, claim: claim)
            }
            try commit(metadata)
            state.withLock { $0.verified.removeAll() }
            return changed
        }
        loginGuard.reset()
        logger.notice(
            "admin credentials set",
            metadata: ["username": "\(LogText.userData(username))", "secretRotated": "\(changed)"])
        return changed
    }

    /// Constant-time check of the admin credentials (false before initialisation). Slow on the first
    /// success for given credentials (PBKDF2), fast after: call it off event loops.
    public func checkAdmin(username: String, password: String) -> Bool {
        guard let admin = state.withLock({ $0.metadata.admin }) else { return false }
        return verifyCached(.admin, admin, username: username, password: password) { $0.admin == admin }
    }

    /// `credential.verify`, through the cache of verified credentials: an entry is added only while
    /// `stillCurrent` holds for the metadata, so credentials that changed during the PBKDF2 are not remembered.
    func verifyCached(
        _ principal: VerifiedPrincipal, _ credential: StoredAdminCredential, username: String,
        password: String, stillCurrent: (NodeMetadata) -> Bool
    ) -> Bool {
        let stored = credential.mechanisms["SHA512"]
        // The HMAC is computed between two short holds of the lock, not under it.
        let digest = state.withLock { $0.verified.digester }.digest(
            stored?.salt ?? "", stored?.storedKey ?? "", username, password)
        if state.withLock({ $0.verified.matches(principal, digest) }) { return true }
        slowChecks.wrappingAdd(1, ordering: .relaxed)
        guard credential.verify(username: username, password: password) else { return false }
        state.withLock { s in
            if stillCurrent(s.metadata) { s.verified.insert(principal, digest) }
        }
        return true
    }

    /// Who these credentials belong to: the admin, a local RBAC user, or nil.
    public func authenticate(username: String, password: String) -> Principal? {
        if username == Self.internalUsername {
            return acceptedInternalSecrets().contains {
                constantTimeEqual(ScramHash.sha256.hash(Array($0.utf8)), ScramHash.sha256.hash(Array(password.utf8)))
            } ? .admin : nil
        }
        // One slow check whoever the name is: a local user's name gets its own check only (a wrong password used to run
        // the admin's check too, so it took twice as long as an unknown name, which tells which names exist); the
        // admin's name and an unknown one get the admin's check.
        if username != adminUsername, let user = state.withLock({ $0.metadata.users?.first { $0.name == username } }) {
            return authenticateLocalUser(user, password: password)
        }
        return checkAdmin(username: username, password: password) ? .admin : nil
    }

    /// SCRAM verification data for `username`, for the KV server's SASL; nil for unknown users.
    public func scramCredential(username: String, hash: ScramHash) -> ScramKeys? {
        guard let admin = state.withLock({ $0.metadata.admin }), admin.username == username else { return nil }
        return admin.scram(hash)
    }

    /// The admin username, if initialised.
    public var adminUsername: String? { state.withLock { $0.metadata.admin?.username } }

    // MARK: Cluster settings

    /// The cluster's uuid and name.
    public var clusterIdentity: ClusterIdentity { state.withLock { $0.metadata.cluster } }

    /// The data-service RAM quota in MiB (0 until set).
    public var memoryQuotaMB: Int { state.withLock { $0.metadata.memoryQuotaMB } }

    /// The services this node runs (`setupServices`).
    public var services: [String] { state.withLock { $0.metadata.services } }

    /// Updates cluster-wide settings; nil leaves a value unchanged. A name change bumps every config's
    /// revision (configs carry `clusterName`), in `claim`'s epoch when given (`takeRevision`). Blocking (fsync).
    public func updateClusterSettings(
        clusterName: String? = nil, memoryQuotaMB: Int? = nil, services: [String]? = nil, claim: EpochClaim? = nil
    ) throws {
        let renamed = try mutations.withLock { _ in
            var metadata = state.withLock { $0.metadata }
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

    // MARK: Buckets

    /// The bucket's engine; nil if there is no such bucket or its engine is not open.
    public func bucket(named name: String) -> BucketEngine? { state.withLock { $0.engines[name] } }

    /// The current bucket generation (see `bucketGeneration`). Read it before `resolveBucket`. Inlinable: every KV
    /// request reads it, and a call into this module retained the registry, shared by every connection, each time.
    @inlinable public var generation: Int { bucketGeneration.load(ordering: .acquiring) }

    /// The current users generation (see `localUsersGeneration`). A KV connection logged in as a local user reads it
    /// before each operation and compares it with the one its roles were resolved at; inlinable, one relaxed load (a
    /// moved value is confirmed by `currentRoles(ofUser:)`, which takes the state lock, so no ordering is needed here).
    @inlinable public var usersGeneration: Int { localUsersGeneration.load(ordering: .relaxed) }

    /// A bucket's engine and settings in one lookup; nil if unknown or not open (warming up or failed).
    public func resolveBucket(named name: String) -> (engine: BucketEngine, settings: BucketSettings)? {
        state.withLock { s in
            guard let engine = s.engines[name], let b = s.metadata.buckets.first(where: { $0.settings.name == name })
            else { return nil }
            return (engine, b.settings)
        }
    }

    public func bucketSettings(named name: String) -> BucketSettings? {
        state.withLock { s in s.metadata.buckets.first { $0.settings.name == name }?.settings }
    }

    /// Every bucket's settings, in creation order.
    public var allBucketSettings: [BucketSettings] { state.withLock { $0.metadata.buckets.map(\.settings) } }

    /// Bucket names in creation order.
    public var bucketNames: [String] { state.withLock { $0.metadata.buckets.map(\.settings.name) } }

    /// The one bucket clients may use without authenticating: the single `authType=none` bucket, if
    /// there is exactly one.
    public func defaultUnauthenticatedBucket() -> String? {
        let open = state.withLock { $0.metadata.buckets.filter { $0.settings.authType == .none } }
        return open.count == 1 ? open[0].settings.name : nil
    }

    /// Creates a bucket: opens its engine, then persists it. When this returns the bucket is usable
    /// (the SDK SELECTs it right after the 202). Settings are validated by the caller. `claim`: the epoch the new
    /// config is committed in (`takeRevision`). Blocks.
    public func createBucket(_ settings: BucketSettings, claim: EpochClaim? = nil) throws {
        defer { bucketGeneration.wrappingAdd(1, ordering: .releasing) }
        // The name becomes a path component: a caller that skipped validation must not escape the data dir.
        guard BucketName.isValid(settings.name), BucketName.isValidUUID(settings.uuid),
            (1...Limits.numVBuckets).contains(settings.numVBuckets)
        else {
            throw RegistryError.corruptMetadata(
                "invalid bucket settings: name \(LogText.quoted(settings.name)), uuid \(LogText.quoted(settings.uuid)), "
                    + "numVBuckets \(settings.numVBuckets)")
        }
        try mutations.withLock { _ in
            try checkRunning()
            var metadata = state.withLock { $0.metadata }
            if metadata.buckets.contains(where: { $0.settings.name == settings.name }) {
                throw RegistryError.alreadyExists
            }
            if metadata.buckets.count >= Limits.maxBuckets { throw RegistryError.tooMany }
            // Before any file is made: a revision past its bound leaves nothing behind.
            try takeRevision(&metadata, claim: claim)
            let dir = directory(for: settings)
            try DataDirectory.makeDirectory(dir)
            let engine: BucketEngine
            do {
                engine = try BucketEngine(
                    settings: settings, directory: dir, clock: clock, options: engineOptions, logger: logger)
            } catch {
                try? DataDirectory.remove(dir)
                throw RegistryError.engine("\(error)")
            }
            metadata.buckets.append(
                NodeMetadata.Bucket(
                    settings: settings, rev: metadata.lastRev,
                    placement: .initial(
                        numVBuckets: settings.numVBuckets, numReplicas: settings.replicaNumber,
                        nodes: Self.activeMemberNames(metadata, node: node))))
            do {
                try commit(metadata) { $0[settings.name] = engine }
            } catch {
                try? engine.destroy()
                try? DataDirectory.remove(dir)
                throw error
            }
        }
        logger.notice("bucket created", metadata: ["bucket": "\(settings.name)", "uuid": "\(settings.uuid)"])
        notify(settings.name)
    }

    /// Deletes a bucket: unlists it (durably), then destroys its engine and files. Throws `.notFound`, or
    /// `.deletionIncomplete` when the files could not all be removed (the next start finishes). `claim`: the epoch
    /// the new config is committed in (`takeRevision`). Blocks.
    public func deleteBucket(named name: String, claim: EpochClaim? = nil) throws {
        defer { bucketGeneration.wrappingAdd(1, ordering: .releasing) }
        let (engine, settings): (BucketEngine?, BucketSettings) = try mutations.withLock { _ in
            var metadata = state.withLock { $0.metadata }
            guard let index = metadata.buckets.firstIndex(where: { $0.settings.name == name }) else {
                throw RegistryError.notFound
            }
            let settings = metadata.buckets.remove(at: index).settings
            try takeRevision(&metadata, claim: claim)
            markBucketDirectoryDeleted(settings)
            var removed: BucketEngine? = nil
            try commit(metadata) { removed = $0.removeValue(forKey: name) }
            state.withLock { _ = $0.failedBuckets.removeValue(forKey: name) }
            return (removed, settings)
        }
        var problems: [String] = []
        if let engine {
            do { try engine.destroy() } catch { problems.append("engine: \(error)") }
        }
        do { try DataDirectory.remove(directory(for: settings)) } catch { problems.append("\(error)") }
        logger.notice("bucket deleted", metadata: ["bucket": "\(name)"])
        notify(name)
        if !problems.isEmpty { throw RegistryError.deletionIncomplete(problems.joined(separator: "; ")) }
    }

    /// Changes the settings that need no engine restart: `flushEnabled` (the registry enforces it) and
    /// `replicaNumber` (changes the map's chain length, so the config's revision grows). nil leaves a
    /// value unchanged. Throws `.notFound`. `claim`: the epoch the new config is committed in (`takeRevision`).
    /// Blocks (fsync).
    public func updateBucket(
        named name: String, flushEnabled: Bool? = nil, replicaNumber: Int? = nil, purgeInterval: Double? = nil,
        claim: EpochClaim? = nil
    ) throws {
        defer { bucketGeneration.wrappingAdd(1, ordering: .releasing) }
        if let replicaNumber { precondition((0...3).contains(replicaNumber), "replicaNumber \(replicaNumber)") }
        let mapChanged = try mutations.withLock { _ in
            try checkRunning()
            var metadata = state.withLock { $0.metadata }
            guard let i = metadata.buckets.firstIndex(where: { $0.settings.name == name }) else {
                throw RegistryError.notFound
            }
            var mapChanged = false
            if let flushEnabled { metadata.buckets[i].settings.flushEnabled = flushEnabled }
            if let purgeInterval { metadata.buckets[i].settings.purgeInterval = purgeInterval }
            if let replicaNumber, replicaNumber != metadata.buckets[i].settings.replicaNumber {
                metadata.buckets[i].settings.replicaNumber = replicaNumber
                mapChanged = true
            }
            // Configs list flush in the full bucket object only, but the bucket description feeds the
            // cached configs: any change gets a new revision so no two different documents share one.
            try takeRevision(&metadata, claim: claim)
            metadata.buckets[i].rev = metadata.lastRev
            try commit(metadata)
            // Committed: the engine purges by the new interval from its next pass (ADR 0095).
            if let purgeInterval { state.withLock { $0.engines[name] }?.setPurgeInterval(days: purgeInterval) }
            return mapChanged
        }
        logger.notice("bucket updated", metadata: ["bucket": "\(name)", "mapChanged": "\(mapChanged)"])
        notify(name)
    }

    /// Removes every document of a bucket. Throws `.notFound` or `.flushDisabled`. Blocks.
    public func flushBucket(named name: String) throws {
        try mutations.withLock { _ in
            try checkRunning()
            guard let settings = bucketSettings(named: name) else { throw RegistryError.notFound }
            guard settings.flushEnabled else { throw RegistryError.flushDisabled }
            guard let engine = bucket(named: name) else { throw RegistryError.engine("bucket is not open") }
            do { try engine.flushAll() } catch { throw RegistryError.engine("\(error)") }
        }
        logger.notice("bucket flushed", metadata: ["bucket": "\(name)"])
    }

    // MARK: Configs

    /// Registers `observer`; returns a token for `removeConfigObserver`.
    @discardableResult
    public func addConfigObserver(_ observer: @escaping ConfigObserver) -> UInt64 {
        observers.withLock { o in
            o.next += 1
            o.all[o.next] = observer
            return o.next
        }
    }

    public func removeConfigObserver(_ token: UInt64) {
        _ = observers.withLock { $0.all.removeValue(forKey: token) }
    }

    func notify(_ bucket: String?) {
        for observer in observers.withLock({ Array($0.all.values) }) { observer(bucket) }
    }

    /// The bucket's cluster map.
    public func clusterMap(bucket: String) -> ClusterMap? { state.withLock { $0.maps[bucket] } }

    /// The terse bucket config with `$HOST` for this node, cached: the KV server's GET_CLUSTER_CONFIG and
    /// NOT_MY_VBUCKET bodies.
    public func terseConfigJSON(bucket: String) -> [UInt8]? { state.withLock { $0.terseCache[bucket] } }

    /// The cluster-level config (no bucket) for GCCCP, cached.
    public func globalConfigJSON() -> [UInt8] { state.withLock { $0.globalCache } }

    /// The bucket config's current revision.
    public func configRevision(bucket: String) -> MapRevision? { state.withLock { $0.maps[bucket]?.revision } }

    /// The global config's current revision.
    public var globalConfigRevision: MapRevision {
        state.withLock { MapRevision(epoch: $0.metadata.revEpoch, rev: $0.metadata.lastRev) }
    }

    /// Shuts every open engine down (flushing what is dirty) and releases the data directory. Blocks (while a
    /// disk fails, up to `EngineOptions.shutdownPersistTimeout` per bucket). Afterwards `bucket(named:)` is
    /// nil for every bucket and mutations throw `.shutDown`. Idempotent. Returns the unpersisted items each
    /// bucket gave up (only buckets that lost any).
    @discardableResult
    public func shutdown() -> [String: Int] {
        var lost: [String: Int] = [:]
        defer { bucketGeneration.wrappingAdd(1, ordering: .releasing) }
        mutations.withLock { _ in
            let engines = state.withLock { s in
                let engines = s.engines
                s.engines.removeAll()
                s.isShutDown = true
                return engines
            }
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
        return lost
    }
}
