import Foundation
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeRegistry
import SetteeTestSupport
import Testing

/// The registry's side of ADR 0039: an operator's change of the cluster document commits in the epoch claimed for
/// it, published by the claimant, or not at all.
@Suite struct ClaimedConfigChangeTests {
    /// Proves, on a real registry: with this node's promise of epoch e a bucket create commits at (e, rev + 1) with
    /// this node as publisher; the same claim cannot be used for a second change (a user, auto-failover settings,
    /// a bucket delete, the secret: each throws `.staleClaim` and nothing moves); a claim whose promise was
    /// overtaken by a promise to another node commits nothing and leaves no bucket directory behind; without a claim
    /// (a node alone) the change takes the current epoch as before.
    @Test func changeCommitsInItsClaimOnly() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let me = registry.node.otpNode
        let start = registry.clusterStamp

        let e = start.epoch + 1
        // The brain granted itself `e` (its claim); the store holds what the brain persisted.
        try registry.storePromise(EpochPromise(epoch: e, candidate: me))
        let claim = EpochClaim(epoch: e, claimant: me)
        try registry.createBucket(settings("claimed"), claim: claim)
        let made = registry.clusterStamp
        #expect(made == ConfigStamp(epoch: e, rev: start.rev + 1, publisher: me))
        #expect(registry.bucketNames == ["claimed"])

        func isStale(_ body: () throws -> Void) -> Bool {
            do {
                try body()
                return false
            } catch RegistryError.staleClaim {
                return true
            } catch {
                return false
            }
        }
        #expect(isStale { try registry.deleteBucket(named: "claimed", claim: claim) })
        #expect(
            isStale { try registry.upsertUser(name: "u", fullName: "", password: "secret1", roles: [], claim: claim) })
        #expect(isStale { try registry.updateAutoFailover(claim: claim) { $0.timeout = 17 } })
        #expect(isStale { try registry.rotateInternalSecret(claim: claim) })
        #expect(isStale { try registry.updateBucket(named: "claimed", flushEnabled: true, claim: claim) })
        #expect(isStale { try registry.updateClusterSettings(clusterName: "renamed", claim: claim) })
        #expect(registry.clusterStamp == made)
        #expect(registry.bucketNames == ["claimed"] && registry.localUser(named: "u") == nil)
        #expect(registry.autoFailover.timeout != 17)

        // A claim of e + 1 overtaken by a promise of e + 2 to another node.
        let other = NodeID("n_other@127.0.0.1")
        try registry.storePromise(EpochPromise(epoch: e + 1, candidate: me))
        try registry.storePromise(EpochPromise(epoch: e + 2, candidate: other))
        #expect(registry.epochPromise == EpochPromise(epoch: e + 2, candidate: other))
        #expect(isStale { try registry.createBucket(settings("late"), claim: EpochClaim(epoch: e + 1, claimant: me)) })
        #expect(registry.bucketNames == ["claimed"] && registry.clusterStamp == made)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path + "/buckets").filter {
            $0.contains("late")
        }
        #expect(leftovers.isEmpty, "\(leftovers)")

        // No claim: the current epoch, as for a node alone.
        try registry.updateAutoFailover { $0.timeout = 17 }
        #expect(registry.clusterStamp.epoch == e && registry.clusterStamp.rev == made.rev + 1)
    }
}
