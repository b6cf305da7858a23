import Logging
import NIOCore
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `include_docs` answers (`_changes` in every feed, `_all_docs`) are written a chunk of rows at a time, each chunk's
/// bodies read just before it is written: one answer holds at most `Limits.gatewayIncludeDocsChunk` bodies, however
/// many rows it has (before, a normal feed of a big database gathered every row's body first).
@Suite struct IncludeDocsChunkTests {
    static func database() async throws -> (EmbeddedBucket, GatewayDatabase) {
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let bucket = try EmbeddedBucket(server: "walrus:", name: "chunks", logger: logger)
        let db = try await GatewayDatabase(options: DatabaseOptions(name: "db"), bucket: bucket, logger: logger)
        return (bucket, db)
    }

    /// Writes `d0` ... `d(count-1)`, each `{"n":i}`, and deletes `d3`.
    static func fill(_ db: GatewayDatabase, count: Int) async throws {
        var rev3 = ""
        for n in 0..<count {
            let rev = try await db.put("d\(n)", body: .object([("n", .number(Double(n)))]), user: nil)
            if n == 3 { rev3 = rev.description }
        }
        _ = try await db.put(
            "d3", body: .object([("_rev", .string(rev3)), ("_deleted", .bool(true))]), user: nil)
    }

    /// Proves a `_changes` page with `include_docs` holds no body until it is written, hands its rows over in chunks
    /// of at most `gatewayIncludeDocsChunk` with each current row's own body (a deleted one its stub), and that the
    /// chunks together are the page `changes` answers whole. Without `include_docs` the rows are one chunk. Fails
    /// when the rows are read in one go (one chunk of 50).
    @Test func changesRowsComeAChunkAtATime() async throws {
        let (bucket, db) = try await Self.database()
        try await Self.fill(db, count: 50)
        let q = ChangesQuery(includeDocs: true)
        let page = try await db.changeRows(q, user: nil)
        #expect(page.rows.count == 50)
        #expect(page.rows.allSatisfy { $0.doc == nil || $0.id == "d3" }, "bodies are read as rows are written")
        #expect(page.bodyReads.count == 49)

        var chunks: [[ChangeRow]] = []
        await db.forEachChunk(of: page) { chunks.append(Array($0)) }
        #expect(chunks.count == (50 + Limits.gatewayIncludeDocsChunk - 1) / Limits.gatewayIncludeDocsChunk)
        #expect(chunks.allSatisfy { $0.count <= Limits.gatewayIncludeDocsChunk })
        let rows = chunks.flatMap { $0 }
        #expect(rows.map(\.id) == page.rows.map(\.id))
        for row in rows {
            if row.id == "d3" {
                #expect(row.doc?["_deleted"]?.boolValue == true)
            } else {
                #expect(row.doc?["n"]?.intValue == Int(row.id.dropFirst()), "\(row)")
            }
        }
        let whole = try await db.changes(q, user: nil)
        #expect(whole.rows == rows)
        #expect(whole.bodyReads.isEmpty)

        let plain = try await db.changeRows(ChangesQuery(), user: nil)
        var plainChunks = 0
        await db.forEachChunk(of: plain) { rows in
            plainChunks += 1
            #expect(rows.count == 50)
        }
        #expect(plainChunks == 1)
        await db.close()
        await bucket.close()
    }

    /// Proves `_all_docs` rows are built when their page is, not when the ids are gathered: a document deleted after
    /// the pager gathered its ids is left out of the answer (and `total_rows`), as an answer begun a moment later
    /// leaves it out, while an answer by `keys` shows it as deleted, as it shows any deleted key.
    @Test func allDocsLeavesOutADocumentDeletedAfterItsIdsWereGathered() async throws {
        let (bucket, db) = try await Self.database()
        var revs: [String: RevID] = [:]
        for n in 0..<5 {
            revs["x\(n)"] = try await db.put("x\(n)", body: .object([("n", .number(Double(n)))]), user: nil)
        }
        var pager = try db.allDocsPager(AllDocsQuery(), user: nil)
        var byKeys = AllDocsQuery()
        byKeys.keys = ["x0", "x2", "x9"]
        var keysPager = try db.allDocsPager(byKeys, user: nil)
        _ = try await db.delete("x2", rev: revs["x2"], user: nil)

        let page = await pager.next(db)
        #expect(pager.done)
        #expect(page.rows.map { $0.first { $0.0 == "id" }?.1.stringValue } == ["x0", "x1", "x3", "x4"])
        var pieces: [UInt8] = []
        await BulkHandlers.writeAllDocs(first: page, rest: &pager, db: db, revs: false) { pieces += $0 }
        #expect(try JSON.parse(pieces)["total_rows"]?.intValue == 4)

        let keyed = (await keysPager.next(db)).rows.map { JSON.object($0) }
        #expect(keyed.count == 3)
        guard keyed.count == 3 else { return }
        #expect(keyed[0]["id"]?.stringValue == "x0")
        #expect(keyed[1]["id"]?.stringValue == "x2")
        #expect(keyed[1]["value"]?["deleted"]?.boolValue == true)
        #expect(keyed[2]["key"]?.stringValue == "x9")
        #expect(keyed[2]["error"]?.stringValue == "not_found")
        await db.close()
        await bucket.close()
    }

