import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeStorage
import SetteeTestSupport
import SetteeViewsServer
import Synchronization
import Testing

@testable import SetteeAdmin
@testable import SetteeGateway
@testable import SetteeLiteListener
@testable import SetteeRegistry

/// The fuzz pass of `make test` (a short one: `FuzzTarget.defaultIterations` mutations per target, a fixed
/// seed each) and of `make fuzz` (`SETTEE_FUZZ_SECONDS` per target). Serialized: one target at a time
/// owns the crash-capture buffer.
@Suite(.serialized) struct FuzzTests {
    static func check(_ report: FuzzReport) {
        #expect(report.executions >= report.corpusFiles)
        for f in report.findings.prefix(5) {
            Issue.record("\(report.target) seed \(report.seed): \(f.reason); input \(Array(f.input))")
        }
    }

    @Test(
        arguments: [
            "kv-frame", "json", "multipart", "revs", "replication-wire", "gateway-config", "form", "routes", "subdoc",
            "scram",
        ])
    func pureTarget(name: String) async {
        // Proves each byte-level parser survives its corpus and the seeded mutations of it: no trap (the
        // process would die), no property-check finding.
        let targets = [
            FuzzTargets.kvFrame, FuzzTargets.json, FuzzTargets.multipart, FuzzTargets.revs, FuzzTargets.replicationWire,
            FuzzTargets.gatewayConfig, FuzzTargets.form, FuzzTargets.routes, FuzzTargets.subdoc, FuzzTargets.scram,
        ]
        guard Fuzz.selected(name), let target = targets.first(where: { $0.name == name }) else { return }
        Self.check(await Fuzz.run(target))
    }

    @Test func scramCorpusExchangesAuthenticate() async throws {
        // Proves the scram target's corpus reaches the success path its oracle checks: each `valid*` exchange
        // authenticates its user against the target's keys, and `wrong-proof` does not.
        let hash = ScramHash.sha256
        let keys = ScramKeys.derive(
            password: FuzzTargets.scramPassword, salt: FuzzTargets.scramSalt, iterations: 1, hash: hash)
        let dir = Fuzz.corpusRoot.appendingPathComponent("scram")
        var valid = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        where name.hasPrefix("valid") || name == "wrong-proof" {
            let input = try [UInt8](Data(contentsOf: dir.appendingPathComponent(name)))
            let (first, final) = FuzzTargets.split(input)
            var server = ScramServer(hash: hash)
            _ = server.receiveClientFirst(first, keys: keys, decoy: keys, serverNonce: FuzzTargets.scramServerNonce)
            let reply = server.receiveClientFinal(final)
            if name == "wrong-proof" {
                #expect(reply == .failure(.invalidProof), "\(name): \(reply)")
            } else {
                guard case .success = reply else {
                    Issue.record("\(name): \(reply)")
                    continue
                }
                valid += 1
            }
        }
        #expect(valid == 3)
        // The oracle agrees with the server on a real success (a finding would throw here).
        try await FuzzTargets.scram.body(Array(Data(contentsOf: dir.appendingPathComponent("valid"))))
    }

