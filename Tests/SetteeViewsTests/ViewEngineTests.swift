import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeSQLite
import SetteeTestSupport
import SetteeViews
import Testing

@testable import SetteeStorage

func quietLogger() -> Logger {
    var l = Logger(label: "settee.views.test")
    l.logLevel = .critical
    return l
}

/// A real `BucketEngine` (its change feed drives the index) with a manual clock.
final class EngineFixture {
    let dir = TemporaryDirectory("views")
    let clock = ManualWallClock()
    var engine: BucketEngine
    var views: BucketViews
    static let settings = BucketSettings(
        name: "test", uuid: "0123456789abcdef0123456789abcdef", ramQuotaMB: 256, numVBuckets: 16)

    init(active: (Int) -> Bool = { _ in true }, flusherMaxDelay: Double = 0.001) throws {
        engine = try Self.openEngine(dir: dir.path, clock: clock, flusherMaxDelay: flusherMaxDelay)
        for vb in 0..<Self.settings.numVBuckets where !active(vb) {
            engine.setVBucketState(VBucketID(UInt16(vb)), .replica)
        }
        views = try BucketViews(
            bucket: "test", directory: dir.path + "/views", source: EngineViewSource(engine: engine, clock: clock),
            logger: quietLogger())
    }

    /// `hold`: active vBuckets warm up held after an unclean shutdown, as on a clustered node (ADR 0033).
    static func openEngine(
        dir: String, clock: ManualWallClock, flusherMaxDelay: Double = 0.001, hold: Bool = false
    ) throws -> BucketEngine {
        var options = EngineOptions()
        options.flusherMaxDelay = flusherMaxDelay
        options.holdAfterUncleanShutdown = hold
        options.expiryPagerInterval = 3600
        let e = try BucketEngine(
            settings: settings, directory: dir + "/data", clock: clock, options: options, logger: quietLogger())
        for vb in 0..<settings.numVBuckets { e.setVBucketState(VBucketID(UInt16(vb)), .active) }
        return e
    }

    /// Closes and reopens engine and views from disk (a restart).
    func restart() throws {
        views.stop()
        engine.shutdown()
        engine = try Self.openEngine(dir: dir.path, clock: clock)
        views = try BucketViews(
            bucket: "test", directory: dir.path + "/views", source: EngineViewSource(engine: engine, clock: clock),
            logger: quietLogger())
    }

    /// Stops the views and opens them again over the running engine: while stopped, no pass runs, so what
    /// happens meanwhile (a flush, writes) reaches the index in one pass.
    func reopenViews() throws {
        views.stop()
        views = try BucketViews(
            bucket: "test", directory: dir.path + "/views", source: EngineViewSource(engine: engine, clock: clock),
            logger: quietLogger())
    }

    /// A crash: the views stop, the engine is abandoned (nothing more is written) and opened again from its file
    /// (warmup sees an unclean shutdown). The views stay stopped until `reopenViews`.
    func crashEngine(hold: Bool = false) throws {
        views.stop()
        engine.stopThreads(.abandon)
        engine = try Self.openEngine(dir: dir.path, clock: clock, hold: hold)
    }

