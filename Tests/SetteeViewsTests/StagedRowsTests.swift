import Foundation
import SetteeCore
import SetteeJSON
import SetteeStorage
import SetteeStreams
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeViews

@Suite struct StagedRowsTests {
    /// One batch: each document's key and its rows (view, key JSON text; value 1), with their collation sort
    /// keys, as `MapRunner` makes them. A document without rows stands for a deletion.
    static func batch(_ docs: [(id: String, keys: [(view: Int, key: String)])]) throws -> (
        records: [ChangeRecord], mapped: MappedDocuments
    ) {
        var m = MappedDocuments(count: docs.count)
        var records: [ChangeRecord] = []
        for (d, doc) in docs.enumerated() {
            let meta = ItemMetadata(
                cas: CAS(rawValue: 1), revSeqno: RevSeqNo(rawValue: 1), bySeqno: SeqNo(UInt64(d + 1)), flags: 0,
                expiry: 0, datatype: .json, deleted: doc.keys.isEmpty)
            records.append(ChangeRecord(key: Array(doc.id.utf8), value: [], meta: meta))
            let first = m.rows.count
            for (view, key) in doc.keys {
                let k = m.bytes.count
                m.bytes.append(contentsOf: key.utf8)
                let v = m.bytes.count
                m.bytes.append(contentsOf: "1".utf8)
                let s = m.bytes.count
                Collation.encode(try JSON.parse(Array(key.utf8)), into: &m.bytes)
                m.rows.append(MappedRow(view: view, key: k..<v, value: v..<s, sortKey: s..<m.bytes.count, number: 1))
            }
            m.ranges[d] = first..<m.rows.count
        }
        return (records, m)
    }

    // Proves the staged rows come out in SQLite's order of the view table's key (view, then sort key by memcmp
    // with a prefix first, then doc id bytes, then emission number), for random keys, including sort keys that
    // share their first 8 bytes (long strings, arrays) and keys emitted twice by one document; batches of
    // several documents, several batches per vBucket.
    @Test func orderIsTheViewKeyOrder() throws {
        var rng = SplitMix64(seed: 44)
        let pool = [
            "null", "true", "0", "-1.5", "1700000000", "\"a\"", "\"A\"", "\"abcdefghij\"", "\"abcdefghijk\"",
            "[\"abcdefgh\",1]", "[\"abcdefgh\",2]", "[\"abcdefgh\"]", "{\"a\":1}", "\"\"",
        ]
        var staged = StagedRows()
        var want: [(view: Int, sk: [UInt8], doc: [UInt8], n: Int)] = []
        for b in 0..<60 {
            var docs: [(id: String, keys: [(view: Int, key: String)])] = []
            for d in 0..<5 {
                let count = Int.random(in: 0..<4, using: &rng)
                let keys = (0..<count).map { _ in
                    (view: Int.random(in: 0..<2, using: &rng), key: pool[Int.random(in: 0..<pool.count, using: &rng)])
                }
                docs.append(("doc\(Int.random(in: 0..<1000, using: &rng))-\(b)-\(d)", keys))
            }
            let (records, m) = try Self.batch(docs)
            staged.stage(vb: b % 7, records: records, mapped: m)
            for (d, r) in records.enumerated() {
                for (n, row) in m.rows[m.ranges[d]].enumerated() {
                    want.append((row.view, Array(m.bytes[row.sortKey]), r.key, n))
                }
            }
        }
        want.sort { a, b in
            if a.view != b.view { return a.view < b.view }
            if a.sk != b.sk { return a.sk.lexicographicallyPrecedes(b.sk) }
            if a.doc != b.doc { return a.doc.lexicographicallyPrecedes(b.doc) }
            return a.n < b.n
        }
        let got = staged.ordered().map { i in
            let r = staged.rows[i]
            return (r.view, Array(staged.arena[r.sortKey]), Array(staged.arena[r.doc]), r.n)
        }
        #expect(got.count == want.count)
        for (g, w) in zip(got, want) {
            #expect(g.0 == w.view && g.1 == w.sk && g.2 == w.doc && g.3 == w.n)
        }
    }

