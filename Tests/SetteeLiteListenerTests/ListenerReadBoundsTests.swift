import Foundation
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeLiteListener
import SetteeTestSupport
import Testing

/// What one request from an authenticated peer may make a Lite P2P listener read and hold: `_bulk_get` and
/// `open_revs` keep the gateway's `_bulk_get` bounds (`GatewayHTTPLimits`: identical items read once, at most
/// `maxBulkReadDocs` distinct, at most `maxBulkReadBytes` gathered, else 413) and `open_revs` lists at most
/// `Limits.liteListenerMaxOpenRevs` revisions; `_changes` `doc_ids` lists at most `maxBulkReadDocs` ids.
@Suite struct ListenerReadBoundsTests {
    /// A running listener over a new database `db` (in a temporary directory) and a way to send it requests.
    final class Peer: Sendable {
        let db: Database
        let listener: PeerListener
        let port: Int
        let authorization: String
        let dir: String

        init(maxBulkReadBytes: Int = GatewayHTTPLimits.maxBulkReadBytes) async throws {
            dir = NSTemporaryDirectory() + "settee-listener-reads-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            db = try Database(name: "db", directory: dir)
            listener = PeerListener(endpoint: LocalEndpoint(db), databaseName: "db", maxBulkReadBytes: maxBulkReadBytes)
            let started = try await listener.start()
            port = started.port
            let credentials = started.credentials
            authorization = Data("\(credentials.user):\(credentials.password)".utf8).base64EncodedString()
        }

        func close() async {
            await listener.stop()
            db.close()
            try? FileManager.default.removeItem(atPath: dir)
        }

        /// One HTTP/1.1 request on a fresh connection: the answer's status and body as JSON.
        func request(_ method: String, _ path: String, body: String = "") async throws -> (status: Int, json: JSON) {
            let (port, authorization) = (port, authorization)
            let (reply, closed) = try await offPool { () throws -> ([UInt8], Bool) in
                let c = try TestKVClient(port: port, timeoutSeconds: 30)
                let payload = Array(body.utf8)
                try c.send(
                    bytes: Array(
                        ("\(method) \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \(authorization)\r\n"
                            + "Content-Type: application/json\r\nContent-Length: \(payload.count)\r\n"
                            + "Connection: close\r\n\r\n").utf8) + payload)
                let read = c.readUntilClosed()
                return (read.bytes, read.closed)
            }
            let text = String(decoding: reply, as: UTF8.self)
            guard let split = text.range(of: "\r\n\r\n"), text.hasPrefix("HTTP/1.1 "),
                let status = Int(text.dropFirst(9).prefix(3))
            else {
                // Which way it failed: the listener closed without (a whole) answer, or nothing came for 30 s.
                let how = closed ? "the listener closed the connection" : "no answer within the client's 30 s"
                throw TestSupportError(
                    "\(method) \(path.prefix(40)): \(how) after \(reply.count) bytes: \(text.prefix(200))")
            }
            return (status, try JSON.parse(Array(text[split.upperBound...].utf8)))
        }

        /// Saves `document` and returns its revision.
        func save(_ document: Document) throws -> String {
            String(describing: try db.put(document).revision!)
        }
    }

    static func bulkGet(_ items: [String]) -> String { "{\"docs\":[\(items.joined(separator: ","))]}" }

    /// The revisions of a JSON `_bulk_get` answer (`results` holds one entry per document id, each with its `docs`).
    static func revisions(_ answer: JSON) -> Int {
        (answer["results"]?.arrayValue ?? []).reduce(0) { $0 + ($1["docs"]?.arrayValue?.count ?? 0) }
    }

    /// Proves identical `_bulk_get` items are read once: 500 asks for one revision are answered with one row (before,
    /// the listener read and answered the revision 500 times, with its attachments each time).
    @Test func identicalBulkGetItemsAreReadOnce() async throws {
        let peer = try await Peer()
        let rev = try peer.save(Document(id: "d"))
        let item = "{\"id\":\"d\",\"rev\":\"\(rev)\"}"
        let answer = try await peer.request(
            "POST", "/db/_bulk_get", body: Self.bulkGet(Array(repeating: item, count: 500)))
        await peer.close()
        #expect(answer.status == 200)
        #expect(Self.revisions(answer.json) == 1, "\(answer.json.serialized().count) bytes")
    }

    /// Proves a request body of more than `GatewayHTTPLimits.maxRequestJSONValues` values is 400 naming the bound and
    /// saves nothing, as the gateway's (before, up to 64 MiB of `[0,0,…]` was parsed: about 24 times its size in
    /// values, ADR 0113).
    @Test func aBodyOfTooManyJSONValuesIs400() async throws {
        let peer = try await Peer()
        let bound = GatewayHTTPLimits.maxRequestJSONValues
        // 12 values (the body, `new_edits` and `docs` with theirs, the document, its three members with theirs), then
        // `bound - 11` zeros.
        func body(_ id: String, zeros: Int) -> String {
            #"{"new_edits":false,"docs":[{"_id":"\#(id)","_rev":"1-0123456789abcdef0123456789abcdef","a":["#
                + String(repeating: "0,", count: zeros - 1) + "0]}]}"
        }
        let over = try await peer.request("POST", "/db/_bulk_docs", body: body("big", zeros: bound - 11))
        let small = try await peer.request("POST", "/db/_bulk_docs", body: body("small", zeros: 1))
        let saved = try peer.db.document("big") != nil
        await peer.close()
        #expect(over.status == 400)
        #expect(over.json["reason"]?.stringValue?.contains("more than \(bound) values") == true, "\(over.json)")
        #expect(!saved)
        #expect(small.status == 201)
    }