    /// Proves `_all_docs?include_docs=true` is written as a head, one piece per chunk of rows and a tail, and that
    /// the pieces together are exactly the answer `allDocs` builds whole (same rows, members in the same order).
    @Test func allDocsIsWrittenAChunkAtATime() async throws {
        let (bucket, db) = try await Self.database()
        try await Self.fill(db, count: 50)
        var q = AllDocsQuery()
        q.includeDocs = true
        q.updateSeq = true
        var pager = try db.allDocsPager(q, user: nil)
        let page = await pager.next(db)
        #expect(pager.done, "49 rows are one page")
        #expect(page.rows.count == 49)
        #expect(page.bodyReads.count == 49)
        #expect(page.rows.allSatisfy { row in !row.contains { $0.0 == "doc" } }, "bodies are read as rows are written")
        var pieces: [[UInt8]] = []
        await BulkHandlers.writeAllDocs(first: page, rest: &pager, db: db, revs: false) { pieces.append($0) }
        let chunks = (49 + Limits.gatewayIncludeDocsChunk - 1) / Limits.gatewayIncludeDocsChunk
        #expect(pieces.count == chunks + 2)
        let streamed = try JSON.parse(pieces.flatMap { $0 })
        let whole = try await db.allDocs(q, user: nil)
        // The same rows and members in the same order; `update_seq` is the stable sequence when each answer was made,
        // which moves when the allocator releases its unused reserve (1.5 s after it: a slow run crosses it).
        #expect(streamed["rows"] == whole["rows"])
        #expect(streamed["total_rows"] == whole["total_rows"])
        #expect(streamed["update_seq"]?.intValue == Int(page.updateSeq))
        if case .object(let members) = streamed {
            #expect(members.map(\.0) == ["rows", "total_rows", "update_seq"])
        } else {
            Issue.record("the answer is not an object")
        }
        #expect(streamed["rows"]?.arrayValue?.count == 49)
        #expect(streamed["rows"]?.arrayValue?.last?["doc"]?["n"]?.intValue == 9, "ids sort as strings: d9 last")
        await db.close()
        await bucket.close()
    }

    /// Proves the on-the-fly gzip of a streamed answer: the pieces and the trailer decode to the bytes written, in
    /// order.
    @Test func gzipPiecesDecodeToTheWhole() throws {
        let zip = try GzipCodec.Stream()
        var written: [UInt8] = []
        var encoded: [UInt8] = []
        for n in 0..<20 {
            let piece = Array(#"{"row":\#(n),"pad":"\#(String(repeating: "x", count: n * 37))"},"#.utf8)
            written += piece
            encoded += Array(try zip.piece(piece).readableBytesView)
        }
        encoded += Array(try zip.end().readableBytesView)
        #expect(encoded.count < written.count)
        #expect(try GzipCodec.gunzip(encoded) == written)
    }

    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}},
          "sync": `function(doc) { channel(doc.channels); }`}}}
        """

    /// Proves every HTTP feed writes `include_docs` rows chunk by chunk with each row's own body: the normal feed
    /// (streamed), a longpoll that has rows at once, and a continuous feed (one line per row, ending at `limit`).
    @Test func everyFeedCarriesItsRowsBodies() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        _ = try await BulkReadConcurrencyTests.putDocuments(gw, prefix: "c", count: 40)

        func check(_ rows: [JSON]) {
            let docs = rows.filter { $0["id"]?.stringValue?.hasPrefix("c") == true }
            #expect(docs.count == 40)
            for row in docs {
                let n = row["id"]?.stringValue.flatMap { Int($0.dropFirst()) }
                #expect(row["doc"]?["n"]?.intValue == n, "\(row)")
            }
        }
        let normal = try await gw.request("GET", "/db/_changes?include_docs=true")
        #expect(normal.status == 200)
        check(normal.body["results"]?.arrayValue ?? [])
        #expect(normal.body["last_seq"]?.stringValue != nil)

        let longpoll = try await gw.request("GET", "/db/_changes?feed=longpoll&include_docs=true")
        #expect(longpoll.status == 200)
        check(longpoll.body["results"]?.arrayValue ?? [])

        let continuous = try await gw.request("GET", "/db/_changes?feed=continuous&include_docs=true&limit=40")
        let lines = continuous.bytes.split(separator: UInt8(ascii: "\n")).filter { !$0.isEmpty }
        #expect(lines.count == 40)
        check(lines.compactMap { try? JSON.parse(Array($0)) })
        await gw.stop()
    }
}
