import Foundation
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeRegistry
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

/// ADR 0039 as ADR 0130 splits it: an operator's change of the cluster document commits in the epoch claimed for it,
/// published by the claimant, or not at all; whether a claim may still be used is the brain's decision
/// (`changeCommitting`), and the registry stores what it is handed.
@Suite(.onTestThreads) struct ClaimedConfigChangeTests {
    /// Proves, on a real registry behind its cluster manager: with this node's promise of epoch e a bucket create
    /// commits at (e, rev + 1) with this node as publisher; the same claim cannot be used for a second change (a user,
    /// auto-failover settings, a bucket delete, the secret, a bucket edit, a rename: each is refused `noQuorum` by the
    /// brain and nothing moves); a claim whose promise was overtaken by a promise to another node commits nothing and
    /// leaves no bucket directory behind; without a claim (a node alone) the change takes the current epoch as before;
    /// and the registry itself judges no claim: handed a used one directly, it stores the change in it.
    @Test func changeCommitsInItsClaimOnly() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        let me = registry.node.otpNode
        let start = registry.clusterStamp

        let e = start.epoch + 1
        // The brain grants itself `e` (its claim) and the store holds the promise it persisted.
        #expect(try cluster.promiseRequested(from: me, epoch: e, stamp: start))
        #expect(registry.epochPromise == EpochPromise(epoch: e, candidate: me))
        let claim = EpochClaim(epoch: e, claimant: me)
        try cluster.committed(in: claim) { try registry.createBucket(settings("claimed"), claim: $0) }
        let made = registry.clusterStamp
        #expect(made == ConfigStamp(epoch: e, rev: start.rev + 1, publisher: me))
        #expect(registry.bucketNames == ["claimed"])

        func isStale(_ claim: EpochClaim, _ body: (EpochClaim?) throws -> Void) -> Bool {
            do {
                try cluster.committed(in: claim, body)
                return false
            } catch ClusterRequestError.noQuorum(let why) {
                return why.contains("No quorum")
            } catch {
                return false
            }
        }
        #expect(isStale(claim) { try registry.deleteBucket(named: "claimed", claim: $0) })
        #expect(
            isStale(claim) {
                try registry.upsertUser(name: "u", fullName: "", password: "secret1", roles: [], claim: $0)
            }
        )
        #expect(isStale(claim) { try registry.updateAutoFailover(claim: $0) { $0.timeout = 17 } })
        #expect(isStale(claim) { try registry.rotateInternalSecret(claim: $0) })
        #expect(isStale(claim) { try registry.updateBucket(named: "claimed", flushEnabled: true, claim: $0) })
        #expect(isStale(claim) { try registry.updateClusterSettings(clusterName: "renamed", claim: $0) })
        #expect(registry.clusterStamp == made)
        #expect(registry.bucketNames == ["claimed"] && registry.localUser(named: "u") == nil)
        #expect(registry.autoFailover.timeout != 17)

        // A claim of e + 1 overtaken by a promise of e + 2 to another node.
        let other = NodeID("n_other@127.0.0.1")
        #expect(try cluster.promiseRequested(from: me, epoch: e + 1, stamp: registry.clusterStamp))
        #expect(try cluster.promiseRequested(from: other, epoch: e + 2, stamp: registry.clusterStamp))
        #expect(registry.epochPromise == EpochPromise(epoch: e + 2, candidate: other))
        #expect(
            isStale(EpochClaim(epoch: e + 1, claimant: me)) { try registry.createBucket(settings("late"), claim: $0) })
        #expect(registry.bucketNames == ["claimed"] && registry.clusterStamp == made)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path + "/buckets").filter {
            $0.contains("late")
        }
        #expect(leftovers.isEmpty, "\(leftovers)")

        // No claim: the current epoch, as for a node alone.
        try cluster.committed(in: nil) { try registry.updateAutoFailover(claim: $0) { $0.timeout = 17 } }
        #expect(registry.clusterStamp.epoch == e && registry.clusterStamp.rev == made.rev + 1)

        // The store judges nothing: a used claim handed to it directly is stored as given (the brain refused it above).
        try registry.updateAutoFailover(claim: claim) { $0.timeout = 18 }
        #expect(registry.clusterStamp == ConfigStamp(epoch: e, rev: made.rev + 2, publisher: me))
        await cluster.shutdown()
    }
}
