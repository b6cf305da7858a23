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

    /// Proves, over seeded histories of additions, removals and re-additions (seed printed, `SETTEE_IDORDER_SEED`
    /// replays), that after every step a walk gives exactly the live ids in order, once each, also cut by a range
    /// and taken a few at a time; that the pending ids stay within their bound (invariant 3) and forgotten ones never
    /// outnumber the live ones past the floor (invariant 4), and that both a merge and a rebuild happened.
    @Test func aWalkIsTheLiveIdsInOrderAfterAnyHistory() {
        let seed =
            UInt64(ProcessInfo.processInfo.environment["SETTEE_IDORDER_SEED"] ?? "")
            ?? UInt64.random(in: 1...UInt64.max)
        print("IDOrderTests seed \(seed) (replay with SETTEE_IDORDER_SEED=\(seed))")
        for round in 0..<3 {
            var rng = SplitMix64(seed: seed &+ UInt64(round))
            var order = IDOrder()
            var live = Set<String>()
            var merges = 0
            var rebuilds = 0
            // Grow past a few merges, shrink past a rebuild, grow again (re-adding forgotten ids).
            let phases: [(steps: Int, addPercent: Int)] = [(6_000, 90), (7_000, 15), (3_000, 70)]
            for (phase, (steps, addPercent)) in phases.enumerated() {
                for step in 0..<steps {
                    let id = "d\(Int.random(in: 0..<8_000, using: &rng))"
                    if Int.random(in: 0..<100, using: &rng) < addPercent {
                        guard live.insert(id).inserted else { continue }
                        let pendingBefore = order.pending.count
                        order.added(id)
                        if order.pending.count < pendingBefore { merges += 1 }
                    } else {
                        guard live.remove(id) != nil else { continue }
                        let staleBefore = order.stale
                        order.removed { live.contains($0) }
                        if order.stale < staleBefore { rebuilds += 1 }
                    }
                    #expect(order.pending.count <= max(IDOrder.mergeFloor, order.sorted.count / 8))
                    #expect(order.stale <= max(IDOrder.mergeFloor, (order.sorted.count + order.pending.count) / 2))
                    guard step % 997 == 0 || step == steps - 1 else { continue }
                    let expected = live.sorted()
                    #expect(Self.walked(IDOrder.Walk(order), live: live) == expected, "seed \(seed) round \(round)")
                    #expect(zip(order.sorted, order.sorted.dropFirst()).allSatisfy { $0 < $1 }, "invariant 1")
                    let held = Set(order.sorted).union(order.pending)
                    #expect(live.isSubset(of: held), "invariant 2")
                    // A range, as `startkey`/`endkey` cut it (bounds that are ids and bounds that are not).
                    let from = "d\(Int.random(in: 0..<8_000, using: &rng))"
                    let through = from + "5"
                    let ranged = Self.walked(IDOrder.Walk(order, from: from, through: through), live: live)
                    #expect(ranged == expected.filter { $0 >= from && $0 <= through }, "seed \(seed) phase \(phase)")
                    // A few at a time, as `AllDocsPager` takes a page.
                    var w = IDOrder.Walk(order)
                    var paged: [String] = []
                    while !w.isEmpty { paged += w.next(37).filter { live.contains($0) } }
                    #expect(paged == expected)
                }
            }
            #expect(merges > 0, "a history that never merged proves little")
            #expect(rebuilds > 0, "a history that never rebuilt proves little")
        }
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
