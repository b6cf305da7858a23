import Foundation
import NIOCore
import NIOSSL
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeLiteListener
import SetteeReplication
import SetteeTLS
import SetteeTestSupport
import Testing

/// Two Lite databases syncing peer to peer over the listener's BLIP (`/db/_blipsync`, ADR 0128): the same
/// one-time credentials as its REST side (401 before the upgrade), the same TLS identity (`wss://` with the pin), and
/// the replication protocol answered by `BLIPReplicationServer` over the listener's `LocalEndpoint`.
@Suite(.onTestThreads) struct ListenerBLIPTests {
    /// A Lite database in a temporary directory.
    final class Peer: Sendable {
        let db: Database
        let dir: String

        init(_ tag: String) throws {
            dir = NSTemporaryDirectory() + "settee-listener-blip-\(tag)-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            db = try Database(name: "db", directory: dir)
        }

        func close() {
            db.close()
            try? FileManager.default.removeItem(atPath: dir)
        }

        /// Saves `count` documents `<prefix>-<i>`, each with an attachment of its own bytes.
        func fill(_ prefix: String, count: Int) throws {
            var docs: [Document] = []
            for i in 0..<count {
                let bytes =
                    Array("\(prefix) attachment \(i) ".utf8) + [UInt8](repeating: UInt8(i % 251), count: 200 + i)
                docs.append(
                    Document(
                        id: "\(prefix)-\(i)", properties: .object([("n", .int(i)), ("from", .string(prefix))]),
                        attachments: ["data": Blob(data: bytes, contentType: "application/octet-stream")]))
            }
            _ = try db.saveAll(docs)
        }

        /// A one-shot or continuous replicator with the listener at `url` (`ws(s)://…`), trusting `tls` for `wss`.
        func replicator(
            _ role: BLIPEndpoint.Role, url: String, tls: TLSConfiguration? = nil, continuous: Bool = false,
            batchSize: Int? = nil
        ) throws -> Replicator {
            var options = ReplicatorOptions(continuous: continuous)
            options.backoffInitialMs = 50
            if let batchSize { options.batchSize = batchSize }
            let clean = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
            let connector = try WebSocketBLIPConnector(databaseURL: clean, tls: tls)
            return Replicator(
                blip: connector, remoteIdentity: ReplicationID.stripCredentials(clean), local: LocalEndpoint(db),
                role: role, options: options)
        }
    }

    /// Runs a one-shot replication to its end.
    static func run(_ replicator: Replicator) async -> ReplicationStatus {
        replicator.start()
        return await replicator.waitUntilStopped()
    }

    /// Proves the documents `ids` are byte-identical on both databases: the same winning revision, the same
    /// properties, the same attachment digests, and the same attachment bytes (read by digest on each side).
    static func expectIdentical(_ a: Database, _ b: Database, ids: [String]) throws {
        var differing: [String] = []
        for id in ids {
            guard let x = try a.document(id), let y = try b.document(id) else {
                differing.append("\(id): missing")
                continue
            }
            let digests = x.attachments.mapValues(\.digest)
            guard x.revision == y.revision, x.properties == y.properties, digests == y.attachments.mapValues(\.digest)
            else {
                differing.append("\(id): differs")
                continue
            }
            for digest in digests.values where try a.attachmentData(digest: digest) != b.attachmentData(digest: digest)
            {
                differing.append("\(id): attachment bytes differ")
            }
        }
        #expect(differing.isEmpty, "\(differing.count) documents differ, first \(differing.prefix(5))")
    }

    /// Proves A pushes 1,000 documents with attachments to B and pulls B's 1,000 over the listener's `ws://` BLIP, one
    /// shot each, and that all 2,000 are byte-identical on both sides afterwards; a second push finds nothing to send.
    @Test func pushAndPullThousandDocumentsWithAttachments() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        try a.fill("a", count: 1_000)
        try b.fill("b", count: 1_000)
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db")
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        #expect(started.blipSyncURL.hasPrefix("ws://peer-"))

