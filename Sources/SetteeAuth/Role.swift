/// One role assignment as Couchbase's RBAC API spells it: `admin`, `data_reader[demo]`,
/// `bucket_full_access[*]`, `data_writer[demo:_default:_default]`. Scope and collection are accepted
/// and kept, but grants apply to the whole bucket (settee has only the default collection).
public struct Role: Hashable, Sendable, CustomStringConvertible {
    public enum Name: String, Sendable, CaseIterable {
        case admin
        case clusterAdmin = "cluster_admin"
        case readOnlyAdmin = "ro_admin"
        case bucketAdmin = "bucket_admin"
        case bucketFullAccess = "bucket_full_access"
        case dataReader = "data_reader"
        case dataWriter = "data_writer"
        /// Couchbase's "Sync Gateway" role: what a gateway's credentials need on its bucket (data, change
        /// streams and the system XATTR `_sync`), without flush or bucket settings.
        case mobileSyncGateway = "mobile_sync_gateway"

        /// Whether the role takes a `[bucket]` parameter.
        public var isBucketScoped: Bool {
            switch self {
            case .admin, .clusterAdmin, .readOnlyAdmin: false
            default: true
            }
        }

        /// Display name and description for `GET /settings/rbac/roles` (Couchbase's texts, shortened).
        public var display: (name: String, desc: String) {
            switch self {
            case .admin: ("Full Admin", "Can manage all cluster features (including security).")
            case .clusterAdmin: ("Cluster Admin", "Can manage all cluster features except security.")
            case .readOnlyAdmin: ("Read-Only Admin", "Can view all cluster statistics.")
            case .bucketAdmin: ("Bucket Admin", "Can manage ALL bucket features for a given bucket.")
            case .bucketFullAccess: ("Application Access", "Full access to bucket data, including flush.")
            case .dataReader: ("Data Reader", "Can read data from a given bucket.")
            case .dataWriter: ("Data Writer", "Can write data to a given bucket.")
            case .mobileSyncGateway: ("Sync Gateway", "Can access a given bucket as a sync gateway.")
            }
        }
    }

    public var name: Name
    /// The bucket name, `*` for every bucket, nil for cluster-wide roles.
    public var bucket: String?
    public var scope: String?
    public var collection: String?

    public init(name: Name, bucket: String? = nil, scope: String? = nil, collection: String? = nil) {
        self.name = name
        self.bucket = bucket
        self.scope = scope
        self.collection = collection
    }

    public var description: String {
        guard let bucket else { return name.rawValue }
        var parameter = bucket
        if let scope { parameter += ":" + scope }
        if let collection { parameter += ":" + collection }
        return "\(name.rawValue)[\(parameter)]"
    }

    /// Parses one role (`data_reader[demo]`); nil if unknown or malformed. A bucket-scoped role
    /// without a parameter is malformed, as in Couchbase.
    public init?(parsing text: Substring) {
        let t = text.trimmingPrefixAndSuffixSpaces
        guard let open = t.firstIndex(of: "[") else {
            guard let n = Name(rawValue: String(t)), !n.isBucketScoped else { return nil }
            self.init(name: n)
            return
        }
        guard t.last == "]", let n = Name(rawValue: String(t[..<open])), n.isBucketScoped else { return nil }
        let parameter = t[t.index(after: open)..<t.index(before: t.endIndex)]
        let parts = parameter.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard (1...3).contains(parts.count), !parts.contains(where: \.isEmpty) else { return nil }
        guard parts[0].allSatisfy({ $0.isLetter || $0.isNumber || "*-_.%".contains($0) }) else { return nil }
        self.init(
            name: n, bucket: parts[0], scope: parts.count > 1 ? parts[1] : nil,
            collection: parts.count > 2 ? parts[2] : nil)
    }

    /// Parses a comma-separated list; `.failure` carries the entries that are unknown or malformed.
    public static func parseList(_ text: String) -> Result<[Role], RoleListError> {
        var roles: [Role] = []
        var bad: [String] = []
        for item in text.split(separator: ",") where !item.trimmingPrefixAndSuffixSpaces.isEmpty {
            if let r = Role(parsing: item) {
                if !roles.contains(r) { roles.append(r) }
            } else {
                bad.append(String(item.trimmingPrefixAndSuffixSpaces))
            }
        }
        return bad.isEmpty ? .success(roles) : .failure(RoleListError(invalid: bad))
    }

