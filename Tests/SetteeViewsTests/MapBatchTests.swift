import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeViews

@Suite struct MapBatchTests {
    static func record(_ id: String, _ body: [UInt8], seqno: UInt64, deleted: Bool = false) -> ChangeRecord {
        let meta = ItemMetadata(
            cas: CAS(rawValue: 0x1234_5678_9abc_0000 + seqno), revSeqno: RevSeqNo(rawValue: seqno),
            bySeqno: SeqNo(seqno), flags: 7, expiry: 0, datatype: .json, deleted: deleted)
        return ChangeRecord(key: Array(id.utf8), value: body, meta: meta)
    }

    static func runner(
        _ maps: [String], timeLimitSeconds: Double = Limits.jsCallTimeLimitSeconds,
        heapLimitBytes: Int = Limits.jsHeapMaxBytes
    ) throws -> MapRunner {
        try MapRunner(
            views: maps.enumerated().map { ViewDefinition(name: "v\($0.offset)", map: $0.element, reduce: nil) },
            timeLimitSeconds: timeLimitSeconds, heapLimitBytes: heapLimitBytes)
    }

    /// Record `i`'s rows as `view:key=value`, in their stored order (`n`).
    static func rows(_ m: MappedDocuments, _ i: Int) -> [String] {
        m.rows[m.ranges[i]].map { r in
            "\(r.view):" + String(decoding: m.bytes[r.key], as: UTF8.self) + "="
                + String(decoding: m.bytes[r.value], as: UTF8.self)
        }
    }

    static func errors(_ m: MappedDocuments, _ i: Int) -> [String] {
        m.errors.filter { $0.record == i }.map { "\($0.view):\($0.error)" }
    }

