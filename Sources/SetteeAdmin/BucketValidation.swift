import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage

/// Checks a `POST /pools/default/buckets` form the way ns_server does (`menelaus_web_buckets.erl`),
/// with its exact messages, collecting every field's error. Pure: the caller passes what it needs to know
/// about existing buckets.
struct BucketValidation {
    /// Names ns_server keeps for itself.
    static let reservedNames: Set<String> = ["_replicator.couch.1", "_users.couch.1"]

    /// Errors by field, in Couchbase's keys.
    var errors: [(String, String)] = []
    var settings: BucketSettings?

    static func validate(
        _ form: FormBody, existingNames: [String], uuid: String
    ) -> BucketValidation {
        var v = BucketValidation()
        let name = v.checkName(form["name"], existing: existingNames)
        v.checkBucketType(form["bucketType"])
        let ram = v.checkRamQuota(form["ramQuota"] ?? form["ramQuotaMB"])
        let replicas = v.checkReplicaNumber(form["replicaNumber"])
        let flush = v.checkZeroOne(
            form["flushEnabled"], field: "flushEnabled", message: "flushEnabled can only be 1 or 0")
        v.checkZeroOne(form["replicaIndex"], field: "replicaIndex", message: "replicaIndex can only be 1 or 0")
        let authType = v.checkAuthType(form["authType"])
        let eviction = v.checkEviction(form["evictionPolicy"])
        let purgeInterval = v.checkPurgeInterval(form["purgeInterval"])
        v.checkFixed(
            form["numVBuckets"], allowed: [String(Limits.numVBuckets)], field: "numVBuckets",
            message: "Number of vbuckets must be \(Limits.numVBuckets)")
        v.checkFixed(
            form["conflictResolutionType"], allowed: ["seqno"], field: "conflictResolutionType",
            message: "Conflict resolution type must be 'seqno'; 'lww' and 'custom' are not supported")
        v.checkFixed(
            form["durabilityMinLevel"], allowed: ["none"], field: "durabilityMinLevel",
            message: "Durability minimum level must be 'none'; minimum durability levels are not supported")
        if v.errors.isEmpty, let name, let ram, let replicas, let flush, let authType, let eviction {
            v.settings = BucketSettings(
                name: name, uuid: uuid, ramQuotaMB: ram, replicaNumber: replicas, flushEnabled: flush,
                authType: authType, evictionPolicy: eviction, numVBuckets: Limits.numVBuckets,
                purgeInterval: purgeInterval)
        }
        return v
    }

    /// What an edit (`POST /pools/default/buckets/NAME`) may change, checked against the current settings.
    /// Fields this node cannot change live are refused unless they repeat the current value.
    struct Edit {
        var errors: [(String, String)] = []
        var flushEnabled: Bool?
        var replicaNumber: Int?
        var purgeInterval: Double?
    }

    static func validateEdit(_ form: FormBody, current: BucketSettings) -> Edit {
        var v = BucketValidation()
        var edit = Edit()
        if let name = form["name"], name != current.name { v.fail("name", "Bucket name cannot be changed") }
        switch form["bucketType"] {
        case nil, "couchbase", "membase": break
        default: v.fail("bucketType", "Cannot change bucket type.")
        }
        if let quota = form["ramQuota"] ?? form["ramQuotaMB"] {
            if let n = v.checkRamQuota(quota), n != current.ramQuotaMB {
                v.fail("ramQuota", "Changing the RAM quota of an existing bucket is not supported by this server.")
            }
        }
        if form["replicaNumber"] != nil { edit.replicaNumber = v.checkReplicaNumber(form["replicaNumber"]) }
        if form["flushEnabled"] != nil {
            edit.flushEnabled = v.checkZeroOne(
                form["flushEnabled"], field: "flushEnabled", message: "flushEnabled can only be 1 or 0")
        }
        if form["purgeInterval"] != nil { edit.purgeInterval = v.checkPurgeInterval(form["purgeInterval"]) }
        if let e = form["evictionPolicy"], e != current.evictionPolicy {
            v.fail(
                "evictionPolicy", "Changing the eviction policy of an existing bucket is not supported by this server.")
        }
        if let a = form["authType"], a != current.authType.rawValue {
            v.fail("authType", "Changing authType of an existing bucket is not supported by this server.")
        }
        if form["conflictResolutionType"] != nil {
            v.fail("conflictResolutionType", "Conflict resolution type not allowed in update bucket")
        }
        v.checkFixed(
            form["durabilityMinLevel"], allowed: ["none"], field: "durabilityMinLevel",
            message: "Durability minimum level must be 'none'; minimum durability levels are not supported")
        edit.errors = v.errors
        return edit
    }

