import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeLite

/// Document expiration as Couchbase Lite has it (ADR 0153): per collection, stored, purged (not deleted) by a timer
/// on the injected clock armed for the earliest expiration. No test sleeps: each moves a `ManualTimerClock`.
@Suite struct DocumentExpirationTests {
    static func open(_ name: String, _ dir: String, _ clock: ManualTimerClock) throws -> Database {
        var options = DatabaseOptions()
        options.clock = clock
        return try Database(name: name, directory: dir, options: options)
    }

    static func date(_ clock: ManualTimerClock, plus seconds: Double) -> Date {
        Date(timeIntervalSince1970: Double(clock.nowNanoseconds()) / 1e9 + seconds)
    }

    @Test func theScheduleArmsTheEarliestPurgesWhatIsDueAndRetries() {
        // Proves the pure rule: nothing stored arms nothing; an expiration in the future arms exactly it, once; one
        // due is purged before anything is armed; a far one is capped at the timer's longest wait; clearing every
        // expiration cancels; a fired timer is re-armed; a failed purge retries later, never at once.
        var s = ExpirySchedule()
        #expect(s.next(earliest: nil, now: 1_000) == .nothing)
        #expect(s.next(earliest: 5_000, now: 1_000) == .arm(atMilliseconds: 5_000))
        #expect(s.next(earliest: 5_000, now: 2_000) == .nothing)
        #expect(s.next(earliest: 3_000, now: 2_000) == .arm(atMilliseconds: 3_000))
        #expect(s.next(earliest: 3_000, now: 3_000) == .purgeDue)
        #expect(s.next(earliest: nil, now: 3_000) == .cancel)
        #expect(s.armedAt == nil)
        let far = Int64(Limits.liteExpiryTimerMaxDelaySeconds) * 1_000
        #expect(s.next(earliest: 10 * far, now: 0) == .arm(atMilliseconds: far))
        s.timerFired()
        #expect(s.next(earliest: 10 * far, now: far) == .arm(atMilliseconds: 2 * far))
        #expect(s.purgeFailed(now: 7) == .arm(atMilliseconds: 7 + Int64(Limits.liteExpiryRetrySeconds) * 1_000))
    }

    @Test func anExpiredDocumentIsPurgedAtItsExpirationByTheTimer() throws {
        // Proves the timer is armed for the earliest expiration to the millisecond, a document is still there a
        // millisecond before it and purged (no revision, no tombstone, gone from the changes feed) at it, the next
        // expiration is armed after, and a purge is reported to change listeners as a purge.
        let clock = ManualTimerClock()
        let dir = TemporaryDirectory.make("lite-exp")
        let db = try Self.open("exp", dir, clock)
        defer { try? db.delete() }
        try db.save(Document(id: "a", properties: ["n": 1]))
        try db.save(Document(id: "b", properties: ["n": 2]))
        try db.save(Document(id: "keep", properties: ["n": 3]))
        let start = clock.nowNanoseconds()
        try db.setDocumentExpiration(id: "b", date: Self.date(clock, plus: 20))
        try db.setDocumentExpiration(id: "a", date: Self.date(clock, plus: 10))
        #expect(clock.armedDeadlines == [start + 10_000_000_000])
        #expect(try db.getDocumentExpiration(id: "a") == Self.date(clock, plus: 10))
        #expect(try db.getDocumentExpiration(id: "keep") == nil)
        #expect(try db.stats().total.expiringDocuments == 2)
        clock.advance(seconds: 9.999)
        #expect(try db.document("a") != nil)
        clock.advance(seconds: 0.001)
        #expect(try db.document("a") == nil)
        #expect(try db.revisionTree(of: "a") == nil)
        #expect(try db.changes(since: .zero).map(\.id) == ["b", "keep"])
        #expect(try db.getDocumentExpiration(id: "a") == nil)
        #expect(clock.armedDeadlines == [start + 20_000_000_000])
        clock.advance(seconds: 10)
        #expect(try db.document("b") == nil && db.document("keep") != nil)
        #expect(clock.armedDeadlines.isEmpty)
        let stats = try db.stats()
        #expect(stats.total.documents == 1 && stats.total.tombstones == 0 && stats.total.expiringDocuments == 0)
    }

    @Test func expirationsAreStoredAndThosePastWhileClosedGoAtOpen() throws {
        // Proves an expiration survives closing the file, a document that expired while it was closed is purged when
        // it opens (before any call), and one not yet due is armed again.
        let clock = ManualTimerClock()
        let dir = TemporaryDirectory.make("lite-exp")
        var db = try Self.open("exp", dir, clock)
        try db.save(Document(id: "soon", properties: [:]))
        try db.save(Document(id: "later", properties: [:]))
        try db.setDocumentExpiration(id: "soon", date: Self.date(clock, plus: 60))
        try db.setDocumentExpiration(id: "later", date: Self.date(clock, plus: 3_600))
        db.close()
        #expect(clock.armedDeadlines.isEmpty)  // closing cancelled the timer
        clock.advance(seconds: 61)
        db = try Self.open("exp", dir, clock)
        defer { try? db.delete() }
        #expect(try db.document("soon") == nil && db.revisionTree(of: "soon") == nil)
        #expect(try db.getDocumentExpiration(id: "later") == Self.date(clock, plus: 3_600 - 61))
        #expect(clock.armedDeadlines.count == 1)
    }

