import Foundation
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeTestSupport
import Testing

@Suite struct QueryTests {
    static func seeded(_ name: String) throws -> Database {
        let db = try Database(name: name, directory: TemporaryDirectory.make("lite"))
        _ = try db.saveAll(
            (0..<20).map { i in
                Document(
                    id: String(format: "doc%02d", i),
                    properties: [
                        "type": i % 2 == 0 ? "image" : "note", "timestamp_added": .number(Double(100 - i)),
                        "tags": .array([.string("t\(i % 3)")]), "n": .number(Double(i)),
                    ])
            })
        return db
    }

    @Test func allDocumentsRangesOrderSkipLimitAndFilter() throws {
        // Proves all-docs returns id order, honours start/end (inclusive or not), descending, keys,
        // skip and limit, and applies the post-filter before skip/limit.
        let db = try Self.seeded("alldocs")
        defer { try? db.delete() }
        #expect(try db.allDocuments().count == 20)
        let range = try db.allDocuments(AllDocsQuery(startKey: "doc05", endKey: "doc08"))
        #expect(range.map(\.id) == ["doc05", "doc06", "doc07", "doc08"])
        let exclusive = try db.allDocuments(AllDocsQuery(startKey: "doc05", endKey: "doc08", inclusiveEnd: false))
        #expect(exclusive.map(\.id) == ["doc05", "doc06", "doc07"])
        let desc = try db.allDocuments(AllDocsQuery(startKey: "doc08", endKey: "doc05", descending: true))
        #expect(desc.map(\.id) == ["doc08", "doc07", "doc06", "doc05"])
        let paged = try db.allDocuments(AllDocsQuery(limit: 3, skip: 2))
        #expect(paged.map(\.id) == ["doc02", "doc03", "doc04"])
        let keyed = try db.allDocuments(AllDocsQuery(keys: ["doc03", "nope", "doc01"]))
        #expect(keyed.map(\.id) == ["doc03", "doc01"])
        let filtered = try db.allDocuments(
            AllDocsQuery(limit: 2, skip: 1, postFilter: { $0.type == "note" }))
        #expect(filtered.map(\.id) == ["doc03", "doc05"])
        try db.delete("doc00")
        #expect(try db.allDocuments().count == 19)
        #expect(try db.allDocuments(AllDocsQuery(includeDeleted: true)).first?.isDeleted == true)
    }

    @Test func viewQueriesRangesDescendingAndReduce() throws {
        // Proves a Swift map view sorts by key in collation order, answers ranges, descending, keys,
        // skip/limit, includes documents, and reduces with _count/_sum/_stats, group and group_level.
        let db = try Self.seeded("views")
        defer { try? db.delete() }
        let images = db.view("images", version: "1") { doc, emit in
            if doc.type == "image" { emit(doc["timestamp_added"], nil) }
        }
        let all = try images.query().run()
        #expect(all.count == 10)
        #expect(all.map(\.key) == (0..<10).map { .number(Double(82 + 2 * $0)) })
        let desc = try images.query(descending: true, includeDocs: true).run()
        #expect(desc.first?.key == .number(100) && desc.first?.documentID == "doc00")
        #expect(desc.first?.document?["n"] == .number(0))
        let range = try images.query(startKey: 90, endKey: 96).run()
        #expect(range.map(\.key) == [90, 92, 94, 96])
        let exclusive = try images.query(startKey: 96, endKey: 90, descending: true, inclusiveEnd: false).run()
        #expect(exclusive.map(\.key) == [96, 94, 92])
        let keyed = try images.query(keys: [98, 84, 85]).run()
        #expect(keyed.map(\.documentID) == ["doc02", "doc16"])
        let paged = try images.query(limit: 2, skip: 1).run()
        #expect(paged.map(\.key) == [84, 86])

        let byTag = db.view("tags", version: "1", reduce: .count) { doc, emit in
            for case .string(let t) in doc["tags"]?.arrayValue ?? [] {
                emit([.string(t), doc["type"] ?? nil], doc["n"])
            }
        }
        #expect(try byTag.query().run() == [QueryRow(key: .null, value: 20)])
        let level1 = try byTag.query(groupLevel: 1).run()
        #expect(level1.map(\.key) == [["t0"], ["t1"], ["t2"]])
        #expect(level1.map(\.value) == [7, 7, 6])
        let exact = try byTag.query(group: true).run()
        #expect(exact.count == 6)
        #expect(try byTag.query(reduce: false).run().count == 20)
        let sums = db.view("sums", version: "1", reduce: .sum) { doc, emit in emit(doc["type"], doc["n"]) }
        #expect(try sums.query(group: true).run().map(\.value) == [90, 100])  // image: 0+2+..+18, note: 1+..+19
        let stats = db.view("stats", version: "1", reduce: .stats) { doc, emit in emit(nil, doc["n"]) }
        let s = try #require(try stats.query().run().first?.value)
        #expect(s["count"] == 20 && s["min"] == 0 && s["max"] == 19 && s["sum"] == 190)
        let custom = db.view(
            "longest", version: "1",
            reduce: .custom({ _, values in
                .number(values.compactMap(\.numberValue).max() ?? -1)
            })
        ) { doc, emit in emit(doc["type"], doc["n"]) }
        #expect(try custom.query(group: true).run().map(\.value) == [18, 19])
    }

