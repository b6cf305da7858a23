import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeTestSupport
import Testing

@testable import SetteeLite

/// `saveAll`'s helper thread (ADR 0080): what it prepares must be exactly what `save` would write.
@Suite(.onTestThreads) struct SavePipelineTests {
    static let chunk = Limits.liteSavePrepareChunk

    static func body(_ i: Int) -> JSON {
        ["type": "note", "n": .number(Double(i)), "text": .string(String(repeating: "x", count: i % 97))]
    }

    /// The same state in `db`: a live document "live-k" and a deleted one "gone-k" for a few k.
    static func seed(_ db: Database) throws -> [String: RevID] {
        var revs: [String: RevID] = [:]
        for k in 0..<3 {
            revs["live-\(k)"] = try db.put(Document(id: "live-\(k)", properties: ["v": 1])).revision
            try db.save(Document(id: "gone-\(k)", properties: ["v": 1]))
            try db.delete("gone-\(k)")
        }
        return revs
    }

    /// Proves a batch through the helper thread ends in the same file as the same documents saved one by one
    /// with `put` (no helper): new documents with and without ids, a tombstone re-created (its prepared row
    /// finds the id taken and `save` takes the general path), edits naming a revision and documents with
    /// attachments (both never prepared). Same revisions, same bodies, same sequence order.
    @Test func aBatchThroughTheHelperEqualsSavesOneByOne() throws {
        let dir = TemporaryDirectory.make("lite")
        let batchDB = try Database(name: "batch", directory: dir)
        let singleDB = try Database(name: "single", directory: dir)
        defer {
            try? batchDB.delete()
            try? singleDB.delete()
        }
        let revs = try Self.seed(batchDB)
        #expect(try Self.seed(singleDB) == revs)
        var docs: [Document] = []
        for i in 0..<(5 * Self.chunk + 37) {
            switch i % 50 {
            case 7: docs.append(Document(id: nil, properties: Self.body(i)))
            case 11 where i / 50 < 3: docs.append(Document(id: "gone-\(i / 50)", properties: Self.body(i)))
            case 13 where i / 50 < 3:
                var edit = Document(id: "live-\(i / 50)", properties: Self.body(i))
                edit.revision = revs["live-\(i / 50)"]
                docs.append(edit)
            case 17:
                docs.append(
                    Document(
                        id: "att-\(i)", properties: Self.body(i),
                        attachments: ["a": Blob(data: Array("bytes \(i)".utf8), contentType: "text/plain")]))
            default: docs.append(Document(id: "doc-\(i)", properties: Self.body(i)))
            }
        }
        #expect(docs.count >= 2 * Self.chunk)
        let batch = try batchDB.saveAll(docs)
        let single = try docs.map { try singleDB.put($0) }
        #expect(batch.count == docs.count)
        for (b, s) in zip(batch, single) {
            #expect(b.revision == s.revision)
            #expect(b.properties == s.properties)
            #expect(b.attachments == s.attachments)
        }
        for (d, b) in zip(docs, batch) where d.id != nil { #expect(b.id == d.id) }
        // Generated ids differ between the files; everything else matches row for row.
        let generated = Set(zip(docs, batch).filter { $0.0.id == nil }.compactMap { $0.1.id })
        #expect(generated.count == docs.filter { $0.id == nil }.count)
        func rows(_ db: Database) throws -> [String] {
            try db.changes(since: .zero).map { e in
                let id = e.id.count == 32 && !e.id.contains("-") ? "<generated>" : e.id
                return "\(e.sequence.rawValue) \(id) \(e.revision) \(e.isDeleted) \(e.leaves)"
            }
        }
        #expect(try rows(batchDB) == rows(singleDB))
        #expect(batchDB.lastSequence == singleDB.lastSequence)
        for d in docs where d.id != nil {
            let id = d.id ?? ""
            #expect(try batchDB.document(id) == singleDB.document(id))
            #expect(try batchDB.revisionTree(of: id) == singleDB.revisionTree(of: id))
        }
    }

    /// Proves an invalid document late in a long batch rolls the whole batch back (rows the helper prepared
    /// are dropped with it), and the next batch commits.
    @Test func anInvalidDocumentLateInTheBatchRollsItAllBack() throws {
        let db = try Database(name: "rollback", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        var docs = (0..<(4 * Self.chunk)).map { Document(id: "d\($0)", properties: Self.body($0)) }
        docs[3 * Self.chunk + 5] = Document(id: "bad", properties: ["_reserved": 1])
        #expect(throws: LiteError.self) { try db.saveAll(docs) }
        #expect(db.documentCount == 0)
        #expect(db.lastSequence == .zero)
        docs[3 * Self.chunk + 5] = Document(id: "good", properties: ["ok": true])
        #expect(try db.saveAll(docs).count == docs.count)
        #expect(db.documentCount == docs.count)
        #expect(db.lastSequence == SeqNo(UInt64(docs.count)))
    }

    /// Proves the helper prepares at most `Limits.liteSavePrepareAhead` chunks ahead of a writer that has not
    /// started and hands over the rows `Store.newDocumentRow` computes.
    @Test func theHelperStaysWithinItsLeadAndHandsOverTheRows() throws {
        let docs = (0..<((Limits.liteSavePrepareAhead + 8) * Self.chunk)).map {
            Document(id: "d\($0)", properties: Self.body($0))
        }
        let pipeline = try #require(SavePipeline.start(docs))
        defer { pipeline.stop() }
        let deadline = Date().addingTimeInterval(10)
        while pipeline.claimedChunks < Limits.liteSavePrepareAhead && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        Thread.sleep(forTimeInterval: 0.2)
        #expect(pipeline.claimedChunks == Limits.liteSavePrepareAhead)
        for (i, d) in docs.enumerated() {
            let row = try #require(pipeline.row(i))
            let expected = try #require(Store.newDocumentRow(d))
            #expect(row.id == expected.id && row.rev == expected.rev && row.bytes == expected.bytes)
            #expect(row.type == "note")
        }
        #expect(pipeline.claimedChunks == docs.count / Self.chunk)
        #expect(SavePipeline.start(Array(docs.prefix(2 * Self.chunk - 1))) == nil)
    }

    /// Proves a writer whose helper never runs computes every chunk itself: the same rows, nothing waited for.
    @Test func aWriterWithoutItsHelperComputesEveryChunk() throws {
        let docs = (0..<(3 * Self.chunk + 5)).map { Document(id: "d\($0)", properties: Self.body($0)) }
        let pipeline = try #require(SavePipeline.start(docs, helper: false))
        defer { pipeline.stop() }
        #expect(pipeline.claimedChunks == 0)
        for (i, d) in docs.enumerated() {
            let row = try #require(pipeline.row(i))
            let expected = try #require(Store.newDocumentRow(d))
            #expect(row.id == expected.id && row.rev == expected.rev && row.bytes == expected.bytes)
        }
        #expect(pipeline.claimedChunks == 4)
    }
}
