import Foundation
import Hummingbird
import HummingbirdTesting
import SetteeAdmin
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Cluster documents from peers and the metadata file are checked before anything in them names a file;
/// a fresh node joins only for a caller that knows the document's secrets.
@Suite struct ClusterDocumentValidationTests {
    /// A cluster document of an initialised node holding bucket `demo`, as a JSON object to tamper with.
    static func document(_ registry: NodeRegistry) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(registry.clusterDocument())) as? [String: Any])
    }

    static func bytes(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object))
    }

    /// `edit` applied to the first bucket's settings.
    static func withBucket(_ doc: [String: Any], _ edit: (inout [String: Any]) -> Void) -> [String: Any] {
        var doc = doc
        var buckets = doc["buckets"] as? [[String: Any]] ?? []
        var settings = buckets[0]["settings"] as? [String: Any] ?? [:]
        edit(&settings)
        buckets[0]["settings"] = settings
        if settings["numVBuckets"] as? Int != 1024 { buckets[0]["placement"] = nil }
        doc["buckets"] = buckets
        doc["lastRev"] = ((doc["lastRev"] as? Int) ?? 1) + 10
        return doc
    }

    /// Proves a joining node refuses documents with a bucket named `../../x` (and other path tricks), a
    /// numVBuckets out of range and a member name with a newline, and creates nothing outside its data dir.
    /// Before the check, `../../x` opened an engine two levels above `buckets/`.
    @Test func joinRefusesHostileDocuments() throws {
        let source = TemporaryDirectory("admin")
        let target = TemporaryDirectory("admin")
        defer {
            source.remove()
            target.remove()
        }
        let origin = try makeRegistry(source)
        defer { _ = origin.shutdown() }
        try origin.initialize(username: "Administrator", password: "password")
        try origin.createBucket(settings("demo"))
        let good = try Self.document(origin)
        let joiner = try makeRegistry(target)
        defer { _ = joiner.shutdown() }

        let escape = "evil-\(UUID().uuidString.prefix(8))"
        let outside = URL(fileURLWithPath: target.path).deletingLastPathComponent().path
        var hostile: [[String: Any]] = [
            Self.withBucket(good) { $0["name"] = "../../" + escape },
            Self.withBucket(good) { $0["name"] = "a/b" },
            Self.withBucket(good) { $0["name"] = ".." },
            Self.withBucket(good) { $0["name"] = "" },
            Self.withBucket(good) { $0["uuid"] = "../../" + escape },
            Self.withBucket(good) { $0["numVBuckets"] = 0 },
            Self.withBucket(good) { $0["numVBuckets"] = 70_000 },
            Self.withBucket(good) { $0["numVBuckets"] = -1 },
            Self.withBucket(good) { $0["replicaNumber"] = 9 },
            Self.withBucket(good) { $0["purgeInterval"] = -1 },
            Self.withBucket(good) { $0["purgeInterval"] = 0 },
            Self.withBucket(good) { $0["purgeInterval"] = 1e9 },
        ]
        var forged = good
        forged["members"] = [
            [
                "node": [
                    "otpNode": "n_1@x\nforged log line", "host": "x", "adminPort": 1, "kvPort": 2, "viewsPort": 3,
                    "nodeUUID": "u", "servesViews": true,
                ], "membership": "active",
            ]
        ]
        hostile.append(forged)
        for doc in hostile {
            #expect(throws: RegistryError.self) {
                try joiner.storeClusterDocument(try Self.bytes(doc), promise: joiner.epochPromise, join: true)
            }
        }
        #expect(joiner.bucketNames.isEmpty)
        let leaked = (try? FileManager.default.contentsOfDirectory(atPath: outside))?.filter { $0.contains(escape) }
        #expect(leaked == [])
        // The untampered document is adopted.
        try joiner.storeClusterDocument(try Self.bytes(good), promise: joiner.epochPromise, join: true)
        #expect(joiner.bucketNames == ["demo"])
        // An edit of the bucket's purge interval on another node reaches this node's running engine (ADR 0095).
        try origin.updateBucket(named: "demo", purgeInterval: 2)
        try joiner.storeClusterDocument(try origin.clusterDocument(), promise: joiner.epochPromise)
        #expect(joiner.bucketSettings(named: "demo")?.purgeInterval == 2)
        #expect(try #require(joiner.bucket(named: "demo")).purgeAgeNanoseconds == UInt64(2 * 86_400 * 1e9))
    }

    /// Proves the metadata file is checked at start: a bucket renamed to `../../x` in the file (with a valid
    /// checksum) stops the node from opening instead of creating directories outside the data dir.
    @Test func startRefusesTamperedMetadata() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let escape = "evil-\(UUID().uuidString.prefix(8))"
        do {
            let registry = try makeRegistry(dir)
            try registry.initialize(username: "Administrator", password: "password")
            try registry.createBucket(settings("demo"))
            _ = registry.shutdown()
        }
        let path = dir.path + "/node-metadata.json"
        var envelope = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        let inner = try #require(envelope["metadata"] as? String)
        let tampered = inner.replacingOccurrences(of: "\"name\":\"demo\"", with: "\"name\":\"..\\/..\\/\(escape)\"")
        #expect(tampered != inner)
        envelope["metadata"] = tampered
        envelope["crc32"] = Int(CRC32.checksum(Array(tampered.utf8)))
        try JSONSerialization.data(withJSONObject: envelope).write(to: URL(fileURLWithPath: path))
        #expect(throws: RegistryError.self) { _ = try makeRegistry(dir) }
        let outside = URL(fileURLWithPath: dir.path).deletingLastPathComponent().path
        let leaked = (try? FileManager.default.contentsOfDirectory(atPath: outside))?.filter { $0.contains(escape) }
        #expect(leaked == [])
    }

    /// Proves `POST /settee/internal/join` on an uninitialised node needs credentials the document holds
    /// (its admin's password or its internal secret): none or wrong ones are 401 and nothing is adopted.
    /// Before, the endpoint was open to anyone who could reach the port.
    @Test func uninitialisedJoinNeedsTheClustersCredentials() async throws {
        let source = TemporaryDirectory("admin")
        defer { source.remove() }
        let origin = try makeRegistry(source)
        defer { _ = origin.shutdown() }
        try origin.initialize(username: "Administrator", password: "password")
        try origin.createBucket(settings("demo"))
        let doc = String(decoding: try origin.clusterDocument(), as: UTF8.self)
        let (user, secret) = origin.internalCredentials

        try await withAdmin(initialized: false, cluster: true) { client, registry in
            let json = "application/json"
            #expect(
                try await call(client, .post, "/settee/internal/join", form: doc, auth: nil, contentType: json)
                    .status == .unauthorized)
            let wrong = RBACAPITests.basic("Administrator", "guess")
            #expect(
                try await call(client, .post, "/settee/internal/join", form: doc, auth: wrong, contentType: json)
                    .status == .unauthorized)
            #expect(registry.bucketNames.isEmpty && !registry.isInitialized)
            let nodeAuth = RBACAPITests.basic(user, secret)
            let joined = try await call(
                client, .post, "/settee/internal/join", form: doc, auth: nodeAuth, contentType: json)
            #expect(joined.status == .ok)
            #expect(registry.bucketNames == ["demo"] && registry.isInitialized)
        }
    }

    /// Proves `POST /settee/internal/promise` refuses, with 400 and before anything is persisted, an epoch or a
    /// candidate's stamp past `Limits.maxClusterEpoch` / `maxConfigRevision` (`EpochLimitTests` proves the rule;
    /// this, the route). Before, a promise of 9223372036854775807 was granted and persisted, and the node then
    /// refused every config for good. A promise within the bound is still granted and persisted.
    @Test func promisePastTheEpochBoundIsRefusedByTheRoute() async throws {
        @Sendable func promise(_ epoch: Int64, stampEpoch: Int64, stampRev: Int64) -> String {
            #"{"epoch":\#(epoch),"candidate":"ns_1@elsewhere","stampEpoch":\#(stampEpoch),"stampRev":\#(stampRev)}"#
        }
        try await withAdmin(cluster: true) { client, registry in
            let (user, secret) = registry.internalCredentials
            let stamp = registry.clusterStamp
            let auth = RBACAPITests.basic(user, secret)
            let top = Limits.maxClusterEpoch
            for body in [
                promise(.max, stampEpoch: stamp.epoch, stampRev: stamp.rev),
                promise(top + 1, stampEpoch: stamp.epoch, stampRev: stamp.rev),
                promise(stamp.epoch + 1, stampEpoch: .max, stampRev: stamp.rev),
                promise(stamp.epoch + 1, stampEpoch: stamp.epoch, stampRev: Limits.maxConfigRevision + 1),
                promise(-1, stampEpoch: stamp.epoch, stampRev: stamp.rev),
            ] {
                let refused = try await call(
                    client, .post, "/settee/internal/promise", form: body, auth: auth, contentType: "application/json")
                #expect(refused.status == .badRequest, "\(body)")
                #expect(registry.epochPromise == nil, "\(body)")
            }
            let granted = try await call(
                client, .post, "/settee/internal/promise",
                form: promise(stamp.epoch + 1, stampEpoch: stamp.epoch, stampRev: stamp.rev), auth: auth,
                contentType: "application/json")
            #expect(granted.status == .ok)
            #expect(granted.json?["granted"] as? Bool == true)
            #expect(registry.epochPromise?.epoch == stamp.epoch + 1)
        }
    }

    /// Proves `POST /settee/internal/fence` (ADR 0120) refuses malformed requests with 400 and fences nothing: no
    /// JSON, a missing or mistyped `epoch` or `from`, an epoch past `Limits.maxClusterEpoch` or below 0. A request
    /// that parses but comes from no member of this node's config is answered `fenced: false` and fences nothing
    /// either; without the internal credentials it is 401.
    @Test func fenceRequestsThatAreMalformedOrFromNoMemberFenceNothing() async throws {
        try await withAdmin(cluster: true) { client, registry in
            let (user, secret) = registry.internalCredentials
            let next = registry.clusterStamp.epoch + 1
            let top = Limits.maxClusterEpoch
            let auth = RBACAPITests.basic(user, secret)
            let json = "application/json"
            for body in [
                "", "not json", "[]", #"{"from":"ns_1@elsewhere"}"#, #"{"epoch":\#(next)}"#,
                #"{"epoch":"\#(next)","from":"ns_1@elsewhere"}"#, #"{"epoch":\#(next),"from":7}"#,
                #"{"epoch":\#(top + 1),"from":"ns_1@elsewhere"}"#, #"{"epoch":-1,"from":"ns_1@elsewhere"}"#,
                #"{"epoch":9223372036854775807,"from":"ns_1@elsewhere"}"#,
            ] {
                let refused = try await call(
                    client, .post, "/settee/internal/fence", form: body, auth: auth, contentType: json)
                #expect(refused.status == .badRequest, "\(body)")
                #expect(registry.fenceReason == nil, "\(body)")
            }
            let stranger = #"{"epoch":\#(next),"from":"ns_1@elsewhere"}"#
            let anonymous = try await call(
                client, .post, "/settee/internal/fence", form: stranger, auth: nil, contentType: json)
            #expect(anonymous.status == .unauthorized)
            let answered = try await call(
                client, .post, "/settee/internal/fence", form: stranger, auth: auth, contentType: json)
            #expect(answered.status == .ok)
            #expect(answered.json?["fenced"] as? Bool == false)
            #expect(registry.fenceReason == nil)
        }
    }

    /// Proves `GET /settee/internal/seqnos?…&persist=` (what a rebalance's persistence wait polls, ADR 0119) has the
    /// named vBuckets written in the flusher's next express batch: with a 30 s window, a write stays unpersisted
    /// through a plain poll and is persisted within seconds of a poll naming its vBucket. Before, every catch-up and
    /// hand-over of a rebalance waited for the window (1 s by default), which made rebalances under load about three
    /// times longer. Entries that are no vBucket of the bucket are ignored.
    @Test func aSeqnoPollNamingVBucketsHasThemPersistedSoon() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        var options = EngineOptions()
        // An hour: only the poll's request can get the vBucket written within the test's deadline.
        options.flusherMaxDelay = 3_600
        let registry = try NodeRegistry(
            dataDirectory: dir.path, node: testNode, engineOptions: options, logger: testLogger)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("polled"))
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        let app = Application(router: AdminServer.makeRouter(registry: registry, logger: testLogger, cluster: cluster))
        let engine = try #require(registry.bucket(named: "polled"))
        let vb = VBucketID(7)
        let written = try engine.store(
            .set, vb, Array("k".utf8), value: Array("v".utf8), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        try await app.test(.router) { client in
            let plain = try await call(client, .get, "/settee/internal/seqnos?bucket=polled")
            #expect(plain.status == .ok)
            #expect(engine.seqnoInfo(vb).persistedSeqno < written.token.seqno, "persisted before any poll asked")
            let asked = try await call(
                client, .get, "/settee/internal/seqnos?bucket=polled&persist=x,-1,99999,7,,7")
            #expect(asked.status == .ok)
            // Generous for a loaded machine, and still far inside the flusher's hour-long window.
            let deadline = ContinuousClock.now + .seconds(60)
            while engine.seqnoInfo(vb).persistedSeqno < written.token.seqno, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(engine.seqnoInfo(vb).persistedSeqno >= written.token.seqno, "the named vBucket was not written")
        }
        await cluster.shutdown()
    }

    /// Proves a replica number outside 0...3 that reached the registry past validation is refused with an error
    /// (it was a trap) and leaves the bucket's settings and the config revision as they were.
    @Test func anOutOfRangeReplicaNumberIsRefusedNotTrapped() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("edited"))
        let before = registry.clusterStamp
        for bad in [-1, 4, Int.max] {
            #expect(throws: RegistryError.invalidArgument("replicaNumber \(bad) is not 0 to 3")) {
                try registry.updateBucket(named: "edited", replicaNumber: bad)
            }
        }
        #expect(registry.bucketSettings(named: "edited")?.replicaNumber == settings("edited").replicaNumber)
        #expect(registry.clusterStamp == before)
    }

    /// Proves the admin password of the document also opens the join (what `addNode` sends for a fresh node).
    @Test func uninitialisedJoinAcceptsTheAdminPassword() throws {
        let source = TemporaryDirectory("admin")
        defer { source.remove() }
        let origin = try makeRegistry(source)
        defer { _ = origin.shutdown() }
        try origin.initialize(username: "Administrator", password: "password")
        let doc = try origin.clusterDocument()
        #expect(NodeRegistry.joinCredentialsMatch(document: doc, username: "Administrator", password: "password"))
        #expect(!NodeRegistry.joinCredentialsMatch(document: doc, username: "Administrator", password: "passwore"))
        #expect(!NodeRegistry.joinCredentialsMatch(document: doc, username: "other", password: "password"))
        #expect(!NodeRegistry.joinCredentialsMatch(document: [0x7b], username: "Administrator", password: "password"))
    }

    /// Proves anonymous `GET /pools/default` names only buckets without a password (ADR 0015): before, it
    /// listed every bucket, telling a stranger which protected buckets exist.
    @Test func anonymousPoolDefaultHidesProtectedBuckets() async throws {
        try await withAdmin { client, registry in
            try registry.createBucket(settings("secretbucket"))
            var open = settings("openbucket", auth: .none)
            open.uuid = String(repeating: "cd", count: 16)
            try registry.createBucket(open)
            let anonymous = try await call(client, .get, "/pools/default", auth: nil)
            #expect(anonymous.status == .ok)
            #expect(anonymous.body.contains("openbucket"))
            #expect(!anonymous.body.contains("secretbucket"))
            let admin = try await call(client, .get, "/pools/default")
            #expect(admin.body.contains("secretbucket") && admin.body.contains("openbucket"))
        }
    }

    /// Proves the data directory, `buckets/` and each bucket's directory are 0700 and the metadata file
    /// (password keys, the internal secret) 0600 under a permissive umask. Before, directories followed the
    /// umask (0755 under 022), so any local user could read every bucket's documents.
    @Test func dataFilesAreOwnerOnly() throws {
        let old = umask(0o022)
        defer { umask(old) }
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("demo"))
        func mode(_ path: String) throws -> Int {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            return (attributes[.posixPermissions] as? Int ?? -1) & 0o777
        }
        let bucketDir = registry.directory(for: try #require(registry.bucketSettings(named: "demo")))
        for path in [dir.path, dir.path + "/buckets", bucketDir] {
            #expect(try mode(path) == 0o700, "\(path)")
        }
        #expect(try mode(dir.path + "/node-metadata.json") == 0o600)
    }
}
