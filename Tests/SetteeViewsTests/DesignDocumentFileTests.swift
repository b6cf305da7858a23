import Foundation
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeViews

/// The bucket's design documents on disk (`DesignDocumentFile`).
@Suite struct DesignDocumentFileTests {
    /// Proves a design-document file that exists but cannot be read fails the views' open instead of reading as no
    /// design documents (after which the next PUT wrote a set of one and dropped the rest for good), while a missing
    /// file is an empty set. The unreadable file here is a directory in its place (EISDIR), which root cannot read
    /// either.
    @Test func anUnreadableFileIsAnErrorAndAMissingOneIsEmpty() throws {
        let f = try EngineFixture()
        defer { f.views.stop() }
        let source = EngineViewSource(engine: f.engine, clock: f.clock)
        let missing = f.dir.path + "/views-missing"
        let empty = try BucketViews(bucket: "test", directory: missing, source: source, logger: quietLogger())
        #expect(empty.designDocuments.isEmpty)
        empty.stop()
        let broken = f.dir.path + "/views-broken"
        try FileManager.default.createDirectory(
            atPath: broken + "/" + DesignDocumentFile.fileName, withIntermediateDirectories: true)
        #expect(throws: ViewError.self) {
            _ = try BucketViews(bucket: "test", directory: broken, source: source, logger: quietLogger())
        }
    }
}
