import SetteeBLIP
import Synchronization

/// The client as `BLIPSyncHandler`'s work sees it: every request sent through it, and every answer, is counted in the
/// handler's `BLIPSyncTraffic`; otherwise `base` unchanged.
struct BLIPCountingPeer: BLIPPeer {
    let base: any BLIPPeer
    let handler: BLIPSyncHandler

    func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        handler.state.withLock { $0.traffic.requestsOut += 1 }
        let answer = try await base.send(request)
        if answer != nil { handler.state.withLock { $0.traffic.answersIn += 1 } }
        return answer
    }
}
