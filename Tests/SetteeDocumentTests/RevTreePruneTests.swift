import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

private func rev(_ s: String) -> RevID { RevID(s)! }

/// A document edited as issue 67 item 9 describes: `1-a` edited to `2-live2`, then `conflicts` branches `2-cK`
/// (pushed off `1-a`) each resolved by a tombstone `3-cK`, then the live branch edited up to `liveGeneration`.
private func resolvedConflicts(_ conflicts: Int, liveGeneration: Int) throws -> RevTree {
    var t = RevTree()
    try t.add(rev("1-a"), parent: nil, deleted: false, body: nil)
    try t.add(rev("2-live2"), parent: rev("1-a"), deleted: false, body: nil)
    for k in 0..<conflicts {
        try t.addHistory([rev("2-c\(k)"), rev("1-a")], deleted: false, body: nil)
        try t.add(rev("3-c\(k)"), parent: rev("2-c\(k)"), deleted: true, body: nil)
    }
    var parent = rev("2-live2")
    for g in stride(from: 3, through: liveGeneration, by: 1) {
        let r = RevID(generation: g, digest: "live\(g)")
        try t.add(r, parent: parent, deleted: false, body: nil)
        parent = r
    }
    return t
}

@Suite struct RevTreePruneTests {
    // Proves issue 67 item 9's case: 30 conflicts resolved by tombstones, then 40 edits with revs_limit 20, leave
    // the live branch's 20 newest revisions and one leaf (31 leaves and 81 revisions before the fix).
    @Test func resolvedConflictBranchesGoOnceTheLiveBranchIsRevsLimitPastThem() throws {
        var t = try resolvedConflicts(30, liveGeneration: 41)
        #expect(t.count == 1 + 60 + 40 && t.leaves.count == 31)
        #expect(t.prune(revsLimit: 20) == 81)
        #expect(t.count == 20 && t.leaves == [rev("41-live41")])
        #expect(t.revisions == (22...41).map { RevID(generation: $0, digest: "live\($0)") })
        #expect(t.winner == rev("41-live41") && t.parent(of: rev("22-live22")) == nil)
    }

    // Proves the threshold is strict, as Sync Gateway's: a tombstone at generation 3 stays while the lowest live
    // leaf is at 23 (3 is not below 23 - 20) and goes at 24, with the whole branch (2-cK and the shared root 1-a).
    @Test func thresholdIsLowestLiveLeafMinusRevsLimit() throws {
        var kept = try resolvedConflicts(2, liveGeneration: 23)
        kept.prune(revsLimit: 20)
        #expect(kept.leaves.count == 3 && kept.contains(rev("3-c0")) && kept.contains(rev("2-c1")))
        #expect(kept.contains(rev("1-a")))  // within 20 of the tombstones (the live branch alone would drop it)
        var gone = try resolvedConflicts(2, liveGeneration: 24)
        gone.prune(revsLimit: 20)
        #expect(gone.leaves == [rev("24-live24")] && gone.count == 20 && !gone.contains(rev("1-a")))
    }

    // Proves that without a live leaf (a deleted document) no tombstoned branch is removed (Sync Gateway #2695),
    // only depth pruning applies.
    @Test func aDeletedDocumentKeepsEveryTombstonedBranch() throws {
        var t = try resolvedConflicts(3, liveGeneration: 41)
        try t.add(rev("42-dead"), parent: rev("41-live41"), deleted: true, body: nil)
        #expect(t.winnerIsDeleted)
        t.prune(revsLimit: 20)
        #expect(t.leaves.count == 4 && t.contains(rev("3-c2")) && t.contains(rev("2-c2")) && t.contains(rev("1-a")))
        #expect(t.count == 20 + 3 * 2 + 1)
    }

    // Proves the threshold follows the lowest live leaf: an unresolved conflict at generation 5 keeps tombstones
    // down to generation 5 - 20, so nothing goes; live leaves are never removed.
    @Test func anUnresolvedLowConflictHoldsTheThreshold() throws {
        var t = try resolvedConflicts(3, liveGeneration: 41)
        try t.addHistory(
            [rev("5-open"), rev("4-open"), rev("3-open"), rev("2-open"), rev("1-a")], deleted: false, body: nil)
        t.prune(revsLimit: 20)
        #expect(t.leaves.count == 5 && t.contains(rev("3-c0")) && t.conflicts == [rev("5-open")])
    }

    // Proves how a live conflicting branch far older than the limit is handled (issue 71 item 1), as Sync Gateway's
    // `pruneRevisions` does: it is never removed (only tombstoned branches go whole); like every branch it keeps the
    // `revs_limit` revisions nearest its leaf, and the trunk they shared is forgotten once no leaf reaches it.
    @Test func aLiveConflictBranchOlderThanTheLimitKeepsItsNewestRevisions() throws {
        var t = RevTree()
        var parent: RevID?
        for g in 1...100 {
            let r = RevID(generation: g, digest: "m\(g)")
            try t.add(r, parent: parent, deleted: false, body: nil)
            parent = r
        }
        // Off 10-m10: a live branch up to 40, sixty generations behind the winner.
        try t.addHistory(
            (11...40).reversed().map { RevID(generation: $0, digest: "c\($0)") } + [rev("10-m10")], deleted: false,
            body: nil)
        #expect(t.prune(revsLimit: 20) == 100 + 30 - 40)
        #expect(Set(t.leaves) == [rev("100-m100"), rev("40-c40")] && t.conflicts == [rev("40-c40")])
        #expect(t.history(of: rev("40-c40")).count == 20 && t.history(of: rev("100-m100")).count == 20)
        #expect(!t.contains(rev("10-m10")) && t.parent(of: rev("21-c21")) == nil)
    }