    // Proves a document staged again in a later batch of its vBucket keeps only its later rows (also when the
    // later staging has none: a deletion), another vBucket's document of the same id is left alone, and the
    // per-vBucket, per-view counts are the rows that will be inserted.
    @Test func laterStagingSupersedes() throws {
        var staged = StagedRows()
        let first = try Self.batch([("x", [(0, "1"), (1, "2")]), ("y", [(0, "3")]), ("z", [(0, "5")])])
        staged.stage(vb: 3, records: first.records, mapped: first.mapped)
        let other = try Self.batch([("x", [(0, "1"), (1, "2")])])
        staged.stage(vb: 4, records: other.records, mapped: other.mapped)
        let second = try Self.batch([("x", [(0, "4")]), ("w", [(1, "6")])])
        staged.stage(vb: 3, records: second.records, mapped: second.mapped)
        let third = try Self.batch([("z", []), ("w", [(0, "7")])])
        staged.stage(vb: 3, records: third.records, mapped: third.mapped)
        let keys = staged.ordered().map { i in
            let r = staged.rows[i]
            return "\(r.vb):" + String(decoding: staged.arena[r.doc], as: UTF8.self) + ":"
                + String(decoding: staged.arena[r.key], as: UTF8.self) + "@\(r.view)"
        }
        #expect(keys == ["4:x:1@0", "3:y:3@0", "3:x:4@0", "3:w:7@0", "4:x:2@1"])
        #expect(staged.counts[3]?.filter { $0.value != 0 } == [0: 3])
        #expect(staged.counts[4] == [0: 1, 1: 1])
    }

    // Proves a document that changes while a pass reads its vBucket (so it comes in two batches of one write
    // group: its first version, then its new one) is indexed once, with its new rows, and counted once.
    @Test func documentChangedDuringThePassIsIndexedOnce() throws {
        let source = ChangingSource()
        let dir = TemporaryDirectory("views")
        let design = try DesignDocument(
            name: "d",
            body: Array(#"{"views":{"v":{"map":"function(doc){ emit(doc.k, null); }","reduce":"_count"}}}"#.utf8))
        let index = try DesignIndex(design: design, directory: dir.path, source: source, logger: quietLogger())
        defer { index.stop() }
        try index.update(wait: true)
        var q = ViewQuery()
        q.stale = .ok
        q.reduce = false
        let rows = try index.query(view: "v", q)
        #expect(String(decoding: rows.serialized(), as: UTF8.self).contains(#""key":"x2""#))
        #expect(!String(decoding: rows.serialized(), as: UTF8.self).contains(#""key":"x1""#))
        var r = ViewQuery()
        r.stale = .ok
        let reduced = String(decoding: try index.query(view: "v", r).serialized(), as: UTF8.self)
        #expect(reduced.contains(#""value":2"#), "\(reduced)")
    }
}

/// One active vBucket whose document `x` changes while the first pass reads it: the first scan returns `x`'s
/// first version (covering seqno 1 of 2), then `x` is rewritten at seqno 3, and the next scan returns `y` and
/// `x`'s new version.
final class ChangingSource: ViewDataSource {
    private let scans = Mutex(0)

    static func record(_ id: String, _ k: String, seqno: UInt64) -> ChangeRecord {
        let meta = ItemMetadata(
            cas: CAS(rawValue: seqno), revSeqno: RevSeqNo(rawValue: seqno), bySeqno: SeqNo(seqno), flags: 0,
            expiry: 0, datatype: .json, deleted: false)
        return ChangeRecord(key: Array(id.utf8), value: Array(#"{"k":"\#(k)"}"#.utf8), meta: meta)
    }

    var vbucketCount: Int { 1 }
    func activeHistory(_ vb: VBucketID) -> (log: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo)? {
        (FailoverLog(initialUUID: VBucketUUID(7)), SeqNo(scans.withLock { $0 } == 0 ? 2 : 3), .zero)
    }
    func nowSeconds() -> UInt32 { 1_000 }
    func changes(_ vb: VBucketID, since: SeqNo, limit: Int) throws -> (
        records: [ChangeRecord], highSeqno: SeqNo, purgeSeqno: SeqNo
    ) {
        let scan = scans.withLock { s in
            s += 1
            return s
        }
        switch (scan, since.rawValue) {
        case (1, 0): return ([Self.record("x", "x1", seqno: 1)], SeqNo(1), .zero)
        case (_, 1): return ([Self.record("y", "y", seqno: 2), Self.record("x", "x2", seqno: 3)], SeqNo(3), .zero)
        default: return ([], SeqNo(3), .zero)
        }
    }
    func document(_ key: [UInt8]) -> (value: [UInt8], meta: ItemMetadata)? { nil }
    func addObserver(_ observer: @escaping @Sendable (VBucketID, SeqNo) -> Void) -> UInt64 { 1 }
    func removeObserver(_ token: UInt64) {}
}
