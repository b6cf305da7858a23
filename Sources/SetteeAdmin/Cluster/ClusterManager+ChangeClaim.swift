import Foundation
import Logging
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeRegistry
import Synchronization

/// Config changes other than failover (rebalance steps, hand-overs, adding, recovering and removing members, and
/// since ADR 0039 buckets, settings, users and the internal secret) claim a new epoch from a majority before they
/// are committed, as a failover does (ADR 0034): the brain decides the claim
/// (`ClusterBrain+ChangeClaim.swift`), this file waits for its verdict and commits the change in the claimed epoch.
///
/// ```
///   claimedUpdate(edit) ──changeRequested(id)──▶ brain ──persistPromise, requestPromises──▶ POST /promise
///                       ◀──changeClaimed(id, e)──        (a strict majority persisted e for this node)
///   committed(in: claim) ──changeCommitting(claim)──▶ brain ──commitChange──▶ registry.updateCluster(epoch: e, edit)
///                                                          └──changeStale──▶ 503, nothing stored
///   (storeOrder held across both: only if this node still holds its promise of e and no config of e or later
///    arrived meanwhile, decided by the brain on what the store holds)
/// ```
extension ClusterManager {
    /// Commits `edit` as a new config at a freshly claimed epoch (rev + 1), without publishing it: the caller
    /// pushes it (`publish`). Throws `ClusterRequestError` when the claim is refused or the claim went stale.
    @discardableResult
    func claimedUpdate(
        _ edit: @escaping @Sendable (inout [ClusterMember], inout [String: BucketPlacement]) throws -> Void
    ) async throws -> MapRevision {
        let epoch: Int64
        switch await claimChangeEpoch() {
        case .success(let e): epoch = e
        case .failure(let why): throw Self.changeError(why)
        }
        let registry = self.registry
        let claim = EpochClaim(epoch: epoch, claimant: selfID)
        return try await BlockingPool.run {
            try self.committed(in: claim) { _ in try registry.updateCluster(epoch: epoch, edit) }
        }
    }

    /// Runs `change`, a registry write of the cluster document in `claim` (nil: a node alone, at the current epoch),
    /// in the store's order (`stored`), once the brain said the claim may still be used: `changeCommitting` answered
    /// `commitChange` (ADR 0039's rule, `EpochClaim.staleness`, on the brain's promise and config, which under
    /// `storeOrder` are what the store holds). Throws `ClusterRequestError.noQuorum` with the brain's reason on
    /// `changeStale`, before `change` runs: nothing of it is stored. Blocking.
    func committed<T: Sendable>(in claim: EpochClaim?, _ change: (EpochClaim?) throws -> T) throws -> T {
        try stored {
            if let claim {
                let out = feed(.changeCommitting(claim))
                guard out.contains(.commitChange(claim)) else {
                    let why = out.lazy.compactMap { d -> String? in
                        if case .changeStale(_, let reason) = d { return reason }
                        return nil
                    }.first
                    throw ClusterRequestError.noQuorum(why ?? "No quorum: \(claim) may no longer be used; retry.")
                }
            }
            return try change(claim)
        }
    }

    /// Runs an operator's change of the cluster document (buckets, bucket and cluster settings, users, the internal
    /// secret: a registry call that takes a new config revision) in an epoch claimed from a majority first
    /// (ADR 0039). `change` commits in the claim it is given, once the brain confirmed it (`committed(in:)`); it gets nil when this node is the only active member (nobody else can publish). A claim that finds
    /// another under way (a failover, a rebalance step, a concurrent change) is retried for
    /// `changeClaimBusyWait`. Throws `ClusterRequestError.noQuorum` (503) when refused or gone stale: then nothing
    /// of the change was committed. The caller publishes.
    func claimedChange<T: Sendable>(_ change: @escaping @Sendable (EpochClaim?) throws -> T) async throws -> T {
        let actives = registry.clusterSnapshot.members.filter { $0.membership == .active }
        if actives.count <= 1, actives.allSatisfy({ $0.id == selfID }) {
            return try await BlockingPool.run { try self.committed(in: nil, change) }
        }
        let deadline = ContinuousClock.now + Self.changeClaimBusyWait
        var outcome = await claimChangeEpoch()
        while case .failure(.busy) = outcome, ContinuousClock.now < deadline {
            try? await Task.sleep(for: Self.changeClaimBusyRetry)
            outcome = await claimChangeEpoch()
        }
        let claim: EpochClaim
        switch outcome {
        case .success(let epoch): claim = EpochClaim(epoch: epoch, claimant: selfID)
        case .failure(let why):
            logger.warning("operator's cluster change refused", metadata: ["reason": "\(why)"])
            throw Self.changeError(why)
        }
        return try await BlockingPool.run { try self.committed(in: claim, change) }
    }

    /// Moves the config into a new claimed epoch (no other edit) when this node holds a promise of its own above the
    /// config's epoch that no config uses: a claim it gave up on (its promises came late) was granted by voters that
    /// now refuse every config below it, so a change published at the current epoch without a claim (a certificate
    /// pin, the auto-failover count: ADR 0039) would never reach them. Skipped while a claim is under way here. Called before each publish.
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

    /// Asks the brain for a new epoch for a config change and waits for its verdict (bounded: the brain answers
    /// within a round, the margin covers a node whose tick loop is not running).
    func claimChangeEpoch() async -> Result<Int64, ClusterBrain.Refusal> {
        let id = changeIDs.withLock { n -> UInt64 in
            n &+= 1
            return n
        }
        return await withCheckedContinuation { (c: CheckedContinuation<Result<Int64, ClusterBrain.Refusal>, Never>) in
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
    func resolveChange(_ id: UInt64, _ result: Result<Int64, ClusterBrain.Refusal>) {
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
        case .limitReached(let why):
            return .internalError("The cluster change was refused: \(why).")
        default:
            return .noQuorum("The cluster change was refused: \(why).")
        }
    }
}
