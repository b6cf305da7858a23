import SetteeAuth
import SetteeCore

extension Collection<Role> {
    /// The decision for `needed` on the collection engine key `engineKey` is in (a named collection's key starts
    /// with `CollectionKey.engineMarker` and its LEB128 id; any other key is `_default._default`'s), in `bucket`
    /// (ADR 0141). A key naming a collection the bucket's manifest does not have (dropped since it was checked)
    /// is `unknown`.
    func access<K: Collection<UInt8>>(_ needed: BucketGrants, bucket: ResolvedBucket, engineKey: K) -> KeyspaceAccess {
        let d = CollectionsManifest.defaultName
        guard engineKey.first == CollectionKey.engineMarker,
            let (id, _) = CollectionKey.decodePrefix(engineKey.dropFirst()),
            id != CollectionsManifest.defaultCollectionID
        else {
            return access(needed, bucket: bucket.settings.name, scope: d, collection: d)
        }
        guard let collection = bucket.collectionsByID[id], let scope = bucket.scopeNamesByCollectionID[id] else {
            return .unknown
        }
        return access(needed, bucket: bucket.settings.name, scope: scope, collection: collection.name)
    }
}
