import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// `EpochClaim.staleness`, the rule a claimed change passes under the registry's lock before it commits (ADR 0034,
/// ADR 0039): only while the claimant still holds its own promise of exactly that epoch and holds no config of it
/// or later.
@Suite struct EpochClaimTests {
    let me = NodeID("n_a@127.0.0.1")
    let other = NodeID("n_b@127.0.0.1")

    /// Proves the fresh claim passes, and each way it goes stale is refused with a reason: a later promise to
    /// anyone, the same epoch promised to another candidate (cannot happen after a grant, checked anyway), no
    /// promise at all, and a config of the claimed epoch (the claim already used: one change per claim) or later.
    @Test func freshClaimOnly() {
        let claim = EpochClaim(epoch: 7, claimant: me)
        let held = ConfigStamp(epoch: 6, rev: 40, publisher: other)
        #expect(claim.staleness(promise: EpochPromise(epoch: 7, candidate: me), current: held) == nil)

        let refused: [(EpochPromise?, ConfigStamp)] = [
            (EpochPromise(epoch: 8, candidate: other), held),
            (EpochPromise(epoch: 8, candidate: me), held),
            (EpochPromise(epoch: 7, candidate: other), held),
            (nil, held),
            (EpochPromise(epoch: 7, candidate: me), ConfigStamp(epoch: 7, rev: 41, publisher: me)),
            (EpochPromise(epoch: 7, candidate: me), ConfigStamp(epoch: 9, rev: 2, publisher: other)),
        ]
        for (promise, current) in refused {
            let why = claim.staleness(promise: promise, current: current)
            #expect(why?.hasPrefix("No quorum:") == true, "\(String(describing: promise)) \(current)")
        }
    }
}
