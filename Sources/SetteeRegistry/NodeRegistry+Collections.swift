import Logging
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeStorage
import Synchronization

/// A bucket's collections manifest lives in its `BucketSettings` (ADR 0129), so it is persisted in the node metadata
/// and travels to every member in the cluster document with the bucket, as any bucket edit does: the admin API runs
/// `editCollections` through the same majority claim (`AdminAPI.configChange`) and then publishes.
extension NodeRegistry {
    /// The bucket's collections manifest; nil when there is no such bucket.
    public func collectionsManifest(bucket name: String) -> CollectionsManifest? {
        bucketSettings(named: name)?.collectionsManifest
    }

    /// Applies `edit` to the bucket's manifest and commits it in a new config revision (in `claim`'s epoch when
    /// given, see `takeRevision`). Returns the new manifest. Throws `RegistryError.notFound` for an unknown bucket,
    /// what `edit` throws (a `CollectionsManifest.EditError`, say; nothing is committed), or the commit's errors. Blocks (fsync).
    @discardableResult
    public func editCollections(
        bucket name: String, claim: EpochClaim? = nil,
        _ edit: (inout CollectionsManifest) throws -> Void
    ) throws -> CollectionsManifest {
        defer { buckets.bumpGeneration() }
        let manifest = try mutations.withLock { _ in
            try checkRunning()
            var metadata = snapshots.metadata
            guard let i = metadata.buckets.firstIndex(where: { $0.settings.name == name }) else {
                throw RegistryError.notFound
            }
            var manifest = metadata.buckets[i].settings.collectionsManifest
            try edit(&manifest)
            metadata.buckets[i].settings.collections = manifest
            try takeRevision(&metadata, claim: claim)
            metadata.buckets[i].rev = metadata.lastRev
            try commit(metadata)
            return manifest
        }
        // Committed: dropped collections' items are purged in the background (ADR 0138).
        bucket(named: name)?.setCollections(manifest)
        logger.notice("collections manifest changed", metadata: ["bucket": "\(name)", "uid": "\(manifest.uidHex)"])
        notify(name)
        return manifest
    }
}
