import SetteeCore

/// One role assignment as Couchbase's RBAC API spells it: `admin`, `data_reader[demo]`,
/// `bucket_full_access[*]`, `data_writer[demo:inventory]`, `data_reader[demo:inventory:airline]` (ADR 0141).
///
/// The data roles (`data_reader`, `data_writer`) may be qualified by scope and collection, as in Couchbase Server 7;
/// the other bucket roles take a bucket only. A `*` at a level covers every name there and ends the qualification:
/// `data_reader[demo:*:*]` and `data_reader[demo:*]` are `data_reader[demo]`, `data_reader[demo:s:*]` is
/// `data_reader[demo:s]` (kept as `scope`/`collection` nil). A role may name a scope or collection that does not
/// exist (yet), as Couchbase accepts: it covers whatever later bears that name.
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

        /// Whether the role may also name a scope and a collection (`[bucket:scope:collection]`): Couchbase 7's
        /// data roles. The others are refused with a scope, as ns_server refuses them.
        public var isCollectionScoped: Bool { self == .dataReader || self == .dataWriter }

        /// Display name and description for `GET /settings/rbac/roles` (Couchbase's texts, shortened).
        public var display: (name: String, desc: String) {
            switch self {
            case .admin: ("Full Admin", "Can manage all cluster features (including security).")
            case .clusterAdmin: ("Cluster Admin", "Can manage all cluster features except security.")
            case .readOnlyAdmin: ("Read-Only Admin", "Can view all cluster statistics.")
            case .bucketAdmin: ("Bucket Admin", "Can manage ALL bucket features for a given bucket.")
            case .bucketFullAccess: ("Application Access", "Full access to bucket data, including flush.")
            case .dataReader: ("Data Reader", "Can read data from a given bucket, scope or collection.")
            case .dataWriter: ("Data Writer", "Can write data to a given bucket, scope or collection.")
            case .mobileSyncGateway: ("Sync Gateway", "Can access a given bucket as a sync gateway.")
            }
        }
    }

    public var name: Name
    /// The bucket name, `*` for every bucket, nil for cluster-wide roles.
    public var bucket: String?
    /// The scope name, nil for every scope of the bucket (`*`).
    public var scope: String?
    /// The collection name (only with a scope), nil for every collection of the scope (`*`).
    public var collection: String?

    public init(name: Name, bucket: String? = nil, scope: String? = nil, collection: String? = nil) {
        self.name = name
        self.bucket = bucket
        self.scope = scope
        self.collection = scope == nil ? nil : collection
    }

    public var description: String {
        guard let bucket else { return name.rawValue }
        var parameter = bucket
        if let scope { parameter += ":" + scope }
        if let collection { parameter += ":" + collection }
        return "\(name.rawValue)[\(parameter)]"
    }

    /// Parses one role (`data_reader[demo]`, `data_reader[demo:s:c]`); nil if unknown or malformed. Malformed: a
    /// bucket-scoped role without a parameter, a cluster role with one, more than three levels, an empty level, a
    /// bucket name past `Limits.maxBucketNameLength` or with characters a bucket name cannot have, a scope or
    /// collection name that is neither `*` nor 1...`Limits.maxCollectionNameLength` characters of
    /// `A-Z a-z 0-9 _ - %`, a name after a `*` (`[*:s]`, `[b:*:c]`), or a scope on a role that is not a data role.
    /// Work is bounded by the text's length; nothing traps.
    public init?(parsing text: Substring) {
        let t = text.trimmingPrefixAndSuffixSpaces
        guard let open = t.firstIndex(of: "[") else {
            guard let n = Name(rawValue: String(t)), !n.isBucketScoped else { return nil }
            self.init(name: n)
            return
        }
        guard t.last == "]", let n = Name(rawValue: String(t[..<open])), n.isBucketScoped else { return nil }
        let parameter = t[t.index(after: open)..<t.index(before: t.endIndex)]
        // At most three levels: split no further than that, so a hostile `[a:a:a:...]` costs one pass.
        let parts = parameter.split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
        guard (1...3).contains(parts.count), !parts.contains(where: \.isEmpty) else { return nil }
        guard parts[0].utf8.count <= Limits.maxBucketNameLength,
            parts[0].allSatisfy({ $0.isLetter || $0.isNumber || "*-_.%".contains($0) })
        else { return nil }
        guard parts.count == 1 || n.isCollectionScoped else { return nil }
        var levels: [String?] = [String(parts[0])]
        for part in parts.dropFirst() {
            guard part == "*" || Self.isKeyspaceName(part) else { return nil }
            // Nothing narrower under a wildcard: `[*:s]` and `[b:*:c]` name nothing Couchbase accepts.
            guard levels.last != "*" || part == "*" else { return nil }
            levels.append(String(part))
        }
        let scope = levels.count > 1 && levels[1] != "*" ? levels[1] : nil
        let collection = levels.count > 2 && levels[2] != "*" ? levels[2] : nil
        self.init(name: n, bucket: String(parts[0]), scope: scope, collection: collection)
    }

    /// A scope or collection name a role may carry: 1...`Limits.maxCollectionNameLength` bytes of
    /// `A-Z a-z 0-9 _ - %` (`_default` and system names included: only creating a name forbids a leading `_`).
    static func isKeyspaceName(_ name: Substring) -> Bool {
        (1...Limits.maxCollectionNameLength).contains(name.utf8.count)
            && name.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || b == 0x5f
                    || b == 0x2d || b == 0x25
            }
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

    /// Whether the role reaches collection `c` of scope `s`: a cluster role or an unqualified bucket role reaches
    /// every collection, a scope role every collection of its scope, a collection role its own.
    func covers(scope s: String, collection c: String) -> Bool {
        guard let scope else { return true }
        guard scope == s else { return false }
        return collection == nil || collection == c
    }

    /// Whether the role reaches anything in scope `s` (its own scope, or every scope).
    func covers(scope s: String) -> Bool { scope == nil || scope == s }

    /// What this role grants on the whole of bucket `b`: nothing for a role qualified by a scope (it reaches only
    /// part of the bucket; ask `grants(onBucket:scope:collection:)`). Bucket-wide rights (`manage`,
    /// `streamChanges`, the system XATTRs) come only from here.
    public func grants(onBucket b: String) -> BucketGrants {
        scope == nil ? grantsAnywhere(inBucket: b) : []
    }

    /// What this role grants on collection `s.c` of bucket `b` (ADR 0141).
    public func grants(onBucket b: String, scope s: String, collection c: String) -> BucketGrants {
        covers(scope: s, collection: c) ? grantsAnywhere(inBucket: b) : []
    }

    /// What this role grants on whatever part of bucket `b` it reaches.
    public func grantsAnywhere(inBucket b: String) -> BucketGrants {
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

/// The answer to "may this principal do that in this collection", as kv_engine's privilege check gives it
/// (`PrivilegeAccess`: Ok, Fail, FailNoPrivileges): `allowed`; `denied` when the principal holds some privilege in
/// the collection but not the one needed (EACCESS 0x24, HTTP 403); `unknown` when it holds none at all there, so the
/// collection is answered as if it did not exist (UNKNOWN_COLLECTION 0x88 / UNKNOWN_SCOPE 0x8c) and its existence
/// does not leak.
public enum KeyspaceAccess: Equatable, Sendable {
    case allowed
    case denied
    case unknown
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
    /// The union of what these roles grant on the whole of bucket `b` (roles qualified by a scope add nothing).
    public func grants(onBucket b: String) -> BucketGrants {
        reduce(into: BucketGrants()) { $0.formUnion($1.grants(onBucket: b)) }
    }

    /// The union of what these roles grant on collection `s.c` of bucket `b`.
    public func grants(onBucket b: String, scope s: String, collection c: String) -> BucketGrants {
        reduce(into: BucketGrants()) { $0.formUnion($1.grants(onBucket: b, scope: s, collection: c)) }
    }

    /// The union of what these roles grant anywhere in bucket `b`: whether any privilege there at all (SELECT_BUCKET,
    /// the bucket's config, listing its scopes), as kv_engine lets a user select a bucket it holds anything in.
    public func grantsAnywhere(inBucket b: String) -> BucketGrants {
        reduce(into: BucketGrants()) { $0.formUnion($1.grantsAnywhere(inBucket: b)) }
    }

    /// The decision for one operation needing `needed` on collection `s.c` of bucket `b` (ADR 0141): a pure
    /// function of the roles and the names, with kv_engine's three answers (`KeyspaceAccess`).
    public func access(_ needed: BucketGrants, bucket b: String, scope s: String, collection c: String)
        -> KeyspaceAccess
    {
        let held = grants(onBucket: b, scope: s, collection: c)
        if held.isSuperset(of: needed) { return .allowed }
        return held.isEmpty ? .unknown : .denied
    }

    /// Whether collection `s.c` of bucket `b` is visible: some privilege in it (kv_engine filters
    /// GET_COLLECTIONS_MANIFEST by this).
    public func sees(bucket b: String, scope s: String, collection c: String) -> Bool {
        !grants(onBucket: b, scope: s, collection: c).isEmpty
    }

    /// Whether scope `s` of bucket `b` is visible: a role reaching the whole scope or something in it.
    public func sees(bucket b: String, scope s: String) -> Bool {
        contains { $0.covers(scope: s) && !$0.grantsAnywhere(inBucket: b).isEmpty }
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