    @Test func expirationOutlivesEditsAndDeletionAndGoesWithAPurge() throws {
        // Proves Couchbase Lite's rules: an unknown document has no expiration to set (404); saves and a deletion
        // keep it (a tombstone expires too, leaving nothing); nil clears it and cancels the timer; a past date purges
        // at once; a purge drops the expiration, so a re-created document does not inherit it; dates past the year
        // 9999 are refused and dates before 1970 are past.
        let clock = ManualTimerClock()
        let db = try Self.open("exp", TemporaryDirectory.make("lite-exp"), clock)
        defer { try? db.delete() }
        #expect(throws: LiteError.notFound("ghost")) {
            try db.setDocumentExpiration(id: "ghost", date: Self.date(clock, plus: 1))
        }
        let saved = try db.put(Document(id: "t", properties: ["v": 1]))
        try db.setDocumentExpiration(id: "t", date: Self.date(clock, plus: 5))
        var edit = saved
        edit["v"] = 2
        _ = try db.put(edit)
        try db.delete("t")
        #expect(try db.getDocumentExpiration(id: "t") == Self.date(clock, plus: 5))
        clock.advance(seconds: 5)
        #expect(try db.revisionTree(of: "t") == nil)
        #expect(try db.stats().total.tombstones == 0)

        try db.save(Document(id: "c", properties: [:]))
        try db.setDocumentExpiration(id: "c", date: Self.date(clock, plus: 5))
        try db.setDocumentExpiration(id: "c", date: nil)
        #expect(clock.armedDeadlines.isEmpty)
        clock.advance(seconds: 10)
        #expect(try db.document("c") != nil)

        try db.setDocumentExpiration(id: "c", date: Self.date(clock, plus: 100))
        #expect(try db.purge("c"))
        try db.save(Document(id: "c", properties: [:]))
        #expect(try db.getDocumentExpiration(id: "c") == nil)
        try db.setDocumentExpiration(id: "c", date: Self.date(clock, plus: -1))
        #expect(try db.document("c") == nil)

        try db.save(Document(id: "d", properties: [:]))
        #expect(throws: LiteError.self) {
            try db.setDocumentExpiration(id: "d", date: Date(timeIntervalSince1970: 1e15))
        }
        try db.setDocumentExpiration(id: "d", date: Date(timeIntervalSince1970: -1e12))
        #expect(try db.document("d") == nil)
    }

    @Test func expirationIsPerCollectionAndADroppedCollectionTakesItsOwn() throws {
        // Proves an expiration names its collection's document only (the same id elsewhere stays), and deleting a
        // collection deletes its expirations (nothing left armed for it).
        let clock = ManualTimerClock()
        let db = try Self.open("exp", TemporaryDirectory.make("lite-exp"), clock)
        defer { try? db.delete() }
        let notes = try db.createCollection("notes", scope: "app")
        let other = try db.createCollection("other", scope: "app")
        try notes.save(Document(id: "x", properties: ["in": "notes"]))
        try db.save(Document(id: "x", properties: ["in": "default"]))
        try other.save(Document(id: "y", properties: [:]))
        try notes.setDocumentExpiration(id: "x", date: Self.date(clock, plus: 1))
        try other.setDocumentExpiration(id: "y", date: Self.date(clock, plus: 2))
        #expect(try db.getDocumentExpiration(id: "x") == nil)
        #expect(try db.stats().collections["app.notes"]?.expiringDocuments == 1)
        clock.advance(seconds: 1)
        #expect(try notes.document("x") == nil)
        #expect(try db.document("x")?["in"] == "default")
        #expect(try db.deleteCollection("other", scope: "app"))
        clock.advance(seconds: 1)
        #expect(clock.armedDeadlines.isEmpty)
        #expect(try db.stats().total.expiringDocuments == 0)
    }

    @Test func aVersion5FileOpensAsVersion6WithNoExpiration() throws {
        // Proves the upgrade: a file of schema version 5 (no `expirations` table) opens as version 6 with its
        // documents, and expirations work on it.
        let clock = ManualTimerClock()
        let dir = TemporaryDirectory.make("lite-exp")
        var db = try Self.open("v5", dir, clock)
        try db.save(Document(id: "a", properties: ["n": 1]))
        let path = db.path
        db.close()
        do {
            let c = try Connection(path: path, options: Connection.Options())
            defer { c.close() }
            try c.execute("DROP TABLE expirations; UPDATE meta SET value = 5 WHERE key = 'schema_version'")
        }
        db = try Self.open("v5", dir, clock)
        defer { try? db.delete() }
        #expect(try SchemaMigrationTests.query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == 6)
        #expect(try db.document("a")?["n"] == 1)
        try db.setDocumentExpiration(id: "a", date: Self.date(clock, plus: 1))
        clock.advance(seconds: 1)
        #expect(try db.document("a") == nil)
    }

    @Test func theRealClocksTimerPurgesOnItsOwn() async throws {
        // Proves the dispatch timer of `SystemTimerClock` runs the purge without anyone calling in: a document set to
        // expire 50 ms ahead is gone within the deadline (waits for the purge to happen, never for nothing to).
        let db = try Database(name: "real", directory: TemporaryDirectory.make("lite-exp"))
        defer { try? db.delete() }
        try db.save(Document(id: "a", properties: [:]))
        try db.setDocumentExpiration(id: "a", date: Date().addingTimeInterval(0.05))
        // The reads are SQLite's (blocking): polled off the cooperative pool.
        let gone = try await offPool { () throws -> Bool in
            let deadline = ContinuousClock.now + .seconds(10)
            while try db.document("a") != nil, ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.01)
            }
            return try db.document("a") == nil
        }
        #expect(gone)
    }
}