    /// Proves a `_bulk_get` of more than `maxBulkReadDocs` distinct documents is refused with 413 (CouchDB's
    /// `too_large`) before anything is read, and one of exactly that many is answered (before: any count was read).
    @Test func moreDistinctDocsThanTheCapIs413() async throws {
        let peer = try await Peer()
        let items = (0...GatewayHTTPLimits.maxBulkReadDocs).map { "{\"id\":\"m\($0)\",\"rev\":\"1-a\"}" }
        let over = try await peer.request("POST", "/db/_bulk_get", body: Self.bulkGet(items))
        let atCap = try await peer.request("POST", "/db/_bulk_get", body: Self.bulkGet(Array(items.dropLast())))
        await peer.close()
        #expect(over.status == 413)
        #expect(over.json["error"]?.stringValue == "too_large")
        #expect(atCap.status == 200)
        #expect(Self.revisions(atCap.json) == GatewayHTTPLimits.maxBulkReadDocs)
    }

    /// Proves a `_bulk_get` whose revisions would pass the byte bound (3 MiB here) is refused with 413: one 1 MiB
    /// attachment asked for in 4 distinct shapes (different `atts_since`, none an ancestor, so each reads the bytes)
    /// passes it, 2 shapes do not. Before, the listener gathered any number of them.
    @Test func aBulkGetPastTheByteBoundIs413() async throws {
        let peer = try await Peer(maxBulkReadBytes: 3 << 20)
        let blob = Blob(data: [UInt8](repeating: 0x61, count: 1 << 20), contentType: "application/octet-stream")
        let rev = try peer.save(Document(id: "big", attachments: ["a": blob]))
        let shapes = (0..<4).map { "{\"id\":\"big\",\"rev\":\"\(rev)\",\"atts_since\":[\"1-x\($0)\"]}" }
        let under = try await peer.request("POST", "/db/_bulk_get", body: Self.bulkGet(Array(shapes.prefix(2))))
        let over = try await peer.request("POST", "/db/_bulk_get", body: Self.bulkGet(shapes))
        await peer.close()
        #expect(under.status == 200)
        #expect(Self.revisions(under.json) == 2)
        #expect(over.status == 413)
        #expect(over.json["error"]?.stringValue == "too_large")
    }

    /// Proves `open_revs` lists are bounded: more than `Limits.liteListenerMaxOpenRevs` revisions answer 413 (the
    /// `_bulk_get` refusal; CouchDB has no such cap to copy, and 413 tells the peer to ask for fewer), and a revision
    /// listed 50 times is answered once. Before, every listed revision was read.
    @Test func openRevsListsAreBounded() async throws {
        let peer = try await Peer()
        let rev = try peer.save(Document(id: "d"))
        func path(_ revs: [String]) -> String {
            let list = "[" + revs.map { "\"\($0)\"" }.joined(separator: ",") + "]"
            return "/db/d?open_revs=" + list.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        }
        let over = try await peer.request("GET", path((0...Limits.liteListenerMaxOpenRevs).map { "1-r\($0)" }))
        let repeated = try await peer.request("GET", path(Array(repeating: rev, count: 50)))
        await peer.close()
        #expect(over.status == 413)
        #expect(over.json["error"]?.stringValue == "too_large")
        #expect(repeated.status == 200)
        #expect(repeated.json.arrayValue?.count == 1)
    }

    /// Proves `POST _changes {"doc_ids": […]}` answers exactly the listed documents with a long list (10,000 ids
    /// against 3,000 documents, tested with a set per change rather than a scan of the list), and refuses a list of
    /// more than `maxBulkReadDocs` distinct ids with 413 (the gateway's `_doc_ids` bound). Before, any list was taken
    /// and every change of the database compared with each of its ids, on the database's queue.
    @Test func changesDocIDsAreASetAndBounded() async throws {
        let peer = try await Peer()
        _ = try peer.db.saveAll((0..<3_000).map { Document(id: "d\($0)") })
        let listed = stride(from: 0, to: 3_000, by: 3).map { "d\($0)" }
        let absent = (0..<(GatewayHTTPLimits.maxBulkReadDocs - listed.count)).map { "x\($0)" }
        func body(_ ids: [String]) -> String {
            "{\"doc_ids\":[" + ids.map { "\"\($0)\"" }.joined(separator: ",") + "],\"limit\":100000}"
        }
        let answer = try await peer.request("POST", "/db/_changes", body: body(listed + absent))
        let over = try await peer.request("POST", "/db/_changes", body: body(listed + absent + ["one-more"]))
        await peer.close()
        #expect(answer.status == 200)
        let ids = answer.json["results"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(ids.count == listed.count)
        #expect(Set(ids) == Set(listed))
        #expect(over.status == 413)
        #expect(over.json["error"]?.stringValue == "too_large")
    }
}
