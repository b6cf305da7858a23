import Foundation
import HTTPTypes
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage

/// What an admin request without credentials may read on an initialised node (docs/adr/0015), as Couchbase
/// 4.x allowed for buckets without a password: the pool listings, the bucket list (open buckets only) and
/// an `authType=none` bucket's full and terse configs. Everything else, and any request that carries
/// credentials (right or wrong), goes through the normal checks.
enum AnonymousAccess {
    /// True while a request let through without credentials runs (set by `AdminAuthMiddleware`), so the
    /// bucket listing shows only open buckets.
    @TaskLocal static var isAnonymous = false

    /// Whether a request without credentials may run (`GET` only).
    static func allows(method: HTTPRequest.Method, path: String, registry: NodeRegistry) -> Bool {
        guard method == .get else { return false }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true).map {
            PercentEncoding.decodeOrKeep(String($0))
        }
        if segments == ["pools"] || segments == ["pools", "default"] || segments == ["pools", "default", "buckets"] {
            return true
        }
        if segments.count == 4, segments[0] == "pools", segments[1] == "default",
            segments[2] == "buckets" || segments[2] == "b"
        {
            return mayRead(bucket: segments[3], registry: registry)
        }
        return false
    }

    /// Whether an anonymous caller may see `bucket` (false for unknown buckets, so a 401 tells nothing about
    /// which password-protected buckets exist).
    static func mayRead(bucket: String, registry: NodeRegistry) -> Bool {
        let open = registry.bucketSettings(named: bucket).map { $0.authType == .none } ?? false
        return BucketGrants.anonymous(bucketHasNoPassword: open).contains(.readConfig)
    }
}

/// The roles of the local RBAC user a request runs for, set by `AdminAuthMiddleware` (nil for the administrator and
/// for anonymous requests, which `AnonymousAccess` covers). Bucket listings name only the buckets these roles may
/// read the settings of, as ns_server filters its lists by permission: a `data_reader[a]` user sees bucket `a`, not
/// every bucket's configuration and counts.
enum CallerRoles {
    @TaskLocal static var roles: [Role]? = nil

    /// Whether a caller with `roles` (read from `CallerRoles.roles` on the request's task) may see `bucket` in a
    /// listing.
    static func mayList(bucket: String, roles: [Role]?) -> Bool {
        guard let roles else { return true }
        // Any privilege anywhere in the bucket shows it, `data_reader[b:s:c]` included (ADR 0141).
        return roles.grantsAnywhere(inBucket: bucket).contains(.readConfig)
    }
}
