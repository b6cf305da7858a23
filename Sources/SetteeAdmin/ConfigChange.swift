import Hummingbird
import SetteeClusterMap
import SetteeControl
import SetteeRegistry

/// An operator's change of the cluster document (a bucket created, edited or deleted, cluster settings, users, the
/// internal secret) is committed in an epoch claimed from a majority first, like every topology change (ADR 0039):
/// an orchestrator cut off from the majority refuses it with 503 and a JSON array naming why, and commits nothing.
extension AdminAPI {
    /// Runs `change` (a blocking registry call that takes a new config revision in the claim it is given) through
    /// `ClusterManager.claimedChange`; without a cluster manager it runs with no claim. Throws
    /// `ClusterRequestError` when the claim was refused (render it with `refusal`), else `change`'s errors.
    func configChange<T: Sendable>(_ change: @escaping @Sendable (EpochClaim?) throws -> T) async throws -> T {
        guard let cluster else { return try await BlockingPool.run { try change(nil) } }
        return try await cluster.claimedChange(change)
    }

    /// The answer to a change whose claim was refused: 503 with the reason (Couchbase answers cluster-state
    /// refusals with 503 and a JSON array of messages).
    static func refusal(_ error: ClusterRequestError) -> Response {
        ClusterRoutes.response(error)
    }
}
