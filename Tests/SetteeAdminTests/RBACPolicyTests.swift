import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import SetteeAuth
import SetteeRegistry
import SetteeStorage
import Testing

@testable import SetteeAdmin

/// Every admin route × every role, allow or deny (RBAC deny by default).
@Suite struct RBACPolicyTests {
    /// The roles under test, by their Couchbase spelling; bucket roles are on bucket `b` unless named.
    static let roleNames = [
        "admin", "cluster_admin", "ro_admin", "bucket_admin[b]", "bucket_admin[*]", "bucket_full_access[b]",
        "data_reader[b]", "data_writer[b]", "data_reader[other]", "bucket_full_access[other]",
        // Qualified by scope and collection (ADR 0141): the bucket's config and scopes listing, and the documents
        // endpoint (default collection only) when the role reaches `_default._default`; never bucket management.
        "data_reader[b:s:c]", "data_writer[b:_default:_default]",
    ]

    static let everyone = Set(roleNames)
    static let clusterAdmins: Set<String> = ["admin", "cluster_admin"]
    static let clusterReaders: Set<String> = ["admin", "cluster_admin", "ro_admin"]
    static let onlyAdmin: Set<String> = ["admin"]
    static let nobody: Set<String> = []
    static let configReaders: Set<String> = [
        "admin", "cluster_admin", "ro_admin", "bucket_admin[b]", "bucket_admin[*]", "bucket_full_access[b]",
        "data_reader[b]", "data_writer[b]", "data_reader[b:s:c]", "data_writer[b:_default:_default]",
    ]
    static let docReaders: Set<String> = ["admin", "cluster_admin", "bucket_full_access[b]", "data_reader[b]"]
    static let docWriters: Set<String> = [
        "admin", "cluster_admin", "bucket_full_access[b]", "data_writer[b]", "data_writer[b:_default:_default]",
    ]
    static let flushers: Set<String> = [
        "admin", "cluster_admin", "bucket_admin[b]", "bucket_admin[*]", "bucket_full_access[b]",
    ]

