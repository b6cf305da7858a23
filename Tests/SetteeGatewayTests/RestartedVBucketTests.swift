import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeStorage
import SetteeSubdoc
import Synchronization
import Testing

@testable import SetteeGateway

/// A vBucket the bucket's change stream reads again from seqno 0 (a failover promoted a copy without some writes, a
/// flush, purged tombstones) may have lost documents whose deletion the stream never delivers: the database checks
/// what it indexed of that vBucket against the bucket (ADR 0096).
@Suite struct RestartedVBucketTests {
    /// `count` keys in one vBucket of a bucket of `vbuckets`, and one key in another vBucket.
    static func keys(_ count: Int, vbuckets: Int) -> (vb: VBucketID, same: [String], other: String) {
        let vb = VBucketHash.vbucket(forKey: "k0", count: vbuckets)
        var same: [String] = []
        var other: String?
        var i = 0
        while same.count < count || other == nil {
            let k = "k\(i)"
            if VBucketHash.vbucket(forKey: k, count: vbuckets) == vb {
                if same.count < count { same.append(k) }
            } else if other == nil {
                other = k
            }
            i += 1
        }
        return (vb, same, other ?? "")
    }

    /// A database on an embedded bucket whose change stream is the returned feed alone (the test plays the stream).
    static func open(
        _ name: String, options: DatabaseOptions = DatabaseOptions(name: "db"), failingReads: FailingReads? = nil
    ) async throws -> (inner: EmbeddedBucket, feed: ScriptedFeed, db: GatewayDatabase) {
        let inner = try EmbeddedBucket(server: "walrus:", name: name, logger: quietLogger())
        let feed = ScriptedFeed()
        let db = try await GatewayDatabase(
            options: options, bucket: StalledFeedBucket(inner: inner, script: feed, failingReads: failingReads),
            logger: quietLogger())
        return (inner, feed, db)
    }