    // Proves a batch gives each document what one call per document and view gave: a fresh parse of the
    // document and a fresh meta per view (view 0's changes to them do not reach view 1), rows numbered view by
    // view in emission order, a throwing view dropped with its error while the other view indexes the
    // document, a view that emits a too-large key dropped, non-JSON bodies handed over base64-encoded with
    // meta.type "base64", deletions with no rows; and that every sort key is the collation of its key.
    @Test func batchKeepsPerDocumentSemantics() throws {
        let m = try Self.runner([
            """
            function(doc, meta) {
                if (meta.type != 'json') { emit(meta.type, doc); return; }
                if (doc.boom) throw new Error('boom ' + meta.id);
                doc.touched = 1; meta.id = 'changed';
                emit(doc.k, doc.n);
                if (doc.many) for (var i = 0; i < 3; i++) emit([doc.k, i], null);
                if (doc.big) emit(new Array(5000).join('x'), 1);
            }
            """,
            "function(doc, meta) { emit(meta.id, doc.touched === undefined ? 'fresh' : 'shared'); }",
        ])
        let records = [
            Self.record("d0", Array(#"{"k":"x","n":1}"#.utf8), seqno: 1),
            Self.record("d1", [], seqno: 2, deleted: true),
            Self.record("d2", Array(#"{"k":"y","n":2,"many":true}"#.utf8), seqno: 3),
            Self.record("bin", [0xFF, 0x00, 0x41], seqno: 4),
            Self.record("d4", Array(#"{"boom":true}"#.utf8), seqno: 5),
            Self.record("d5", Array(#"{"k":"z","big":true}"#.utf8), seqno: 6),
            Self.record("d6", Array(#"{"k":1} trailing"#.utf8), seqno: 7),
        ]
        let out = m.map(records, vb: VBucketID(3))
        #expect(Self.rows(out, 0) == [#"0:"x"=1"#, #"1:"d0"="fresh""#])
        #expect(Self.rows(out, 1).isEmpty && Self.errors(out, 1).isEmpty)
        #expect(
            Self.rows(out, 2) == [
                #"0:"y"=2"#, #"0:["y",0]=null"#, #"0:["y",1]=null"#, #"0:["y",2]=null"#, #"1:"d2"="fresh""#,
            ])
        #expect(Self.rows(out, 3) == [#"0:"base64"="/wBB""#, #"1:"bin"="fresh""#])
        #expect(Self.rows(out, 4) == [#"1:"d4"="fresh""#])
        #expect(Self.errors(out, 4) == ["0:Error: boom d4"])
        #expect(Self.rows(out, 5) == [#"1:"d5"="fresh""#])
        #expect(Self.errors(out, 5) == ["0:emitted key or value too large or not JSON"])
        #expect(Self.rows(out, 6) == [#"0:"base64"="eyJrIjoxfSB0cmFpbGluZw==""#, #"1:"d6"="fresh""#])
        for row in out.rows[out.ranges[2]] {
            let key = try JSON.parse(Array(out.bytes[row.key]))
            #expect(Array(out.bytes[row.sortKey]) == Collation.encode(key))
        }
        #expect(out.rows[out.ranges[0]].first?.number == 1)
        #expect(out.rows[out.ranges[2]].last?.number == nil)
    }

    // Proves a document whose map function runs past the time limit in the middle of a batch costs only that
    // document and view: the documents before and after it in the batch are indexed, its other view's rows
    // (finished before the watchdog stopped the batch) are kept, and that view gets `.timeout`, as when each
    // document had a call of its own.
    @Test func watchdogInsideABatchCostsOneDocumentAndView() throws {
        let m = try Self.runner(
            [
                "function(doc) { emit(doc.i, null); }",
                "function(doc) { if (doc.spin) while (true) {} emit('all', doc.i); }",
            ], timeLimitSeconds: 0.5)
        let records = (0..<10).map { i in
            Self.record("d\(i)", Array((i == 4 ? #"{"i":4,"spin":true}"# : #"{"i":\#(i)}"#).utf8), seqno: UInt64(i + 1))
        }
        let out = m.map(records, vb: VBucketID(0))
        for i in 0..<10 {
            if i == 4 {
                #expect(Self.rows(out, i) == ["0:4=null"])
                #expect(Self.errors(out, i) == ["1:timeout"])
            } else {
                #expect(Self.rows(out, i) == ["0:\(i)=null", "1:\"all\"=\(i)"])
                #expect(Self.errors(out, i).isEmpty)
            }
        }
        // The engine stays usable after the watchdog.
        let again = m.map([Self.record("x", Array(#"{"i":99}"#.utf8), seqno: 20)], vb: VBucketID(0))
        #expect(Self.rows(again, 0) == ["0:99=null", #"1:"all"=99"#])
    }

    /// Proves a map function that holds more heap than the engine's bound costs only its document and view, as
    /// a runaway one does: it is stopped with `.outOfMemory`, the documents around it are indexed, and the engine
    /// maps the next batch. Before, a design document's map function could hold gigabytes for its 5 s on every
    /// document (JavaScriptCore has no heap limit of its own).
    @Test func aMapFunctionHoldingTooMuchHeapCostsOneDocumentAndView() throws {
        let m = try Self.runner(
            [
                "function(doc) { emit(doc.i, null); }",
                "function(doc) { var a = []; if (doc.hoard) for (;;) a.push({s: 'x' + a.length}); emit('all', doc.i); }",
            ], heapLimitBytes: 64 << 20)
        let records = (0..<6).map { i in
            Self.record(
                "d\(i)", Array((i == 2 ? #"{"i":2,"hoard":true}"# : #"{"i":\#(i)}"#).utf8), seqno: UInt64(i + 1))
        }
        let out = m.map(records, vb: VBucketID(0))
        for i in 0..<6 {
            if i == 2 {
                #expect(Self.rows(out, i) == ["0:2=null"])
                #expect(Self.errors(out, i) == ["1:\(JSError.outOfMemory)"])
            } else {
                #expect(Self.rows(out, i) == ["0:\(i)=null", "1:\"all\"=\(i)"])
                #expect(Self.errors(out, i).isEmpty)
            }
        }
        let again = m.map([Self.record("x", Array(#"{"i":99}"#.utf8), seqno: 20)], vb: VBucketID(0))
        #expect(Self.rows(again, 0) == ["0:99=null", #"1:"all"=99"#])
    }

    // Proves the per-document emit limit (Couchbase's 65,535 rows) fails that view with the same message as
    // the native emit, and that a map function replacing JSON or String does not change how rows come back.
    @Test func emitLimitAndReplacedBuiltins() throws {
        let m = try Self.runner([
            "function(doc) { if (doc.flood) for (var i = 0; i < 70000; i++) emit(i, null); else emit(doc.k, 1); }",
            "function(doc) { JSON = null; String = null; emit(doc.k, [doc.k]); }",
        ])
        let out = m.map(
            [
                Self.record("a", Array(#"{"flood":true,"k":"a"}"#.utf8), seqno: 1),
                Self.record("b", Array(#"{"k":"b"}"#.utf8), seqno: 2),
            ], vb: VBucketID(0))
        #expect(Self.errors(out, 0) == ["0:Error: Too many (65536) keys emitted for document"])
        #expect(Self.rows(out, 0) == [#"1:"a"=["a"]"#])
        #expect(Self.rows(out, 1) == [#"0:"b"=1"#, #"1:"b"=["b"]"#])
    }

    // Proves the allocation-light meta writer gives the bytes the former String-formatting one gave.
    @Test func metaJSONMatchesTheFormerFormatting() {
        func former(id: [UInt8], meta: ItemMetadata, vb: VBucketID, isJSON: Bool) -> String {
            var idJSON: [UInt8] = []
            JSON.writeString(String(decoding: id, as: UTF8.self), into: &idJSON)
            let hex = String(meta.cas.rawValue, radix: 16)
            let exp = String(meta.expiry, radix: 16)
            let flags = String(meta.flags, radix: 16)
            let rev =
                "\(meta.revSeqno.rawValue)-" + String(repeating: "0", count: 16 - hex.count) + hex
                + String(repeating: "0", count: 8 - exp.count) + exp + String(repeating: "0", count: 8 - flags.count)
                + flags
            return #"{"id":"# + String(decoding: idJSON, as: UTF8.self) + #","rev":""# + rev + #"","seq":""#
                + "\(meta.bySeqno.rawValue)" + #"","vb":""# + "\(vb.rawValue)" + #"","expiration":"#
                + "\(meta.expiry)" + #","flags":"# + "\(meta.flags)" + #","cas":"# + "\(meta.cas.rawValue)"
                + #","type":""# + (isJSON ? "json" : "base64") + #""}"#
        }
        let ids: [[UInt8]] = [Array("doc-1".utf8), Array(#"a"b\c"#.utf8), Array("é\n".utf8), [0xFF, 0x41], []]
        let metas = [
            ItemMetadata(
                cas: CAS(rawValue: 0), revSeqno: RevSeqNo(rawValue: 0), bySeqno: SeqNo(0), flags: 0, expiry: 0,
                datatype: .json, deleted: false),
            ItemMetadata(
                cas: CAS(rawValue: .max), revSeqno: RevSeqNo(rawValue: .max), bySeqno: SeqNo(.max), flags: .max,
                expiry: .max, datatype: .json, deleted: false),
            ItemMetadata(
                cas: CAS(rawValue: 0x17f3_aa00_0001_0000), revSeqno: RevSeqNo(rawValue: 12), bySeqno: SeqNo(99),
                flags: 0x2000006, expiry: 1_700_000_000, datatype: .json, deleted: false),
        ]
        for id in ids {
            for meta in metas {
                for isJSON in [true, false] {
                    let vb = VBucketID(1023)
                    let got = String(
                        decoding: MapRunner.metaJSON(id: id, meta: meta, vb: vb, isJSON: isJSON), as: UTF8.self)
                    #expect(got == former(id: id, meta: meta, vb: vb, isJSON: isJSON))
                }
            }
        }
    }

    // Proves a pass large enough to map on threads of its own (more than `Limits.viewIndexParallelChanges`
    // changes over several vBuckets) builds the index brute force gives, every view and reduce, and that
    // the index then follows updates and deletions.
    @Test func parallelBuildMatchesBruteForce() throws {
        var rng = SplitMix64(seed: 19)
        let f = try EngineFixture()
        var docs: [String: String] = [:]
        for i in 0..<(Limits.viewIndexParallelChanges + 1000) {
            let id = "doc\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            try f.set(id, docs[id]!)
        }
        try f.views.put(try DesignDocument(name: "test", body: TestDesign.body))
        let index = try #require(f.views.index(named: "test"))
        func check(_ phase: String) throws {
            var q = ViewQuery()
            q.stale = .false
            for (v, def) in TestDesign.views.enumerated() {
                let all = try BruteForce.rows(map: def.map, docs: docs)
                q.reduce = def.reduce == nil ? nil : false
                q.limit = 50
                q.skip = Int.random(in: 0..<1000, using: &rng)
                let want = try BruteForce.answer(all, q, reduce: def.reduce)
                #expect(try index.query(view: def.name, q).serialized() == want, "\(phase) view \(v) rows")
                if def.reduce != nil {
                    var r = ViewQuery()
                    r.stale = .false
                    let wantReduce = try BruteForce.answer(all, r, reduce: def.reduce)
                    #expect(try index.query(view: def.name, r).serialized() == wantReduce, "\(phase) view \(v) reduce")
                }
            }
        }
        try check("build")
        for i in stride(from: 0, to: 3000, by: 3) {
            let id = "doc\(i)"
            if i % 2 == 0 {
                try f.delete(id)
                docs[id] = nil
            } else {
                docs[id] = TestDesign.randomDoc(&rng)
                try f.set(id, docs[id]!)
            }
        }
        try check("updates")
        f.views.stop()
        f.engine.shutdown()
    }
}
