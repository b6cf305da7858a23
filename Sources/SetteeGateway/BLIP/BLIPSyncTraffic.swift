/// The messages one `/_blipsync` connection's handler has carried, for its closing log line (Sync Gateway logs a
/// BLIP connection's message counts when it ends). Counted by `BLIPSyncHandler.handle` and `BLIPCountingPeer`.
public struct BLIPSyncTraffic: Sendable, Equatable {
    /// Requests the client sent (each handled once).
    public var requestsIn = 0
    /// Requests answered with a response.
    public var responsesOut = 0
    /// Requests answered with an error response.
    public var errorsOut = 0
    /// Requests the gateway sent the client (`changes`, `rev`, `norev`, `getAttachment`, `proveAttachment`).
    public var requestsOut = 0
    /// Answers the client gave to those (a `noReply` request has none).
    public var answersIn = 0

    /// Messages received: requests and answers.
    public var messagesIn: Int { requestsIn + answersIn }
    /// Messages sent: responses, error responses and requests.
    public var messagesOut: Int { responsesOut + errorsOut + requestsOut }
}
