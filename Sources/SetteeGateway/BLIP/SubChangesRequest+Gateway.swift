import SetteeCore
import SetteeJSON
import SetteeReplication

extension SubChangesRequest.Bounds {
    /// The gateway's (`Limits.gatewayBLIP*`, Sync Gateway's batch minimum and default).
    static let gateway = SubChangesRequest.Bounds(
        defaultBatch: Limits.gatewayBLIPDefaultChangesBatch, minBatch: Limits.gatewayBLIPMinChangesBatch,
        maxBatch: Limits.gatewayBLIPMaxChangesBatch, maxChannels: Limits.maxChannelsPerGrant,
        maxDocIDs: Limits.gatewayBLIPMaxDocIDs, maxJSONValues: Limits.gatewayBLIPMaxJSONValues)
}

extension SubChangesRequest {
    /// `since` as a gateway sequence (`12`, `5:12`, …; zero when absent).
    /// - Throws: `GatewayError` 400 "Invalid subChanges parameters" when it is none.
    func changesSince() throws(GatewayError) -> ChangesSince {
        guard let since else { return .zero }
        guard let parsed = ChangesSince(since) else {
            throw .badRequest("Invalid subChanges parameters: since \(since)")
        }
        return parsed
    }

    /// The gateway's `_changes` query for this subscription from `since` on.
    func query(since: ChangesSince) -> ChangesQuery {
        ChangesQuery(since: since, activeOnly: activeOnly, channels: channels, docIDs: docIDs)
    }
}