    /// Design `d`, whose view `v` emits (document id, `doc.n`).
    static func idDesign() throws -> DesignDocument {
        try DesignDocument(
            name: "d", body: Array(#"{"views":{"v":{"map":"function(d, meta){ emit(meta.id, d.n); }"}}}"#.utf8))
    }

    /// `idDesign`'s rows, stale=false, as JSON texts: key (the quoted document id) to value.
    func idRows() throws -> [String: String] {
        var q = ViewQuery()
        q.stale = .false
        let r = try #require(views.index(named: "d")).query(view: "v", q)
        var out: [String: String] = [:]
        for row in r.rows { out[String(decoding: row.key, as: UTF8.self)] = String(decoding: row.value, as: UTF8.self) }
        return out
    }

    func set(_ id: String, _ body: String, expiry: UInt32 = 0) throws {
        let key = Array(id.utf8)
        _ = try engine.store(
            .set, VBucketHash.vbucket(forKey: key, count: Self.settings.numVBuckets), key, value: Array(body.utf8),
            flags: 0, expiry: expiry, datatype: .json, cas: .zero)
    }

    func delete(_ id: String) throws {
        let key = Array(id.utf8)
        _ = try engine.delete(VBucketHash.vbucket(forKey: key, count: Self.settings.numVBuckets), key, cas: .zero)
    }
}

@Suite(.serialized, .onTestThreads) struct ViewEngineTests {
    // Proves, for random documents and random queries over every parameter, that the incremental index
    // answers exactly what a brute-force map/reduce over all live documents gives, after inserts,
    // updates, deletions, expiries and a restart (index resumes from its stored seqnos).
    @Test func matchesBruteForce() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SETTEE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        print("ViewEngineTests.matchesBruteForce seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let f = try EngineFixture()
        try f.views.put(try DesignDocument(name: "test", body: TestDesign.body))
        var docs: [String: String] = [:]

        func check(_ phase: String, queries: Int = 40) throws {
            let index = try #require(f.views.index(named: "test"))
            let ids = Array(docs.keys).sorted()
            for _ in 0..<queries {
                let v = Int.random(in: 0..<TestDesign.views.count, using: &rng)
                let (q, text) = try TestDesign.randomQuery(view: v, docIDs: ids, &rng)
                let def = TestDesign.views[v]
                let got = try index.query(view: def.name, q).serialized()
                let want = try BruteForce.answer(try BruteForce.rows(map: def.map, docs: docs), q, reduce: def.reduce)
                let same = got == want
                #expect(
                    same,
                    "\(phase) seed \(seed) view \(def.name) ?\(text)\n got  \(String(decoding: got, as: UTF8.self))\n want \(String(decoding: want, as: UTF8.self))"
                )
                if !same { return }
            }
        }

        // Inserts (enough rows that a custom reduce over everything rereduces: > Limits.reduceBatchSize).
        for i in 0..<1200 {
            let id = "doc\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            try f.set(id, docs[id]!)
        }
        try check("inserts")
        // Updates and deletions.
        for _ in 0..<300 {
            let id = "doc\(Int.random(in: 0..<1300, using: &rng))"
            if Bool.random(using: &rng), docs[id] != nil {
                try f.delete(id)
                docs[id] = nil
            } else {
                docs[id] = TestDesign.randomDoc(&rng)
                try f.set(id, docs[id]!)
            }
        }
        try check("updates+deletions")
        // Expiries: documents with a TTL disappear once it passes (the change feed expires them).
        let now = f.clock.nowSeconds()
        for i in 0..<50 {
            let id = "exp\(i)"
            try f.set(id, TestDesign.randomDoc(&rng), expiry: now + 10)
        }
        // Indexed while live, then their TTL passes with no other change in their vBuckets.
        try #require(f.views.index(named: "test")).update(wait: true)
        f.clock.advance(seconds: 20)
        try check("expiries")
        // Restart: the index resumes from its stored seqnos, then more changes arrive.
        try f.restart()
        try check("restart")
        for i in 0..<100 {
            let id = "after\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            try f.set(id, docs[id]!)
        }
        if let victim = docs.keys.sorted().first {
            try f.delete(victim)
            docs[victim] = nil
        }
        try check("after restart")
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves stale=false after a single write returns that write, and a changed design document
    // rebuilds its index (the new map function's rows, none of the old).
    @Test func staleFalseAndRebuild() throws {
        let f = try EngineFixture()
        try f.views.put(
            try DesignDocument(
                name: "d", body: Array(#"{"views":{"v":{"map":"function(d){ emit(d.x, null); }"}}}"#.utf8)))
        var q = ViewQuery()
        q.stale = .false
        let index = try #require(f.views.index(named: "d"))
        #expect(try index.query(view: "v", q).rows.isEmpty)
        try f.set("one", #"{"x":"hello"}"#)
        let r = try index.query(view: "v", q)
        #expect(r.rows.map { String(decoding: $0.key, as: UTF8.self) } == [#""hello""#])
        #expect(r.totalRows == 1)
        try f.views.put(
            try DesignDocument(name: "d", body: Array(#"{"views":{"v":{"map":"function(d){ emit(1, d.x); }"}}}"#.utf8)))
        let rebuilt = try #require(f.views.index(named: "d")).query(view: "v", q)
        #expect(rebuilt.rows.map { String(decoding: $0.key + [0x20] + $0.value, as: UTF8.self) } == [#"1 "hello""#])
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves a stale=ok query sent the moment a design document is stored answers from the index as it is (no rows
    // yet, or some) and never fails: before, it could run before the worker had created the index file, or between
    // the file's tables, and answered "no such table: vbuckets" (a 500 on the views port, found by the views-http
    // fuzz target).
    @Test func aQueryRightAfterTheDesignIsStoredDoesNotFail() throws {
        let f = try EngineFixture()
        for n in 0..<20 { try f.set("doc\(n)", #"{"n":\#(n)}"#) }
        var q = ViewQuery()
        q.stale = .ok
        var failures: [String] = []
        for round in 0..<40 {
            // A new signature each round: a new index file each time.
            try f.views.put(
                try DesignDocument(
                    name: "d",
                    body: Array(#"{"views":{"v":{"map":"function(d){ emit(d.n, \#(round)); }"}}}"#.utf8)))
            let index = try #require(f.views.index(named: "d"))
            do {
                let r = try index.query(view: "v", q)
                #expect(r.rows.count <= 20)
            } catch {
                failures.append("round \(round): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of 40 failed, first: \(failures.first ?? "")")
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves rebalance moves are followed: rows of vBuckets that stop being active here leave the
    // index (answers equal brute force over the documents of the still-active vBuckets), and a vBucket
    // that becomes active again is indexed again.
    @Test func followsVBucketMoves() throws {
        var rng = SplitMix64(seed: 42)
        let f = try EngineFixture()
        try f.views.put(try DesignDocument(name: "test", body: TestDesign.body))
        var docs: [String: String] = [:]
        for i in 0..<400 {
            docs["doc\(i)"] = TestDesign.randomDoc(&rng)
            try f.set("doc\(i)", docs["doc\(i)"]!)
        }
        let index = try #require(f.views.index(named: "test"))
        var q = ViewQuery()
        q.stale = .false
        q.reduce = false
        func vb(_ id: String) -> Int {
            Int(VBucketHash.vbucket(forKey: Array(id.utf8), count: EngineFixture.settings.numVBuckets).rawValue)
        }
        let moved: Set<Int> = [0, 3, 5, 8, 13]
        for v in moved { f.engine.setVBucketState(VBucketID(UInt16(v)), .replica) }
        let remaining = docs.filter { !moved.contains(vb($0.key)) }
        let def = TestDesign.views[0]
        let want = try BruteForce.answer(try BruteForce.rows(map: def.map, docs: remaining), q, reduce: def.reduce)
        #expect(try index.query(view: def.name, q).serialized() == want)
        for v in moved { f.engine.setVBucketState(VBucketID(UInt16(v)), .active) }
        let all = try BruteForce.answer(try BruteForce.rows(map: def.map, docs: docs), q, reduce: def.reduce)
        #expect(try index.query(view: def.name, q).serialized() == all)
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves a flush is followed even when the index did not run between the flush and the next writes (ADR 0088):
    // the vBuckets written again after it reach the seqnos the index stored before it, the high-seqno rule alone
    // took them for already indexed and kept the old rows (FlushProcessTests saw it once on three nodes). The
    // index stores the history (failover-log uuid) with its seqno and rebuilds a vBucket whose history ended below.
    @Test func flushFollowedWhenWritesCatchUpBeforeThePass() throws {
        let f = try EngineFixture()
        try f.views.put(try EngineFixture.idDesign())
        for i in 0..<32 { try f.set("k\(i)", #"{"n":\#(i)}"#) }
        #expect(try f.idRows().count == 32)
        // The index is not running while the flush and the new writes happen: its next pass sees both at once.
        f.views.stop()
        try f.engine.flushAll()
        for i in 0..<16 { try f.set("k\(i)", #"{"n":\#(100 + i)}"#) }
        try f.reopenViews()
        #expect(try f.idRows() == Dictionary(uniqueKeysWithValues: (0..<16).map { (#""k\#($0)""#, "\(100 + $0)") }))
        // A restart keeps the stored history: nothing is rebuilt or lost, and later writes are indexed.
        try f.restart()
        try f.set("k0", #"{"n":200}"#)
        #expect(try f.idRows()[#""k0""#] == "200")
        #expect(try f.idRows().count == 16)
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves an index that did not run while tombstones were deleted and then purged (ADR 0095) rebuilds the
    // vBuckets concerned instead of keeping the deleted documents' rows: its stored positions lie below the purge
    // seqnos, and the change feed no longer holds the deletions above them.
    @Test func purgedDeletionsTheIndexNeverSawRebuildTheVBucket() throws {
        let f = try EngineFixture()
        try f.views.put(try EngineFixture.idDesign())
        for i in 0..<32 { try f.set("k\(i)", #"{"n":\#(i)}"#) }
        #expect(try f.idRows().count == 32)
        f.views.stop()
        for i in 0..<16 { try f.delete("k\(i)") }
        let vbuckets = (0..<EngineFixture.settings.numVBuckets).map { VBucketID(UInt16($0)) }
        // A live write after the deletions in every vBucket: the tombstone at the high seqno is kept (ADR 0161).
        var fences: [String] = []
        for vb in vbuckets {
            var j = 0
            while VBucketHash.vbucket(forKey: "fence\(j)", count: vbuckets.count) != vb { j += 1 }
            fences.append("fence\(j)")
            try f.set("fence\(j)", #"{"n":-1}"#)
        }
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline
            && !vbuckets.allSatisfy({ f.engine.seqnoInfo($0).persistedSeqno == f.engine.seqnoInfo($0).highSeqno })
        {
            usleep(5_000)
        }
        f.clock.advance(seconds: (Limits.defaultPurgeIntervalDays + 1) * 86_400)
        #expect(f.engine.runTombstonePurger() == 16)
        #expect(vbuckets.contains { f.engine.purgeSeqno($0) != .zero })
        try f.reopenViews()
        let live = (16..<32).map { (#""k\#($0)""#, "\($0)") } + fences.map { ("\"\($0)\"", "-1") }
        #expect(try f.idRows() == Dictionary(uniqueKeysWithValues: live))
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves, as a seeded simulation (the seed is printed; SETTEE_SEED replays it), that a stale=false query equals
    // the documents whatever the order of writes, deletions, flushes and the index's passes (ADR 0088): the index
    // is stopped and reopened at random so that its passes skip over flushes, and a small key space keeps the
    // vBuckets' seqnos low, so new histories often reach the seqnos stored under old ones.
    @Test func flushesWritesAndPassesInAnyOrderMatchTheDocuments() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SETTEE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        print("ViewEngineTests.flushesWritesAndPassesInAnyOrderMatchTheDocuments seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let f = try EngineFixture()
        try f.views.put(try EngineFixture.idDesign())
        var docs: [String: String] = [:]  // idRows' shape: quoted id -> value
        var checks = 0
        var flushes = 0
        for step in 0..<400 {
            let roll = Int.random(in: 0..<100, using: &rng)
            let id = "k\(Int.random(in: 0..<40, using: &rng))"
            switch roll {
            case 0..<50:
                try f.set(id, #"{"n":\#(step)}"#)
                docs["\"\(id)\""] = "\(step)"
            case 50..<65:
                if docs["\"\(id)\""] != nil {
                    try f.delete(id)
                    docs["\"\(id)\""] = nil
                }
            case 65..<70:
                try f.engine.flushAll()
                docs = [:]
                flushes += 1
            case 70..<80:
                try f.reopenViews()
            default:
                let got = try f.idRows()
                checks += 1
                #expect(got == docs, "seed \(seed) step \(step)")
                if got != docs { return }
            }
        }
        #expect(checks > 0 && flushes > 0, "seed \(seed): \(checks) checks, \(flushes) flushes")
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves a crash that loses indexed writes is followed the same way (ADR 0088): the index read writes from
    // memory that never reached disk; after the restart the same keys are written again, so every vBucket is back
    // at the seqno the index stored, under the history the unclean restart branched. The lost values must not
    // come back in the view.
    @Test func crashLosingIndexedWritesIsFollowed() throws {
        // Nothing of the writes below is persisted before the crash.
        let f = try EngineFixture(flusherMaxDelay: 3600)
        try f.views.put(try EngineFixture.idDesign())
        for i in 0..<16 { try f.set("k\(i)", #"{"n":\#(i)}"#) }
        #expect(try f.idRows().count == 16)
        try f.crashEngine()
        for i in 0..<16 { try f.set("k\(i)", #"{"n":\#(100 + i)}"#) }
        try f.reopenViews()
        #expect(try f.idRows() == Dictionary(uniqueKeysWithValues: (0..<16).map { (#""k\#($0)""#, "\(100 + $0)") }))
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves (ADR 0097): after an unclean shutdown a clustered node's vBuckets are held (dead until the cluster
    // releases them). The index keeps their rows and positions through the hold, where it dropped every one at its
    // first pass and then indexed every vBucket again from 0; a query leaves the held vBuckets' rows out; a released
    // vBucket is served again, and one handed to another copy (a replica here) loses its rows.
    @Test func heldVBucketsKeepTheirRowsUntilReleased() throws {
        let f = try EngineFixture()
        try f.views.put(try EngineFixture.idDesign())
        for i in 0..<64 { try f.set("k\(i)", #"{"n":\#(i)}"#) }
        #expect(try f.idRows().count == 64)
        for vb in 0..<EngineFixture.settings.numVBuckets {
            let info = f.engine.seqnoInfo(VBucketID(UInt16(vb)))
            let deadline = Date().addingTimeInterval(10)
            while f.engine.seqnoInfo(VBucketID(UInt16(vb))).persistedSeqno < info.highSeqno && Date() < deadline {
                usleep(1_000)
            }
        }
        let path = try #require(f.views.index(named: "d")).path
        func positions() throws -> [Int64: Int64] {
            let db = try Connection(path: path)
            defer { db.close() }
            let s = try db.prepare("SELECT vb, seqno FROM vbuckets")
            var out: [Int64: Int64] = [:]
            while try s.step() { out[s.int64(at: 0)] = s.int64(at: 1) }
            return out
        }
        let before = try positions()
        #expect(before.count == EngineFixture.settings.numVBuckets)

        try f.crashEngine(hold: true)
        #expect(f.engine.heldVBuckets().count == EngineFixture.settings.numVBuckets)
        try f.reopenViews()
        #expect(try f.idRows().isEmpty)  // stale=false: a pass ran during the hold
        #expect(try positions() == before)

        func vb(_ id: String) -> Int {
            Int(VBucketHash.vbucket(forKey: Array(id.utf8), count: EngineFixture.settings.numVBuckets).rawValue)
        }
        let released = Set(0..<8)
        for v in released { f.engine.releaseHold(VBucketID(UInt16(v)), becoming: .active) }
        let served = (0..<64).map { "k\($0)" }.filter { released.contains(vb($0)) }
        #expect(try f.idRows().keys.sorted() == served.map { "\"\($0)\"" }.sorted())
        #expect(try positions() == before)

        for v in 8..<EngineFixture.settings.numVBuckets { f.engine.setVBucketState(VBucketID(UInt16(v)), .replica) }
        #expect(try f.idRows().count == served.count)
        #expect(try positions().keys.sorted() == released.map { Int64($0) }.sorted())
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves include_docs returns Couchbase's {"meta":{...},"json":doc} shape with the current body,
    // and that non-JSON documents reach the map function base64-encoded with meta.type "base64".
    @Test func includeDocsAndBinaryDocuments() throws {
        let f = try EngineFixture()
        try f.views.put(
            try DesignDocument(
                name: "d",
                body: Array(
                    #"{"views":{"v":{"map":"function(doc, meta){ emit(meta.type, meta.type == 'json' ? doc.x : doc); }"}}}"#
                        .utf8)))
        try f.set("j", #"{"x":7}"#)
        let key = Array("bin".utf8)
        _ = try f.engine.store(
            .set, VBucketHash.vbucket(forKey: key, count: EngineFixture.settings.numVBuckets), key,
            value: [0xFF, 0x00, 0x41],
            flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        var q = ViewQuery()
        q.stale = .false
        q.includeDocs = true
        let r = try #require(f.views.index(named: "d")).query(view: "v", q)
        #expect(r.rows.count == 2)
        let text = String(decoding: r.serialized(), as: UTF8.self)
        #expect(text.contains(#""key":"base64","value":"/wBB""#))
        #expect(text.contains(#""key":"json","value":7"#))
        #expect(text.contains(#""json":{"x":7}}"#))
        #expect(text.contains(#"{"meta":{"id":"j","rev":"1-"#))
        f.views.stop()
        f.engine.shutdown()
    }

    // Proves the scatter/gather merge: two "nodes" (engines with disjoint active vBuckets), each
    // answering the partial query for its own vBuckets, merge into exactly the brute-force answer
    // over all documents, for random queries over every parameter (map and every reduce).
    @Test func scatterGatherMergeMatchesBruteForce() throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("ViewEngineTests.scatterGather seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let a = try EngineFixture(active: { $0 % 2 == 0 })
        let b = try EngineFixture(active: { $0 % 2 == 1 })
        for f in [a, b] { try f.views.put(try DesignDocument(name: "test", body: TestDesign.body)) }
        var docs: [String: String] = [:]
        for i in 0..<1100 {
            let id = "doc\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            let vb = Int(
                VBucketHash.vbucket(forKey: Array(id.utf8), count: EngineFixture.settings.numVBuckets).rawValue)
            try (vb % 2 == 0 ? a : b).set(id, docs[id]!)
        }
        let ia = try #require(a.views.index(named: "test"))
        let ib = try #require(b.views.index(named: "test"))
        let ids = docs.keys.sorted()
        for _ in 0..<60 {
            let v = Int.random(in: 0..<TestDesign.views.count, using: &rng)
            let (q, text) = try TestDesign.randomQuery(view: v, docIDs: ids, &rng)
            let def = TestDesign.views[v]
            let parts = [try ia.query(view: def.name, q.partial), try ib.query(view: def.name, q.partial)]
            let reduce = try def.reduce.map { try ReduceFunction(source: $0) }
            let got = try ViewMerge.merge(parts, q, reduce: reduce).serialized()
            let want = try BruteForce.answer(try BruteForce.rows(map: def.map, docs: docs), q, reduce: def.reduce)
            let same = got == want
            #expect(
                same,
                "seed \(seed) \(def.name)?\(text)\n got  \(String(decoding: got.prefix(500), as: UTF8.self))\n want \(String(decoding: want.prefix(500), as: UTF8.self))"
            )
            if !same { break }
        }
        for f in [a, b] {
            f.views.stop()
            f.engine.shutdown()
        }
    }

    // Proves query-parameter and design-document errors carry CouchDB's error/reason and status.
    @Test func errorShapes() throws {
        #expect(throws: ViewError.queryParse("Query parameter 'count' is now 'limit'.")) {
            try ViewQuery.parse([("count", "1")])
        }
        // Booleans in any case, as Couchbase reads them; anything else is refused.
        let mixed = try ViewQuery.parse([("descending", "True"), ("inclusive_end", "FALSE"), ("include_docs", "tRuE")])
        #expect(mixed.descending && !mixed.inclusiveEnd && mixed.includeDocs)
        #expect(throws: ViewError.queryParse("Invalid boolean parameter value for `descending`: yes")) {
            try ViewQuery.parse([("descending", "yes")])
        }
        #expect(throws: ViewError.queryParse("stale only available as stale=ok, stale=update_after or stale=false")) {
            try ViewQuery.parse([("stale", "maybe")])
        }
        #expect(throws: ViewError.invalidDesignDocument("Invalid builtin reduce function: _median")) {
            try DesignDocument(
                name: "d", body: Array(#"{"views":{"v":{"map":"function(d){}","reduce":"_median"}}}"#.utf8))
        }
        let f = try EngineFixture()
        #expect(throws: ViewError.self) {
            try f.views.put(
                try DesignDocument(name: "bad", body: Array(#"{"views":{"v":{"map":"function(d){ emit("}}}"#.utf8)))
        }
        try f.views.put(
            try DesignDocument(
                name: "d",
                body: Array(
                    #"{"views":{"v":{"map":"function(d){ emit(d.x, 1); }","reduce":"_count"},"m":{"map":"function(d){ emit(d.x, 1); }"}}}"#
                        .utf8)))
        let index = try #require(f.views.index(named: "d"))
        // A map view answers `reduce=false` as it answers without it (Couchbase and CouchDB accept it; it used to be
        // refused), and refuses `reduce=true`.
        try f.set("one", #"{"x":1}"#)
        try f.set("two", #"{"x":2}"#)
        let plain = try ViewQuery.parse([("stale", "false")])
        let unreduced = try ViewQuery.parse([("stale", "false"), ("reduce", "false")])
        let rows = try index.query(view: "m", plain)
        #expect(rows.rows.count == 2)
        #expect(try index.query(view: "m", unreduced).serialized() == rows.serialized())
        #expect(throws: ViewError.queryParse("Invalid URL parameter `reduce` for map view.")) {
            try index.query(view: "m", try ViewQuery.parse([("reduce", "true")]))
        }
        var q = ViewQuery()
        q.startKey = .number(5)
        q.endKey = .number(1)
        do {
            _ = try index.query(view: "v", q)
            Issue.record("expected an error")
        } catch {
            #expect(error.status == 400 && error.error == "query_parse_error")
            #expect(error.reason.hasPrefix("No rows can match your key range"))
        }
        #expect(throws: ViewError.notFound("missing_named_view")) { try index.query(view: "nope", ViewQuery()) }
        q = ViewQuery()
        q.keys = [.number(1)]
        #expect(throws: ViewError.queryParse("Multi-key fetchs for reduce view must include `group=true`")) {
            try index.query(view: "v", q)
        }
        f.views.stop()
        f.engine.shutdown()
    }
}
