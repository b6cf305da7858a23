import SetteeCore
import Testing

@testable import SetteeTorture

private func w(_ p: Int, _ v: Int, _ a: UInt64, _ b: UInt64, _ o: TortureOutcome = .ok) -> TortureEntry {
    TortureEntry(process: p, operation: .write(key: "r", value: v), invokeNs: a, completeNs: b, outcome: o)
}
private func r(_ p: Int, _ v: Int?, _ a: UInt64, _ b: UInt64, _ o: TortureOutcome? = nil) -> TortureEntry {
    TortureEntry(process: p, operation: .read(key: "r"), invokeNs: a, completeNs: b, outcome: o ?? .ok(read: v))
}

/// The register checker accepts exactly the histories some sequential order explains.
@Suite struct RegisterCheckerTests {
    /// Sequential write then read of the same value is linearizable; reading a value never written is not.
    @Test func sequentialHistories() {
        #expect(RegisterChecker.check([w(0, 1, 0, 10), r(1, 1, 20, 30)])["r"] == .linearizable)
        #expect(RegisterChecker.check([w(0, 1, 0, 10), r(1, 2, 20, 30)])["r"] != .linearizable)
    }

    /// A read that overlaps a write may see either the old or the new value.
    @Test func concurrentReadSeesEither() {
        #expect(RegisterChecker.check([w(0, 1, 0, 10), w(0, 2, 20, 40), r(1, 1, 25, 30)])["r"] == .linearizable)
        #expect(RegisterChecker.check([w(0, 1, 0, 10), w(0, 2, 20, 40), r(1, 2, 25, 30)])["r"] == .linearizable)
    }

    /// A stale read after a completed write is the lost-update pattern the fault test looks for.
    @Test func staleReadAfterCompletedWriteIsCaught() {
        let h = [w(0, 1, 0, 10), w(0, 2, 20, 30), r(1, 1, 40, 50)]
        #expect(RegisterChecker.check(h)["r"] == .notLinearizable(key: "r", operations: 3))
    }

    /// Reads must not go back in time: once a later value was read, an older one cannot be read after it.
    @Test func readsDoNotGoBackwards() {
        let h = [w(0, 1, 0, 10), w(1, 2, 0, 100), r(2, 2, 20, 30), r(2, 1, 40, 50)]
        #expect(RegisterChecker.check(h)["r"] != .linearizable)
    }

    /// An unknown write may have happened (late) or not at all; a failed write never happened.
    @Test func infoAndFailWrites() {
        #expect(RegisterChecker.check([w(0, 5, 0, 10, .info), r(1, 5, 1000, 1010)])["r"] == .linearizable)
        #expect(RegisterChecker.check([w(0, 5, 0, 10, .info), r(1, nil, 1000, 1010)])["r"] == .linearizable)
        #expect(RegisterChecker.check([w(0, 5, 0, 10, .fail), r(1, 5, 1000, 1010)])["r"] != .linearizable)
        #expect(RegisterChecker.check([r(1, nil, 0, 5)], initial: nil)["r"] == .linearizable)
    }

    /// Random sequential histories (each op completes before the next starts) always check, and changing one
    /// read to a value never written always fails; the seed is printed so a failure replays.
    @Test func randomSequentialHistories() {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("RegisterCheckerTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        for _ in 0..<200 {
            var h: [TortureEntry] = []
            var value: Int? = nil
            var t: UInt64 = 0
            for _ in 0..<Int.random(in: 1...40, using: &rng) {
                if Bool.random(using: &rng) {
                    let v = Int.random(in: 0..<5, using: &rng)
                    h.append(w(0, v, t, t + 5))
                    value = v
                } else {
                    h.append(r(1, value, t, t + 5))
                }
                t += 10
            }
            #expect(RegisterChecker.check(h)["r"] ?? .linearizable == .linearizable, "seed \(seed)")
            h.append(r(1, 99, t, t + 5))
            #expect(RegisterChecker.check(h)["r"] != .linearizable, "seed \(seed)")
        }
    }

