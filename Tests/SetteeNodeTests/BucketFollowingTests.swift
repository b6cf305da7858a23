import SetteeNode
import Testing

/// The decisions that turn registry config changes into replica streams (they lived inline in
/// settee-server's main, where nothing tested them).
@Suite struct BucketFollowingTests {
    /// Proves a change naming one bucket looks at that bucket only: followed when this node serves it, stopped
    /// when it does not (no duties in the map, or its engine is not open), whatever else is followed.
    @Test func aNamedChangeLooksAtThatBucketOnly() {
        let candidates = BucketFollowing.candidates(changed: "b", registered: ["a", "b", "c"], followed: ["a"])
        #expect(candidates == ["b"])
        #expect(BucketFollowing.directives(candidates: candidates, served: ["a", "b"]) == [.follow("b")])
        #expect(BucketFollowing.directives(candidates: candidates, served: ["a"]) == [.stop("b")])
    }

    /// Proves an unnamed change (an adopted cluster config) looks at every registered and every followed
    /// bucket: one the config deleted, still followed but no longer registered, is stopped, a new one is
    /// followed, a registered one without duties here is stopped; and the followed set ends as the served ones.
    @Test func anUnnamedChangeAlsoStopsBucketsThatAreGone() {
        var followed: Set<String> = ["gone", "kept"]
        let candidates = BucketFollowing.candidates(
            changed: nil, registered: ["kept", "new", "elsewhere"], followed: followed)
        #expect(candidates == ["elsewhere", "gone", "kept", "new"])
        let directives = BucketFollowing.directives(candidates: candidates, served: ["kept", "new"])
        #expect(directives == [.stop("elsewhere"), .stop("gone"), .follow("kept"), .follow("new")])
        BucketFollowing.apply(directives, to: &followed)
        #expect(followed == ["kept", "new"])
    }

    /// Proves a named change of a bucket that was deleted stops it and removes it from the followed set, and a
    /// later unnamed change does not look at it again.
    @Test func aDeletedBucketIsForgotten() {
        var followed: Set<String> = ["a", "b"]
        let directives = BucketFollowing.directives(
            candidates: BucketFollowing.candidates(changed: "b", registered: ["a"], followed: followed), served: ["a"])
        #expect(directives == [.stop("b")])
        BucketFollowing.apply(directives, to: &followed)
        #expect(followed == ["a"])
        #expect(BucketFollowing.candidates(changed: nil, registered: ["a"], followed: followed) == ["a"])
    }
}