    /// Plays the stream's delivery of `id`'s item as the bucket holds it, and waits until the database has taken it
    /// (the write is no longer ahead of the stream).
    static func stream(
        _ id: String, _ vb: VBucketID, _ inner: EmbeddedBucket, _ feed: ScriptedFeed, _ db: GatewayDatabase
    ) async throws {
        let item = try #require(try await inner.get(id))
        feed.yield(
            BucketMutation(key: id, value: item.value, cas: item.cas, deleted: false, vbucket: vb, seqno: SeqNo(1)))
        for _ in 0..<250 where db.index.withLock({ $0.aheadOfStream[id] != nil }) {
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func changedIDs(_ db: GatewayDatabase) async throws -> [String] {
        try await db.changes(ChangesQuery(), user: nil).rows.map(\.id).filter { !$0.hasPrefix("_") }.sorted()
    }

    /// A document's item as the layout holds it, to put back later: the whole item (1.x), or body and `_sync` (shared).
    enum SavedItem { case plain([UInt8]), shared(body: [UInt8], sync: [UInt8]) }

    static func save(_ id: String, _ bucket: EmbeddedBucket, shared: Bool) async throws -> SavedItem? {
        guard shared else { return try await bucket.get(id).map { .plain($0.value) } }
        guard let r = try await bucket.lookupIn(id, SharedBucketAccess.lookup), r.results.count == 2 else { return nil }
        return .shared(body: r.results[1].value, sync: r.results[0].value)
    }

    static func restore(_ id: String, _ saved: SavedItem, _ bucket: EmbeddedBucket) async throws {
        switch saved {
        case .plain(let value):
            _ = try await bucket.upsert(id, value: value, expiry: 0)
        case .shared(let body, let sync):
            let cas = try await bucket.get(id)?.cas ?? .zero
            _ = try await bucket.mutateIn(
                id, SharedBucketAccess.write(.update, sync: sync, body: body, expiry: 0), cas: cas)
        }
    }

    /// Removes every trace of `id` from the bucket, as a failover to a copy that never had it leaves it: the item
    /// (1.x), or the item and its `_sync` (shared: a KV delete alone leaves a tombstone the gateway imports).
    static func lose(_ id: String, _ bucket: EmbeddedBucket, shared: Bool) async throws {
        guard shared else {
            try await bucket.remove(id, cas: .zero)
            return
        }
        _ = try await bucket.mutateIn(id, SharedBucketAccess.purge(itemDeleted: false), cas: .zero)
    }

    @Test(arguments: [false, true])
    func documentsTheBucketLostLeaveTheIndexWhenTheirVBucketRestarts(sharedBucketAccess: Bool) async throws {
        // Proves, in both item layouts (1.x's `_sync` in the body, and `enable_shared_bucket_access`'s XATTR read
        // through a sub-document lookup that also sees tombstones): after a restart marker for vBucket V, documents
        // of V the bucket no longer holds (removed behind the stream's back, as a failover to a copy that never had
        // them leaves them) leave `_changes`; a document of V whose last revision the bucket lost is listed at the
        // revision the bucket holds; the document of V the bucket still holds stays, and so does the lost document
        // of another vBucket, which did not restart.
        // Without the recheck the marker changed nothing and all three stayed (checked by removing
        // `vbucketRestarted`'s call in `handle`).
        var options = DatabaseOptions(name: "db", importDocs: sharedBucketAccess)
        options.sharedBucketAccess = sharedBucketAccess
        let (inner, feed, db) = try await Self.open("restart", options: options)
        let n = inner.engine.settings.numVBuckets
        let (vb, same, other) = Self.keys(3, vbuckets: n)
        let (lost, kept, older) = (same[0], same[1], same[2])
        var first: RevID?
        for id in [lost, kept, older, other] {
            let rev = try await db.put(id, body: json(#"{"v":1}"#), user: nil)
            if id == older { first = rev }
        }
        // `older`'s second revision is lost too: the bucket goes back to the item of its first.
        let firstItem = try #require(try await Self.save(older, inner, shared: sharedBucketAccess))
        _ = try await db.put(older, body: json(#"{"_rev":"\#(first?.description ?? "")","v":2}"#), user: nil)
        #expect(try await Self.changedIDs(db) == [lost, kept, older, other].sorted())

        try await Self.lose(lost, inner, shared: sharedBucketAccess)
        try await Self.lose(other, inner, shared: sharedBucketAccess)
        try await Self.restore(older, firstItem, inner)
        feed.yield(.restart(vb, vbucketCount: n))
        var rows: [String: String] = [:]
        for _ in 0..<250 {
            rows = [:]
            for row in try await db.changes(ChangesQuery(), user: nil).rows where !row.id.hasPrefix("_") {
                rows[row.id] = row.changes.first?.description
            }
            if rows[lost] == nil && rows[older] == first?.description { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        let ids = rows.keys.sorted()
        #expect(ids == [kept, older, other].sorted())
        #expect(rows[older] == first?.description, "\(older) listed at \(rows[older] ?? "nothing")")
        #expect(try await db.get(older, user: nil).body["v"]?.intValue == 1)
        do {
            _ = try await db.get(lost, user: nil)
            Issue.record("a lost document still reads")
        } catch { #expect(error.status == 404) }
        await db.close()
        await inner.close()
    }

    @Test func aRecheckReplacesOnlyTheVersionIndexedWhenItBegan() async throws {
        // Proves: a recheck's read (ADR 0096, 0098) installs what it found, older or absent, only over the version
        // indexed when the recheck began. When the stream indexed another version while the item was read (the read
        // is then at most as new as that one), the read is dropped: without the guard a recheck racing a writer put a
        // stale revision back, or removed a document the writer had just recreated.
        let (inner, _, db) = try await Self.open("guard")
        let first = try await db.put("doc", body: json(#"{"v":1}"#), user: nil)
        let firstItem = try #require(try await Self.save("doc", inner, shared: false))
        let firstSeq = try #require(db.index.withLock { $0.docs["doc"]?.seq })
        let second = try await db.put("doc", body: json(#"{"_rev":"\#(first)","v":2}"#), user: nil)
        let secondSeq = try #require(db.index.withLock { $0.docs["doc"]?.seq })
        try await Self.restore("doc", firstItem, inner)

        // Began when the first version was indexed: the second came since, so the (older) read is dropped.
        #expect(await db.handleCurrentItem("doc", replacing: firstSeq))
        #expect(db.index.withLock { $0.docs["doc"]?.rev } == second)
        // Began with the second indexed: the bucket's older version replaces it.
        #expect(await db.handleCurrentItem("doc", replacing: secondSeq))
        #expect(db.index.withLock { $0.docs["doc"]?.rev } == first)
        // Gone from the bucket: removed only over the version indexed when the recheck began.
        try await Self.lose("doc", inner, shared: false)
        #expect(await db.handleCurrentItem("doc", replacing: secondSeq))
        #expect(db.index.withLock { $0.docs["doc"]?.rev } == first)
        #expect(await db.handleCurrentItem("doc", replacing: firstSeq))
        #expect(db.index.withLock { $0.docs["doc"] } == nil)
        await db.close()
        await inner.close()
    }

    @Test func aBranchRechecksOnlyWhatTheStreamHasNotDeliveredYet() async throws {
        // Proves (ADR 0098): after a `branched` marker for vBucket V (its first open, or a reopen in a newer history
        // at the position reached), only this gateway's writes to V that the stream has not delivered yet are read
        // again: B and user "bea", never streamed and gone from the bucket, leave; A, which the stream delivered, stays
        // although the bucket lost it too (a branch at or above the stream's position cannot have lost it: the test
        // removes it only to show it is not read). A restart of V (from 0) then reads every indexed document of V.
        let (inner, feed, db) = try await Self.open("branch")
        let n = inner.engine.settings.numVBuckets
        let (vb, same, _) = Self.keys(2, vbuckets: n)
        let (a, b) = (same[0], same[1])
        _ = try await db.put(a, body: json(#"{"v":1}"#), user: nil)
        _ = try await db.put(b, body: json(#"{"v":1}"#), user: nil)
        _ = try await db.putPrincipal("bea", isRole: false, json(#"{"password":"secret","admin_channels":["x"]}"#))
        let userKey = PrincipalRecord.key("bea", isRole: false)
        #expect(db.index.withLock { Set($0.aheadOfStream.keys) } == [a, b, userKey])
        try await Self.stream(a, vb, inner, feed, db)
        #expect(db.index.withLock { Set($0.aheadOfStream.keys) } == [b, userKey])

        try await inner.remove(a, cas: .zero)
        try await inner.remove(b, cas: .zero)
        try await inner.remove(userKey, cas: .zero)
        feed.yield(.restart(vb, vbucketCount: n, branched: true))
        feed.yield(.restart(VBucketHash.vbucket(forKey: userKey, count: n), vbucketCount: n, branched: true))
        var ids: [String] = []
        for _ in 0..<250 {
            ids = try await Self.changedIDs(db)
            let noUsers = await db.principalNames(isRole: false).isEmpty
            if !ids.contains(b) && noUsers { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(ids == [a])
        #expect(await db.principalNames(isRole: false).isEmpty)
        #expect(db.index.withLock { $0.aheadOfStream.isEmpty })

        feed.yield(.restart(vb, vbucketCount: n))
        for _ in 0..<250 where ids.contains(a) {
            try await Task.sleep(for: .milliseconds(20))
            ids = try await Self.changedIDs(db)
        }
        #expect(ids.isEmpty)
        await db.close()
        await inner.close()
    }

    @Test func aWriteIndexedAfterItsBranchWasRecheckedIsReadOnceItIsLate() async throws {
        // Proves the window after a branch recheck is closed: a write of vBucket V acknowledged by the old active and
        // indexed only after V's branch round ran (so the round never saw it), and that the new history does not
        // hold, leaves `_changes` once it has been ahead of the stream for two looks of the own-write timer (0.2 s
        // here), and no write stays ahead of the stream. A write the stream delivered stays. Before, the lost write
        // stayed listed (and ahead of the stream) until V branched again.
        var options = DatabaseOptions(name: "db")
        options.ownWriteStreamWaitSeconds = 0.2
        let (inner, feed, db) = try await Self.open("late", options: options)
        let n = inner.engine.settings.numVBuckets
        let (vb, same, other) = Self.keys(1, vbuckets: n)
        let lost = same[0]
        feed.yield(.restart(vb, vbucketCount: n, branched: true))
        // The marker is handled (a round starts), then the round ends.
        for _ in 0..<250 where !db.restarts.withLock({ $0.running }) {
            try await Task.sleep(for: .milliseconds(5))
        }
        for _ in 0..<250 where db.restarts.withLock({ $0.running }) {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(db.restarts.withLock { !$0.running && $0.vbucketCount == n }, "the branch round ran before the write")

        _ = try await db.put(lost, body: json(#"{"v":1}"#), user: nil)
        _ = try await db.put(other, body: json(#"{"v":1}"#), user: nil)
        try await Self.stream(other, VBucketHash.vbucket(forKey: other, count: n), inner, feed, db)
        #expect(db.index.withLock { Set($0.aheadOfStream.keys) } == [lost])
        try await inner.remove(lost, cas: .zero)

        // The row leaves `_changes` and the entry leaves `aheadOfStream` in two steps: wait for both (a loaded run
        // once looked between them).
        var ids = try await Self.changedIDs(db)
        for _ in 0..<250 where ids.contains(lost) || !db.index.withLock({ $0.aheadOfStream.isEmpty }) {
            try await Task.sleep(for: .milliseconds(20))
            ids = try await Self.changedIDs(db)
        }
        #expect(ids == [other])
        #expect(db.index.withLock { $0.aheadOfStream.isEmpty })
        await db.close()
        await inner.close()
    }

    @Test func aPurgeTheBranchLostBringsTheDocumentBack() async throws {
        // Proves (ADR 0098): a `_purge` through this gateway is ahead of the stream until the stream delivers its
        // deletion; when a branch of the document's vBucket lost the purge (the bucket holds the document again), the
        // document is indexed again. Without recording the purge it stayed unlisted although the bucket held it.
        let (inner, feed, db) = try await Self.open("purge")
        let n = inner.engine.settings.numVBuckets
        let (vb, same, _) = Self.keys(1, vbuckets: n)
        let id = same[0]
        _ = try await db.put(id, body: json(#"{"v":1}"#), user: nil)
        let saved = try #require(try await Self.save(id, inner, shared: false))
        // The stream delivers the write, so only the purge can put the document ahead of it.
        try await Self.stream(id, vb, inner, feed, db)
        #expect(db.index.withLock { $0.aheadOfStream.isEmpty })
        _ = try await db.purge([id: ["*"]])
        #expect(try await Self.changedIDs(db).isEmpty)
        #expect(db.index.withLock { $0.aheadOfStream[id] } != nil)
        try await Self.restore(id, saved, inner)
        feed.yield(.restart(vb, vbucketCount: n, branched: true))
        var ids: [String] = []
        for _ in 0..<250 where ids.isEmpty {
            try await Task.sleep(for: .milliseconds(20))
            ids = try await Self.changedIDs(db)
        }
        #expect(ids == [id])
        #expect(try await db.get(id, user: nil).body["v"]?.intValue == 1)
        await db.close()
        await inner.close()
    }

    @Test func aRecheckWhoseReadsFailIsTriedAgain() async throws {
        // Proves: when the recheck cannot read a document (the bucket answers "temporary", as while a node fails over),
        // its vBucket is checked again in a later round, and the document the bucket lost does leave the index. Without
        // the retry the first round's failed read left it listed for good.
        let inner = try EmbeddedBucket(server: "walrus:", name: "retry", logger: quietLogger())
        let feed = ScriptedFeed()
        let n = inner.engine.settings.numVBuckets
        let (vb, same, _) = Self.keys(1, vbuckets: n)
        let lost = same[0]
        let failing = FailingReads([lost: 3])
        let db = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"),
            bucket: StalledFeedBucket(inner: inner, script: feed, failingReads: failing), logger: quietLogger())
        failing.pause()
        _ = try await db.put(lost, body: json(#"{"v":1}"#), user: nil)
        try await inner.remove(lost, cas: .zero)
        failing.resume()
        feed.yield(.restart(vb, vbucketCount: n))
        var ids = [lost]
        for _ in 0..<250 where ids.contains(lost) {
            try await Task.sleep(for: .milliseconds(20))
            ids = try await Self.changedIDs(db)
        }
        #expect(failing.remaining == 0)
        #expect(!ids.contains(lost))
        await db.close()
        await inner.close()
    }

    @Test func principalsTheBucketLostAreForgottenAndTheConfigsWrittenAgain() async throws {
        // Proves: after a restart of the vBucket holding their items, a user the bucket lost (created on the admin API)
        // is forgotten, and a user of the config file the bucket lost is written again and still signs in.
        let inner = try EmbeddedBucket(server: "walrus:", name: "principals", logger: quietLogger())
        let n = inner.engine.settings.numVBuckets
        let vb = VBucketHash.vbucket(forKey: PrincipalRecord.key("ghost", isRole: false), count: n)
        var configured = ""
        for i in 0..<100_000
        where VBucketHash.vbucket(forKey: PrincipalRecord.key("cfg\(i)", isRole: false), count: n) == vb {
            configured = "cfg\(i)"
            break
        }
        let feed = ScriptedFeed()
        let db = try await GatewayDatabase(
            options: DatabaseOptions(name: "db", users: [configured: json(#"{"password":"secret"}"#)]),
            bucket: StalledFeedBucket(inner: inner, script: feed), logger: quietLogger())
        _ = try await db.putPrincipal("ghost", isRole: false, json(#"{"password":"boo!"}"#))
        #expect(db.index.withLock { $0.users["ghost"] != nil && $0.users[configured] != nil })

        for name in ["ghost", configured] {
            try await inner.remove(PrincipalRecord.key(name, isRole: false), cas: .zero)
        }
        feed.yield(.restart(vb, vbucketCount: n))
        var restored = false
        for _ in 0..<250 {
            restored = try await inner.get(PrincipalRecord.key(configured, isRole: false)) != nil
            if restored && db.index.withLock({ $0.users["ghost"] == nil }) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(db.index.withLock { $0.users["ghost"] == nil })
        #expect(restored)
        #expect(await db.authenticate(name: configured, password: "secret") != nil)
        #expect(await db.authenticate(name: "ghost", password: "boo!") == nil)
        await db.close()
        await inner.close()
    }

    @Test func restartsNotedTogetherAreTakenTogether() {
        // Proves the bookkeeping: restarts and branches noted before the task takes them come out as two sets (a vBucket
        // both restarted and branched counts as restarted, whose recheck covers more), a take that finds nothing ends
        // the task (so the next note starts one); keys are told apart as documents and principals.
        var r = RestartedVBuckets()
        r.running = true
        r.pending = [VBucketID(3), VBucketID(9)]
        r.branched = [VBucketID(9), VBucketID(12)]
        r.vbucketCount = 64
        let taken = r.take()
        #expect(taken?.restarted == [VBucketID(3), VBucketID(9)] && taken?.branched == [VBucketID(12)])
        #expect(taken?.count == 64 && r.running && r.pending.isEmpty && r.branched.isEmpty)
        #expect(r.take() == nil && !r.running)
        // CRC32 of the key, bits 16-30, modulo the count (kv_engine's hash; worked out with Python's zlib.crc32):
        // "k0" and "k12" are in vBucket 9 of 64, "k1" in 14.
        #expect(VBucketHash.vbucket(forKey: "k0", count: 64) == VBucketID(9))
        #expect(RestartedVBuckets.ids(["k0", "k1", "k12"], in: [VBucketID(9)], count: 64) == ["k0", "k12"])
        #expect(RestartedVBuckets.ids(["k0"], in: [VBucketID(9)], count: 0).isEmpty)
        #expect(RestartedVBuckets.ids(["k0"], in: [], count: 64).isEmpty)
        let names = ["ann", "bob", "cy", "dee", "eve", "fay"]
        let userVB = VBucketHash.vbucket(forKey: "_sync:user:ann", count: 64)
        let users = RestartedVBuckets.principals(names, isRole: false, in: [userVB], count: 64)
        #expect(users.allSatisfy { !$0.isRole } && users.map(\.name).contains("ann"))
        let roleVB = VBucketHash.vbucket(forKey: "_sync:role:ann", count: 64)
        #expect(RestartedVBuckets.principals(names, isRole: true, in: [roleVB], count: 64).map(\.name).contains("ann"))
        #expect(RestartedVBuckets.ownKey("doc") == .document("doc"))
        #expect(RestartedVBuckets.ownKey("_sync:user:ann") == .principal(name: "ann", isRole: false))
        #expect(RestartedVBuckets.ownKey("_sync:role:ann") == .principal(name: "ann", isRole: true))
        #expect(RestartedVBuckets.ownKey("_sync:seq") == nil)
    }

    @Test func anEmbeddedFeedThatMissedPurgedDeletionsSaysSoBeforeReadingAgain() async throws {
        // Proves: an embedded bucket's stream whose position is below tombstones purged since its last read yields the
        // restart marker for that vBucket, then reads it again from 0 (the purged key is not among the reread).
        let bucket = try EmbeddedBucket(server: "walrus:", name: "purge", logger: quietLogger())
        let engine = bucket.engine
        let n = engine.settings.numVBuckets
        let (vb, keys, _) = Self.keys(4, vbuckets: n)
        for k in keys { _ = try await bucket.upsert(k, value: Array(#"{"v":1}"#.utf8), expiry: 0) }
        let (stream, continuation) = AsyncStream.makeStream(of: BucketMutation.self)
        // Not an observer of the engine: it reads again only when the test marks the vBucket.
        let feed = EmbeddedMutationFeed(engine: engine, continuation: continuation)
        let task = Task.detached { await feed.run() }
        var it = stream.makeAsyncIterator()
        var first: [String] = []
        for _ in keys { first.append(await it.next()?.key ?? "") }
        #expect(first.sorted() == keys.sorted())

        try await bucket.remove(keys[0], cas: .zero)
        // A write after the deletion: the tombstone at the high seqno is never purged (ADR 0161).
        _ = try await bucket.upsert(keys[1], value: Array(#"{"v":2}"#.utf8), expiry: 0)
        try await bucket.ensureFullCommit()
        try await Task.sleep(for: .milliseconds(20))
        engine.setPurgeInterval(days: 0)
        #expect(engine.runTombstonePurger() == 1)
        feed.mark(vb)
        let marker = await it.next()
        #expect(marker?.restart == VBucketRestart(vbucketCount: n) && marker?.vbucket == vb)
        if marker?.restart == nil {
            // Without the marker the reread delivers one entry fewer than read below: stop here instead of waiting.
            feed.finish()
            task.cancel()
            await bucket.close()
            return
        }
        var again: [String] = []
        for _ in 1..<keys.count { again.append(await it.next()?.key ?? "") }
        #expect(again.sorted() == keys.dropFirst().sorted())
        feed.finish()
        task.cancel()
        await bucket.close()
    }
}
