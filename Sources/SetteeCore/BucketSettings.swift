/// A bucket's settings as the admin API accepts them, the data dir persists them and the configs
/// describe them. Lives in the lowest layer so the engine, the registry, admin and the config JSON share one
/// type without the engine depending on the cluster map.
public struct BucketSettings: Sendable, Codable, Equatable {
    public enum AuthType: String, Sendable, Codable { case none, sasl }

    public var name: String
    /// 32 lowercase hex characters, fixed at creation.
    public var uuid: String
    /// RAM quota per node in MiB (minimum `Limits.minBucketRamQuotaMB`).
    public var ramQuotaMB: Int
    public var replicaNumber: Int
    public var flushEnabled: Bool
    public var authType: AuthType
    /// `valueOnly`: keys and metadata stay resident; only values are evicted.
    public var evictionPolicy: String
    public var numVBuckets: Int
    /// Couchbase's metadata purge interval, in days: tombstones older than this are purged from memory and disk,
    /// and change feeds from before the newest purged one roll back to 0 (ADR 0095). Nil (a bucket created
    /// without one, or persisted before it existed): `Limits.defaultPurgeIntervalDays`.
    public var purgeInterval: Double?
    /// The bucket's scopes and collections (ADR 0129); nil (a new bucket, or one persisted before collections):
    /// `CollectionsManifest.initial`. Read it through `collectionsManifest`.
    public var collections: CollectionsManifest?

    public init(
        name: String, uuid: String, ramQuotaMB: Int, replicaNumber: Int = 1, flushEnabled: Bool = false,
        authType: AuthType = .sasl, evictionPolicy: String = "valueOnly", numVBuckets: Int = 1024,
        purgeInterval: Double? = nil
    ) {
        self.name = name
        self.uuid = uuid
        self.ramQuotaMB = ramQuotaMB
        self.replicaNumber = replicaNumber
        self.flushEnabled = flushEnabled
        self.authType = authType
        self.evictionPolicy = evictionPolicy
        self.numVBuckets = numVBuckets
        self.purgeInterval = purgeInterval
    }

    /// The bucket's collections manifest (`collections`, else `_default._default` only).
    public var collectionsManifest: CollectionsManifest { collections ?? .initial }

    /// RAM quota in bytes.
    public var ramQuotaBytes: Int { ramQuotaMB * 1024 * 1024 }

    /// The tombstone purge age in nanoseconds (`purgeInterval`, else the default).
    public var purgeAgeNanoseconds: UInt64 { Self.purgeAgeNanoseconds(days: purgeInterval) }

    /// A purge interval in days (nil or NaN: the default) as nanoseconds, clamped to 0 ... `UInt64.max`.
    public static func purgeAgeNanoseconds(days given: Double?) -> UInt64 {
        let days = given.flatMap { $0.isNaN ? nil : $0 } ?? Limits.defaultPurgeIntervalDays
        let ns = max(0, days) * 86_400 * 1e9
        return ns < 1.8e19 ? UInt64(ns) : UInt64.max
    }
}