    /// Many overlapping operations on one key stay within the step budget or say `unknown`, never guess.
    @Test func budgetGivesUnknownNotAGuess() {
        var h: [TortureEntry] = []
        for i in 0..<40 { h.append(w(i, i, 0, 1_000)) }
        h.append(r(99, 12345, 2_000, 2_010))
        let v = RegisterChecker.check(h, maxSteps: 1_000)["r"]
        #expect(v == .unknown(key: "r") || v == .notLinearizable(key: "r", operations: 41))
    }
}

/// Lost writes, counters, availability and split brain are judged from the recorded facts only.
@Suite struct TortureChecksTests {
    @Test func lostInsertsCountsOnlyAcknowledged() {
        let h = [
            TortureEntry(process: 0, operation: .insert(key: "a"), invokeNs: 0, completeNs: 1, outcome: .ok),
            TortureEntry(process: 0, operation: .insert(key: "b"), invokeNs: 2, completeNs: 3, outcome: .ok),
            TortureEntry(process: 0, operation: .insert(key: "c"), invokeNs: 4, completeNs: 5, outcome: .info),
            TortureEntry(process: 0, operation: .insert(key: "d"), invokeNs: 6, completeNs: 7, outcome: .fail),
        ]
        let v = TortureChecks.lostInserts(h, present: ["a"])
        #expect(v.acknowledged == 2 && v.unknown == 1 && v.lost == ["b"])
        #expect(TortureChecks.lostInserts(h, present: ["a", "b"]).lost.isEmpty)
    }

    @Test func counterBounds() {
        let h = [
            TortureEntry(process: 0, operation: .add(key: "c", delta: 1), invokeNs: 0, completeNs: 1, outcome: .ok),
            TortureEntry(process: 0, operation: .add(key: "c", delta: 1), invokeNs: 2, completeNs: 3, outcome: .ok),
            TortureEntry(process: 0, operation: .add(key: "c", delta: 1), invokeNs: 4, completeNs: 5, outcome: .info),
            TortureEntry(process: 0, operation: .add(key: "c", delta: 1), invokeNs: 6, completeNs: 7, outcome: .fail),
        ]
        #expect(TortureChecks.counters(h, finals: ["c": 2]).first?.holds == true)
        #expect(TortureChecks.counters(h, finals: ["c": 3]).first?.holds == true)
        #expect(TortureChecks.counters(h, finals: ["c": 1]).first?.holds == false)
        #expect(TortureChecks.counters(h, finals: ["c": 4]).first?.holds == false)
        #expect(TortureChecks.counters(h, finals: [:]).first?.holds == false)
    }

    @Test func availabilityPerPhase() {
        let h = [
            TortureEntry(process: 0, operation: .insert(key: "a"), invokeNs: 5, completeNs: 6, outcome: .ok),
            TortureEntry(process: 0, operation: .insert(key: "b"), invokeNs: 15, completeNs: 16, outcome: .info),
            TortureEntry(process: 0, operation: .insert(key: "c"), invokeNs: 16, completeNs: 17, outcome: .ok),
        ]
        let a = TortureChecks.availability(
            h,
            phases: [TorturePhase(name: "steady", startNs: 0, endNs: 10), .init(name: "fault", startNs: 10, endNs: 20)])
        #expect(a.map(\.total) == [1, 2])
        #expect(a.map(\.ok) == [1, 1])
    }

    @Test func splitBrainNeedsTwoClaimsInOneRound() {
        let claims = [
            TortureChecks.ActiveClaim(node: "n0", atNs: 0, activeVBuckets: [1, 2]),
            .init(node: "n1", atNs: 5, activeVBuckets: [3]),
            .init(node: "n0", atNs: 100, activeVBuckets: [1]),
            .init(node: "n1", atNs: 103, activeVBuckets: [1, 2]),
        ]
        let found = TortureChecks.splitBrain(claims, roundNs: 10)
        #expect(found == [TortureChecks.SplitBrain(vbucket: 1, nodes: ["n0", "n1"], atNs: 100)])
    }