    // Proves an ancestor shared by a removed tombstoned branch and a kept one stays while the kept branch reaches
    // it within the limit (Sync Gateway would delete the removed branch down to its root).
    @Test func sharedAncestorsOfAKeptTombstonedBranchStay() throws {
        var t = RevTree()
        var parent: RevID?
        for g in 1...40 {
            let r = RevID(generation: g, digest: "m\(g)")
            try t.add(r, parent: parent, deleted: false, body: nil)
            parent = r
        }
        // Both off 10-m10: an old tombstone at 12 (below 40 - 20) and a newer one at 25 (not below).
        try t.addHistory([rev("12-old"), rev("11-old"), rev("10-m10")], deleted: true, body: nil)
        try t.addHistory(
            (11...25).reversed().map { RevID(generation: $0, digest: "new\($0)") } + [rev("10-m10")], deleted: true,
            body: nil)
        t.prune(revsLimit: 20)
        #expect(Set(t.leaves) == [rev("40-m40"), rev("25-new25")])
        #expect(!t.contains(rev("12-old")) && !t.contains(rev("11-old")))
        // 25-new25 keeps its 20 newest revisions, down to 6-m6 through 10-m10, which Sync Gateway would delete.
        #expect(t.contains(rev("10-m10")) && t.history(of: rev("25-new25")).count == 20)
        #expect(t.contains(rev("6-m6")) && !t.contains(rev("5-m5")))
    }

    // Proves a tree of at most revs_limit revisions is left alone (Sync Gateway's early return), old tombstones
    // included: a live branch replicated with a short history at generation 100 and a tombstone at 3.
    @Test func aSmallTreeIsLeftAlone() throws {
        var t = RevTree()
        try t.addHistory([rev("3-t"), rev("2-t"), rev("1-t")], deleted: true, body: nil)
        try t.addHistory([rev("100-live")], deleted: false, body: nil)
        #expect(t.prune(revsLimit: 20) == 0 && t.count == 4)
        #expect(t.prune(revsLimit: 3) == 3 && t.revisions == [rev("100-live")])
    }

    // Proves `pruned` is pure (the tree it is called on is unchanged), equals `prune`, and pruning twice changes
    // nothing more; a limit below 1 counts as 1.
    @Test func prunedIsPureAndIdempotent() throws {
        let t = try resolvedConflicts(5, liveGeneration: 30)
        let p = t.pruned(revsLimit: 10)
        #expect(t.count == 1 + 10 + 29)
        var q = t
        #expect(q.prune(revsLimit: 10) == t.count - p.count)
        #expect(p == q && p.pruned(revsLimit: 10) == p)
        #expect(
            t.pruned(revsLimit: 0) == t.pruned(revsLimit: 1) && t.pruned(revsLimit: -5).revisions == [rev("30-live30")])
    }

    // Proves, on seeded random trees (seed printed), what pruning may and may not do: the winner and every live
    // leaf stay, no leaf appears, every kept leaf keeps at least min(revs_limit, its history) of its history, and a
    // removed leaf is a tombstone below the lowest live leaf's generation minus revs_limit.
    @Test func randomTreesKeepTheirInvariants() throws {
        let seed = UInt64.random(in: 1...UInt64.max)
        print("RevTreePruneTests.randomTreesKeepTheirInvariants seed \(seed)")
        var rng = SplitMix64(seed: seed)
        for round in 0..<200 {
            var t = RevTree()
            var made: [RevID] = []
            for step in 0..<Int(rng.next() % 60 + 1) {
                let leaves = t.leaves
                let deleted = rng.next() % 4 == 0
                if leaves.isEmpty || rng.next() % 5 == 0 {
                    // A branch off a random known revision (or a new root), replicated.
                    let base = made.isEmpty || rng.next() % 6 == 0 ? nil : made[Int(rng.next() % UInt64(made.count))]
                    let r = RevID(generation: (base?.generation ?? 0) + 1, digest: "b\(round)x\(step)")
                    try t.addHistory([r] + (base.map { [$0] } ?? []), deleted: deleted, body: nil)
                    made.append(r)
                } else {
                    let p = leaves[Int(rng.next() % UInt64(leaves.count))]
                    let r = RevID(generation: p.generation + 1, digest: "e\(round)x\(step)")
                    try t.add(r, parent: p, deleted: deleted, body: nil)
                    made.append(r)
                }
            }
            let limit = Int(rng.next() % 8 + 1)
            let after = t.pruned(revsLimit: limit)
            let live = t.leaves.filter { !t.isDeleted($0) }
            #expect(after.winner == t.winner, "seed \(seed) round \(round)")
            #expect(Set(after.leaves).isSubset(of: Set(t.leaves)), "seed \(seed) round \(round)")
            guard t.count > limit else {
                #expect(after == t)
                continue
            }
            #expect(Set(live).isSubset(of: Set(after.leaves)), "seed \(seed) round \(round)")
            let lowest = live.map(\.generation).min()
            for leaf in t.leaves where !after.contains(leaf) {
                #expect(t.isDeleted(leaf) && lowest.map { leaf.generation < $0 - limit } == true, "seed \(seed)")
            }
            for leaf in after.leaves {
                // At least the limit (more when another kept leaf reaches further down), always a prefix.
                let kept = after.history(of: leaf)
                #expect(kept.count >= min(limit, t.history(of: leaf).count), "seed \(seed) round \(round)")
                #expect(Array(t.history(of: leaf).prefix(kept.count)) == kept, "seed \(seed) round \(round)")
            }
        }
    }
}
