import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeStorage
import Synchronization

/// Buckets: their settings and placements are in the committed metadata (`ClusterSnapshotStore`), their engines in
/// the bucket store (`BucketStore`); each change here commits both in one `mutations` hold.
extension NodeRegistry {
    /// The bucket's engine; nil if there is no such bucket or its engine is not open.
    public func bucket(named name: String) -> BucketEngine? { buckets.engine(named: name) }

    /// The current bucket generation (see `bucketGeneration`). Read it before `resolveBucket`. Inlinable: every KV
    /// request reads it, and a call into this module retained the registry, shared by every connection, each time.
    @inlinable public var generation: Int { buckets.generation.load(ordering: .acquiring) }

    /// The current users generation (see `localUsersGeneration`). A KV connection logged in as a local user reads it
    /// before each operation and compares it with the one its roles were resolved at; inlinable, one relaxed load (a
    /// moved value is confirmed by `currentRoles(ofUser:)`, which takes the state lock, so no ordering is needed here).
    @inlinable public var usersGeneration: Int { credentials.usersGeneration.load(ordering: .relaxed) }

    /// A bucket's engine and settings in one lookup; nil if unknown or not open (warming up or failed).
    public func resolveBucket(named name: String) -> (engine: BucketEngine, settings: BucketSettings)? {
        // Both under the snapshot store's hold, which a commit changes them under: never one bucket's engine with
        // another's settings.
        snapshots.read { m in
            guard let engine = buckets.engine(named: name), let b = m.buckets.first(where: { $0.settings.name == name })
            else { return nil }
            return (engine, b.settings)
        }
    }

    public func bucketSettings(named name: String) -> BucketSettings? {
        snapshots.read { m in m.buckets.first { $0.settings.name == name }?.settings }
    }

    /// Every bucket's settings, in creation order.
    public var allBucketSettings: [BucketSettings] { snapshots.read { $0.buckets.map(\.settings) } }

    /// Bucket names in creation order.
    public var bucketNames: [String] { snapshots.read { $0.buckets.map(\.settings.name) } }

    /// The one bucket clients may use without authenticating: the single `authType=none` bucket, if
    /// there is exactly one.
    public func defaultUnauthenticatedBucket() -> String? {
        let open = snapshots.read { $0.buckets.filter { $0.settings.authType == .none } }
        return open.count == 1 ? open[0].settings.name : nil
    }

    /// Creates a bucket: opens its engine, then persists it. When this returns the bucket is usable
    /// (the SDK SELECTs it right after the 202). Settings are validated by the caller. `claim`: the epoch the new
    /// config is committed in (`takeRevision`). Blocks.
    public func createBucket(_ settings: BucketSettings, claim: EpochClaim? = nil) throws {
        defer { buckets.bumpGeneration() }
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
            var metadata = snapshots.metadata
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
        defer { buckets.bumpGeneration() }
        let (engine, settings): (BucketEngine?, BucketSettings) = try mutations.withLock { _ in
            var metadata = snapshots.metadata
            guard let index = metadata.buckets.firstIndex(where: { $0.settings.name == name }) else {
                throw RegistryError.notFound
            }
            let settings = metadata.buckets.remove(at: index).settings
            try takeRevision(&metadata, claim: claim)
            buckets.markDeleted(settings, logger: logger)
            var removed: BucketEngine? = nil
            try commit(metadata) { removed = $0.removeValue(forKey: name) }
            buckets.setFailure(nil, named: name)
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
    /// value unchanged. Throws `.notFound`, `.invalidArgument` for a replica number outside 0...3. `claim`: the epoch the new config is committed in (`takeRevision`).
    /// Blocks (fsync).
    public func updateBucket(
        named name: String, flushEnabled: Bool? = nil, replicaNumber: Int? = nil, purgeInterval: Double? = nil,
        claim: EpochClaim? = nil
    ) throws {
        defer { buckets.bumpGeneration() }
        if let replicaNumber, !(0...3).contains(replicaNumber) {
            throw RegistryError.invalidArgument("replicaNumber \(replicaNumber) is not 0 to 3")
        }
        let mapChanged = try mutations.withLock { _ in
            try checkRunning()
            var metadata = snapshots.metadata
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
            if let purgeInterval { buckets.engine(named: name)?.setPurgeInterval(days: purgeInterval) }
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

}
