import Foundation
import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// Config changes other than failover claim an epoch from a majority before they are published (ADR 0034): the
/// brain's decision, without a network.
@Suite struct ClusterBrainChangeClaimTests {
    static let names = (0..<5).map { NodeID("ns_1@n\($0)") }

    static func config(epoch: Int64 = 1, rev: Int64 = 1, publisher: Int = 0, members: Int = 3)
        -> ClusterBrain.Config
    {
        let active = Array(names.prefix(members))
        return ClusterBrain.Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: names[publisher]), active: active,
            placements: ["b": .initial(numVBuckets: 8, numReplicas: 1, nodes: active)])
    }

    /// A brain of `me` that has heard from `heard` at 1 s (so it has a quorum when they are a majority).
    static func brain(_ me: Int, members: Int = 3, heard: [Int], config: ClusterBrain.Config? = nil) -> ClusterBrain {
        let c = config ?? Self.config(members: members)
        var b = ClusterBrain(
            me: names[me], config: c, promise: nil, timing: ClusterBrain.Timing(), autoFailover: false, now: .zero)
        for p in heard {
            _ = b.handle(
                .heartbeatAnswered(
                    from: names[p], sent: .seconds(1), stamp: c.stamp, promised: 0, sees: Set(names.prefix(members))),
                now: .seconds(1))
        }
        _ = b.handle(.tick, now: .seconds(1))
        return b
    }

    /// Proves a change claims `max(config epoch, promise) + 1`: the candidate persists its own promise before it
    /// asks the other active members, and the change is claimed once a strict majority promised, not before.
    @Test func changeIsClaimedOnceAMajorityPromised() {
        var b = Self.brain(0, heard: [1, 2])
        let out = b.handle(.changeRequested(id: 7), now: .seconds(2))
        #expect(
            out == [
                .persistPromise(EpochPromise(epoch: 2, candidate: Self.names[0])),
                .requestPromises(epoch: 2, stamp: b.config.stamp, from: [Self.names[1], Self.names[2]]),
            ])
        #expect(b.isClaimingChange)
        #expect(b.handle(.promiseAnswered(from: Self.names[1], epoch: 2, granted: false), now: .seconds(2)).isEmpty)
        let claimed = b.handle(.promiseAnswered(from: Self.names[2], epoch: 2, granted: true), now: .seconds(2))
        #expect(claimed == [.changeClaimed(id: 7, epoch: 2)])
        #expect(!b.isClaimingChange)
        // The next claim goes above the promise just made, though no config of epoch 2 was published yet.
        let next = b.handle(.changeRequested(id: 8), now: .seconds(3))
        #expect(next.first == .persistPromise(EpochPromise(epoch: 3, candidate: Self.names[0])), "\(next)")
    }

    /// Proves the brain, not the store, decides whether a claimed change may still be committed (`changeCommitting`,
    /// ADR 0039's rule on the brain's own promise and config, ADR 0130): a claim a majority just granted commits, and
    /// asking again changes nothing; once the config its change made is loaded, the same claim is stale (one change
    /// per claim); a later promise to another candidate makes it stale; a claim naming another node is stale here.
    @Test func aClaimedChangeCommitsOnlyWhileTheBrainStillHoldsItsClaim() {
        var b = Self.brain(0, heard: [1, 2])
        _ = b.handle(.changeRequested(id: 7), now: .seconds(2))
        #expect(
            b.handle(.promiseAnswered(from: Self.names[1], epoch: 2, granted: true), now: .seconds(2))
                == [.changeClaimed(id: 7, epoch: 2)])
        let claim = EpochClaim(epoch: 2, claimant: Self.names[0])
        #expect(b.handle(.changeCommitting(claim), now: .seconds(2)) == [.commitChange(claim)])
        #expect(b.handle(.changeCommitting(claim), now: .seconds(2)) == [.commitChange(claim)])
        #expect(b.promise == EpochPromise(epoch: 2, candidate: Self.names[0]))

        func isStale(_ out: [ClusterBrain.Directive], _ claim: EpochClaim, saying words: String) -> Bool {
            guard out.count == 1, case .changeStale(let c, let reason) = out[0], c == claim else { return false }
            return reason.contains(words)
        }
        let theirs = EpochClaim(epoch: 2, claimant: Self.names[1])
        #expect(isStale(b.handle(.changeCommitting(theirs), now: .seconds(2)), theirs, saying: "not a claim of"))

        var committed = b
        _ = committed.handle(
            .configLoaded(Self.config(epoch: 2, rev: 2, publisher: 0), promise: committed.promise), now: .seconds(3))
        #expect(
            isStale(
                committed.handle(.changeCommitting(claim), now: .seconds(3)), claim,
                saying: "a config of epoch 2 arrived"))

        var overtaken = b
        #expect(
            overtaken.handle(.promiseRequested(from: Self.names[1], epoch: 3, stamp: b.config.stamp), now: .seconds(3))
                .contains(.answerPromise(to: Self.names[1], epoch: 3, granted: true)))
        #expect(
            isStale(
                overtaken.handle(.changeCommitting(claim), now: .seconds(3)), claim, saying: "promised epoch 3 to"))
    }

    /// Proves an orchestrator cut off from the majority cannot claim: without quorum it is refused at once; with a
    /// stale view of quorum (the first seconds of a partition) the voters' silence refuses it after a round; and
    /// voters that promised a later epoch to another candidate refuse it as soon as a majority is out of reach.
    @Test func orchestratorWithoutMajorityCannotClaim() {
        var alone = Self.brain(0, heard: [])
        _ = alone.handle(.tick, now: .seconds(6))
        let refused = alone.handle(.changeRequested(id: 1), now: .seconds(6))
        #expect(refused.count == 1)
        if case .changeRefused(1, .noQuorum) = refused.first {} else { Issue.record("\(refused)") }
        #expect(alone.promise == nil, "no promise made without quorum")

        var stale = Self.brain(0, heard: [1, 2])
        _ = stale.handle(.changeRequested(id: 2), now: .seconds(2))
        #expect(stale.handle(.tick, now: .milliseconds(4900)).isEmpty)
        #expect(stale.handle(.tick, now: .seconds(5)) == [.changeRefused(id: 2, .epochRefused(2))])

        var outvoted = Self.brain(0, heard: [1, 2])
        _ = outvoted.handle(.changeRequested(id: 3), now: .seconds(2))
        #expect(
            outvoted.handle(.promiseAnswered(from: Self.names[1], epoch: 2, granted: false), now: .seconds(2)).isEmpty)
        #expect(
            outvoted.handle(.promiseAnswered(from: Self.names[2], epoch: 2, granted: false), now: .seconds(2))
                == [.changeRefused(id: 3, .epochRefused(2))])
        // A voter's own rule: epoch 2 promised to n1 is not granted to n0.
        let held = Self.config().stamp
        #expect(
            !EpochRules.grants(
                epoch: 2, candidate: Self.names[0], candidateStamp: held, current: held,
                promise: EpochPromise(epoch: 2, candidate: Self.names[1])))
    }

    /// Proves one claim at a time: a second change, or a failover, is refused as busy while a change claims; a
    /// change is refused while a failover runs; a failed-over member cannot claim; a single member claims at once.
    @Test func oneClaimAtATimeAndSingleMemberClaimsAtOnce() {
        var b = Self.brain(0, heard: [1, 2])
        _ = b.handle(.changeRequested(id: 1), now: .seconds(2))
        #expect(b.handle(.changeRequested(id: 2), now: .seconds(2)) == [.changeRefused(id: 2, .busy)])
        #expect(
            b.handle(.failoverRequested(Self.names[2], allowUnsafe: false, automatic: false), now: .seconds(2))
                == [.failoverRefused(Self.names[2], .busy)])

        var f = Self.brain(0, heard: [1, 2])
        _ = f.handle(.heartbeatFailed(from: Self.names[2], refused: true), now: .seconds(2))
        let failing = f.handle(
            .failoverRequested(Self.names[2], allowUnsafe: false, automatic: false), now: .seconds(2))
        #expect(failing.contains { if case .requestPromises = $0 { return true } else { return false } })
        #expect(f.handle(.changeRequested(id: 3), now: .seconds(2)) == [.changeRefused(id: 3, .busy)])

        // A member failed over has no vote: it is refused, though the others would promise it the epoch.
        var failed = Self.brain(
            2, heard: [0, 1],
            config: ClusterBrain.Config(
                stamp: ConfigStamp(epoch: 2, rev: 2, publisher: Self.names[0]), active: [Self.names[0], Self.names[1]],
                placements: [:]))
        let out = failed.handle(.changeRequested(id: 5), now: .seconds(2))
        if case .changeRefused(5, .noQuorum) = out.first {} else { Issue.record("\(out)") }

        var single = Self.brain(0, members: 1, heard: [])
        #expect(
            single.handle(.changeRequested(id: 4), now: .seconds(1)) == [
                .persistPromise(EpochPromise(epoch: 2, candidate: Self.names[0])), .changeClaimed(id: 4, epoch: 2),
            ])
    }

    /// Proves a member that adopts a claimed change of a later epoch keeps serving (no failover in it: the active
    /// it moves served nothing before), while a failover config of a later epoch is held until confirmed; and the
    /// publisher never holds its own change.
    @Test func onlyFailoverConfigsAreHeldUntilConfirmed() {
        let change = ClusterBrain.Config(
            stamp: ConfigStamp(epoch: 2, rev: 2, publisher: Self.names[0]), active: Array(Self.names.prefix(3)),
            placements: ["b": .initial(numVBuckets: 8, numReplicas: 1, nodes: Array(Self.names.prefix(3)))])
        var member = Self.brain(1, heard: [0, 2])
        #expect(member.fence == nil)
        #expect(member.handle(.configOffered(from: Self.names[0], change), now: .seconds(2)) == [.adopt(change)])
        #expect(member.handle(.tick, now: .seconds(2)).isEmpty)
        #expect(member.fence == nil)

        var failedOver = change
        failedOver.stamp = ConfigStamp(epoch: 3, rev: 3, publisher: Self.names[0])
        failedOver.active = [Self.names[0], Self.names[1]]
        var other = Self.brain(1, heard: [0, 2])
        let out = other.handle(.configOffered(from: Self.names[0], failedOver), now: .seconds(2))
        #expect(out.first.map { if case .fence = $0 { return true } else { return false } } == true, "\(out)")

        var publisher = Self.brain(0, heard: [1, 2])
        #expect(publisher.handle(.configLoaded(change, promise: nil), now: .seconds(2)).isEmpty)
        #expect(publisher.fence == nil)
    }

    /// Proves, over seeded random schedules, that competing candidates (3 or 5 members, each asking for changes at
    /// random times, promise requests and answers lost, delayed and reordered, links cut) never both claim one
    /// epoch, every claim is backed by a strict majority of persisted promises, and a candidate cut off from the
    /// majority claims nothing. Replay: `CHANGE_CLAIM_SEED=S`.
    @Test func competingCandidatesNeverShareAnEpoch() {
        let env = ProcessInfo.processInfo.environment
        let seeds: [UInt64] = env["CHANGE_CLAIM_SEED"].flatMap(UInt64.init).map { [$0] } ?? Array(1...300)
        var claims = 0
        for seed in seeds {
            var rng = SplitMix64(seed: seed)
            let n = Bool.random(using: &rng) ? 3 : 5
            let members = Array(Self.names.prefix(n))
            // A cut-off member (maybe none): it reaches nobody, though its view is still fresh.
            let isolated: Int? = Bool.random(using: &rng) ? Int.random(in: 0..<n, using: &rng) : nil
            var brains = (0..<n).map { i in Self.brain(i, members: n, heard: (0..<n).filter { $0 != i }) }
            var grantsFor: [String: Set<Int>] = [:]  // "epoch candidate" → voters that persisted it
            var claimedBy: [Int64: Int] = [:]
            // In-flight messages: (deliver at, to, event).
            var inFlight: [(at: Int, to: Int, event: ClusterBrain.Event)] = []
            var t = 2000
            var nextID: UInt64 = 0
            func apply(_ i: Int, _ out: [ClusterBrain.Directive], at now: Int) {
                for d in out {
                    switch d {
                    case .persistPromise(let p):
                        grantsFor["\(p.epoch) \(p.candidate)", default: []].insert(i)
                    case .requestPromises(let epoch, let stamp, let from):
                        for v in from {
                            guard let j = members.firstIndex(of: v), i != isolated, j != isolated,
                                Int.random(in: 0..<10, using: &rng) > 0
                            else { continue }
                            inFlight.append(
                                (
                                    now + Int.random(in: 1...4000, using: &rng), j,
                                    .promiseRequested(from: members[i], epoch: epoch, stamp: stamp)
                                ))
                        }
                    case .answerPromise(let to, let epoch, let granted):
                        guard let j = members.firstIndex(of: to), Int.random(in: 0..<10, using: &rng) > 0 else {
                            continue
                        }
                        inFlight.append(
                            (
                                now + Int.random(in: 1...2000, using: &rng), j,
                                .promiseAnswered(from: members[i], epoch: epoch, granted: granted)
                            ))
                    case .changeClaimed(_, let epoch):
                        claims += 1
                        if let other = claimedBy[epoch], other != i {
                            Issue.record("seed \(seed): epoch \(epoch) claimed by \(members[other]) and \(members[i])")
                        }
                        claimedBy[epoch] = i
                        let voters = grantsFor["\(epoch) \(members[i])"] ?? []
                        if !EpochRules.isMajority(Set(voters.map { members[$0] }), of: members) {
                            Issue.record("seed \(seed): \(members[i]) claimed \(epoch) with promises of \(voters)")
                        }
                        if i == isolated { Issue.record("seed \(seed): the cut-off \(members[i]) claimed \(epoch)") }
                    default:
                        break
                    }
                }
            }
            for _ in 0..<Int.random(in: 4...12, using: &rng) {
                t += Int.random(in: 0...1500, using: &rng)
                // Deliver what arrived by now, in time order.
                inFlight.sort { $0.at < $1.at }
                while let m = inFlight.first, m.at <= t {
                    inFlight.removeFirst()
                    apply(m.to, brains[m.to].handle(m.event, now: .milliseconds(m.at)), at: m.at)
                }
                for i in 0..<n { apply(i, brains[i].handle(.tick, now: .milliseconds(t)), at: t) }
                let via = Int.random(in: 0..<n, using: &rng)
                nextID += 1
                apply(via, brains[via].handle(.changeRequested(id: nextID), now: .milliseconds(t)), at: t)
            }
            inFlight.sort { $0.at < $1.at }
            for m in inFlight { apply(m.to, brains[m.to].handle(m.event, now: .milliseconds(m.at)), at: m.at) }
        }
        print("ChangeClaim simulation: \(seeds.count) schedules, \(claims) changes claimed")
        #expect(seeds.count == 1 || claims > 0)
    }
}