    func covers(bucket b: String) -> Bool { bucket == "*" || bucket == b }

    /// What this role grants on bucket `b`.
    public func grants(onBucket b: String) -> BucketGrants {
        switch name {
        case .admin, .clusterAdmin: return .all
        case .readOnlyAdmin: return [.readConfig]
        case .bucketAdmin: return covers(bucket: b) ? [.readConfig, .manage, .systemXattrs] : []
        case .bucketFullAccess:
            return covers(bucket: b) ? [.readConfig, .read, .write, .manage, .streamChanges, .systemXattrs] : []
        case .dataReader: return covers(bucket: b) ? [.readConfig, .read] : []
        case .dataWriter: return covers(bucket: b) ? [.readConfig, .write] : []
        case .mobileSyncGateway:
            return covers(bucket: b) ? [.readConfig, .read, .write, .streamChanges, .systemXattrs] : []
        }
    }
}

/// Unknown or malformed role names in a role list.
public struct RoleListError: Error, Equatable, Sendable {
    public var invalid: [String]
    public init(invalid: [String]) { self.invalid = invalid }
}

/// What a principal may do on one bucket.
public struct BucketGrants: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// SELECT_BUCKET, GET_CLUSTER_CONFIG, `GET /pools/default/buckets/NAME`.
    public static let readConfig = BucketGrants(rawValue: 1 << 0)
    /// Document reads (GET, GET_META, ...).
    public static let read = BucketGrants(rawValue: 1 << 1)
    /// Document writes (SET, DELETE, INCR, TOUCH, ...).
    public static let write = BucketGrants(rawValue: 1 << 2)
    /// Flush and bucket settings.
    public static let manage = BucketGrants(rawValue: 1 << 3)
    /// Opening a DCP producer (change streams of the whole bucket), as Couchbase's `DcpProducer`
    /// privilege: what a sync gateway needs besides reads and writes.
    public static let streamChanges = BucketGrants(rawValue: 1 << 4)
    /// Couchbase's SystemXattrRead: reading system extended attributes (`_…`, such as the gateway's `_sync`).
    public static let systemXattrRead = BucketGrants(rawValue: 1 << 5)
    /// Couchbase's SystemXattrWrite: writing them.
    public static let systemXattrWrite = BucketGrants(rawValue: 1 << 6)
    public static let systemXattrs: BucketGrants = [.systemXattrRead, .systemXattrWrite]
    public static let all: BucketGrants = [.readConfig, .read, .write, .manage, .streamChanges, .systemXattrs]

    /// What a connection or request without credentials may do on a bucket (docs/adr/0015): on a bucket
    /// without a password (`authType=none`, Couchbase 4.x's open buckets) its config, its documents and
    /// its change stream, but never its settings (`manage`); on any other bucket nothing. Every anonymous
    /// check (KV SELECT_BUCKET, data ops, DCP_OPEN; admin bucket reads) asks this one function.
    public static func anonymous(bucketHasNoPassword: Bool) -> BucketGrants {
        bucketHasNoPassword ? [.readConfig, .read, .write, .streamChanges, .systemXattrs] : []
    }
}

/// Cluster-wide rights outside any one bucket.
public enum ClusterRight: Sendable {
    /// Read-only admin endpoints (GET on cluster settings, pools, buckets listings).
    case read
    /// Cluster and bucket management (settings, create/delete buckets, nodes).
    case manage
    /// Users and roles (`/settings/rbac/...`).
    case security
}

extension Collection<Role> {
    /// The union of what these roles grant on bucket `b`.
    public func grants(onBucket b: String) -> BucketGrants {
        reduce(into: BucketGrants()) { $0.formUnion($1.grants(onBucket: b)) }
    }

    /// Whether these roles give a cluster-wide right.
    public func allows(_ right: ClusterRight) -> Bool {
        contains { r in
            switch (r.name, right) {
            case (.admin, _): true
            case (.clusterAdmin, .read), (.clusterAdmin, .manage): true
            case (.readOnlyAdmin, .read): true
            default: false
            }
        }
    }
}

extension Substring {
    fileprivate var trimmingPrefixAndSuffixSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}
