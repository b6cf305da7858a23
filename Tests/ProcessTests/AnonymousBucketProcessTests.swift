import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SetteeClient
import SetteeGateway
import SetteeJSON
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Buckets without a password used without credentials (ADR 0015), on real `settee-server` and
/// `settee-gateway` processes: the admin reads Couchbase 4.x allowed, anonymous DCP, and seed 000's config
/// mounting a cluster bucket unchanged.
@Suite("Anonymous access to authType=none buckets (real processes)", .serialized, .onTestThreads)
struct AnonymousBucketProcessTests {
    static func names(_ r: ServerProcess.HTTPResult) -> [String] {
        ((try? r.json()) as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }.sorted()
    }

    static func dcpOpen(_ c: TestKVClient, name: String = "anon") throws -> Status {
        var open = ByteBuffer()
        open.writeInteger(UInt32(0))
        open.writeInteger(DCPOpenFlags.producer)
        return try c.request(.dcpOpen, key: name, extras: Array(open.readableBytesView), vbucket: 0).status
    }

    @Test func anonymousAdminReads() throws {
        // Proves the admin API without credentials: pools answer; the bucket list shows only the
        // authType=none bucket; that bucket's full and terse configs answer, the sasl bucket's (and an
        // unknown one's) are 401; writes, RBAC and other endpoints stay 401; a wrong password is 401 even
        // on the routes open to anonymous callers.
        let node = try ServerProcess.started(name: "anon-admin")
        defer { node.stopAndRemove() }
        try node.initialize(bucket: "secret", authType: "sasl")
        let created = try node.http(
            "POST", "/pools/default/buckets", form: [("name", "open"), ("ramQuotaMB", "100"), ("authType", "none")])
        #expect(created.status == 202, "\(created.text)")

        for path in ["/pools", "/pools/default", "/pools/default/buckets/open", "/pools/default/b/open"] {
            let r = try node.http("GET", path, useAuth: false)
            #expect(r.status == 200, "\(path): \(r.status) \(r.text)")
        }
        let list = try node.http("GET", "/pools/default/buckets", useAuth: false)
        #expect(list.status == 200)
        #expect(Self.names(list) == ["open"], "\(list.text)")
        #expect(Self.names(try node.http("GET", "/pools/default/buckets")) == ["open", "secret"])
        for path in [
            "/pools/default/buckets/secret", "/pools/default/b/secret", "/pools/default/buckets/nosuch",
            "/settings/rbac/users", "/pools/default/rebalanceProgress", "/pools/default/buckets/open/docs/k",
        ] {
            let r = try node.http("GET", path, useAuth: false)
            #expect(r.status == 401, "\(path): \(r.status)")
        }
        let writes: [(String, String, [(String, String)]?)] = [
            ("POST", "/pools/default/buckets", [("name", "x"), ("ramQuotaMB", "100"), ("authType", "none")]),
            ("POST", "/pools/default/buckets/open", [("ramQuotaMB", "120")]),
            ("DELETE", "/pools/default/buckets/open", nil),
            ("POST", "/pools/default/buckets/open/controller/doFlush", nil),
            ("POST", "/controller/rebalance", [("knownNodes", "x")]),
        ]
        for (method, path, form) in writes {
            let r = try node.http(method, path, form: form, useAuth: false)
            #expect(r.status == 401, "\(method) \(path): \(r.status)")
        }
        for path in ["/pools", "/pools/default/buckets", "/pools/default/buckets/open", "/pools/default/b/open"] {
            let r = try node.http("GET", path, auth: ("Administrator", "wrong"))
            #expect(r.status == 401, "wrong password on \(path): \(r.status)")
        }
        #expect(try node.http("GET", "/pools/default/buckets/open").status == 200)
    }

