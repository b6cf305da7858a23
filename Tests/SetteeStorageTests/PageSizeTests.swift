import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// New data files get `StorageSchema.newFilePageSize` pages (4 KiB, ADR 0072); a file created with 16 KiB pages
/// (every file before ADR 0072) keeps them, is read and written as before, and both checkpoint their WAL after
/// `walAutoCheckpointBytes`, not after a fixed number of pages.
@Suite(.onTestThreads) struct PageSizeTests {
    let dir = TemporaryDirectory("storage")

    private func pageSize() throws -> Int64? {
        try RawSQLite(dir.dataFile).rows("PRAGMA page_size").first?.0
    }

    @Test func aNewBucketFileHasFourKiBPagesAndCheckpointsBy64MiB() throws {
        // A file the writer creates (not the bucket's: a new but existing file would be refused as not Settee's).
        let writer = try StorageSchema.openWriter(path: dir.path + "/probe.sqlite")
        #expect(try writer.queryInt64("PRAGMA page_size") == 4096)
        #expect(try writer.queryInt64("PRAGMA wal_autocheckpoint") == Int64((64 << 20) / 4096))
        #expect(try writer.queryInt64("PRAGMA journal_size_limit") == Int64(64 << 20))
        // The writer's page cache is 8 MiB (ADR 0108), half the connections' default.
        #expect(try writer.queryInt64("PRAGMA cache_size") == -8192)
        #expect(try Connection(path: dir.path + "/probe.sqlite").queryInt64("PRAGMA cache_size") == -16384)
        writer.close()

        let e = try openEngine(dir)
        let k = key("page-size-new")
        let vb = vbOf(k, e)
        let r = try e.store(
            .set, vb, k, value: [UInt8](repeating: 3, count: 1024), flags: 0, expiry: 0,
            datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, r.token.seqno)))
        e.shutdown()
        #expect(try pageSize() == Int64(StorageSchema.newFilePageSize))
    }

    /// Rewrites the closed bucket file with `bytes` pages: what a user runs (sqlite3 CLI, node stopped) to move a
    /// file to another page size, since SQLite changes it only by VACUUM and not in WAL mode.
    private func convert(to bytes: Int) throws {
        let raw = try RawSQLite(dir.dataFile)
        try raw.exec("PRAGMA journal_mode=DELETE; PRAGMA page_size=\(bytes); VACUUM; PRAGMA journal_mode=WAL")
    }

    @Test func anExistingSixteenKiBFileKeepsItsPagesAndItsData() throws {
        let e0 = try openEngine(dir)
        let k0 = key("page-size-before")
        let vb0 = vbOf(k0, e0)
        let v0 = [UInt8](repeating: 4, count: 1024)
        let r0 = try e0.store(.set, vb0, k0, value: v0, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e0, vb0, r0.token.seqno)))
        e0.shutdown()
        // The same file as every build before ADR 0072 created it: 16 KiB pages.
        try convert(to: 16384)
        #expect(try pageSize() == 16384)

        let writer = try StorageSchema.openWriter(path: dir.dataFile)
        #expect(try writer.queryInt64("PRAGMA page_size") == 16384)
        #expect(try writer.queryInt64("PRAGMA wal_autocheckpoint") == Int64((64 << 20) / 16384))
        writer.close()

        let e1 = try openEngine(dir)
        #expect(try e1.get(vb0, k0).value == v0)
        let k = key("page-size-old")
        let vb = vbOf(k, e1)
        let value = [UInt8](repeating: 5, count: 1024)
        let r = try e1.store(.set, vb, k, value: value, flags: 4, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r.token.seqno)))
        e1.stopThreads(.abandon)

        // After a crash the 16 KiB file warms up with both writes, and still has 16 KiB pages.
        let e2 = try openEngine(dir)
        let got = try e2.get(vb, k)
        #expect(got.value == value)
        #expect(got.meta.flags == 4)
        #expect(got.meta.cas == r.cas)
        #expect(try e2.get(vb0, k0).value == v0)
        e2.shutdown()
        #expect(try pageSize() == 16384)

        // And back: the same conversion gives an existing file 4 KiB pages.
        try convert(to: 4096)
        #expect(try pageSize() == 4096)
        let e3 = try openEngine(dir)
        defer { e3.shutdown() }
        #expect(try e3.get(vb, k).value == value)
        #expect(try e3.get(vb0, k0).value == v0)
    }
}