    @Test func gatewayHTTP() async throws {
        // Proves the gateway's whole request pipeline (routing, body decoding, authentication, handlers)
        // on both ports answers every fuzzed request of its corpus without a trap and never with a 5xx
        // other than 503, run in-process through Hummingbird's router test client over a walrus database.
        guard Fuzz.selected("gateway-http") else { return }
        let logger = LoneNode.quietLogger("gateway")
        let config = try GatewayConfig.parse(
            Array(
                #"{"databases": {"db": {"server": "walrus:", "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}, "alice": {"password": "alice-pw", "admin_channels": ["*"]}}}}}"#
                    .utf8))
        let server = try await GatewayServer.open(config: config, logger: logger)
        let methods: [HTTPRequest.Method] = [.get, .head, .put, .post, .delete, .options]
        for admin in [false, true] {
            // The responder both listeners run, without the listener (the router test client calls it).
            let app = Application(responder: GatewayResponder(server: server, admin: admin))
            try await app.test(.router) { client in
                if !admin {
                    // Documents for `include_docs` answers to carry, more than one chunk of them (ADR 0091).
                    for n in 0..<(Limits.gatewayIncludeDocsChunk + 4) {
                        let put = try await client.execute(
                            uri: "/db/seed\(n)", method: .put, headers: [.contentType: "application/json"],
                            body: ByteBuffer(string: #"{"n":\#(n)}"#))
                        #expect(put.status == .created)
                    }
                }
                let target = FuzzTarget(
                    name: "gateway-http", defaultIterations: 2_000,
                    dictionary: FuzzTargets.tokens([
                        "/db/", "/db/_all_docs", "/db/_bulk_docs", "/db/_bulk_get", "/db/_changes", "/db/_revs_diff",
                        "/db/_local/", "/db/_session", "/db/_user/", "?new_edits=false", "?revs=true", "&open_revs=all",
                        "Content-Type: application/json\n", "Content-Encoding: gzip\n",
                        "Authorization: Basic YWxpY2U6YWxpY2UtcHc=\n",
                        "{\"_rev\":\"1-a\"}", "{\"docs\":[", "{\"keys\":[", "\"_attachments\"",
                        "multipart/related; boundary=b", "include_docs=true", "Accept-Encoding: gzip\n",
                    ])
                ) { input in
                    let (method, path, headers, body) = FuzzTargets.request(input, methods: methods)
                    let response = try await client.execute(
                        uri: path, method: method, headers: headers, body: ByteBuffer(bytes: body))
                    if response.status.code >= 500 && response.status.code != 503 {
                        throw FuzzFinding("\(method) \(path) answered \(response.status.code)")
                    }
                }
                Self.check(await Fuzz.run(target))
            }
            // The websocket upgrade decision runs on the head alone, before routing and authentication, outside
            // the router the test client calls: fuzzed targets and headers straight into it (it trapped on `?=`).
            let responder = GatewayResponder(server: server, admin: admin)
            let upgrade = FuzzTarget(
                name: "gateway-http", defaultIterations: 2_000,
                dictionary: FuzzTargets.tokens([
                    "/db/_changes", "?feed=websocket", "&", "=", "%", "%3D", "?", "Origin: http://x\n",
                    "Authorization: Basic YWxpY2U6YWxpY2UtcHc=\n",
                ])
            ) { input in
                let (method, path, headers, _) = FuzzTargets.request(input, methods: methods)
                _ = await responder.shouldUpgrade(
                    HTTPRequest(method: method, scheme: nil, authority: "x", path: path, headerFields: headers),
                    source: "127.0.0.1")
            }
            Self.check(await Fuzz.run(upgrade))
        }
        await server.close()
    }

    @Test func adminHTTP() async throws {
        // Proves the admin API's router (auth, RBAC, bucket and document routes, console) answers every
        // fuzzed request without a trap and never with a 5xx other than 503. Methods are GET/HEAD/OPTIONS/DELETE
        // (state changes: `adminHTTPWrites`).
        guard Fuzz.selected("admin-http") else { return }
        let node = try LoneNode("admin")
        defer { node.close() }
        let (registry, logger) = (node.registry, node.logger)
        let app = Application(router: AdminServer.makeRouter(registry: registry, logger: logger))
        try await app.test(.router) { client in
            let target = FuzzTarget(
                name: "admin-http", defaultIterations: 1_000,
                dictionary: FuzzTargets.tokens([
                    "/pools/default", "/pools/default/buckets/b", "/pools/default/b/b", "/docs", "?skip=", "&limit=",
                    "/settings/rbac/users", "/ui/", "/metrics",
                    "Authorization: Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA==\n",
                    "/pools/default/buckets/b/docs/k", "startkey=%22", "/nodes/self",
                ])
            ) { input in
                let (method, path, headers, body) = FuzzTargets.request(
                    input, methods: [.get, .head, .options, .delete])
                let response = try await client.execute(
                    uri: path, method: method, headers: headers, body: ByteBuffer(bytes: body))
                if response.status.code >= 500 && response.status.code != 503 {
                    throw FuzzFinding("\(method) \(path) answered \(response.status.code)")
                }
            }
            Self.check(await Fuzz.run(target))
        }
    }

    @Test func adminHTTPWrites() async throws {
        // Proves the admin API's state-changing routes (POST/PUT/PATCH/DELETE, and GET/HEAD) of a lone node survive
        // fuzzed requests without a trap or a 500, and that a read-only admin (`ro_admin`) or a bucket's data reader
        // changes nothing whatever it sends: each input runs once with those credentials, with the node's metadata
        // file and the bucket's high seqnos compared before and after, then once as it came (the dictionary carries
        // the full admin's header). No cluster manager runs, so no route here contacts another host.
        guard Fuzz.selected("admin-http-write") else { return }
        let node = try LoneNode("admin-write")
        defer { node.close() }
        let (registry, logger, dir, bucket) = (node.registry, node.logger, node.dir, LoneNode.bucket)
        let lowUsers: [(name: String, password: String, role: Role)] = [
            ("ro", "ro-password", Role(name: .readOnlyAdmin)),
            ("reader", "reader-password", Role(name: .dataReader, bucket: bucket.name)),
        ]
        for u in lowUsers { try registry.upsertUser(name: u.name, fullName: "", password: u.password, roles: [u.role]) }
        let lowCredentials = lowUsers.map { "Basic " + Data("\($0.name):\($0.password)".utf8).base64EncodedString() }
        // The full admin's requests may delete or change the two users or the bucket: they are put back before the
        // next input, so every input is tried with both users' real rights.
        let asSetUp = Mutex(lowUsers.map { registry.localUser(named: $0.name) })
        let restore = { @Sendable () throws in
            for (i, u) in lowUsers.enumerated() where registry.localUser(named: u.name) != asSetUp.withLock({ $0[i] }) {
                try? registry.deleteUser(name: u.name)
                try registry.upsertUser(name: u.name, fullName: "", password: u.password, roles: [u.role])
                asSetUp.withLock { $0[i] = registry.localUser(named: u.name) }
            }
            if registry.bucket(named: bucket.name) == nil { try? registry.createBucket(bucket) }
        }
        let metadataPath = dir + "/" + NodeMetadata.fileName
        // What a refused request must leave as it was: the node's metadata (users, buckets, settings, secrets) and
        // the bucket's data.
        let snapshot = { @Sendable () -> (Data?, [UInt64]) in
            let seqnos =
                registry.bucket(named: bucket.name).map { engine in
                    (0..<UInt16(bucket.numVBuckets)).map { engine.seqnoInfo(VBucketID($0)).highSeqno.rawValue }
                } ?? []
            return (FileManager.default.contents(atPath: metadataPath), seqnos)
        }
        let app = Application(router: AdminServer.makeRouter(registry: registry, logger: logger))
        try await app.test(.router) { client in
            let target = FuzzTarget(
                name: "admin-http-write", defaultIterations: 60,
                dictionary: FuzzTargets.tokens([
                    "/pools/default/buckets", "/pools/default/buckets/b", "name=", "ramQuotaMB=", "&", "roles=admin",
                    "roles=ro_admin", "password=", "/settings/rbac/users/local/u", "/settings/web", "/clusterInit",
                    "/node/controller/setupServices", "/pools/default/buckets/b/controller/doFlush",
                    "/pools/default/buckets/b/docs/k", "/controller/rotateInternalSecret",
                    "/node/controller/loadTrustedCAs", "/node/controller/reloadCertificate",
                    "/settee/views/b/_design/d",
                    "Authorization: Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA==\n",
                    "Content-Type: application/x-www-form-urlencoded\n", "Content-Type: application/json\n",
                ])
            ) { input in
                let (method, path, headers, body) = FuzzTargets.request(
                    input, methods: [.post, .put, .patch, .delete, .get, .head])
                var low = headers
                low[.authorization] = lowCredentials[input.count % lowCredentials.count]
                let before = snapshot()
                let refused = try await client.execute(
                    uri: path, method: method, headers: low, body: ByteBuffer(bytes: body))
                let after = snapshot()
                if before.0 != after.0 || before.1 != after.1 {
                    throw FuzzFinding(
                        "\(low[.authorization] == lowCredentials[0] ? "ro_admin" : "data_reader") changed the node: "
                            + "\(method) \(path) answered \(refused.status.code)")
                }
                let response = try await client.execute(
                    uri: path, method: method, headers: headers, body: ByteBuffer(bytes: body))
                if response.status.code == 500 || refused.status.code == 500 {
                    throw FuzzFinding("\(method) \(path) answered 500")
                }
                try restore()
            }
            Self.check(await Fuzz.run(target))
        }
    }

    @Test func liteListenerHTTP() async throws {
        // Proves a Lite P2P listener's routes (its credentials gate, `_changes`, `_revs_diff`, `_bulk_get`,
        // `_bulk_docs`, `_local`, `open_revs`) answer every fuzzed request a peer could send without a trap and
        // never with a 5xx other than 503, over a database holding a few documents. Inputs asking for a continuous
        // feed are skipped: it streams until its row limit or until the peer leaves, which the router test client
        // does not do.
        guard Fuzz.selected("lite-listener") else { return }
        let dir = TemporaryDirectory.make("fuzz-lite")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = try Database(name: "db", directory: dir)
        defer { db.close() }
        for n in 0..<8 {
            _ = try db.save(Document(id: "doc\(n)", properties: .object([("n", .number(Double(n)))])))
        }
        let logger = LoneNode.quietLogger("lite")
        let listener = PeerListener(endpoint: LocalEndpoint(db, feedTimeoutMs: 20), databaseName: "db", logger: logger)
        let app = Application(
            router: listener.makeRouter(credentials: OneTimeCredentials(user: "peer", password: "pw")))
        try await app.test(.router) { client in
            let target = FuzzTarget(
                name: "lite-listener", defaultIterations: 1_000,
                dictionary: FuzzTargets.tokens([
                    "/db/_changes", "/db/_revs_diff", "/db/_bulk_get", "/db/_bulk_docs", "/db/_local/", "/db/doc1",
                    "?open_revs=", "[\"1-a\"]", "since=", "limit=", "feed=longpoll", "heartbeat=",
                    "\"new_edits\":false",
                    "\"_revisions\"", "\"docs\"", "Authorization: Basic cGVlcjpwdw==\n", "Accept: multipart/mixed\n",
                ])
            ) { input in
                let (method, path, headers, body) = FuzzTargets.request(
                    input, methods: [.get, .head, .post, .put, .delete])
                let decodedPath = PercentEncoding.decode(path) ?? path
                let feed = (try? JSON.parse(body))?["feed"]?.stringValue
                guard !decodedPath.contains("continuous"), feed != "continuous" else { return }
                let response = try await client.execute(
                    uri: path, method: method, headers: headers, body: ByteBuffer(bytes: body))
                if response.status.code >= 500 && response.status.code != 503 {
                    throw FuzzFinding("\(method) \(path) answered \(response.status.code)")
                }
            }
            Self.check(await Fuzz.run(target))
        }
    }

    @Test func viewsHTTP() async throws {
        // Proves the views port's router (its auth, design documents put/get/delete, view queries by GET and POST,
        // the JavaScript map and reduce functions a design document brings) answers every fuzzed request without a
        // trap and never with a 5xx other than 503 or a reduce function's own `reduce_error`, over a lone node's
        // bucket of twelve JSON documents. Its first finding: a query right after a design document was stored
        // failed, "no such table: vbuckets" (`aQueryRightAfterTheDesignIsStoredDoesNotFail`).
        guard Fuzz.selected("views-http") else { return }
        let node = try LoneNode("views")
        defer { node.close() }
        let (registry, logger) = (node.registry, node.logger)
        let engine = try #require(registry.bucket(named: LoneNode.bucket.name))
        for n in 0..<12 {
            let key = "doc\(n)"
            _ = try engine.store(
                .set, VBucketHash.vbucket(forKey: key, count: LoneNode.bucket.numVBuckets), Array(key.utf8),
                value: Array("{\"n\":\(n),\"type\":\"t\(n % 3)\",\"tags\":[\"a\",\(n)]}".utf8), flags: 0x0200_0006,
                expiry: 0, datatype: .json, cas: CAS(0))
        }
        let views = NodeViews(registry: registry, logger: logger)
        let app = Application(router: ViewsServer.makeRouter(views: views, logger: logger))
        try await app.test(.router) { client in
            let target = FuzzTarget(
                name: "views-http", defaultIterations: 300,
                dictionary: FuzzTargets.tokens([
                    "/b/_design/d", "/b/_design/d/_view/v", "?stale=false", "&reduce=false", "&group_level=1",
                    "&keys=[\"t1\"]", "&startkey=", "&limit=", "&skip=", "&descending=true", "&include_docs=true",
                    "emit(doc.type, doc.n)", "_count", "_sum", "_stats", "function(doc, meta)",
                    "Authorization: Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA==\n",
                ])
            ) { input in
                let (method, path, headers, body) = FuzzTargets.request(input, methods: [.get, .put, .post, .delete])
                let response = try await client.execute(
                    uri: path, method: method, headers: headers, body: ByteBuffer(bytes: body))
                // A design document's own reduce failing (`_sum` of strings, a custom reduce that throws) is a 500
                // `reduce_error`, as CouchDB answers it (`ViewError.reduce`); any other 5xx is ours.
                let text = String(buffer: response.body)
                if response.status.code >= 500 && response.status.code != 503
                    && !(response.status.code == 500 && text.contains("\"reduce_error\""))
                {
                    throw FuzzFinding("\(method) \(path) answered \(response.status.code): \(text.prefix(300))")
                }
            }
            Self.check(await Fuzz.run(target))
        }
    }
}

/// A lone node's registry in a directory of its own, as the admin and views targets run it: initialized with the
/// admin `Administrator`/`password`, bucket `b` of 16 vBuckets, no cluster manager (so no route contacts another
/// host). `close()` shuts it down and removes the directory.
final class LoneNode {
    static let bucket = BucketSettings(
        name: "b", uuid: String(repeating: "ab", count: 16), ramQuotaMB: 100, replicaNumber: 0, numVBuckets: 16)
    let dir: String
    let logger: Logger
    let registry: NodeRegistry

    init(_ name: String) throws {
        dir = TemporaryDirectory.make("fuzz-\(name)")
        logger = Self.quietLogger(name)
        registry = try NodeRegistry(
            dataDirectory: dir,
            node: NodeInfo(
                otpNode: NodeID("n_0@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 12000, viewsPort: 9500,
                nodeUUID: ""),
            logger: logger)
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(Self.bucket)
    }

    func close() {
        registry.shutdown()
        try? FileManager.default.removeItem(atPath: dir)
    }

    static func quietLogger(_ name: String) -> Logger {
        var logger = Logger(label: "settee.fuzz.\(name)")
        logger.logLevel = .critical
        return logger
    }
}
