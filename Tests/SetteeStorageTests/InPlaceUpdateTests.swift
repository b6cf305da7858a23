import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// An overwrite of a persisted key rewrites its row in place (ADR 0067): same rowid, and its commit appends one
/// WAL frame (the row's leaf) instead of the old row's leaf, an appended leaf, the index leaf and page 1.
@Suite(.onTestThreads) struct InPlaceUpdateTests {
    let dir = TemporaryDirectory("storage")

    private static let frameBytes = 24 + StorageSchema.newFilePageSize

    private func rowid(_ raw: RawSQLite, _ vb: VBucketID, _ k: [UInt8]) throws -> Int64? {
        let hex = k.map { String(format: "%02x", $0) }.joined()
        return try raw.rows("SELECT rowid, x'' FROM items WHERE vb = \(vb.rawValue) AND key = x'\(hex)'").first?.0
    }

    private func walBytes() -> Int {
        let a = try? FileManager.default.attributesOfItem(atPath: dir.dataFile + "-wal")
        return (a?[.size] as? Int) ?? 0
    }

    @Test func overwriteOfAPersistedKeyWritesOnlyItsLeaf() throws {
        let e1 = try openEngine(dir)
        let target = key("in-place-target")
        let vb = vbOf(target, e1)
        let value = [UInt8](repeating: 7, count: 1024)
        let r0 = try e1.store(.set, vb, target, value: value, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r0.token.seqno)))
        // Rows after it, so its leaf is not the table's last (where an appended row would land).
        for i in 0..<200 {
            let k = key("in-place-other-\(i)")
            let v = vbOf(k, e1)
            let r = try e1.store(.set, v, k, value: value, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            #expect(isOK(waitPersisted(e1, v, r.token.seqno)))
        }
        // One more write of the target's vBucket, so its state row was committed by this flusher and the
        // overwrite's batch may leave it out (ADR 0061): the frames counted below are the item's alone.
        let r1 = try e1.store(.set, vb, target, value: value, flags: 1, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r1.token.seqno)))
        let raw = try RawSQLite(dir.dataFile)
        let before = try rowid(raw, vb, target)
        let maxBefore = try raw.rows("SELECT max(rowid), x'' FROM items").first?.0
        #expect(before != nil)

        let wal0 = walBytes()
        var changed = value
        changed[0] = 9
        let r2 = try e1.store(.set, vb, target, value: changed, flags: 2, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r2.token.seqno)))
        let frames = (walBytes() - wal0) / Self.frameBytes
        #expect(frames == 1, "the overwrite's commit appended \(frames) WAL frames")
        #expect(try rowid(raw, vb, target) == before)
        #expect(try raw.rows("SELECT max(rowid), x'' FROM items").first?.0 == maxBefore)
        let stored = try raw.rows(
            "SELECT seqno, value FROM items WHERE vb = \(vb.rawValue) AND key = x'\(target.map { String(format: "%02x", $0) }.joined())'"
        )
        #expect(stored.first?.0 == Int64(r2.token.seqno.rawValue))

        // A new key still appends a row.
        let fresh = key("in-place-fresh")
        let vf = vbOf(fresh, e1)
        let r3 = try e1.store(.set, vf, fresh, value: value, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vf, r3.token.seqno)))
        if let maxBefore { #expect(try rowid(raw, vf, fresh) == maxBefore + 1) }
        e1.stopThreads(.abandon)

        // After a crash, warmup reads the updated row: the latest value, seqno, flags and CAS.
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        let got = try e2.get(vb, target)
        #expect(got.value == changed)
        #expect(got.meta.flags == 2)
        #expect(got.meta.cas == r2.cas)
        #expect(e2.seqnoInfo(vb).highSeqno == r2.token.seqno)
        #expect(try e2.get(vf, fresh).value == value)
    }

    /// A deletion of a persisted key is an overwrite too: the tombstone takes the row's place, and warmup after a
    /// crash reads it as deleted.
    @Test func tombstoneReplacesTheRowInPlace() throws {
        let e1 = try openEngine(dir)
        let k = key("in-place-deleted")
        let vb = vbOf(k, e1)
        let r1 = try e1.store(.set, vb, k, value: bytes("alive"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r1.token.seqno)))
        let raw = try RawSQLite(dir.dataFile)
        let before = try rowid(raw, vb, k)
        let d = try e1.delete(vb, k, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, d.token.seqno)))
        #expect(try rowid(raw, vb, k) == before)
        e1.stopThreads(.abandon)

        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        #expect(throws: EngineError.self) { _ = try e2.get(vb, k) }
        #expect(e2.seqnoInfo(vb).highSeqno == d.token.seqno)
    }
}