    /// Every route the admin server registers (paths with `b` for a bucket, `k` for a key, `u` for a user, `s` and `c`
    /// for a scope and a collection),
    /// and which roles may call it.
    static let table: [(HTTPRequest.Method, String, Set<String>)] = [
        (.get, "/pools", everyone),
        (.get, "/pools/default", everyone),
        (.get, "/pools/nodes", everyone),
        (.post, "/pools/default", clusterAdmins),
        (.post, "/node/controller/setupServices", onlyAdmin),
        (.post, "/settings/web", onlyAdmin),
        (.post, "/clusterInit", onlyAdmin),
        (.get, "/pools/default/buckets", everyone),
        (.post, "/pools/default/buckets", clusterAdmins),
        (.get, "/pools/default/buckets/b", configReaders),
        (.post, "/pools/default/buckets/b", clusterAdmins),
        (.delete, "/pools/default/buckets/b", clusterAdmins),
        (.post, "/pools/default/buckets/b/controller/doFlush", flushers),
        // Compaction (ADR 0154): the bucket's managers, as flush; its stats: anyone with a privilege in the bucket.
        (.post, "/pools/default/buckets/b/controller/compactBucket", flushers),
        (.post, "/pools/default/buckets/b/controller/compactDatabases", flushers),
        (.post, "/pools/default/buckets/b/controller/cancelBucketCompaction", flushers),
        (.get, "/pools/default/buckets/b/stats", configReaders),
        (.get, "/pools/default/b/b", configReaders),
        (.get, "/pools/default/buckets/b/docs", docReaders),
        (.get, "/pools/default/buckets/b/docs/k", docReaders),
        (.post, "/pools/default/buckets/b/docs/k", docWriters),
        (.delete, "/pools/default/buckets/b/docs/k", docWriters),
        (.get, "/pools/default/buckets/b/ddocs", docReaders),
        (.get, "/pools/default/buckets/b/scopes", configReaders),
        (.post, "/pools/default/buckets/b/scopes", flushers),
        (.delete, "/pools/default/buckets/b/scopes/s", flushers),
        (.post, "/pools/default/buckets/b/scopes/s/collections", flushers),
        (.delete, "/pools/default/buckets/b/scopes/s/collections/c", flushers),
        (.get, "/settee/views/b/_design/x", nobody),
        (.put, "/settee/views/b/_design/x", nobody),
        (.post, "/settee/views/b/_design/x", nobody),
        (.delete, "/settee/views/b/_design/x", nobody),
        (.get, "/metrics", clusterReaders),
        (.get, "/settings/rbac/roles", clusterReaders),
        (.get, "/settings/rbac/users", clusterReaders),
        (.get, "/settings/rbac/users/local", clusterReaders),
        (.get, "/settings/rbac/users/local/u", clusterReaders),
        (.put, "/settings/rbac/users/local/u", onlyAdmin),
        (.delete, "/settings/rbac/users/local/u", onlyAdmin),
        (.get, "/settee/internal/node", nobody),
        (.get, "/settee/internal/heartbeat", nobody),
        (.get, "/settee/internal/config", nobody),
        (.post, "/settee/internal/config", nobody),
        (.post, "/settee/internal/join", nobody),
        (.post, "/settee/internal/leave", nobody),
        (.get, "/settee/internal/seqnos", nobody),
        (.post, "/settee/internal/promise", nobody),
        (.post, "/settee/internal/fence", nobody),
        (.post, "/settee/internal/flush", nobody),
        (.post, "/settee/internal/handover", nobody),
        (.post, "/settee/internal/certificate", nobody),
        (.post, "/node/controller/reloadCertificate", onlyAdmin),
        // The audit settings are security settings; logs collection is cluster management, its archive security's
        // (ADR 0148).
        (.get, "/settings/audit", onlyAdmin),
        (.get, "/settings/audit/descriptors", onlyAdmin),
        (.post, "/settings/audit", onlyAdmin),
        (.post, "/controller/startLogsCollection", clusterAdmins),
        (.post, "/settee/internal/collectLogs", nobody),
        (.get, "/collectInfo/f", onlyAdmin),
        (.get, "/logs", clusterReaders),
        (.get, "/diag", onlyAdmin),
        (.get, "/sasl_logs", onlyAdmin),
        (.get, "/sasl_logs/info", onlyAdmin),
        (.get, "/pools/default/trustedCAs", onlyAdmin),
        (.post, "/node/controller/loadTrustedCAs", onlyAdmin),
        (.post, "/controller/addNode", onlyAdmin),
        (.post, "/controller/rotateInternalSecret", onlyAdmin),
        (.post, "/controller/rebalance", clusterAdmins),
        (.post, "/controller/stopRebalance", clusterAdmins),
        (.get, "/pools/default/rebalanceProgress", clusterReaders),
        (.get, "/pools/default/tasks", clusterReaders),
        (.post, "/controller/failOver", clusterAdmins),
        (.post, "/controller/startGracefulFailover", clusterAdmins),
        (.post, "/controller/setRecoveryType", clusterAdmins),
        (.get, "/settings/autoFailover", clusterReaders),
        (.post, "/settings/autoFailover", clusterAdmins),
        (.post, "/settings/autoFailover/resetCount", clusterAdmins),
        (.get, "/settings/autoCompaction", clusterReaders),
        (.post, "/controller/setAutoCompaction", clusterAdmins),
        (.post, "/controller/reportBackupTask", clusterAdmins),
        // Not routes: deny by default leaves them to the full admin (who gets a 404).
        (.post, "/settings/somethingNew", onlyAdmin),
        (.get, "/diag/eval", onlyAdmin),
        (.put, "/pools/default/buckets/b", onlyAdmin),
        (.get, "/pools/default/buckets/b/docs/k/extra", onlyAdmin),
        (.get, "/settee/internal/anything", nobody),
    ]

    /// Routes the middleware answers before any role is looked at (console pages, log-in, `GET /`).
    static let openBeforeRBAC: Set<String> = [
        "GET /", "GET /ui", "GET /ui/f", "POST /uilogin", "POST /uilogout",
    ]

    /// Proves deny by default route by route: a cluster_admin cannot replace the admin's credentials
    /// (`POST /settings/web`), initialise, add a node or touch users; a ro_admin cannot read documents through
    /// the console's documents endpoint; nobody but the admin and the nodes reaches `/settee/internal/...`
    /// (the cluster document with the node secret); an unlisted route needs the full admin.
    @Test func everyRouteTimesEveryRole() throws {
        for (method, path, allowed) in Self.table {
            for name in Self.roleNames {
                let role = try #require(Role(parsing: Substring(name)))
                let got = RBACPolicy.allows(roles: [role], method: method, path: path)
                #expect(got == allowed.contains(name), "\(method) \(path) as \(name)")
            }
            // A user without roles may only list the pools.
            let bare = RBACPolicy.allows(roles: [], method: method, path: path)
            #expect(bare == (allowed == Self.everyone), "\(method) \(path) without roles")
        }
    }

