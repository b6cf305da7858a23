import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// A revision body as deep as a request may be, kept inside the document's `_sync` (a losing leaf's body sits four
/// levels down), leaves the document readable.
@Suite struct DeepRevisionTests {
    /// `{"v":{"a":{"a":…1…}}}` with `levels` nested objects under `v`.
    private func deep(_ levels: Int, rev: String) -> String {
        #"{"_rev":"\#(rev)","v":"# + String(repeating: #"{"a":"#, count: levels) + "1"
            + String(repeating: "}", count: levels) + "}"
    }

    /// Proves a pushed losing leaf whose body is at the deepest a document may be (found by nesting deeper bodies
    /// until the document bound refuses one) leaves the document readable (GET of the winner and of that leaf) and
    /// updatable, in both layouts. Before, the item no longer parsed at the request bound: every read answered 404
    /// "Not imported" and every write 409, for anyone, until an admin purge. With shared bucket access the push may
    /// instead be refused for the XATTR's depth; the document stays readable either way.
    @Test func aDeepLosingLeafLeavesTheDocumentReadable() async throws {
        // The deepest body the document bound takes (ADR 0121: the object itself is level 1, `v` adds one).
        var levels = 100
        while let next = try? JSON.parse(deep(levels + 1, rev: "1-0")), next.nestingDepth <= Limits.maxDocumentDepth {
            levels += 1
        }
        #expect(levels == Limits.maxDocumentDepth - 1, "the document bound allows \(levels) levels")
        var shared = DatabaseOptions(name: "db")
        shared.sharedBucketAccess = true
        for options in [DatabaseOptions(name: "db"), shared] {
            let f = try await Fixture.open(options)
            let winner = try await f.db.put("victim", body: json(#"{"v":1}"#), user: nil)
            #expect(winner.digest > "0")
            let leafBody = json(deep(levels, rev: "1-0"))
            if options.sharedBucketAccess {
                _ = try? await f.db.put("victim", body: leafBody, newEdits: false, user: nil)
            } else {
                #expect(try await f.db.put("victim", body: leafBody, newEdits: false, user: nil).description == "1-0")
            }
            let (body, _) = try await f.db.get("victim", user: nil)
            #expect(body["_rev"]?.stringValue == winner.description && body["v"]?.intValue == 1)
            if !options.sharedBucketAccess {
                let (leaf, _) = try await f.db.get("victim", rev: RevID("1-0"), user: nil)
                #expect(leaf["v"]?["a"] != nil)
            }
            let next = try await f.db.put(
                "victim", body: json(#"{"_rev":"\#(winner.description)","v":2}"#), user: nil)
            #expect(next.generation == 2)
            await f.close()
        }
    }
}
