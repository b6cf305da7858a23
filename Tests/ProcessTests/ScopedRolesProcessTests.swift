import Foundation
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTLS
import SetteeTestSupport
import Testing

/// Roles qualified by scope and collection on one real node (issue 70 item 2's must-show, ADR 0141): the same key in
/// two collections holds two values, and a `data_reader[demo:s:c1]` user reads c1 and is refused c2 on every port
/// that reaches a collection.
@Suite(.serialized, .onTestThreads) struct ScopedRolesProcessTests {
    /// Proves, on a `--tls` node with a SASL bucket `demo` holding `k` in `_default._default`, `s.c1` and `s.c2`
    /// (three values), for the user `reader` = `data_reader[demo:s:c1]`:
    /// - the role is stored and listed with Couchbase 7's `bucket_name`/`scope_name`/`collection_name`, and a
    ///   malformed qualified role is refused 400;
    /// - the table below, one row per port: each reads c1 (where the port reaches collections) and refuses c2 as
    ///   kv_engine does (UNKNOWN_COLLECTION, as if c2 did not exist: no privilege there), refuses a write to c1
    ///   with EACCESS (a privilege there, not that one), and hides c2 from every listing.
    @Test func collectionReaderReadsItsCollectionAndIsRefusedTheOtherOnEveryPort() async throws {
        let server = try ServerProcess(name: "scoped-roles")
        let kvTLS = try freePort()
        let adminTLS = try freePort()
        server.extraArguments = ["--tls", "--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(adminTLS)"]
        try server.start()
        defer { server.stopAndRemove() }
        try Loopback.waitUntilListening([kvTLS])
        try server.initialize(authType: "sasl")
        for (path, name) in [("", "s"), ("/s/collections", "c1"), ("/s/collections", "c2")] {
            let r = try server.http("POST", "/pools/default/buckets/demo/scopes\(path)", form: [("name", name)])
            try #require(r.status == 200, "create \(name): \(r.status) \(r.text)")
        }
        let (c1, c2): (UInt8, UInt8) = (8, 9)  // the first two user collection ids, one LEB128 byte each
        let key = "k"
        let vb = VBucketHash.vbucket(forKey: Array(key.utf8)).rawValue
        func keyIn(_ id: UInt8) -> String { String(decoding: [id], as: UTF8.self) + key }
        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)