    /// Proves the table above is complete: every route registered in Sources/SetteeAdmin appears in it (or
    /// is answered before RBAC), so a new route cannot slip in without a decision here.
    @Test func tableCoversEveryRegisteredRoute() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/SetteeAdmin")
        let files = try #require(FileManager.default.enumerator(atPath: root.path))
            .compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        let pattern = try NSRegularExpression(pattern: #"router\.(get|post|put|delete|patch|head)\("([^"]*)""#)
        let known = Set(Self.table.map { "\($0.0) \($0.1)" }).union(Self.openBeforeRBAC)
        var found = 0
        for file in files {
            let text = try String(contentsOfFile: root.appendingPathComponent(file).path, encoding: .utf8)
            let range = NSRange(text.startIndex..., in: text)
            for m in pattern.matches(in: text, range: range) {
                guard let methodRange = Range(m.range(at: 1), in: text), let pathRange = Range(m.range(at: 2), in: text)
                else { continue }
                let method = text[methodRange].uppercased()
                let path = text[pathRange].split(separator: "/", omittingEmptySubsequences: false).map { seg in
                    switch seg {
                    case ":name": "b"
                    case ":id": "k"
                    case ":user": "u"
                    case ":file": "f"
                    case ":scope": "s"
                    case ":collection": "c"
                    case "**": "b/_design/x"
                    default: String(seg)
                    }
                }.joined(separator: "/")
                found += 1
                #expect(known.contains("\(method) \(path)"), "\(file): \(method) \(path) has no RBAC row")
            }
        }
        #expect(found >= 40)
    }

    /// Proves the policy over HTTP: a cluster_admin's `POST /settings/web` is 403 and leaves the admin's
    /// password working; a ro_admin's read of a document is 403.
    @Test func clusterAdminCannotReplaceAdminCredentials() async throws {
        try await withAdmin { client, registry in
            _ = try await call(client, .post, "/pools/default/buckets", form: "name=b&ramQuotaMB=100&replicaNumber=0")
            for (user, role) in [("ops", "cluster_admin"), ("viewer", "ro_admin")] {
                let put = try await call(
                    client, .put, "/settings/rbac/users/local/\(user)", form: "password=\(user)-pw1&roles=\(role)")
                #expect(put.status == .ok)
            }
            let ops = RBACAPITests.basic("ops", "ops-pw1")
            let takeover = try await call(
                client, .post, "/settings/web", form: "username=Administrator&password=hijacked&port=SAME", auth: ops)
            #expect(takeover.status == .forbidden)
            #expect(registry.authenticate(username: "Administrator", password: "password") == .admin)
            #expect(try await call(client, .get, "/settee/internal/config", auth: ops).status == .forbidden)
            let viewer = RBACAPITests.basic("viewer", "viewer-pw1")
            #expect(try await call(client, .get, "/pools/default/buckets/b/docs", auth: viewer).status == .forbidden)
            #expect(try await call(client, .get, "/pools/default/buckets/b", auth: viewer).status == .ok)
        }
    }

    /// Proves a state change from another site's page (Origin or Sec-Fetch-Site says so) is refused before
    /// credentials are even looked at, console log-in included, while the same request without Origin (curl,
    /// the CLI, SDKs) and reads from anywhere work. Before, a form on any site could POST /settings/web with
    /// the admin's cached Basic credentials.
    @Test func crossSiteStateChangesAreRefused() async throws {
        try await withAdmin { client, registry in
            func post(_ path: String, _ form: String, headers: HTTPFields) async throws -> HTTPResponse.Status {
                var h = headers
                h[.authorization] = adminAuth
                h[.contentType] = "application/x-www-form-urlencoded"
                return try await client.execute(uri: path, method: .post, headers: h, body: ByteBuffer(string: form))
                    .status
            }
            let takeover = "username=Administrator&password=hijacked&port=SAME"
            let foreign = try await post("/settings/web", takeover, headers: [.origin: "http://evil.example"])
            #expect(foreign == .forbidden)
            let siteOnly: HTTPFields = [HTTPField.Name("Sec-Fetch-Site")!: "cross-site"]
            let bySite = try await post("/settings/web", takeover, headers: siteOnly)
            #expect(bySite == .forbidden)
            let login = try await post("/uilogin", "user=Administrator&password=password", headers: [.origin: "null"])
            #expect(login == .forbidden)
            #expect(registry.authenticate(username: "Administrator", password: "password") == .admin)
            var read: HTTPFields = [.origin: "http://evil.example"]
            read[.authorization] = adminAuth
            #expect(try await client.execute(uri: "/pools/default", method: .get, headers: read).status == .ok)
            let curl = try await post("/pools/default/buckets", "name=b&ramQuotaMB=100", headers: [:])
            #expect(curl == .accepted)
        }
    }
}