    @Test func viewIndexIsIncrementalAndRebuiltOnNewVersion() throws {
        // Proves the index follows later saves, updates and deletions incrementally, and a new version
        // rebuilds it from scratch with the new map function (the old rows are gone).
        let db = try Self.seeded("reindex")
        defer { try? db.delete() }
        let calls = Counter()
        let v1 = db.view("byN", version: "1") { doc, emit in
            calls.increment()
            emit(doc["n"], nil)
        }
        #expect(try v1.query().run().count == 20)
        #expect(calls.value == 20)
        try db.save(Document(id: "extra", properties: ["n": 100]))
        var d = try #require(try db.document("doc01"))
        d["n"] = 101
        try db.save(d)
        try db.delete("doc02")
        let rows = try v1.query().run()
        #expect(calls.value == 22)
        #expect(rows.count == 20)
        #expect(rows.suffix(2).map(\.documentID) == ["extra", "doc01"])
        let v2 = db.view("byN", version: "2") { doc, emit in emit(.string("k"), doc["n"]) }
        let rebuilt = try v2.query().run()
        #expect(rebuilt.count == 20 && rebuilt.allSatisfy { $0.key == "k" })
        try db.purge("extra")
        #expect(try v2.query().run().count == 19)
    }

    @Test func liveQueryYieldsWhenResultsChange() async throws {
        // Proves a live query yields the current rows, then again after a change that alters them, and
        // not for a change that leaves them equal.
        let db = try Self.seeded("live")
        defer { try? db.delete() }
        let images = db.view("images", version: "1") { doc, emit in
            if doc.type == "image" { emit(doc["timestamp_added"], nil) }
        }
        var it = images.query(descending: true).live().makeAsyncIterator()
        let first = try #require(await it.next())
        #expect(first.count == 10)
        try db.save(Document(id: "irrelevant", properties: ["type": "note"]))
        try db.save(Document(id: "new", properties: ["type": "image", "timestamp_added": 1000]))
        let second = try #require(await it.next())
        #expect(second.count == 11 && second.first?.documentID == "new")
    }

    @Test func fullTextSearchOverChosenProperties() throws {
        // Proves an FTS5 index over chosen properties finds documents by words and prefixes (diacritics
        // folded), ignores other properties, follows updates and deletions, and rejects bad syntax.
        let db = try Database(name: "fts", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        try db.save(Document(id: "a", properties: ["title": "Sunset over the harbour", "secret": "zebra"]))
        try db.save(Document(id: "b", properties: ["title": "Café at night", "tags": ["harbour", "city"]]))
        try db.save(Document(id: "c", properties: ["title": "Mountains"]))
        try db.createFullTextIndex("photos", properties: ["title", "tags"])
        #expect(Set(try db.search("photos", "harbour").map(\.documentID)) == ["a", "b"])
        #expect(try db.search("photos", "cafe").map(\.documentID) == ["b"])
        #expect(try db.search("photos", "mount*").map(\.documentID) == ["c"])
        #expect(try db.search("photos", "zebra").isEmpty)
        #expect(try db.search("photos", "sunset").first?.snippet.contains("[Sunset]") == true)
        try db.delete("a")
        var c = try #require(try db.document("c"))
        c["title"] = "Harbour lights"
        try db.save(c)
        #expect(Set(try db.search("photos", "harbour").map(\.documentID)) == ["b", "c"])
        #expect(throws: LiteError.self) { try db.search("photos", "\"unbalanced") }
        #expect(throws: LiteError.notFound("full-text index nope")) { try db.search("nope", "x") }
    }
}
