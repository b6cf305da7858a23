import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// An attachment compaction racing writes (ADR 0151 amendment): a blob a revision written during the run refers to
/// is never swept, whether the write lands during the mark phase or while the sweep removes that very blob.
@Suite struct AttachmentCompactionRaceTests {
    static let hello = "aGVsbG8gd29ybGQ="  // "hello world"
    static let other = "b3RoZXIgYnl0ZXM="  // "other bytes"

    static func withAttachment(_ data: String, rev: String? = nil) -> JSON {
        let r = rev.map { #""_rev":"\#($0)","# } ?? ""
        return json(#"{\#(r)"_attachments":{"t.txt":{"content_type":"text/plain","data":"\#(data)"}}}"#)
    }

    static func open() async throws -> (db: GatewayDatabase, hooks: BucketHooks, bucket: EmbeddedBucket) {
        let inner = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let hooks = BucketHooks()
        let db = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"),
            bucket: StalledFeedBucket(inner: inner, gate: FeedGate(), hooks: hooks), logger: quietLogger())
        return (db, hooks, inner)
    }

    static func digest(_ db: GatewayDatabase, _ id: String) async throws -> String {
        let body = try await db.get(id, user: nil).body
        return try #require(body["_attachments"]?["t.txt"]?["digest"]?.stringValue)
    }

    @Test func aBlobReferredToWhileTheSweepRemovesItIsPutBack() async throws {
        // Proves the sweep's removal race: "a"'s blob is unreferenced once "a" is purged; just as the sweep removes
        // it, "b" is written with the same bytes (blobs are content-addressed, so "b" stores nothing new). "b"'s
        // attachment still reads afterwards (before the fix the sweep deleted it: data loss).
        let (db, hooks, inner) = try await Self.open()
        _ = try await db.put("a", body: Self.withAttachment(Self.hello), user: nil)
        let key = attachmentPrefix + (try await Self.digest(db, "a"))
        let indexed = await eventually { db.storedFigures().attachmentBlobs == 1 }
        #expect(indexed)
        _ = try await db.purge(["a": ["*"]])
        hooks.on(.remove, key) {
            _ = try? await db.put("b", body: Self.withAttachment(Self.hello), user: nil)
        }
        _ = try #require(await db.compact())
        let read = try await db.attachment(docID: "b", name: "t.txt", rev: nil, user: nil)
        #expect(read.data == Array("hello world".utf8))
        #expect(db.attachmentCompaction.withLock { $0.purgedAttachments } == 0)
        await db.close()
        await inner.close()
    }

    @Test func aDocumentWrittenDuringTheMarkPhaseKeepsItsBlob() async throws {
        // Proves the mark phase's race: while the run reads "a" (the only document it knew at its start), "c" is
        // created with a new attachment and its blob indexed, so the sweep's list holds a blob no marked revision
        // refers to. It stays and reads; an unreferenced blob left from before the run is still swept.
        let (db, hooks, inner) = try await Self.open()
        _ = try await db.put("a", body: json(#"{"v":1}"#), user: nil)
        _ = try await db.put("old", body: Self.withAttachment(Self.hello), user: nil)
        _ = try await db.purge(["old": ["*"]])
        let indexed = await eventually { db.storedFigures().attachmentBlobs == 1 }
        #expect(indexed)
        hooks.on(.get, "a") {
            _ = try? await db.put("c", body: Self.withAttachment(Self.other), user: nil)
            _ = await eventually { db.storedFigures().attachmentBlobs == 2 }
        }
        _ = try #require(await db.compact())
        let read = try await db.attachment(docID: "c", name: "t.txt", rev: nil, user: nil)
        #expect(read.data == Array("other bytes".utf8))
        #expect(db.attachmentCompaction.withLock { $0.purgedAttachments } == 1)
        await db.close()
        await inner.close()
    }

    @Test func aCommitInFlightWhenTheRunStartsIsProtected() {
        // Proves the guard's rule for a commit begun before the run: its keys are protected from the start, and a
        // commit begun and ended before the run protects nothing.
        var g = AttachmentSweepGuard()
        g.begin(["k1"])
        g.begin(["k2"])
        g.end(["k2"])
        g.start()
        #expect(!g.mayRemove("k1") && g.mayRemove("k2"))
        g.end(["k1"])
        #expect(!g.mayRemove("k1"))  // still referred to by what that commit wrote
        g.begin(["k3"])
        #expect(!g.mayRemove("k3"))
        g.finish()
        #expect(g.mayRemove("k1") && g.mayRemove("k3"))
    }
}
