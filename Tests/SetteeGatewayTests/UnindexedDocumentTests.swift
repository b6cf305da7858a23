import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// Writes of documents the database's index has not seen are tried as inserts without a read (ADR 0064); these
/// prove the guess never changes an outcome when the document exists after all.
@Suite struct UnindexedDocumentTests {
    static let r1 = "1-" + String(repeating: "a", count: 32)
    static let r2 = "2-" + String(repeating: "b", count: 32)

    /// `d`'s revision r2, a child of r1, pushed with `_revisions` and `members`.
    static func child(_ members: String) -> String {
        let ids = #"["\#(r2.dropFirst(2))","\#(r1.dropFirst(2))"]"#
        return #"{"_id":"d","_rev":"\#(r2)","_revisions":{"start":2,"ids":\#(ids)},\#(members)}"#
    }

    /// `writer` indexes its writes; `lagging` shares its bucket but never sees them.
    static func open(sync: String? = nil) async throws -> (Fixture, GatewayDatabase) {
        let f = try await Fixture.open(DatabaseOptions(name: "db", syncSource: sync))
        let lagging = try await GatewayDatabase(
            options: DatabaseOptions(name: "db", syncSource: sync), bucket: StalledFeedBucket(inner: f.bucket),
            logger: quietLogger())
        return (f, lagging)
    }

    @Test func pushedRevisionsOfAnExistingDocumentAreFoundByTheFailedInsert() async throws {
        // Proves: a database that has not indexed an existing document answers a push of a revision it holds
        // with that revision and writes nothing, and grafts a pushed child onto the stored tree (no second root).
        let (f, lagging) = try await Self.open()
        let pushed = #"{"_id":"d","_rev":"\#(Self.r1)","v":1}"#
        _ = await f.db.bulkDocs([json(pushed)], newEdits: false, user: nil)
        let before = try await f.db.raw("d")

        let again = await lagging.bulkDocs([json(pushed)], newEdits: false, user: nil)
        #expect(again.first?["ok"]?.boolValue == true && again.first?["rev"]?.stringValue == Self.r1)
        #expect(try await f.db.raw("d")["_sync"]?["sequence"] == before["_sync"]?["sequence"])

        let rows = await lagging.bulkDocs([json(Self.child(#""v":2"#))], newEdits: false, user: nil)
        #expect(rows.first?["ok"]?.boolValue == true)
        let tree = try RevTree(json: try await f.db.raw("d")["_sync"]!["history"]!)
        #expect(tree.count == 2 && tree.winner?.description == Self.r2 && tree.leaves.count == 1)
        await lagging.close()
        await f.close()
    }

    @Test func aNewRevisionWithoutRevOfAnExistingDocumentIsAConflict() async throws {
        // Proves: `PUT` without `_rev` of a live document the database has not indexed is 409, as with a read.
        let (f, lagging) = try await Self.open()
        _ = try await f.db.put("d", body: json(#"{"v":1}"#), user: nil)
        do {
            _ = try await lagging.put("d", body: json(#"{"v":2}"#), user: nil)
            Issue.record("created over a live document")
        } catch { #expect(error.status == 409) }
        await lagging.close()
        await f.close()
    }

    @Test func aSyncFunctionRefusingANullOldDocSeesTheStoredOneAfterTheGuess() async throws {
        // Proves: the guess runs the sync function with a null oldDoc; its refusal does not stand, the write is
        // read and run again with the stored oldDoc, which the function accepts.
        let sync = "function(doc, oldDoc) { if (doc.edit && !oldDoc) throw({forbidden: \"edit of nothing\"}); }"
        let (f, lagging) = try await Self.open(sync: sync)
        _ = await f.db.bulkDocs([json(#"{"_id":"d","_rev":"\#(Self.r1)","v":1}"#)], newEdits: false, user: nil)
        let child = Self.child(#""edit":true"#)
        let rows = await lagging.bulkDocs([json(child)], newEdits: false, user: nil)
        #expect(rows.first?["ok"]?.boolValue == true && rows.first?["rev"]?.stringValue == Self.r2)
        // A truly new document is still refused.
        let fresh = #"{"_id":"e","_rev":"\#(Self.r1)","edit":true}"#
        let refused = await lagging.bulkDocs([json(fresh)], newEdits: false, user: nil)
        #expect(refused.first?["status"]?.intValue == 403)
        await lagging.close()
        await f.close()
    }

    @Test func revsDiffAnswersUnindexedDocumentsAsMissing() async throws {
        // Proves: `_revs_diff` reads only documents the index holds: an indexed document answers from its tree,
        // an unindexed one (here a lagging database's view of an existing document) misses every revision.
        let (f, lagging) = try await Self.open()
        _ = await f.db.bulkDocs([json(#"{"_id":"d","_rev":"\#(Self.r1)","v":1}"#)], newEdits: false, user: nil)
        let request = ["d": [RevID(Self.r1)!, RevID(Self.r2)!]]
        let known = await f.db.revsDiff(request, user: nil)
        #expect(known["d"]?["missing"]?.arrayValue?.map(\.stringValue) == [Self.r2])
        let unknown = await lagging.revsDiff(request, user: nil)
        #expect(unknown["d"]?["missing"]?.arrayValue?.count == 2)
        await lagging.close()
        await f.close()
    }
}
