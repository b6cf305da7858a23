import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeBackup

/// The repository on disk, without a cluster: chains, verification against the manifest, removal with dependents.
@Suite struct BackupRepositoryTests {
    /// Writes a backup of one collection with `records` events in vBucket 1 of 2, and its `backup.json`.
    static func write(
        _ repo: BackupRepository, name: String, parent: String?, records: Int
    ) throws -> BackupManifest {
        var m = BackupManifest(
            bucket: "b", name: name, parent: parent, vbuckets: 2, collections: [.defaultCollection])
        var segs: [SegmentEntry] = []
        for vb in 0..<2 {
            let h = SegmentHeader(vbucket: VBucketID(UInt16(vb)), collection: 0, start: .zero, restarted: false)
            var w = SegmentWriter(header: h)
            var bytes = w.start()
            for i in 0..<(vb == 1 ? records : 0) { bytes += w.append(SegmentFormatTests.event(i)) }
            let end = ChangeStreamPosition(seqno: SeqNo(UInt64(records)), vbucketUUID: VBucketUUID(3))
            bytes += w.finish(end: end)
            let url = repo.segmentURL("b", name, .defaultCollection, h.vbucket)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(bytes).write(to: url)
            segs.append(
                SegmentEntry(
                    vbucket: h.vbucket, start: .zero, end: end, restarted: false, records: w.records,
                    bytes: UInt64(bytes.count)))
        }
        m.segments[0] = segs
        try repo.write(m, complete: true)
        return m
    }

    @Test func chainVerifyAndRemoveWithDependents() throws {
        let dir = TemporaryDirectory("backup-repo")
        let repo = BackupRepository(dir.path + "/repo")
        try repo.create()
        let full = try Self.write(repo, name: "2026-01-01T00_00_00.000Z", parent: nil, records: 30)
        let inc1 = try Self.write(repo, name: "2026-01-02T00_00_00.000Z", parent: full.name, records: 5)
        let other = try Self.write(repo, name: "2026-01-03T00_00_00.000Z", parent: nil, records: 1)
        let inc2 = try Self.write(repo, name: "2026-01-04T00_00_00.000Z", parent: inc1.name, records: 2)
        #expect(try repo.chain("b", to: inc2.name).map(\.name) == [full.name, inc1.name, inc2.name])
        #expect(try repo.verify(inc2) == 2)

        // The manifest and the file disagree (a segment swapped in from another backup): refused.
        let a = repo.segmentURL("b", inc1.name, .defaultCollection, VBucketID(1))
        let b = repo.segmentURL("b", other.name, .defaultCollection, VBucketID(1))
        let saved = try Data(contentsOf: a)
        try FileManager.default.removeItem(at: a)
        try FileManager.default.copyItem(at: b, to: a)
        #expect(throws: BackupError.self) { _ = try repo.verify(inc1) }
        try saved.write(to: a)
        // A truncated segment: refused, naming the file.
        try Data(saved.prefix(saved.count - 1)).write(to: a)
        let error = #expect(throws: BackupError.self) { _ = try repo.verify(inc1) }
        #expect(error?.description.contains("vb-0001.seg") == true)
        try saved.write(to: a)
        #expect(try repo.verify(inc1) == 2)

        // Removing the full backup removes the incrementals built on it, not the other chain.
        #expect(try repo.remove("b", full.name) == [full.name, inc1.name, inc2.name])
        #expect(try repo.backups("b").map(\.name) == [other.name])
        #expect(throws: BackupError.self) { _ = try repo.chain("b", to: inc2.name) }
        #expect(throws: BackupError.self) { _ = try repo.remove("b", "nope") }
    }

    @Test func aDirectoryThatIsNotARepositoryIsRefused() throws {
        let dir = TemporaryDirectory("backup-not-repo")
        try Data("x".utf8).write(to: dir.url.appendingPathComponent("file"))
        #expect(throws: BackupError.self) { try BackupRepository(dir.path).create() }
        #expect(throws: BackupError.self) { _ = try BackupRepository(dir.path).buckets() }
    }
}
