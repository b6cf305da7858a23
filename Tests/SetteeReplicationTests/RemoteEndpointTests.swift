import SetteeJSON
import SetteeReplication
import Testing

@Suite struct RemoteEndpointTests {
    private func fill(_ e: MemoryEndpoint, _ range: ClosedRange<Int>) {
        for i in range {
            e.put("doc \(i)+é", rev: "1-a\(i)", body: [("n", .number(Double(i)))])
        }
        e.put("doc 1+é", rev: "2-b", parent: "1-a1", attachments: ["photo.jpg": (0..<3000).map { UInt8($0 % 251) }])
    }

    // Proves pull and push over real HTTP with each `_bulk_get` shape: multipart/mixed (nested related
    // parts with attachment bytes), CouchDB 2 JSON, and a server without `_bulk_get` (404 → open_revs
    // fallback). Doc ids needing percent-encoding survive, histories and attachment bytes arrive intact.
    @Test(arguments: [ProtocolTestServer.BulkGetMode.multipart, .json, .absent])
    func pullAndPushOverHTTP(mode: ProtocolTestServer.BulkGetMode) async throws {
        let remoteDB = MemoryEndpoint("remote")
        fill(remoteDB, 1...120)
        let server = ProtocolTestServer(db: remoteDB, bulkGetMode: mode)
        let url = try await server.start()
        defer { server.stop() }
        let remote = try RemoteEndpoint(url: url)
        let local = MemoryEndpoint("local")

        let pull = Replicator(source: remote, target: local, options: .init(batchSize: 50, backoffInitialMs: 10))
        pull.start()
        let s = await pull.waitUntilStopped()
        #expect(s.lastError == nil)
        #expect(s.completed == 120 && s.docsWritten == 120)
        let docs = local.docs
        #expect(docs.count == 120)
        #expect(docs["doc 1+é"]?.leaves == ["2-b"] && docs["doc 1+é"]?.revs["2-b"]?.parent == "1-a1")
        #expect(docs["doc 1+é"]?.revs["2-b"]?.attachments["photo.jpg"] == (0..<3000).map { UInt8($0 % 251) })
        if mode == .absent {
            #expect(server.count("bulk_get") == 1, "one 404, then open_revs for the endpoint's life")
            #expect(server.count("open_revs") == 120)
        } else {
            #expect(server.count("open_revs") == 0)
        }
        #expect(try await remote.getLocal(pull.replicationID)?["session_id"] != nil, "checkpoint on the remote")

        // Push new local work back, bodies gzip-compressed.
        local.put(
            "fresh", rev: "1-f",
            body: [("v", .string("é\u{1}")), ("pad", .string(String(repeating: "z", count: 5000)))])
        let gzipRemote = try RemoteEndpoint(url: url, gzipRequests: true)
        let push = Replicator(source: local, target: gzipRemote, options: .init(batchSize: 50))
        push.start()
        let p = await push.waitUntilStopped()
        #expect(p.lastError == nil)
        #expect(remoteDB.docs["fresh"]?.leaves == ["1-f"])
        #expect(p.docsWritten == 1, "the documents pulled before were not sent back")
        #expect(server.count("gzip") >= 1, "the upload went gzip-compressed")
        #expect(remoteDB.docs["fresh"]?.revs["1-f"]?.body["pad"]?.stringValue?.count == 5000)
    }

    // Proves session-cookie authentication logs in once via POST /db/_session and is used afterwards,
    // basic credentials in the URL work, and wrong credentials stop with a 401 rather than retrying.
    @Test func authentication() async throws {
        let remoteDB = MemoryEndpoint("remote")
        fill(remoteDB, 1...5)
        let server = ProtocolTestServer(db: remoteDB, bulkGetMode: .multipart, credentials: ("jane", "pw"))
        let url = try await server.start()
        defer { server.stop() }

        let session = try RemoteEndpoint(url: url, authenticator: .session(user: "jane", password: "pw"))
        let r1 = Replicator(source: session, target: MemoryEndpoint("a"))
        r1.start()
        #expect(await r1.waitUntilStopped().completed == 5)
        #expect(server.count("session") == 1)

        let basic = try RemoteEndpoint(url: url.replacingPrefix("http://", with: "http://jane:pw@"))
        #expect(basic.url == url, "credentials never stay in the URL")
        let r2 = Replicator(source: basic, target: MemoryEndpoint("b"))
        r2.start()
        #expect(await r2.waitUntilStopped().completed == 5)

        let wrong = try RemoteEndpoint(url: url, authenticator: .basic(user: "jane", password: "nope"))
        let r3 = Replicator(source: wrong, target: MemoryEndpoint("c"))
        r3.start()
        let s3 = await r3.waitUntilStopped()
        #expect(s3.lastError?.isTransient == false)
        if case .http(let status, _, _)? = s3.lastError { #expect(status == 401) } else { Issue.record("expected 401") }
    }

    // Proves the continuous feed returns the rows sent before the first heartbeat without waiting for the
    // server to close, and the channel filter travels as sync_gateway/bychannel.
    @Test func continuousFeedReturnsAtHeartbeat() async throws {
        let remoteDB = MemoryEndpoint("remote")
        fill(remoteDB, 1...3)
        let server = ProtocolTestServer(db: remoteDB, bulkGetMode: .json)
        let url = try await server.start()
        defer { server.stop() }
        let remote = try RemoteEndpoint(url: url)
        let clock = ContinuousClock()
        let t0 = clock.now
        let batch = try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: 1000)
        #expect(batch.rows.count == 3)
        #expect(clock.now - t0 < .seconds(45), "returned at the heartbeat, not when the server closed")
        let none = try await remote.changes(
            since: batch.lastSeq?.description, limit: 100, feed: .normal, filter: nil, heartbeatMs: nil)
        #expect(none.rows.isEmpty)
    }

    // Proves a server that is not there is a transient error (retried), and a bad URL is rejected at once.
    @Test func unreachableIsTransient() async throws {
        #expect(throws: ReplicationError.self) { try RemoteEndpoint(url: "ftp://x/db") }
        let remote = try RemoteEndpoint(url: "http://127.0.0.1:1/db")
        do {
            _ = try await remote.info()
            Issue.record("connected to port 1")
        } catch let e as ReplicationError {
            #expect(e.isTransient)
        }
    }
}

extension String {
    fileprivate func replacingPrefix(_ prefix: String, with other: String) -> String {
        hasPrefix(prefix) ? other + dropFirst(prefix.count) : self
    }
}
