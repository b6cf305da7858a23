import Foundation
import SetteeCore
import Testing

@testable import SetteeGateway

/// The channel index's id order (`IDOrder`, ADR 0093): `_all_docs` walks it instead of sorting every id per request.
@Suite struct IDOrderTests {
    /// The live ids a walk gives: every id it hands out that is still live, checked to come in ascending order, once.
    static func walked(_ walk: IDOrder.Walk, live: Set<String>) -> [String] {
        var w = walk
        var out: [String] = []
        while let id = w.next() {
            if let last = out.last { #expect(last < id, "\(last) then \(id)") }
            if live.contains(id) { out.append(id) }
        }
        #expect(w.isEmpty)
        return out
    }

    /// Proves, over seeded histories of additions, removals and re-additions interleaved with readers (seed printed,
    /// `SETTEE_IDORDER_SEED` replays), that after every step a walk gives exactly the live ids in order, once each,
    /// also cut by a range and taken a few at a time; that a reader's merge, made while more ids arrive, installs
    /// without losing them (invariants 1-3), that one whose snapshot a rebuild overtook is refused, and that forgotten
    /// ids never outnumber the live ones past the floor (invariant 4); each history merges and rebuilds.
    @Test func aWalkIsTheLiveIdsInOrderAfterAnyHistory() {
        let seed =
            UInt64(ProcessInfo.processInfo.environment["SETTEE_IDORDER_SEED"] ?? "")
            ?? UInt64.random(in: 1...UInt64.max)
        print("IDOrderTests seed \(seed) (replay with SETTEE_IDORDER_SEED=\(seed))")
        for round in 0..<3 {
            var rng = SplitMix64(seed: seed &+ UInt64(round))
            var order = IDOrder()
            var live = Set<String>()
            var installs = 0
            var refused = 0
            var rebuilds = 0
            /// A reader that copied the order and is merging it, outside the lock, while the history goes on.
            var reader: IDOrder.Snapshot?
            // Grow past a few merges, shrink past a rebuild, grow again (re-adding forgotten ids).
            let phases: [(steps: Int, addPercent: Int)] = [(6_000, 90), (9_000, 8), (3_000, 70)]
            for (phase, (steps, addPercent)) in phases.enumerated() {
                for step in 0..<steps {
                    let id = "d\(Int.random(in: 0..<8_000, using: &rng))"
                    if Int.random(in: 0..<100, using: &rng) < addPercent {
                        if live.insert(id).inserted { order.added(id) }
                    } else if live.remove(id) != nil {
                        let generation = order.generation
                        order.removed { live.contains($0) }
                        if order.generation != generation { rebuilds += 1 }
                    }
                    // Readers: one starts now and then (when enough is pending), and puts its merge in place a few
                    // steps later, after more additions (or a rebuild) came.
                    if let r = reader, Int.random(in: 0..<8, using: &rng) == 0 {
                        let pendingBefore = order.pending.count
                        if order.install(r.merge(), for: r) != nil {
                            installs += 1
                            #expect(order.pending.count == pendingBefore - r.pending.count)
                        } else {
                            refused += 1
                        }
                        reader = nil
                    } else if reader == nil, order.snapshot.wantsMerge || Int.random(in: 0..<50, using: &rng) == 0 {
                        reader = order.snapshot
                    }
                    #expect(order.stale <= max(IDOrder.mergeFloor, (order.sorted.count + order.pending.count) / 2))
                    guard step % 997 == 0 || step == steps - 1 else { continue }
                    let expected = live.sorted()
                    #expect(Self.walked(IDOrder.Walk(order.snapshot), live: live) == expected, "seed \(seed)")
                    #expect(zip(order.sorted, order.sorted.dropFirst()).allSatisfy { $0 < $1 }, "invariant 1")
                    let held = Set(order.sorted).union(order.pending)
                    #expect(live.isSubset(of: held), "invariant 2")
                    // A range, as `startkey`/`endkey` cut it (bounds that are ids and bounds that are not).
                    let from = "d\(Int.random(in: 0..<8_000, using: &rng))"
                    let through = from + "5"
                    let ranged = Self.walked(IDOrder.Walk(order.snapshot, from: from, through: through), live: live)
                    #expect(ranged == expected.filter { $0 >= from && $0 <= through }, "seed \(seed) phase \(phase)")
                    // A few at a time, as `AllDocsPager` takes a page.
                    var w = IDOrder.Walk(order.snapshot)
                    var paged: [String] = []
                    while !w.isEmpty { paged += w.next(37).filter { live.contains($0) } }
                    #expect(paged == expected)
                }
            }
            #expect(installs > 0, "a history that never merged proves little")
            #expect(rebuilds > 0, "a history that never rebuilt proves little")
            print("IDOrderTests round \(round): \(installs) merges installed, \(refused) refused, \(rebuilds) rebuilds")
        }
    }

    /// Proves a merge made from a snapshot that a rebuild overtook is refused and loses nothing, and that one made
    /// while ids kept arriving leaves those ids pending.
    @Test func aStaleMergeIsRefusedAndLateIdsStayPending() {
        var order = IDOrder()
        for n in 0..<10 { order.added("k\(n)") }
        let early = order.snapshot
        order.added("late")
        let installed = order.install(early.merge(), for: early) != nil
        #expect(installed)
        #expect(order.sorted == (0..<10).map { "k\($0)" }.sorted())
        #expect(order.pending == ["late"])
        // A second merge from the same (now old) snapshot is refused: the order moved on.
        let again = order.install(early.merge(), for: early) != nil
        #expect(!again)
        #expect(order.pending == ["late"])
        var live = Set(order.sorted + order.pending)
        let before = order.snapshot
        // Forget enough ids for a rebuild (more than the floor and half of those held).
        for n in 0..<(IDOrder.mergeFloor + 1) { order.added("x\(n)") }
        live.formUnion((0..<(IDOrder.mergeFloor + 1)).map { "x\($0)" })
        for n in 0..<(IDOrder.mergeFloor + 1) {
            live.remove("x\(n)")
            order.removed { live.contains($0) }
        }
        #expect(order.stale == 0 && order.pending.isEmpty, "the rebuild ran")
        let overtaken = order.install(before.merge(), for: before) != nil
        #expect(!overtaken)
        #expect(Self.walked(IDOrder.Walk(order.snapshot), live: live) == live.sorted())
    }

    /// Proves the walk of two runs holding the same ids (an id forgotten, still in `sorted`, and added again) hands
    /// each out once, and that a merge keeps one of each.
    @Test func repeatsBetweenTheRunsComeOnce() {
        let a: ArraySlice<String> = ["a", "c", "e", "g"]
        let b: ArraySlice<String> = ["b", "c", "g", "h"]
        var walk = IDOrder.Walk(a: a, b: b)
        #expect(walk.next(100) == ["a", "b", "c", "e", "g", "h"])
        #expect(walk.next() == nil)
        #expect(IDOrder.merged(a, b) == ["a", "b", "c", "e", "g", "h"])
        #expect(IDOrder.merged([], []) == [])
    }
}
