import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import Synchronization

/// Config changes other than failover (rebalance steps, hand-overs, adding, recovering and removing members) claim a
/// new epoch from a majority before they are committed, as a failover does (ADR 0034): the brain decides the claim
/// (`ClusterBrain+ChangeClaim.swift`), this file waits for its verdict and commits the change in the claimed epoch.
///
/// ```
///   claimedUpdate(edit) ──changeRequested(id)──▶ brain ──persistPromise, requestPromises──▶ POST /promise
///                       ◀──changeClaimed(id, e)──        (a strict majority persisted e for this node)
///   registry.updateCluster(epoch: e, edit)   only if this node still holds its promise of e and no config of e or
///                                            later arrived meanwhile (checked under the registry's lock)
/// ```
extension ClusterManager {
    /// Commits `edit` as a new config at a freshly claimed epoch (rev + 1), without publishing it: the caller
    /// pushes it (`publish`). Throws `ClusterRequestError` when the claim is refused or the claim went stale.
    @discardableResult
    func claimedUpdate(
        _ edit: @escaping @Sendable (inout [ClusterMember], inout [String: BucketPlacement]) throws -> Void
    ) async throws -> MapRevision {
        let epoch = try await claimChangeEpoch().get()
        let registry = self.registry
        let me = selfID
        return try await BlockingPool.run {
            try registry.updateCluster(epoch: epoch) { members, placements in
                // Under the registry's lock, so no promise or adoption slips in between this check and the commit.
                let stale = Self.staleClaim(
                    epoch: epoch, me: me, promise: registry.epochPromise, current: registry.clusterStamp)
                if let stale { throw ClusterRequestError.noQuorum(stale) }
                try edit(&members, &placements)
            }
        }
    }

    /// Moves the config into a new claimed epoch (no other edit) when this node holds a promise of its own above the
    /// config's epoch that no config uses: a claim it gave up on (its promises came late) was granted by voters that
    /// now refuse every config below it, so a change published at the current epoch without a claim (settings,
    /// buckets, users) would never reach them. Skipped while a claim is under way here. Called before each publish.
    func claimOutstandingEpoch() async {
        guard let p = registry.epochPromise, p.candidate == selfID, p.epoch > registry.clusterStamp.epoch,
            !brain.withLock({ $0.isClaiming })
        else { return }
        do {
            try await claimedUpdate { _, _ in }
        } catch {
            logger.warning(
                "could not move the config into a new epoch above an unused promise",
                metadata: ["promised": "\(p.epoch)", "error": "\(error)"])
        }
    }

    /// Why a claim of `epoch` may no longer be published in, or nil: this node promised a later epoch (or the same
    /// to another candidate) since, or adopted a config of that epoch or later.
    static func staleClaim(epoch: Int64, me: NodeID, promise: EpochPromise?, current: ConfigStamp) -> String? {
        if promise != EpochPromise(epoch: epoch, candidate: me) {
            return "No quorum: cluster epoch \(epoch) was claimed by this node, but it promised "
                + "\(promise.map { "epoch \($0.epoch) to \($0.candidate)" } ?? "nothing") since; retry."
        }
        if current.epoch >= epoch {
            return
                "No quorum: a config of epoch \(current.epoch) arrived while this node claimed epoch \(epoch); retry."
        }
        return nil
    }

    /// Asks the brain for a new epoch for a config change and waits for its verdict (bounded: the brain answers
    /// within a round, the margin covers a node whose tick loop is not running).
    func claimChangeEpoch() async -> Result<Int64, ClusterRequestError> {
        let id = changeIDs.withLock { n -> UInt64 in
            n &+= 1
            return n
        }
        return await withCheckedContinuation { (c: CheckedContinuation<Result<Int64, ClusterRequestError>, Never>) in
            changeWaiters.withLock { $0[id] = c }
            Task { await self.feedAndExecute(.changeRequested(id: id)) }
            let limit = Self.heartbeatCallTimeout + .seconds(3) + Self.changeClaimMargin
            Task {
                try? await Task.sleep(for: limit)
                self.resolveChange(id, .failure(.noQuorum("No quorum: the claim of a new cluster epoch timed out.")))
            }
        }
    }

    /// Wakes the change waiting for claim `id` (once: later answers are ignored).
    func resolveChange(_ id: UInt64, _ result: Result<Int64, ClusterRequestError>) {
        let waiter = changeWaiters.withLock { $0.removeValue(forKey: id) }
        waiter?.resume(returning: result)
    }

    /// What an operator or a rebalance is told when a change's claim was refused.
    static func changeError(_ why: ClusterBrain.Refusal) -> ClusterRequestError {
        switch why {
        case .noQuorum(let reason): return .noQuorum(reason)
        case .busy:
            return .noQuorum("A failover or another cluster change is claiming a cluster epoch; retry.")
        case .epochRefused(let epoch):
            return .noQuorum(
                "No quorum: a majority of the active members did not promise cluster epoch \(epoch) to this node "
                    + "(it may be cut off, or another node is changing the cluster); the change was not made.")
        default:
            return .noQuorum("The cluster change was refused: \(why).")
        }
    }
}
