import SetteeDocument
import SetteeJSON
import Testing

/// `_revisions.ids` digests follow the same rule as a `_rev`'s (`RevID.isValidDigest`).
@Suite struct RevisionsDigestTests {
    // Proves `parseRevisions` refuses an id `RevID(_:)` would refuse (space, control byte, non-ASCII, empty),
    // wherever it sits in the list, so the history never reaches a tree. Before, `"x y"` was taken, the tree
    // stored it, and `RevTree(json:)` refused the stored tree from then on: the document was unreadable.
    @Test(arguments: ["x y", "", "a\u{1}b", "é", "tab\there", "a\u{7F}"])
    func aDigestTheRevIDParserRefusesIsRefused(bad: String) throws {
        let rev = try #require(RevID("3-z"))
        let revisions = JSON.object([
            ("start", .number(3)), ("ids", .array([.string("z"), .string(bad), .string("abc")])),
        ])
        #expect(RevID("2-" + bad) == nil, "the string parser refuses it too")
        #expect(throws: RevTreeError.self) { try RevTree.parseRevisions(revisions, rev: rev) }
    }

    // Proves every history `parseRevisions` accepts goes into a tree whose stored form parses back, the
    // property the unchecked digests broke.
    @Test func anAcceptedHistoryRoundTripsThroughStorage() throws {
        let rev = try #require(RevID("3-z"))
        let revisions = try JSON.parse(#"{"start":3,"ids":["z","a-b~!\"q","0123456789abcdef"]}"#)
        let history = try RevTree.parseRevisions(revisions, rev: rev)
        var tree = RevTree()
        #expect(try tree.addHistory(history, deleted: false, body: nil) == 3)
        let back = try RevTree(json: JSON.parse(tree.storageBytes()))
        #expect(back.winner == rev && back.contains(history[1]) && back.contains(history[2]))
    }
}
