import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeStorage
import SetteeTestSupport
import SetteeViews
import Testing

@Suite(.serialized) struct ViewMergeGroupLevelTests {
    // Proves that a scatter/gather query with `keys` and `group_level` answers one row per listed key
    // holding that key's prefix, as a single node (and CouchDB) does: before, a node's rows carried the
    // grouped key while the merge looked them up by the listed key, so every listed array key longer
    // than the group level lost its row. ["a",1] is on both nodes and ["a",2] on one only, so two
    // listed keys share the prefix ["a"] and a node's row must not be credited to the other key.
    @Test func keysWithGroupLevelKeepEveryListedKey() throws {
        let a = try EngineFixture(active: { $0 % 2 == 0 })
        let b = try EngineFixture(active: { $0 % 2 == 1 })
        defer {
            for f in [a, b] {
                f.views.stop()
                f.engine.shutdown()
            }
        }
        for f in [a, b] { try f.views.put(try DesignDocument(name: "test", body: TestDesign.body)) }
        func onA(_ id: String) -> Bool {
            VBucketHash.vbucket(forKey: Array(id.utf8), count: EngineFixture.settings.numVBuckets).rawValue % 2 == 0
        }
        var docs: [String: String] = [:]
        for i in 0..<40 {
            let id = "doc\(i)"
            let k: String
            switch i % 4 {
            case 0: k = #"["a",1]"#
            case 1: k = "[1]"
            case 2: k = "[]"
            default:
                guard onA(id) else { continue }
                k = #"["a",2]"#
            }
            docs[id] = #"{"k":\#(k),"n":\#(i)}"#
            try (onA(id) ? a : b).set(id, docs[id]!)
        }
        #expect(Set(docs.filter { $0.value.contains(#""k":["a",1]"#) }.keys.map(onA)) == [true, false])
        let ia = try #require(a.views.index(named: "test"))
        let ib = try #require(b.views.index(named: "test"))
        let def = TestDesign.views[0]
        let reduce = try def.reduce.map { try ReduceFunction(source: $0) }
        for text in [
            #"[[1],["a",1],[]]"#, #"[["a",1],["a",2],[1],["a",1]]"#, #"[["a",2],["b",1],["a",1]]"#,
        ] {
            for level in [1, 2] {
                for descending in [false, true] {
                    var params = [("stale", "false"), ("group_level", String(level)), ("keys", text)]
                    if descending { params.append(("descending", "true")) }
                    let q = try ViewQuery.parse(params)
                    let parts = [try ia.query(view: def.name, q.partial), try ib.query(view: def.name, q.partial)]
                    let got = try ViewMerge.merge(parts, q, reduce: reduce).serialized()
                    let want = try BruteForce.answer(
                        try BruteForce.rows(map: def.map, docs: docs), q, reduce: def.reduce)
                    #expect(
                        got == want,
                        "keys=\(text) group_level=\(level) descending=\(descending)\n got  \(String(decoding: got, as: UTF8.self))\n want \(String(decoding: want, as: UTF8.self))"
                    )
                }
            }
        }
    }
}
