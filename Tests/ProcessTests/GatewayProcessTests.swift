import AsyncHTTPClient
import CompressNIO
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Synchronization
import Testing

/// settee-gateway end to end over HTTP: real processes, the seeds' configs, loopback only.
@Suite(.serialized, .onTestThreads) struct GatewayProcessTests {
    static func json(_ reply: GatewayHTTP.Reply) throws -> JSON { try JSON.parse(reply.body) }

    /// Row ids of a `_changes` answer.
    static func changeIDs(_ reply: GatewayHTTP.Reply) throws -> [String] {
        try json(reply)["results"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
    }

    /// Seed 000's config as published, with the server switched to an embedded bucket (the published one
    /// points at a Couchbase cluster on :8091).
    static func seed000Config() throws -> String {
        try GatewayProcess.fixture("seed000-config.json")
            .replacingOccurrences(of: "\"server\":\"http://localhost:8091\"", with: "\"server\":\"walrus:\"")
    }

    @Test func seed001ScenarioEndToEnd() async throws {
        // Proves seed 001's exact config and sync function over HTTP: jane's private document reaches only
        // jane, her public one reaches joe, a tag change is rejected with 403, a document without owner is
        // rejected, joe cannot write as jane, GUEST is disabled (401 with a challenge), and CORS answers
        // the configured origin on the public port only.
        let gw = try GatewayProcess(name: "seed001", config: try GatewayProcess.fixture("seed001-config.json"))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let admin = "http://127.0.0.1:\(gw.adminPort)/demo"
        let jane = GatewayHTTP.basic("jane", "password")
        let joe = GatewayHTTP.basic("joe", "password")

        let privateDoc = try await GatewayHTTP.request(
            .PUT, "\(base)/doc1", body: Array(#"{"tag":"private","owner":"jane","name":"doc101"}"#.utf8),
            headers: [jane])
        #expect(privateDoc.status == 201, "\(privateDoc.text)")
        let privateRev = try Self.json(privateDoc)["rev"]?.stringValue
        #expect(privateDoc.header("Server") == "Couchbase Sync Gateway/1.5.0 settee")
        let publicDoc = try await GatewayHTTP.request(
            .PUT, "\(base)/doc2", body: Array(#"{"tag":"public","owner":"jane","name":"doc102"}"#.utf8),
            headers: [jane])
        #expect(publicDoc.status == 201, "\(publicDoc.text)")

        // The sync function's rules (seed 001's JavaScript, run by SetteeSync).
        let noOwner = try await GatewayHTTP.request(
            .PUT, "\(base)/doc3", body: Array(#"{"tag":"private","name":"x"}"#.utf8), headers: [jane])
        let joeChanges = try await GatewayHTTP.request(.GET, "\(base)/_changes?since=0", headers: [joe])
        #expect(joeChanges.status == 200)
        let joeIDs = try Self.changeIDs(joeChanges)
        #expect(joeIDs.contains("doc2") && !joeIDs.contains("doc1"), "\(joeChanges.text)")
        let janeIDs = try Self.changeIDs(
            try await GatewayHTTP.request(.GET, "\(base)/_changes?since=0", headers: [jane]))
        #expect(janeIDs.contains("doc1") && janeIDs.contains("doc2"))
        #expect(try await GatewayHTTP.request(.GET, "\(base)/doc1", headers: [joe]).status == 403)
        #expect(try await GatewayHTTP.request(.GET, "\(base)/doc2", headers: [joe]).status == 200)
        let joeAll = try await GatewayHTTP.request(.GET, "\(base)/_all_docs", headers: [joe])
        #expect(!joeAll.text.contains("doc1") && joeAll.text.contains("doc2"), "\(joeAll.text)")

        // Changing the tag of an existing document: the sync function throws forbidden.
        let retag = try await GatewayHTTP.request(
            .PUT, "\(base)/doc1?rev=\(privateRev ?? "")",
            body: Array(#"{"tag":"public","owner":"jane","name":"doc101"}"#.utf8), headers: [jane])
        #expect(retag.status == 403)
        #expect(try Self.json(retag)["reason"]?.stringValue == "Cannot change tag of document")
        #expect(try Self.json(retag)["error"]?.stringValue == "forbidden")
        // No owner: rejected by validateDocument.
        #expect(noOwner.status == 403, "\(noOwner.text)")
        // joe writing a private document owned by jane: requireUser("jane") fails.
        let asJane = try await GatewayHTTP.request(
            .PUT, "\(base)/doc4", body: Array(#"{"tag":"private","owner":"jane","name":"x"}"#.utf8), headers: [joe])
        #expect(asJane.status == 403, "\(asJane.text)")

        // GUEST disabled: no credentials → 401 with a Basic challenge; a wrong password too.
        let anonymous = try await GatewayHTTP.request(.GET, "\(base)/")
        #expect(anonymous.status == 401)
        #expect(anonymous.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
        #expect(try Self.json(anonymous)["error"]?.stringValue == "unauthorized")
        #expect(
            try await GatewayHTTP.request(.GET, "\(base)/", headers: [GatewayHTTP.basic("jane", "nope")]).status == 401)

        // The admin view of the seed: every document with its body.
        let all = try await GatewayHTTP.request(
            .GET, "\(admin)/_all_docs?access=false&channels=false&include_docs=true")
        #expect(all.status == 200)
        let rows = try Self.json(all)["rows"]?.arrayValue ?? []
        let ids = Set(rows.compactMap { $0["id"]?.stringValue })
        #expect(ids.contains("doc1") && ids.contains("doc2"))
        #expect(rows.first { $0["id"]?.stringValue == "doc1" }?["doc"]?["name"]?.stringValue == "doc101")

        // Session log-in: the cookie alone authenticates jane afterwards.
        let login = try await GatewayHTTP.request(
            .POST, "\(base)/_session", body: Array(#"{"name":"jane","password":"password"}"#.utf8))
        #expect(login.status == 200)
        let cookie = try #require(login.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        #expect(cookie.hasPrefix("SyncGatewaySession="))
        let byCookie = try await GatewayHTTP.request(.GET, "\(base)/", headers: [("Cookie", cookie)])
        #expect(byCookie.status == 200)
        let me = try await GatewayHTTP.request(.GET, "\(base)/_session", headers: [("Cookie", cookie)])
        #expect(try Self.json(me)["userCtx"]?["name"]?.stringValue == "jane")

        // CORS (Origin ["*"]): `*` on the public port, without credentials (an origin must be listed by name to
        // get them), never on the admin port.
        let cors = try await GatewayHTTP.request(.GET, "\(base)/", headers: [jane, ("Origin", "http://app.example")])
        #expect(cors.header("Access-Control-Allow-Origin") == "*")
        #expect(cors.header("Access-Control-Allow-Credentials") == nil)
        let preflight = try await GatewayHTTP.request(
            .OPTIONS, "\(base)/doc1", headers: [("Origin", "http://app.example")])
        #expect(preflight.status == 204)
        #expect(preflight.header("Allow") == "GET, HEAD, PUT, DELETE")
        #expect(preflight.header("Access-Control-Allow-Origin") == "*")
        let adminCORS = try await GatewayHTTP.request(.GET, "\(admin)/", headers: [("Origin", "http://app.example")])
        #expect(adminCORS.header("Access-Control-Allow-Origin") == nil)
    }

    @Test func seed000GuestRESTBasics() async throws {
        // Proves seed 000's config (GUEST with "*", backquoted default-style sync function) serves
        // anonymous reads and writes, and the HTTP conventions: Server header on every response, 404
        // unknown URL and 405 with Allow as {"error","reason"}, OPTIONS, the admin root's ADMIN flag,
        // local documents, _bulk_docs/_bulk_get/_revs_diff, attachments, gzip both ways, 415 for other
        // encodings.
        let gw = try GatewayProcess(name: "seed000", config: try Self.seed000Config())
        try gw.start()
        defer { gw.stop() }
        let root = "http://127.0.0.1:\(gw.port)"
        let base = "\(root)/demo"

        let rootReply = try await GatewayHTTP.request(.GET, "\(root)/")
        #expect(try Self.json(rootReply)["couchdb"]?.stringValue == "Welcome")
        #expect(try Self.json(rootReply)["ADMIN"] == nil)
        let adminRoot = try await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gw.adminPort)/")
        #expect(try Self.json(adminRoot)["ADMIN"]?.boolValue == true)

        let unknown = try await GatewayHTTP.request(.GET, "\(base)/_nothing_here")
        #expect(unknown.status == 404)
        #expect(try Self.json(unknown)["error"]?.stringValue == "not_found")
        #expect(try Self.json(unknown)["reason"]?.stringValue == "unknown URL")
        #expect(unknown.header("Server")?.hasPrefix("Couchbase Sync Gateway/") == true)
        let wrongMethod = try await GatewayHTTP.request(.GET, "\(base)/_bulk_docs")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.header("Allow") == "POST")
        #expect(try Self.json(wrongMethod)["error"]?.stringValue == "method_not_allowed")
        #expect(try await GatewayHTTP.request(.GET, "\(root)/nodb/").status == 404)
        let notJSON = try await GatewayHTTP.request(.GET, "\(base)/", headers: [("Accept", "text/html")])
        #expect(notJSON.status == 406)

        // A guest write and read; a conflicting write without the parent gets 409.
        let put = try await GatewayHTTP.request(.PUT, "\(base)/a", body: Array(#"{"channels":["x"],"n":1}"#.utf8))
        #expect(put.status == 201, "\(put.text)")
        let rev1 = try #require(try Self.json(put)["rev"]?.stringValue)
        #expect(put.header("Etag") == "\"\(rev1)\"")
        let got = try await GatewayHTTP.request(.GET, "\(base)/a?revs=true")
        #expect(try Self.json(got)["n"]?.intValue == 1)
        #expect(try Self.json(got)["_revisions"]?["start"]?.intValue == 1)
        #expect(try await GatewayHTTP.request(.PUT, "\(base)/a", body: Array(#"{"n":2}"#.utf8)).status == 409)
        let bad = try await GatewayHTTP.request(.PUT, "\(base)/b", body: Array(#"{"_bad":1}"#.utf8))
        #expect(bad.status == 400)
        #expect(try Self.json(bad)["error"]?.stringValue == "bad_request")

        // Attachments: PUT raw bytes, GET them back with their type.
        let att = try await GatewayHTTP.request(
            .PUT, "\(base)/a/hello.txt?rev=\(rev1)", body: Array("hello world".utf8),
            headers: [("Content-Type", "text/plain")])
        #expect(att.status == 201, "\(att.text)")
        let attGet = try await GatewayHTTP.request(.GET, "\(base)/a/hello.txt")
        #expect(attGet.text == "hello world")
        #expect(attGet.header("Content-Type") == "text/plain")
        let inline = try await GatewayHTTP.request(.GET, "\(base)/a?attachments=true")
        #expect(try Self.json(inline)["_attachments"]?["hello.txt"]?["data"]?.stringValue == "aGVsbG8gd29ybGQ=")

        // _bulk_docs, _revs_diff, _bulk_get (JSON form), _local.
        let bulk = try await GatewayHTTP.request(
            .POST, "\(base)/_bulk_docs",
            body: Array(
                #"{"docs":[{"_id":"b1","channels":"x"},{"_id":"b2"},{"_id":"b3","_rev":"2-abc","_revisions":{"start":2,"ids":["abc","def"]}}],"new_edits":false}"#
                    .utf8))
        #expect(bulk.status == 201, "\(bulk.text)")
        let diff = try await GatewayHTTP.request(
            .POST, "\(base)/_revs_diff", body: Array(#"{"b3":["2-abc","3-fff"]}"#.utf8))
        #expect(try Self.json(diff)["b3"]?["missing"] == .array([.string("3-fff")]))
        let bulkGet = try await GatewayHTTP.request(
            .POST, "\(base)/_bulk_get?revs=true", body: Array(#"{"docs":[{"id":"b3","rev":"2-abc"},{"id":"zz"}]}"#.utf8)
        )
        let results = try Self.json(bulkGet)["results"]?.arrayValue ?? []
        #expect(results.count == 2)
        #expect(results.first?["docs"]?.arrayValue?.first?["ok"]?["_revisions"]?["ids"]?.arrayValue?.count == 2)
        #expect(results.last?["docs"]?.arrayValue?.first?["error"]?["status"]?.intValue == 404)
        let local = try await GatewayHTTP.request(.PUT, "\(base)/_local/ck%3D1", body: Array(#"{"seq":5}"#.utf8))
        #expect(local.status == 201)
        #expect(try Self.json(local)["rev"]?.stringValue == "0-1")
        #expect(try Self.json(try await GatewayHTTP.request(.GET, "\(base)/_local/ck%3D1"))["seq"]?.intValue == 5)

        // gzip: a response the client accepts gzip for comes compressed; a gzip request body is read.
        let zipped = try await GatewayHTTP.request(
            .GET, "\(base)/_all_docs?include_docs=true", headers: [("Accept-Encoding", "gzip")])
        #expect(zipped.header("Content-Encoding") == "gzip")
        var buffer = ByteBuffer(bytes: zipped.body)
        let inflated = try buffer.decompress(with: .gzip())
        let zippedIDs = try JSON.parse(Array(inflated.readableBytesView))["rows"]?.arrayValue?.compactMap {
            $0["id"]?.stringValue
        }
        #expect(zippedIDs?.contains("a") == true && zippedIDs?.contains("b3") == true, "\(zippedIDs ?? [])")
        var plain = ByteBuffer(bytes: Array(#"{"channels":["x"],"zipped":true}"#.utf8))
        let gzBody = try plain.compress(with: .gzip())
        let gzPut = try await GatewayHTTP.request(
            .PUT, "\(base)/z", body: Array(gzBody.readableBytesView), headers: [("Content-Encoding", "gzip")])
        #expect(gzPut.status == 201, "\(gzPut.text)")
        #expect(try Self.json(try await GatewayHTTP.request(.GET, "\(base)/z"))["zipped"]?.boolValue == true)
        let brotli = try await GatewayHTTP.request(
            .PUT, "\(base)/y", body: Array("{}".utf8), headers: [("Content-Encoding", "br")])
        #expect(brotli.status == 415)

        // Admin: users, offline → 503 on the public port, online again.
        let adminBase = "http://127.0.0.1:\(gw.adminPort)/demo"
        let newUser = try await GatewayHTTP.request(
            .PUT, "\(adminBase)/_user/ann", body: Array(#"{"password":"secret1","admin_channels":["x"]}"#.utf8))
        #expect(newUser.status == 201, "\(newUser.text)")
        #expect(
            try Self.json(try await GatewayHTTP.request(.GET, "\(adminBase)/_user/ann"))["name"]?.stringValue == "ann")
        #expect(try await GatewayHTTP.request(.POST, "\(adminBase)/_offline").status == 200)
        #expect(try await GatewayHTTP.request(.GET, "\(base)/a").status == 503)
        #expect(try await GatewayHTTP.request(.POST, "\(adminBase)/_online").status == 200)
        #expect(try await GatewayHTTP.request(.GET, "\(base)/a").status == 200)
    }

    @Test func multipartDocumentsAndRevisions() async throws {
        // Proves the multipart forms: a multipart/related PUT stores its `follows` attachment, GET with
        // attachments=true and Accept multipart/related answers JSON part + attachment part, open_revs and
        // _bulk_get with Accept multipart/mixed answer one part per revision.
        let gw = try GatewayProcess(name: "multipart", config: try Self.seed000Config())
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let body =
            "--XYZ\r\nContent-Type: application/json\r\n\r\n"
            + #"{"channels":["m"],"_attachments":{"f.txt":{"content_type":"text/plain","follows":true}}}"#
            + "\r\n--XYZ\r\nContent-Disposition: attachment; filename=\"f.txt\"\r\nContent-Type: text/plain\r\n\r\n"
            + "file body\r\n--XYZ--\r\n"
        let put = try await GatewayHTTP.request(
            .PUT, "\(base)/m", body: Array(body.utf8), headers: [("Content-Type", "multipart/related; boundary=XYZ")])
        #expect(put.status == 201, "\(put.text)")
        #expect(try await GatewayHTTP.request(.GET, "\(base)/m/f.txt").text == "file body")

        let related = try await GatewayHTTP.request(
            .GET, "\(base)/m?attachments=true", headers: [("Accept", "multipart/related, application/json")])
        #expect(related.header("Content-Type")?.hasPrefix("multipart/related") == true)
        #expect(related.text.contains("file body") && related.text.contains("\"follows\":true"), "\(related.text)")

        let mixed = try await GatewayHTTP.request(
            .GET, "\(base)/m?open_revs=all&revs=true", headers: [("Accept", "multipart/mixed")])
        #expect(mixed.status == 200)
        #expect(mixed.header("Content-Type")?.hasPrefix("multipart/mixed") == true)
        #expect(mixed.text.contains("\"_id\":\"m\"") && mixed.text.contains("_revisions"), "\(mixed.text)")

        let bulk = try await GatewayHTTP.request(
            .POST, "\(base)/_bulk_get?revs=true&attachments=true",
            body: Array(#"{"docs":[{"id":"m"},{"id":"nope"}]}"#.utf8),
            headers: [("Accept", "multipart/mixed")])
        #expect(bulk.header("Content-Type")?.hasPrefix("multipart/mixed") == true)
        #expect(bulk.text.contains("file body") && bulk.text.contains("error=\"true\""), "\(bulk.text)")
    }

    @Test func feedsDeliverWritesMadeAfterTheyStarted() async throws {
        // Proves a longpoll feed is woken by a write (not by its timeout), and continuous and websocket
        // feeds deliver a write made after they started, row by row, without closing.
        let gw = try GatewayProcess(name: "feeds", config: try Self.seed000Config())
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        _ = try await GatewayHTTP.request(.PUT, "\(base)/first", body: Array(#"{"channels":["c"]}"#.utf8))
        let start = try await GatewayHTTP.request(.GET, "\(base)/_changes")
        let since = try #require(try Self.json(start)["last_seq"]?.stringValue)

        // Longpoll: blocks until the write 0.5 s later.
        let began = ContinuousClock.now
        async let poll = GatewayHTTP.request(.GET, "\(base)/_changes?feed=longpoll&since=\(since)&timeout=30000")
        try await Task.sleep(for: .milliseconds(500))
        _ = try await GatewayHTTP.request(.PUT, "\(base)/woken", body: Array(#"{"channels":["c"]}"#.utf8))
        let polled = try await poll
        #expect(try Self.changeIDs(polled) == ["woken"], "\(polled.text)")
        #expect(ContinuousClock.now - began < .seconds(20))

        // Continuous: a row per line as it happens.
        let since2 = try #require(try Self.json(polled)["last_seq"]?.stringValue)
        var req = HTTPClientRequest(url: "\(base)/_changes?feed=continuous&since=\(since2)&timeout=30000")
        req.method = .GET
        let response = try await GatewayHTTP.client.execute(req, timeout: .seconds(60))
        #expect(response.headers.first(name: "Content-Type") == "application/octet-stream")
        let writer = Task {
            try await Task.sleep(for: .milliseconds(500))
            _ = try await GatewayHTTP.request(.PUT, "\(base)/streamed", body: Array(#"{"channels":["c"]}"#.utf8))
        }
        var received = ""
        for try await chunk in response.body {
            received += String(buffer: chunk)
            if received.contains("\"streamed\"") { break }
        }
        _ = try await writer.value
        #expect(received.contains("\"id\":\"streamed\""), "\(received)")

        // Websocket: options as the first message, `[]` once caught up, then the new row.
        let since3 = try #require(
            try Self.json(try await GatewayHTTP.request(.GET, "\(base)/_changes"))["last_seq"]?.stringValue)
        let messages = Mutex<[String]>([])
        let url = "ws://127.0.0.1:\(gw.port)/demo/_changes?feed=websocket"
        try await WebSocketClient.connect(url: url, logger: Logger(label: "test.ws")) { inbound, outbound, _ in
            try await outbound.write(.text("{\"since\":\"\(since3)\"}"))
            var wrote = false
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message else { continue }
                messages.withLock { $0.append(text) }
                if text == "[]" && !wrote {
                    wrote = true
                    _ = try await GatewayHTTP.request(
                        .PUT, "\(base)/socketed", body: Array(#"{"channels":["c"]}"#.utf8))
                }
                if text.contains("\"socketed\"") { break }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        let got = messages.withLock { $0 }
        #expect(got.first == "[]", "\(got)")
        #expect(got.contains { $0.contains("\"id\":\"socketed\"") }, "\(got)")
    }

    @Test func websocketFeedSendsIncludeDocsRowsAChunkAtATime() async throws {
        // Proves a websocket feed with `include_docs` sends a page of 40 documents as several arrays of at most
        // `Limits.gatewayIncludeDocsChunk` rows (ADR 0091), every row with its own body.
        let gw = try GatewayProcess(name: "wsdocs", config: try Self.seed000Config())
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let docs = (0..<40).map { #"{"_id":"w\#($0)","channels":["c"],"n":\#($0)}"# }.joined(separator: ",")
        let bulk = try await GatewayHTTP.request(.POST, "\(base)/_bulk_docs", body: Array(#"{"docs":[\#(docs)]}"#.utf8))
        #expect(bulk.status == 201, "\(bulk.text)")
        let arrays = Mutex<[[JSON]]>([])
        let url = "ws://127.0.0.1:\(gw.port)/demo/_changes?feed=websocket"
        try await WebSocketClient.connect(url: url, logger: Logger(label: "test.ws")) { inbound, outbound, _ in
            try await outbound.write(.text(#"{"since":0,"include_docs":true}"#))
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message, let rows = try JSON.parse(Array(text.utf8)).arrayValue else {
                    continue
                }
                if rows.isEmpty { break }  // caught up
                arrays.withLock { $0.append(rows) }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        let got = arrays.withLock { $0 }
        let rows = got.flatMap { $0 }.filter { $0["id"]?.stringValue?.hasPrefix("w") == true }
        #expect(rows.count == 40, "\(got.map(\.count))")
        #expect(got.count >= 3, "\(got.map(\.count))")
        #expect(got.allSatisfy { $0.count <= Limits.gatewayIncludeDocsChunk }, "\(got.map(\.count))")
        for row in rows {
            #expect(row["doc"]?["n"]?.intValue == row["id"]?.stringValue.flatMap { Int($0.dropFirst()) }, "\(row)")
        }
    }

    @Test func adminPortIsBoundOnlyToItsInterface() throws {
        // Proves the admin listener bound to 127.0.0.1 refuses a connection made to another loopback
        // address (127.0.0.2), while accepting one on 127.0.0.1.
        let gw = try GatewayProcess(name: "bind", config: try Self.seed000Config())
        try gw.start()
        defer { gw.stop() }
        #expect(GatewayProcess.canConnect(host: "127.0.0.1", port: gw.adminPort))
        #expect(!GatewayProcess.canConnect(host: "127.0.0.2", port: gw.adminPort))
    }

    @Test(arguments: [
        (#"{"databases":{"demo":{"revs_limt":5}}}"#, "databases.demo.revs_limt: unknown field"),
        (#"{"databases":{"demo":{"sync":`function(doc){}}}}"#, "unterminated backquoted string"),
        (#"{"adminInterface":"127.0.0.1:notaport"}"#, "adminInterface: must be host:port"),
    ])
    func badConfigExitsOneNamingTheField(config: String, message: String) throws {
        // Proves an invalid config stops settee-gateway with exit status 1 and a message naming the field.
        let gw = try GatewayProcess(name: "badconfig", config: config)
        let (status, output) = try gw.runToExit()
        #expect(status == 1)
        #expect(output.contains(message), "\(output)")
    }
}