    @Test func anonymousDCP() async throws {
        // Proves DCP_OPEN without credentials is refused while the only bucket has a password (and that
        // bucket cannot be selected), and accepted on an authType=none bucket; the smart client's change
        // stream without a username then delivers a write, and on the sasl bucket fails asking for credentials.
        // An anonymous connection's name with a newline cannot forge a log line (issue 72): the server logs it on
        // the opening's own line, the newline escaped.
        let node = try ServerProcess.started(name: "anon-dcp")
        defer { node.stopAndRemove() }
        try node.initialize(bucket: "secret", authType: "sasl")
        let refused = try TestKVClient(port: node.kvPort)
        #expect(try refused.request(.selectBucket, key: "secret").status == .accessDenied)
        #expect(try Self.dcpOpen(refused) == .accessDenied)

        let created = try node.http(
            "POST", "/pools/default/buckets", form: [("name", "open"), ("ramQuotaMB", "100"), ("authType", "none")])
        #expect(created.status == 202, "\(created.text)")
        let open = try TestKVClient(port: node.kvPort)
        #expect(try open.request(.selectBucket, key: "open").status == .success)
        #expect(try Self.dcpOpen(open) == .success)
        let forger = try TestKVClient(port: node.kvPort)
        #expect(try forger.request(.selectBucket, key: "open").status == .success)
        #expect(try Self.dcpOpen(forger, name: "x\n2026-11-29T00:00:00+0000 critical FORGED\r\u{2028}") == .success)
        let log = try String(contentsOf: node.logURL, encoding: .utf8)
        #expect(!log.split(separator: "\n").contains { $0.hasPrefix("2026-11-29T00:00:00+0000 critical FORGED") })
        #expect(log.contains(#"x\u{a}2026-11-29T00:00:00+0000 critical FORGED\u{d}\u{2028}"#), "\(log.suffix(2000))")

        let seeds: [Seed] = [.http(NodeAddress(host: "127.0.0.1", port: node.adminPort))]
        let options = ClientOptions(seeds: seeds, bucket: "open", operationTimeoutMs: 10_000)
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        let client = try await BucketClient.connect(options, logger: quietClientLogger)
        _ = try await client.upsert("anon-doc", Array("{\"a\":1}".utf8))
        await client.close()
        var seen = false
        for await batch in stream.batches {
            if batch.events.contains(where: { $0.kind == .mutation && $0.key == Array("anon-doc".utf8) }) {
                seen = true
                break
            }
        }
        await stream.close()
        #expect(seen)

        // Bootstrapping from the admin port (HTTP 401) or from a KV port (SELECT_BUCKET refused).
        let kvSeeds: [Seed] = [.kv(NodeAddress(host: "127.0.0.1", port: node.kvPort))]
        for seeds in [seeds, kvSeeds] {
            var secretError = ""
            do {
                let s = try await ChangeStream.open(
                    ClientOptions(seeds: seeds, bucket: "secret", operationTimeoutMs: 10_000), logger: quietClientLogger
                )
                await s.close()
            } catch { secretError = "\(error)" }
            #expect(secretError.contains("without credentials"), "\(secretError)")
        }
    }