        let push = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
        #expect(push.lastError == nil && push.docsWritten == 1_000, "push: \(push)")
        let pull = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL))
        #expect(pull.lastError == nil && pull.docsWritten == 1_000, "pull: \(pull)")
        let ids = (0..<1_000).flatMap { ["a-\($0)", "b-\($0)"] }
        try Self.expectIdentical(a.db, b.db, ids: ids)
        // The push's checkpoint is on B: a second push starts after it and writes nothing.
        let again = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
        #expect(again.lastError == nil && again.docsWritten == 0, "second push: \(again)")
        await listener.stop()
    }

    /// Proves (issue 68, delta sync on the listener, ADR 0137): after a large document (~40 KB in 200 members) went
    /// to the listener whole, three small edits made on A are pushed as JSON deltas (the listener applied three
    /// `deltaSrc` bodies) and three made on B are pulled as deltas (three sent), each a one-shot replication, and
    /// the document ends byte-identical on both (its members, in order, and its revision); no delta was refused by
    /// either side (the listener never resent a revision whole).
    @Test func smallEditsOfALargeDocumentTravelAsDeltas() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        let log = CapturedLog()
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db", logger: log.logger())
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        var members: [(String, JSON)] = (0..<200).map { i in
            ("field\(i)", .string(String(repeating: "\(i * 7919 % 1000)-payload-", count: 16)))
        }
        var doc = try a.db.put(Document(id: "big", properties: .object(members)))
        let first = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
        #expect(first.lastError == nil && first.docsWritten == 1, "first push: \(first)")
        #expect(listener.deltaStats.deltaPushDocCount == 0)
        for k in 0..<3 {
            members[k * 37].1 = .string("edit \(k) on A")
            doc.properties = .object(members)
            doc = try a.db.put(doc)
            let push = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
            #expect(push.lastError == nil && push.docsWritten == 1, "push \(k): \(push)")
        }
        #expect(listener.deltaStats.deltaPushDocCount == 3)
        let pulledWhole = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL))
        #expect(pulledWhole.lastError == nil, "first pull: \(pulledWhole)")
        for k in 0..<3 {
            var onB = try #require(try b.db.document("big"))
            var edited = onB.properties.objectValue ?? []
            edited[k * 41 + 3].1 = .string("edit \(k) on B")
            onB.properties = .object(edited)
            _ = try b.db.put(onB)
            let pull = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL))
            #expect(pull.lastError == nil && pull.docsWritten == 1, "pull \(k): \(pull)")
        }
        #expect(listener.deltaStats.deltasSent == 3 && listener.deltaStats.deltasRequested == 3)
        #expect(log.records("peer could not apply a delta; sending the revision whole").isEmpty)
        #expect(log.records("BLIP request failed").isEmpty, "\(log.records("BLIP request failed").map(\.metadata))")
        let (onA, onB) = (try #require(try a.db.document("big")), try #require(try b.db.document("big")))
        #expect(onA.revision == onB.revision)
        #expect(onA.properties.serialized() == onB.properties.serialized())
        #expect(onA.properties.serialized().count > 30_000)
        await listener.stop()
    }

    /// Proves a continuous pull over the listener's BLIP brings a write made on B afterwards to A, and a document
    /// edited on both sides while apart ends with the same winning revision and body on both after a push and a pull.
    @Test func continuousPullAndConflictConverge() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db")
        let started = try await listener.start()
        defer { Task { await listener.stop() } }

        // A conflict: one document, then an edit on each side.
        let base = try a.db.put(Document(id: "c", properties: .object([("v", .string("base"))])))
        let first = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
        #expect(first.lastError == nil && first.docsWritten == 1)
        var onA = try #require(try a.db.document("c"))
        onA.properties = .object([("v", .string("edited on A"))])
        _ = try a.db.put(onA)
        var onB = try #require(try b.db.document("c"))
        #expect(onB.revision == base.revision)
        onB.properties = .object([("v", .string("edited on B, a longer edit"))])
        _ = try b.db.put(onB)
        let push = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL))
        #expect(push.lastError == nil, "push: \(push)")
        let pull = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL))
        #expect(pull.lastError == nil, "pull: \(pull)")
        let winnerA = try #require(try a.db.document("c"))
        let winnerB = try #require(try b.db.document("c"))
        #expect(winnerA.revision == winnerB.revision && winnerA.properties == winnerB.properties)
        #expect(try a.db.conflicts(of: "c").count == b.db.conflicts(of: "c").count)

        // Continuous: a write on B after the pull started shows on A.
        let live = try a.replicator(.pullSource, url: started.blipSyncURL, continuous: true)
        live.start()
        _ = try b.db.put(Document(id: "live", properties: .object([("written", .string("on B"))])))
        let deadline = ContinuousClock.now + .seconds(30)
        while try a.db.document("live") == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try a.db.document("live")?.properties == .object([("written", .string("on B"))]))
        #expect(live.currentStatus.lastError == nil)
        await live.stop()
        await listener.stop()
    }

    /// Proves a pull stopped part-way resumes from the checkpoint it saved on the listener: the second run transfers
    /// only what the first had not checkpointed, and A ends with all 1,000 documents identical to B's.
    @Test func cancelledPullResumesFromItsCheckpoint() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        try b.fill("b", count: 1_000)
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db")
        let started = try await listener.start()
        defer { Task { await listener.stop() } }

        let first = try a.replicator(.pullSource, url: started.blipSyncURL, batchSize: 50)
        let progress = first.status
        first.start()
        for await s in progress where s.docsWritten >= 200 || (s.activity == .stopped && s.docsWritten > 0) { break }
        await first.stop()
        let stopped = first.currentStatus
        #expect(stopped.docsWritten >= 200 && stopped.docsWritten < 1_000, "first run: \(stopped)")

        let second = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL, batchSize: 50))
        #expect(second.lastError == nil, "second run: \(second)")
        #expect(second.docsWritten < 1_000 && second.docsWritten + stopped.docsWritten >= 1_000, "second: \(second)")
        try Self.expectIdentical(a.db, b.db, ids: (0..<1_000).map { "b-\($0)" })
        await listener.stop()
    }

    /// Proves `wss://` with the listener's pinned self-signed certificate (the sync URL's `?cert=sha256:…`, fetched
    /// and checked with `CertificatePin` as the REST replicator's CLI does): a push and a pull of documents with
    /// attachments, identical on both sides.
    @Test func wssWithThePinnedCertificate() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        try a.fill("a", count: 50)
        try b.fill("b", count: 50)
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db", tls: true)
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        #expect(started.blipSyncURL.hasPrefix("wss://") && started.blipSyncURL.contains("?cert=sha256:"))
        let fingerprint = try #require(started.fingerprint)
        let certificate = try await CertificatePin.fetch(
            host: "127.0.0.1", port: started.port, fingerprint: fingerprint)
        let tls = SelfSignedIdentity.clientConfiguration(trusting: certificate)
        // A hostname check cannot be made against an IP address through the WebSocket client: refused up front, not
        // retried as a network error (before, any `wss://<IP>` failed that way, pinned or not: NIOSSL refuses an IP
        // address in SNI).
        var checked = TLSConfiguration.makeClientConfiguration()
        checked.trustRoots = .certificates([certificate])
        #expect(throws: ReplicationError.self) {
            _ = try WebSocketBLIPConnector(databaseURL: "wss://127.0.0.1:\(started.port)/db", tls: checked)
        }

        let push = await Self.run(try a.replicator(.pushTarget, url: started.blipSyncURL, tls: tls))
        #expect(push.lastError == nil && push.docsWritten == 50, "push: \(push)")
        let pull = await Self.run(try a.replicator(.pullSource, url: started.blipSyncURL, tls: tls))
        #expect(pull.lastError == nil && pull.docsWritten == 50, "pull: \(pull)")
        try Self.expectIdentical(a.db, b.db, ids: (0..<50).flatMap { ["a-\($0)", "b-\($0)"] })
        await listener.stop()
    }

    /// Proves the sync URL alone is the trust (issue 68): SetteeLite's app-facing `Replicator(db, .push(to:))` and
    /// `.pull(from:)` with the listener's `wss://…?cert=sha256:…` read the pin, check the listener's certificate
    /// against it and replicate, with no TLS configuration built by the caller; the URL dialled carries no pin; and
    /// the REST sync URL (`https://…?cert=`) pins the same way.
    @Test func thePinInTheSyncURLIsTheWholeTrust() async throws {
        let (a, b, c) = (try Peer("a"), try Peer("b"), try Peer("c"))
        defer {
            a.close()
            b.close()
            c.close()
        }
        try a.fill("a", count: 20)
        try b.fill("b", count: 20)
        try c.fill("c", count: 5)
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db", tls: true)
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        let fingerprint = try #require(started.fingerprint)

        let connector = try WebSocketBLIPConnector(databaseURL: started.blipSyncURL)
        #expect(connector.pinnedFingerprint == fingerprint)
        // Closing waits 200 ms at most for the listener's TLS close_notify, which never came: before, every one-shot
        // replication over wss ended NIOSSL's 5 s after its work (this test took 20.5 s, now about 2 s).
        let closing = WebSocketBLIPConnector.closingPromptly(TLSConfiguration.makeClientConfiguration())
        #expect(closing?.shutdownTimeout == WebSocketBLIPConnector.tlsShutdownTimeout)
        #expect(WebSocketBLIPConnector.tlsShutdownTimeout < .seconds(1))
        #expect(connector.url == "wss://127.0.0.1:\(started.port)/db/_blipsync")

        let push = await Self.run(try Replicator(a.db, .push(to: started.blipSyncURL)))
        #expect(push.lastError == nil && push.docsWritten == 20, "push: \(push)")
        let pull = await Self.run(try Replicator(a.db, .pull(from: started.blipSyncURL)))
        #expect(pull.lastError == nil && pull.docsWritten == 20, "pull: \(pull)")
        try Self.expectIdentical(a.db, b.db, ids: (0..<20).flatMap { ["a-\($0)", "b-\($0)"] })

        #expect(started.syncURL.hasPrefix("https://") && started.syncURL.contains("?cert=sha256:"))
        let rest = try RemoteEndpoint(url: started.syncURL)
        #expect(rest.pinnedFingerprint == fingerprint && !rest.url.contains("?"))
        let restPush = await Self.run(try Replicator(c.db, .push(to: started.syncURL)))
        #expect(restPush.lastError == nil && restPush.docsWritten == 5, "REST push: \(restPush)")
        try Self.expectIdentical(c.db, b.db, ids: (0..<5).map { "c-\($0)" })
        await listener.stop()
    }

    /// Proves a pin naming another certificate fails the replication at once with an error that says so (not
    /// retried as a network error, nothing written), over BLIP and REST; and that a malformed pin or a pin on a
    /// plain `ws://` URL is refused when the replicator is made.
    @Test func aWrongPinFailsAtOnceAndSaysSo() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        try a.fill("a", count: 3)
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db", tls: true)
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        let fingerprint = try #require(started.fingerprint)
        let other = "sha256:" + String(repeating: "ab", count: 32)

        for url in [started.blipSyncURL, started.syncURL] {
            let status = await Self.run(try Replicator(a.db, .push(to: url.replacing(fingerprint, with: other))))
            guard case .invalid(let why)? = status.lastError else {
                Issue.record("expected a refused pin for \(url.prefix(5)), got \(String(describing: status.lastError))")
                continue
            }
            #expect(why.contains("not the pinned one") && why.contains(fingerprint) && why.contains(other), "\(why)")
            #expect(status.docsWritten == 0 && status.activity == .stopped)
        }
        #expect(b.db.documentCount == 0)

        let plain = "wss://127.0.0.1:\(started.port)/db"
        #expect(throws: ReplicationError.self) { _ = try Replicator(a.db, .push(to: plain + "?cert=sha256:12")) }
        #expect(throws: ReplicationError.self) {
            _ = try Replicator(a.db, .push(to: "ws://127.0.0.1:\(started.port)/db?cert=\(fingerprint)"))
        }
        await listener.stop()
    }

    /// Proves a wrong password is refused with 401 and a Basic challenge before the upgrade (an upgrade with the
    /// right one but no BLIP subprotocol is 400), and that the replicator reports the 401 as an authentication
    /// failure and stops at once instead of retrying it as a network error (before: retried with backoff).
    @Test func wrongPasswordIs401AndStopsTheReplicator() async throws {
        let b = try Peer("b")
        defer { b.close() }
        let listener = PeerListener(endpoint: LocalEndpoint(b.db), databaseName: "db")
        let started = try await listener.start()
        defer { Task { await listener.stop() } }
        let user = started.credentials.user

        func upgrade(password: String, subprotocol: String?) async throws -> String {
            let token = Data("\(user):\(password)".utf8).base64EncodedString()
            var head =
                "GET /db/_blipsync HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \(token)\r\nConnection: Upgrade\r\n"
                + "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            if let subprotocol { head += "Sec-WebSocket-Protocol: \(subprotocol)\r\n" }
            let bytes = Array((head + "\r\n").utf8)
            let port = started.port
            let reply = try await offPool { () throws -> [UInt8] in
                let c = try TestKVClient(port: port, timeoutSeconds: 30)
                try c.send(bytes: bytes)
                return c.readUntilClosed().bytes
            }
            return String(decoding: reply, as: UTF8.self)
        }
        let refused = try await upgrade(password: "wrong", subprotocol: WebSocketBLIPConnector.subprotocols)
        #expect(refused.hasPrefix("HTTP/1.1 401"), "\(refused.prefix(200))")
        #expect(refused.lowercased().contains("www-authenticate: basic"))
        let noProtocol = try await upgrade(password: started.credentials.password, subprotocol: "chat")
        #expect(noProtocol.hasPrefix("HTTP/1.1 400"), "\(noProtocol.prefix(200))")

        let url = "ws://\(user):wrong@127.0.0.1:\(started.port)/db"
        let replicator = try b.replicator(.pullSource, url: url)
        let status = await Self.run(replicator)
        guard case .http(let code, _, _)? = status.lastError else {
            Issue.record("expected an HTTP 401 error, got \(String(describing: status.lastError))")
            return
        }
        #expect(code == 401 && status.activity == .stopped)
        #expect(status.lastError?.isTransient == false)
        await listener.stop()
    }

    /// Proves Lite↔Lite per collection over the listener's BLIP (ADR 0150): B's listener resolves B's collections
    /// (`Database.blipCollectionResolver()`), and A's `CollectionsReplicator` over `tenant.c1` (unfiltered) and
    /// `tenant.c2` (document ids) pushes and pulls both over one WebSocket; each collection then holds exactly what its
    /// filter let cross, neither default collection got anything, and a second run writes nothing.
    @Test func collectionsReplicatorSyncsTwoCollectionsOverOneConnection() async throws {
        let (a, b) = (try Peer("a"), try Peer("b"))
        defer {
            a.close()
            b.close()
        }
        var made: [String: DatabaseCollection] = [:]
        for (peer, tag) in [(a, "a"), (b, "b")] {
            for name in ["c1", "c2"] {
                let c = try peer.db.createCollection(name, scope: "tenant")
                for i in 0..<4 { try c.save(Document(id: "\(tag)\(name)-\(i)")) }
                made[tag + name] = c
            }
            try peer.db.save(Document(id: "\(tag)-default"))
        }
        let listener = PeerListener(
            endpoint: LocalEndpoint(b.db), databaseName: "db", collections: b.db.blipCollectionResolver())
        let started = try await listener.start()
        defer { Task { await listener.stop() } }

        var config = ReplicatorConfiguration(target: .url(started.blipSyncURL))
        config.addCollection(try #require(made["ac1"]))
        config.addCollection(
            try #require(made["ac2"]), configuration: CollectionConfiguration(documentIDs: ["ac2-1", "bc2-2"]))
        let replicator = try CollectionsReplicator(config)
        #expect(replicator.replicators.count == 4)
        replicator.start()
        for s in await replicator.waitUntilStopped() { #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)") }
        #expect(await replicator.blip?.connectionsOpened == 1)

        let ids = { (c: DatabaseCollection?) throws -> Set<String> in
            Set(try #require(c).allDocuments().compactMap(\.id))
        }
        let all1 = Set((0..<4).flatMap { ["ac1-\($0)", "bc1-\($0)"] })
        #expect(try ids(made["ac1"]) == all1)
        #expect(try ids(made["bc1"]) == all1)
        let a2 = Set((0..<4).map { "ac2-\($0)" })
        let b2 = Set((0..<4).map { "bc2-\($0)" })
        #expect(try ids(made["ac2"]) == a2.union(["bc2-2"]))
        #expect(try ids(made["bc2"]) == b2.union(["ac2-1"]))
        #expect(try a.db.allDocuments().compactMap(\.id) == ["a-default"])
        #expect(try b.db.allDocuments().compactMap(\.id) == ["b-default"])

        let again = try CollectionsReplicator(config)
        again.start()
        for s in await again.waitUntilStopped() { #expect(s.lastError == nil && s.docsWritten == 0, "\(s)") }
        await listener.stop()
    }

    /// Proves the per-collection hooks of ADR 0152 over one BLIP connection to a Lite listener: `tenant.c1`'s push
    /// filter keeps `push: false` documents home and its pull filter refuses `secret` ones (one write failure of that
    /// pull); `tenant.c2` crosses everything and its resolver resolves the conflict a later pull makes there, while the
    /// same conflict in `tenant.c1` (no resolver) stays in the tree.
    @Test func collectionFiltersAndResolverOverBLIP() async throws {
        let (a, b) = (try Peer("ha"), try Peer("hb"))
        defer {
            a.close()
            b.close()
        }
        let (a1, a2) = (
            try a.db.createCollection("c1", scope: "tenant"), try a.db.createCollection("c2", scope: "tenant")
        )
        let (b1, b2) = (
            try b.db.createCollection("c1", scope: "tenant"), try b.db.createCollection("c2", scope: "tenant")
        )
        func doc(_ id: String, _ props: [(String, JSON)]) -> Document {
            var d = Document(id: id)
            for (k, v) in props { d[k] = v }
            return d
        }
        try a1.save(doc("p1", [("push", true)]))
        try a1.save(doc("p2", [("push", false)]))
        try b1.save(doc("q1", []))
        try b1.save(doc("q2", [("secret", true)]))
        try a2.save(doc("k", [("v", "base")]))
        let listener = PeerListener(
            endpoint: LocalEndpoint(b.db), databaseName: "db", collections: b.db.blipCollectionResolver())
        let started = try await listener.start()
        defer { Task { await listener.stop() } }

        var config = ReplicatorConfiguration(target: .url(started.blipSyncURL))
        config.addCollection(
            a1,
            configuration: CollectionConfiguration(
                pushFilter: { d, _ in d["push"] == .bool(true) },
                pullFilter: { d, flags in flags.contains(.deleted) || d["secret"] != .bool(true) }))
        config.addCollection(
            a2,
            configuration: CollectionConfiguration(conflictResolver: { c in
                var merged = c.remoteDocument ?? Document(id: c.documentID)
                let local = c.localDocument?["v"]?.stringValue ?? "-"
                merged["v"] = .string("\(local)+\(c.remoteDocument?["v"]?.stringValue ?? "-")")
                return merged
            }))
        let first = try CollectionsReplicator(config)
        first.start()
        for (r, s) in zip(first.replicators, await first.waitUntilStopped()) {
            let refused = r.collection == "tenant.c1" && r.type == .pull ? 1 : 0
            #expect(s.lastError == nil && s.docWriteFailures == refused, "\(r.collection) \(r.type): \(s)")
        }
        let ids = { (c: DatabaseCollection) throws -> Set<String> in Set(try c.allDocuments().compactMap(\.id)) }
        #expect(try ids(b1) == ["p1", "q1", "q2"])
        #expect(try ids(a1) == ["p1", "p2", "q1"])
        #expect(try ids(b2) == ["k"])

        for (local, remote, id) in [(a1, b1, "p1"), (a2, b2, "k")] {
            var mine = try #require(try local.document(id))
            mine["v"] = "local"
            try local.save(mine)
            var theirs = try #require(try remote.document(id))
            theirs["v"] = "remote"
            try remote.save(theirs)
        }
        config.replicatorType = .pull
        let second = try CollectionsReplicator(config)
        second.start()
        for s in await second.waitUntilStopped() { #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)") }
        #expect(try a1.conflicts(of: "p1").count == 2)
        let resolved = try a2.conflicts(of: "k")
        #expect(resolved.count == 1)
        #expect(resolved.first?["v"] == .string("local+remote"))
        await listener.stop()
    }
}
