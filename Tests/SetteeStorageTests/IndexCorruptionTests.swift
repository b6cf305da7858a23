import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// A data file whose key index disagrees with its table (issue 72 item 5, ADR 0144): found at open by SQLite's
/// integrity check, rebuilt by a repair, and, when the open did not check, reported at first use as a corrupt item,
/// never as a missing document.
@Suite(.onTestThreads) struct IndexCorruptionTests {
    let dir = TemporaryDirectory("index-corrupt")

    /// Leaves `missing` out of the file's key index while SQLite believes the index complete, as a damaged index
    /// page does: the index is rebuilt as a partial one without those keys, then its schema text is set back to the
    /// full definition (`writable_schema`). The table keeps every row; a lookup by key misses those.
    static func dropFromIndex(_ path: String, keys missing: [[UInt8]]) throws {
        let c = try Connection(path: path)
        defer { c.close() }
        let literals = missing.map { "X'" + $0.map { String(format: "%02x", $0) }.joined() + "'" }
        try c.execute("DROP INDEX items_by_key")
        try c.execute(
            "CREATE UNIQUE INDEX items_by_key ON items(vb, key) WHERE key NOT IN (\(literals.joined(separator: ",")))")
        try c.execute("PRAGMA writable_schema=ON")
        try c.execute(
            "UPDATE sqlite_master SET sql='CREATE UNIQUE INDEX items_by_key ON items(vb, key)' WHERE name='items_by_key'"
        )
        try c.execute("PRAGMA writable_schema=OFF")
    }

    static let damaged = [key("doc17"), key("doc42")]

    /// Regression: a bucket file whose index lacks 2 of 200 rows opened without complaint (and those documents then
    /// read as "not found" once evicted). Now the open fails as unreadable (`SQLITE_CORRUPT` from the integrity
    /// check), the path a row failing its checksum takes, naming the index.
    @Test func aDamagedIndexFailsTheOpen() throws {
        try storeAndClose(dir, prefix: "doc", count: 200)
        try Self.dropFromIndex(dir.dataFile, keys: Self.damaged)
        var options = testOptions()
        options.expectExistingData = true
        do {
            let e = try openEngine(dir, options: options)
            e.shutdown()
            Issue.record("a file with a damaged index opened")
        } catch {
            #expect(BucketEngine.isUnreadable(error), "\(error)")
            #expect("\(error)".contains("items_by_key"), "\(error)")
        }
    }

    /// Proves a repair rebuilds a damaged index instead of setting the whole file aside: all 200 items open, the two
    /// the index had lost are read back from disk once evicted, and the next ordinary open checks clean.
    @Test func repairRebuildsADamagedIndex() throws {
        try storeAndClose(dir, prefix: "doc", count: 200)
        try Self.dropFromIndex(dir.dataFile, keys: Self.damaged)
        var options = testOptions()
        options.repair = true
        let e = try openEngine(dir, options: options)
        #expect(e.stats().currItems == 200)
        for k in Self.damaged {
            let vb = vbOf(k, e)
            #expect(evict(e, vb, k))
            #expect(fetchSync(e, vb, k))
            #expect(try e.get(vb, k).value == [UInt8(Int(String(decoding: k.dropFirst(3), as: UTF8.self)) ?? 0)])
        }
        e.shutdown()
        let again = try openEngine(dir)
        #expect(again.stats().currItems == 200)
        again.shutdown()
    }

    /// Proves first use reports what the open did not check (`openIntegrityCheckSeconds` 0, as when the check runs
    /// out of time): an evicted item whose row the index misses reads as corrupt ("stored value failed its
    /// checksum", what a bad checksum answers) after its fetch, not as not found; an undamaged one reads back.
    @Test func aRowTheIndexMissesReadsAsCorruptNotMissing() throws {
        try storeAndClose(dir, prefix: "doc", count: 200)
        try Self.dropFromIndex(dir.dataFile, keys: Self.damaged)
        var options = testOptions()
        options.openIntegrityCheckSeconds = 0
        let e = try openEngine(dir, options: options)
        defer { e.shutdown() }
        let k = Self.damaged[0]
        let vb = vbOf(k, e)
        #expect(evict(e, vb, k))
        #expect(fetchSync(e, vb, k))
        #expect(throws: EngineError.ioFailure("stored value failed its checksum")) { _ = try e.get(vb, k) }
        let fine = key("doc5")
        #expect(evict(e, vbOf(fine, e), fine))
        #expect(fetchSync(e, vbOf(fine, e), fine))
        #expect(try e.get(vbOf(fine, e), fine).value == [5])
    }

    /// Proves the check is bounded and says so: `Connection.checkIntegrity` on a sound file is `.ok`, on the damaged
    /// one `.damaged` naming the index, and with no time at all `.unfinished` (interrupted, nothing claimed).
    @Test func theIntegrityCheckReportsAndIsBounded() throws {
        try storeAndClose(dir, prefix: "doc", count: 200)
        do {
            let c = try Connection(path: dir.dataFile)
            defer { c.close() }
            #expect(try c.checkIntegrity(seconds: 10) == .ok)
            #expect(try c.checkIntegrity(seconds: 0) == .unfinished)
        }
        try Self.dropFromIndex(dir.dataFile, keys: Self.damaged)
        let c = try Connection(path: dir.dataFile)
        defer { c.close() }
        guard case .damaged(let problems) = try c.checkIntegrity(seconds: 10) else {
            Issue.record("the damaged index was not found")
            return
        }
        #expect(problems.contains { $0.contains("items_by_key") }, "\(problems)")
    }
}