    @Test func schedulesReplayFromTheirSeed() {
        let a = FaultSchedule.make(
            kind: "partial-partition", nodes: 5, rounds: 4, settleMs: 1000, faultMs: 2000, seed: 7)
        #expect(
            a
                == FaultSchedule.make(
                    kind: "partial-partition", nodes: 5, rounds: 4, settleMs: 1000, faultMs: 2000, seed: 7))
        #expect(a?.count == 4)
        for f in a ?? [] {
            guard case .cutLink(let x, let y) = f.fault else {
                Issue.record("expected a cut link, got \(f.fault)")
                continue
            }
            #expect(x < y && y < 5)
        }
        #expect(FaultSchedule.make(kind: "nope", nodes: 3, rounds: 1, settleMs: 1, faultMs: 1, seed: 1) == nil)
    }

    /// The rebalance-under-a-flapping-link fault never flaps a link of the node leaving when two other nodes
    /// exist, and never "flaps" a node with itself; every kind the command line offers builds a schedule.
    @Test(arguments: [2, 3, 5])
    func rebalanceFlapPicksALinkBetweenTwoDifferentNodes(nodes: Int) {
        for seed in UInt64(0)..<200 {
            let s = FaultSchedule.make(
                kind: "rebalance-flap", nodes: nodes, rounds: 3, settleMs: 1, faultMs: 1, seed: seed)
            for f in s ?? [] {
                guard case .rebalanceOutWhileFlapping(let n, let a, let b) = f.fault else {
                    Issue.record("expected a rebalance fault, got \(f.fault)")
                    continue
                }
                #expect(a < b && b < nodes && n < nodes)
                if nodes >= 3 { #expect(a != n && b != n) }
            }
        }
        for kind in FaultSchedule.kinds {
            let s = FaultSchedule.make(kind: kind, nodes: 3, rounds: 2, settleMs: 1, faultMs: 1, seed: 3)
            #expect(s?.map(\.fault.kind) == [kind, kind])
        }
    }
}

/// What the nodes said about durable writes, read from their `/metrics` (ADR 0086) into the report.
@Suite struct NodeSyncWritesTests {
    /// The four counts of the run's bucket are read from Prometheus text, other buckets' and other families' lines
    /// ignored; a node without them (no such bucket, an older node) gives nil. The report shows them per node.
    @Test func countsAreReadFromMetricsAndReported() throws {
        let text = """
            # TYPE settee_bucket_sync_writes_total counter
            settee_bucket_sync_writes_total{bucket="torture",state="active",outcome="accepted"} 120
            settee_bucket_sync_writes_total{bucket="torture",state="active",outcome="committed"} 111
            settee_bucket_sync_writes_total{bucket="torture",state="active",outcome="aborted"} 7
            settee_bucket_sync_writes_total{bucket="torture",state="replica",outcome="accepted"} 98
            settee_bucket_sync_writes_total{bucket="other",state="active",outcome="aborted"} 50
            settee_bucket_items{bucket="torture"} 42.0
            """
        let counts = try #require(NodeSyncWrites.parse(node: "n1", metrics: text, bucket: "torture"))
        #expect(
            counts.accepted == 120 && counts.committed == 111 && counts.aborted == 7 && counts.replicaAccepted == 98)
        #expect(NodeSyncWrites.parse(node: "n1", metrics: text, bucket: "missing") == nil)

        let report = TortureReport(
            scenario: "kill", nodes: 3, replicas: 1, autoFailover: false, seed: 1, faults: [],
            lost: .init(acknowledged: 10, unknown: 2, lost: []), counters: [], registers: [:], availability: [],
            splitBrain: [], mapsConverged: true, notes: [], nodeSyncWrites: [counts])
        #expect(report.markdown.contains("| n1 | 120 | 111 | 7 | 98 |"), "\(report.markdown)")
        #expect(report.markdown.contains("the clients got 2 unknown insert outcome(s)"))
        #expect(report.passed)
    }
}
