import SetteeClient
import SetteeCore
import SetteeSubdoc

/// The bucket one keyspace of a gateway database sees when the keyspace is a named collection (ADR 0142): its
/// documents, `_local` checkpoints and attachments live in the collection (`data`), while what belongs to the whole
/// database lives in the bucket's default collection (`metadata`), as Sync Gateway 3.1 keeps its metadata in the
/// default collection: the sequence counter and released sequences (one sequence space per database), users, roles
/// and sessions (one set of principals across the database's collections).
///
/// `mutations()` is the collection's stream and `metadataMutations()` the default collection's, whose metadata keys
/// every keyspace's index follows, so each learns principals and released sequences as a database over one collection
/// does. Closing it
/// closes `data` only: `metadata` is the mounted bucket, shared by the database's keyspaces and closed by the server.
final class KeyspaceBucket: GatewayBucket {
    let data: any GatewayBucket
    let metadata: any GatewayBucket

    init(data: any GatewayBucket, metadata: any GatewayBucket) {
        self.data = data
        self.metadata = metadata
    }

    var name: String { data.name }

    /// Whether `key` is kept per database (in the default collection) rather than per collection.
    static func isMetadataKey(_ key: String) -> Bool {
        guard key.hasPrefix("_sync:") else { return false }
        return key == seqKey || key.hasPrefix(unusedSeqPrefix) || key.hasPrefix(unusedSeqRangePrefix)
            || key.hasPrefix(sessionPrefix) || PrincipalRecord.parse(key: key) != nil
    }

    private func bucket(for key: String) -> any GatewayBucket {
        Self.isMetadataKey(key) ? metadata : data
    }

    func get(_ key: String) async throws(GatewayBucketError) -> BucketItem? {
        try await bucket(for: key).get(key)
    }

    func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        try await bucket(for: key).insert(key, value: value, expiry: expiry)
    }

    func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        try await bucket(for: key).replace(key, value: value, cas: cas, expiry: expiry)
    }

    func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        try await bucket(for: key).upsert(key, value: value, expiry: expiry)
    }

    func touch(_ key: String, expiry: UInt32) async throws(GatewayBucketError) {
        try await bucket(for: key).touch(key, expiry: expiry)
    }

    @discardableResult func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        try await bucket(for: key).remove(key, cas: cas)
    }

    func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult? {
        try await bucket(for: key).lookupIn(key, request)
    }

    func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS {
        try await bucket(for: key).mutateIn(key, request, cas: cas)
    }

    func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64 {
        try await bucket(for: key).increment(key, delta: delta, initial: initial)
    }

    /// The collection's mutations (its documents, `_local` checkpoints and attachments).
    func mutations() -> AsyncStream<BucketMutation> { data.mutations() }

    /// The default collection's stream, for its metadata keys (principals, sessions, released sequences): the database
    /// consumes it beside `mutations()`, each pulled at its consumer's pace (both streams keep DCP flow control).
    func metadataMutations() -> AsyncStream<BucketMutation>? { metadata.mutations() }

    func ensureFullCommit() async throws(GatewayBucketError) {
        try await data.ensureFullCommit()
        try await metadata.ensureFullCommit()
    }

    func close() async {
        await data.close()
    }
}
