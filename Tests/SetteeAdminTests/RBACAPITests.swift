import Foundation
import Hummingbird
import HummingbirdTesting
import SetteeAdmin
import SetteeRegistry
import SetteeStorage
import Testing

@Suite struct RBACAPITests {
    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// Proves the user lifecycle over Couchbase's RBAC API: create with roles, read back in ns_server's
    /// shape, bad roles and a missing password are 400 with field errors, update without a password
    /// keeps it, delete, then 404s; the password is persisted only as SCRAM keys.
    @Test func userLifecycle() async throws {
        try await withAdmin { client, registry in
            let put = try await call(
                client, .put, "/settings/rbac/users/local/reader",
                form: "password=reader-pw&roles=data_reader%5Bdemo%5D")
            #expect(put.status == .ok)
            let bad = try await call(
                client, .put, "/settings/rbac/users/local/x", form: "password=secret1&roles=data_reader,superuser")
            #expect(bad.status == .badRequest)
            #expect(bad.errors?["roles"]?.contains("[data_reader,superuser]") == true)
            let noPassword = try await call(client, .put, "/settings/rbac/users/local/y", form: "roles=admin")
            #expect(noPassword.errors?["password"] != nil)

            let one = try await call(client, .get, "/settings/rbac/users/local/reader")
            #expect(one.json?["id"] as? String == "reader" && one.json?["domain"] as? String == "local")
            let roles = one.json?["roles"] as? [[String: Any]]
            #expect(roles?.first?["role"] as? String == "data_reader")
            #expect(roles?.first?["bucket_name"] as? String == "demo")
            let all = try await call(client, .get, "/settings/rbac/users")
            #expect(all.jsonArray?.count == 1)

            // Role change without password keeps the password.
            let update = try await call(
                client, .put, "/settings/rbac/users/local/reader", form: "roles=bucket_full_access%5B*%5D")
            #expect(update.status == .ok)
            #expect(registry.authenticate(username: "reader", password: "reader-pw") != nil)
            #expect(registry.authenticate(username: "reader", password: "wrong-pw") == nil)
            let file = try String(contentsOfFile: registry.dataDirectory + "/node-metadata.json", encoding: .utf8)
            #expect(!file.contains("reader-pw"))

            #expect(try await call(client, .delete, "/settings/rbac/users/local/reader").status == .ok)
            #expect(try await call(client, .delete, "/settings/rbac/users/local/reader").status == .notFound)
            #expect(try await call(client, .get, "/settings/rbac/users/local/reader").status == .notFound)
            let listed = try await call(client, .get, "/settings/rbac/roles")
            #expect(listed.jsonArray?.contains { $0["role"] as? String == "data_reader" } == true)
        }
    }

    /// Proves HTTP enforcement: a data_reader may read its bucket's config but not another bucket's,
    /// not create buckets, not manage users; a wrong password is 401.
    @Test func bucketUserIsLimited() async throws {
        try await withAdmin { client, registry in
            for name in ["demo", "other"] {
                let r = try await call(
                    client, .post, "/pools/default/buckets", form: "name=\(name)&ramQuotaMB=100&replicaNumber=0")
                #expect(r.status == .accepted)
            }
            _ = try await call(
                client, .put, "/settings/rbac/users/local/reader",
                form: "password=reader-pw&roles=data_reader%5Bdemo%5D")
            let reader = Self.basic("reader", "reader-pw")
            #expect(try await call(client, .get, "/pools/default/buckets/demo", auth: reader).status == .ok)
            #expect(try await call(client, .get, "/pools/default/buckets/other", auth: reader).status == .forbidden)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=x&ramQuotaMB=100", auth: reader)
                    .status == .forbidden)
            #expect(try await call(client, .get, "/settings/rbac/users", auth: reader).status == .forbidden)
            #expect(
                try await call(client, .get, "/pools/default/buckets/demo", auth: Self.basic("reader", "nope")).status
                    == .unauthorized)

            // Listings name only the buckets the caller may read the settings of (ns_server filters them): the
            // reader sees `demo`, not `other`'s configuration and counts; the administrator sees both.
            func listed(_ path: String, _ auth: String, _ names: (Any) -> [String]) async throws -> [String] {
                let r = try await call(client, .get, path, auth: auth)
                #expect(r.status == .ok)
                return names(try JSONSerialization.jsonObject(with: Data(r.body.utf8))).sorted()
            }
            let list: (Any) -> [String] = { ($0 as? [[String: Any]] ?? []).compactMap { $0["name"] as? String } }
            let pool: (Any) -> [String] = {
                (($0 as? [String: Any])?["bucketNames"] as? [[String: Any]] ?? []).compactMap {
                    $0["bucketName"] as? String
                }
            }
            #expect(try await listed("/pools/default/buckets", reader, list) == ["demo"])
            #expect(try await listed("/pools/default", reader, pool) == ["demo"])
            #expect(try await listed("/pools/default/buckets", adminAuth, list) == ["demo", "other"])
            #expect(try await listed("/pools/default", adminAuth, pool) == ["demo", "other"])

            // Reloading the node's certificate is security, which a Cluster Admin does not manage (Couchbase).
            _ = try await call(
                client, .put, "/settings/rbac/users/local/ops", form: "password=ops-pw&roles=cluster_admin")
            let reload = try await call(
                client, .post, "/node/controller/reloadCertificate", auth: Self.basic("ops", "ops-pw"))
            #expect(reload.status == .forbidden)
            _ = registry
        }
    }
}