        // The administrator writes the same key in three collections.
        let admin = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        try admin.hello([.collections])
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        #expect(try admin.request(.selectBucket, key: "demo").status == .success)
        for (id, value) in [(UInt8(0), "default"), (c1, "c1"), (c2, "c2")] {
            let r = try admin.request(
                .set, key: keyIn(id), value: Array(#"{"in":"\#(value)"}"#.utf8), extras: extras, vbucket: vb)
            #expect(r.status == .success, "set in \(value)")
        }
        func value(_ f: Frame) -> String { String(buffer: f.value) }
        #expect(value(try admin.request(.get, key: keyIn(c1), vbucket: vb)).hasSuffix(#"{"in":"c1"}"#))
        #expect(value(try admin.request(.get, key: keyIn(c2), vbucket: vb)).hasSuffix(#"{"in":"c2"}"#))

        // The user, its role as Couchbase 7 lists it, and a malformed role refused.
        let made = try server.http(
            "PUT", "/settings/rbac/users/local/reader",
            form: [("password", "secret1"), ("roles", "data_reader[demo:s:c1]")])
        #expect(made.status == 200, "\(made.text)")
        let listed = try server.http("GET", "/settings/rbac/users/local/reader").text
        #expect(
            listed.contains(#""role":"data_reader","bucket_name":"demo","scope_name":"s","collection_name":"c1""#),
            "\(listed)")
        for bad in ["data_reader[demo:s:c1:x]", "data_reader[demo:*:c1]", "bucket_full_access[demo:s]"] {
            let r = try server.http(
                "PUT", "/settings/rbac/users/local/bad", form: [("password", "secret1"), ("roles", bad)])
            #expect(r.status == 400 && r.text.contains(bad), "\(bad): \(r.status) \(r.text)")
        }
        let reader = ("reader", "secret1")

        // KV, plain port, a collection-aware connection.
        let kv = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        try kv.hello([.collections, .xerror])
        #expect(try kv.authenticate(user: reader.0, password: reader.1) == .success)
        #expect(try kv.request(.selectBucket, key: "demo").status == .success)
        let readC1 = try kv.request(.get, key: keyIn(c1), vbucket: vb)
        #expect(readC1.status == .success && value(readC1).hasSuffix(#"{"in":"c1"}"#))
        // KV, plain port, a connection that did not negotiate collections: `_default._default` only, no privilege.
        let legacy = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        #expect(try legacy.authenticate(user: reader.0, password: reader.1) == .success)
        #expect(try legacy.request(.selectBucket, key: "demo").status == .success)
        // KV, TLS port, through the smart client (collection ids resolved with GET_COLLECTION_ID).
        let identity = try TLSIdentity.load(
            certificatePath: server.dataDir + "/tls/cert.pem", keyPath: server.dataDir + "/tls/key.pem")
        var options = ClientOptions(
            seeds: [.kv(NodeAddress(host: "127.0.0.1", port: kvTLS))], bucket: "demo", username: reader.0,
            password: reader.1, operationTimeoutMs: 15_000, connectTimeoutMs: 5_000, configPollIntervalMs: 0)
        options.tls = .pinned(fingerprint: identity.fingerprint)
        options.collections = true
        let tls = try await BucketClient.connect(options)
        defer { Task { await tls.close() } }
        #expect(try await tls.collection("s", "c1").get(key).value == Array(#"{"in":"c1"}"#.utf8))
        func tlsOutcome(_ body: () async throws -> Void) async -> String {
            do {
                try await body()
                return "allowed"
            } catch ClientError.collectionNotFound {
                return "collectionNotFound"
            } catch ClientError.bucketNotFound {
                return "accessDenied"  // the client's name for EACCESS
            } catch {
                return "\(error)"
            }
        }
        // REST: the collection listing and the documents endpoint (default collection only, as in Couchbase).
        let scopes = try server.http("GET", "/pools/default/buckets/demo/scopes", auth: reader)
        #expect(scopes.status == 200 && scopes.text.contains(#""name":"c1""#), "\(scopes.text)")

        // Port -> what the reader gets for c2 (and for a write to c1, and for listings).
        let table: [(port: String, expected: String, observed: String)] = [
            ("kv get c2", "\(Status.unknownCollection)", "\(try kv.request(.get, key: keyIn(c2), vbucket: vb).status)"),
            (
                "kv set c1", "\(Status.accessDenied)",
                "\(try kv.request(.set, key: keyIn(c1), value: Array("{}".utf8), extras: extras, vbucket: vb).status)"
            ),
            (
                "kv get _default._default", "\(Status.unknownCollection)",
                "\(try kv.request(.get, key: keyIn(0), vbucket: vb).status)"
            ),
            (
                "kv GET_COLLECTION_ID s.c2", "\(Status.unknownCollection)",
                "\(try kv.request(.getCollectionID, value: Array("s.c2".utf8), vbucket: 0).status)"
            ),
            (
                "kv GET_COLLECTION_ID _default._default", "\(Status.unknownScope)",
                "\(try kv.request(.getCollectionID, value: Array("_default._default".utf8), vbucket: 0).status)"
            ),
            (
                "kv GET_COLLECTIONS_MANIFEST lists c2", "false",
                "\(value(try kv.request(.getCollectionsManifest, vbucket: 0)).contains("c2"))"
            ),
            ("kv (no collections) get", "\(Status.accessDenied)", "\(try legacy.request(.get, key: key).status)"),
            (
                "kv TLS get c2", "collectionNotFound",
                await tlsOutcome { _ = try await tls.collection("s", "c2").get(key) }
            ),
            (
                "kv TLS upsert c1", "accessDenied",
                await tlsOutcome { _ = try await tls.collection("s", "c1").upsert(key, Array("{}".utf8)) }
            ),
            ("rest scopes lists c2", "false", "\(scopes.text.contains(#""name":"c2""#))"),
            ("rest scopes lists _default", "false", "\(scopes.text.contains("_default"))"),
            (
                "rest docs/k (_default._default)", "403",
                "\(try server.http("GET", "/pools/default/buckets/demo/docs/\(key)", auth: reader).status)"
            ),
            (
                "views query (_default._default)", "401",
                "\(try ViewsPortLoginProcessTests.views(server, "GET", "/demo/_design/d/_view/v", user: reader.0, password: reader.1).status)"
            ),
        ]
        for row in table {
            #expect(row.observed == row.expected, "\(row.port): expected \(row.expected), got \(row.observed)")
        }
        // The refusals changed nothing: c1 and c2 still hold their own values.
        #expect(value(try admin.request(.get, key: keyIn(c1), vbucket: vb)).hasSuffix(#"{"in":"c1"}"#))
        #expect(value(try admin.request(.get, key: keyIn(c2), vbucket: vb)).hasSuffix(#"{"in":"c2"}"#))
    }
}
