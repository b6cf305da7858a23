import SetteeClusterMap
import SetteeCore
import Testing

@testable import SetteeAdmin

/// The pure parts of a bucket's cluster-wide `basicStats`: the ops rate window and the sum of peers' shares.
@Suite struct BucketTotalsTests {
    @Test func opsRateIsMutationsPerSecondOverTheRecentWindow() {
        // Proves: the first sample gives 0, later ones the rate since the oldest sample in the window, old
        // samples leave the window, and a total that went down (a flush) restarts instead of going negative.
        var w = OpsRateWindow()
        #expect(w.record(total: 100, at: 0) == 0)
        #expect(w.record(total: 300, at: 2) == 100)
        #expect(w.record(total: 500, at: 4) == 100)
        let window = Double(Limits.adminOpsRateWindowSeconds)
        // Long after: only the latest older sample is kept, so the rate is about the recent past.
        #expect(w.record(total: 500, at: 4 + 3 * window) == 0)
        #expect(w.record(total: 1500, at: 5 + 3 * window) == 1000)
        #expect(w.record(total: 10, at: 6 + 3 * window) == 0)
        #expect(w.record(total: 30, at: 8 + 3 * window) == 10)
        for i in 0..<1000 { _ = w.record(total: Int64(40 + i), at: 9 + 3 * window + Double(i) / 1000) }
        #expect(w.samples.count <= Limits.adminOpsRateSamples)
    }

    @Test func aSampleTakenMomentsAgoIsNotTheBaseline() {
        // Proves: when the writes outlast the window and a peer's poll sampled the node just before its own
        // stats call, the rate is taken since the older sample, not over the last few milliseconds (it was 0;
        // BucketTotalsProcessTests failed on a loaded machine with opsPerSec [22.99, 0.0]).
        var w = OpsRateWindow()
        let window = Double(Limits.adminOpsRateWindowSeconds)
        #expect(w.record(total: 0, at: 0) == 0)
        #expect(w.record(total: 300, at: 3 * window) == 300 / (3 * window))
        let rate = w.record(total: 300, at: 3 * window + 0.01)
        #expect(rate > 0 && abs(rate - 300 / (3 * window + 0.01)) < 1e-9, "\(rate)")
        // Once the peer's sample is old enough it is the baseline.
        #expect(w.record(total: 400, at: 3 * window + 1) == 100)
    }

    @Test func peerSharesAddUpAndNameTheMissing() {
        // Proves: peers' counts add to this node's, hostile values saturate or are ignored, and a node that did
        // not answer is named in `nodesNotCounted` and the status reason.
        var shares = PeerShares()
        shares.add(itemCount: 40, opsPerSec: 2.5)
        shares.add(itemCount: -7, opsPerSec: .nan)
        shares.missing = ["n_2@127.0.0.1"]
        let total = shares.total(BucketBasicStats(opsPerSec: 1, itemCount: 60))
        #expect(total.itemCount == 100 && total.opsPerSec == 3.5)
        #expect(total.nodesNotCounted == ["n_2@127.0.0.1"])
        #expect(total.statusReason?.contains("n_2@127.0.0.1") == true)
        var huge = PeerShares()
        huge.add(itemCount: Int.max, opsPerSec: 0)
        huge.add(itemCount: Int.max, opsPerSec: 0)
        #expect(huge.total(BucketBasicStats(itemCount: 5)).itemCount == Int.max)
    }
}