    private mutating func fail(_ field: String, _ message: String) { errors.append((field, message)) }

    private mutating func checkName(_ value: String?, existing: [String]) -> String? {
        guard let name = value else {
            fail("name", "Bucket name needs to be specified")
            return nil
        }
        if name.isEmpty {
            fail("name", "Bucket name cannot be empty")
        } else if name.utf8.count > Limits.maxBucketNameLength {
            fail("name", "Bucket name cannot exceed \(Limits.maxBucketNameLength) characters")
        } else if !name.utf8.allSatisfy(Self.isNameByte) {
            fail(
                "name",
                "Bucket name can only contain characters in range A-Z, a-z, 0-9 as well as underscore, period, dash & percent. Consult the documentation."
            )
        } else if name.hasPrefix(".") {
            fail("name", "Bucket name cannot start with dot.")
        } else if Self.reservedNames.contains(name) {
            fail("name", "This name is reserved for the internal use.")
        } else if existing.contains(where: { $0.lowercased() == name.lowercased() }) {
            // ns_server compares names case-insensitively: "Foo" and "foo" cannot coexist.
            fail("name", "Bucket with given name already exists")
        } else {
            return name
        }
        return nil
    }

    static func isNameByte(_ b: UInt8) -> Bool { BucketName.isNameByte(b) }

    private mutating func checkBucketType(_ value: String?) {
        switch value {
        case nil, "couchbase", "membase": return
        case "memcached": fail("bucketType", "memcached buckets are no longer supported")
        default: fail("bucketType", "invalid bucket type")
        }
    }

    private mutating func checkRamQuota(_ value: String?) -> Int? {
        guard let value, let n = Int(value) else {
            fail("ramQuota", "The RAM Quota must be specified and must be a positive integer.")
            return nil
        }
        if n < 0 {
            fail("ramQuota", "The RAM Quota cannot be negative.")
        } else if n < Limits.minBucketRamQuotaMB {
            fail("ramQuota", "RAM quota cannot be less than \(Limits.minBucketRamQuotaMB) MiB")
        } else if n > Limits.maxBucketRamQuotaMB {
            fail("ramQuota", "RAM quota cannot be more than \(Limits.maxBucketRamQuotaMB) MiB")
        } else {
            return n
        }
        return nil
    }

    private mutating func checkReplicaNumber(_ value: String?) -> Int? {
        guard let value else { return 1 }
        guard let n = Int(value), n >= 0 else {
            fail("replicaNumber", "The replica number must be specified and must be a non-negative integer.")
            return nil
        }
        guard n <= 3 else {
            fail("replicaNumber", "Replica number larger than 3 is not supported.")
            return nil
        }
        return n
    }

    @discardableResult
    private mutating func checkZeroOne(_ value: String?, field: String, message: String) -> Bool? {
        switch value {
        case nil, "0": return false
        case "1": return true
        default:
            fail(field, message)
            return nil
        }
    }

    private mutating func checkAuthType(_ value: String?) -> BucketSettings.AuthType? {
        guard let value else { return .sasl }
        guard let t = BucketSettings.AuthType(rawValue: value) else {
            fail("authType", "authType must be 'none' or 'sasl'")
            return nil
        }
        return t
    }

    private mutating func checkEviction(_ value: String?) -> String? {
        switch value {
        case nil: return "valueOnly"
        case "valueOnly", "fullEviction": return value
        default:
            fail("evictionPolicy", "Eviction policy must be either 'valueOnly' or 'fullEviction' for couchbase buckets")
            return nil
        }
    }

    /// Couchbase's metadata purge interval in days (a decimal: 0.04 is about an hour), nil when not given.
    private mutating func checkPurgeInterval(_ value: String?) -> Double? {
        guard let value else { return nil }
        guard let days = Double(value), Limits.purgeIntervalDays.contains(days) else {
            fail(
                "purgeInterval",
                "Metadata purge interval must be a number between \(Limits.purgeIntervalDays.lowerBound) and "
                    + "\(Int(Limits.purgeIntervalDays.upperBound)) days")
            return nil
        }
        return days
    }

    private mutating func checkFixed(_ value: String?, allowed: Set<String>, field: String, message: String) {
        if let value, !allowed.contains(value) { fail(field, message) }
    }
}
