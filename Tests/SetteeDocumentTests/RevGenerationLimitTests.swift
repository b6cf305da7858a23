import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@Suite struct RevGenerationLimitTests {
    static let top = Limits.maxRevGeneration

    @Test func generationsAboveTheLimitDoNotParse() {
        // Proves the edge refuses generations that could overflow later: `Int.max` and anything above
        // `Limits.maxRevGeneration`, while the limit itself parses.
        #expect(RevID("9223372036854775807-a") == nil)
        #expect(RevID("99999999999999999999999-a") == nil)
        #expect(RevID("\(Self.top + 1)-a") == nil)
        #expect(RevID("\(Self.top)-a")?.generation == Self.top)
    }

    @Test func theNextRevisionOfOneAtTheLimitIsNil() throws {
        // Proves `RevID.next` does checked arithmetic: at the limit, and for an out-of-range id built
        // directly (`Int.max`, which trapped on `+ 1` before), there is no next revision.
        let body = try JSON.parse(#"{"v":1}"#)
        #expect(RevID.next(parent: RevID(generation: Self.top, digest: "a"), deleted: false, body: body) == nil)
        #expect(RevID.next(parent: RevID(generation: .max, digest: "a"), deleted: false, body: body) == nil)
        #expect(
            RevID.next(parent: RevID(generation: Self.top - 1, digest: "a"), deleted: false, body: body)?.generation
                == Self.top)
        #expect(RevID.nextGeneration(after: nil) == 1)
    }

    @Test func aTreeRefusesAChildOfAnOverflowingParent() throws {
        // Proves `RevTree.add` throws instead of trapping when the parent's generation cannot grow.
        var tree = RevTree()
        let parent = RevID(generation: .max, digest: "a")
        try tree.addHistory([parent], deleted: false, body: nil)
        #expect(throws: RevTreeError.self) {
            try tree.add(RevID(generation: 1, digest: "b"), parent: parent, deleted: false, body: nil)
        }
        #expect(tree.winner == parent)
    }

    @Test func revisionsWithAStartAboveTheLimitAreRefused() throws {
        // Proves a `_revisions` history can only name generations its (already bounded) rev id names.
        let rev = try #require(RevID("\(Self.top)-a"))
        let ok = try RevTree.parseRevisions(JSON.parse(#"{"start":\#(Self.top),"ids":["a","b"]}"#), rev: rev)
        #expect(ok.map(\.generation) == [Self.top, Self.top - 1])
        #expect(throws: RevTreeError.self) {
            try RevTree.parseRevisions(JSON.parse(#"{"start":1e300,"ids":["a"]}"#), rev: rev)
        }
    }
}