    @Test func seed000MountsAClusterBucketUnchanged() async throws {
        // Proves seed 000's config, with only hosts and ports replaced, mounts bucket `demo` of a 2-node
        // cluster (authType none) with no username or password: GUEST writes a document with `channels` and
        // `_changes` lists it; an SDK-style KV write (smart client, no credentials) reads the gateway's
        // document as exactly its JSON (the seed names no `enable_shared_bucket_access`, so the database has shared
        // access, Sync Gateway 3.0's default: `_sync` is an XATTR); a KV write is imported when a client reads it
        // (on demand, as Sync Gateway 2.x and later do) though the seed has no `import_docs`; after
        // `PUT /demo/_config` turns `import_docs` on, a later KV write is imported and appears in `_changes`;
        // after a rebalance (one node ejected) reads and writes through the gateway still work.
        let a = try ServerProcess(name: "seed000-a")
        let b = try ServerProcess(name: "seed000-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "none")

        let gw = try GatewayProcess(name: "seed000-cluster", config: "{}")
        let published = try GatewayProcess.fixture("seed000-config.json")
        let config =
            published
            .replacingOccurrences(of: "\"interface\":\":4984\"", with: "\"interface\":\"127.0.0.1:\(gw.port)\"")
            .replacingOccurrences(
                of: "\"adminInterface\":\"0.0.0.0:4985\"", with: "\"adminInterface\":\"127.0.0.1:\(gw.adminPort)\""
            )
            .replacingOccurrences(
                of: "\"server\":\"http://localhost:8091\"", with: "\"server\":\"http://127.0.0.1:\(a.adminPort)\"")
        #expect(config != published)
        let parsed = try GatewayConfig.parse(Array(config.utf8))
        #expect(parsed.databases.count == 1)
        #expect(parsed.databases[0].username == nil && parsed.databases[0].password == nil)
        #expect(parsed.databases[0].server == .cluster("http://127.0.0.1:\(a.adminPort)"))
        #expect(parsed.interface.port == gw.port && parsed.adminInterface.port == gw.adminPort)
        try Data(config.utf8).write(to: gw.configURL)
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let admin = "http://127.0.0.1:\(gw.adminPort)/demo"

        let put = try await GatewayHTTP.request(
            .PUT, "\(base)/guest-doc", body: Array(#"{"title":"by guest","channels":["public"]}"#.utf8))
        #expect(put.status == 201, "\(put.text)")
        #expect(try await Self.eventuallyInChanges(base, "guest-doc"))

        let seeds: [Seed] = [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))]
        let client = try await BucketClient.connect(
            ClientOptions(seeds: seeds, bucket: "demo", operationTimeoutMs: 10_000), logger: quietClientLogger)
        let stored = try await client.get("guest-doc").value
        #expect(String(decoding: stored, as: UTF8.self) == #"{"title":"by guest","channels":["public"]}"#)
        _ = try await client.upsert(
            "kv-before", Array(#"{"title":"from kv","channels":["public"]}"#.utf8), flags: 0x0200_0006, datatype: 1)
        let onDemand = try await GatewayHTTP.request(.GET, "\(base)/kv-before")
        #expect(
            try onDemand.status == 200 && JSON.parse(onDemand.body)["_rev"]?.stringValue?.hasPrefix("1-") == true,
            "\(onDemand.text)")

        // Turn import on at runtime: the config as GET shows it, plus import_docs.
        let current = try await GatewayHTTP.request(.GET, "\(admin)/_config")
        #expect(current.status == 200)
        var entry = try JSON.parse(current.body)
        #expect(entry["username"] == nil && entry["password"] == nil)
        entry.set("import_docs", .bool(true))
        let reconfigured = try await GatewayHTTP.request(.PUT, "\(admin)/_config", body: entry.serialized())
        #expect(reconfigured.status == 201, "\(reconfigured.text)")
        _ = try await client.upsert(
            "kv-after", Array(#"{"title":"from kv","channels":["public"]}"#.utf8), flags: 0x0200_0006, datatype: 1)
        #expect(try await Self.eventuallyInChanges(base, "kv-after"), "the KV write was not imported")
        let imported = try await GatewayHTTP.request(.GET, "\(base)/kv-after")
        let importedRev = try JSON.parse(imported.body)["_rev"]
        #expect(imported.status == 200 && importedRev != nil, "\(imported.text)")
        await client.close()

        _ = try ClusterHarness.rebalance(a, known: [a, b], ejected: [b])
        let afterRebalance = try await GatewayHTTP.request(.GET, "\(base)/guest-doc")
        #expect(afterRebalance.status == 200, "\(afterRebalance.text)")
        let put2 = try await GatewayHTTP.request(
            .PUT, "\(base)/after-rebalance", body: Array(#"{"channels":["public"]}"#.utf8))
        #expect(put2.status == 201, "\(put2.text)")
        #expect(try await Self.eventuallyInChanges(base, "after-rebalance"))
    }

    /// Whether `id` shows up in the public `_changes` feed (as GUEST) within a minute.
    static func eventuallyInChanges(_ base: String, _ id: String) async throws -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let r = try await GatewayHTTP.request(.GET, "\(base)/_changes?since=0")
            let ids = (try? JSON.parse(r.body))?["results"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            if ids.contains(id) { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        return false
    }
}
