/// Two `BLIPSession`s wired to each other in memory, for tests of anything that speaks BLIP (a replication handler,
/// a replicator, the codec itself): every frame one side writes is the other side's next inbound frame, through
/// the real codec (checksums, deflate, ACK flow control). Ending one side (`close`, a protocol error) ends the other
/// with `.closedByPeer`, as a WebSocket close would.
///
/// ```
/// let pair = BLIPSessionPair(client: replicatorHandler, server: gatewayHandler)
/// let running = Task { await pair.run() }
/// let answer = try await pair.client.send(BLIPMessage(properties: [("Profile", "getCheckpoint")]))
/// await pair.client.close()
/// let (clientEnd, serverEnd) = await running.value   // (.closedLocally(1000, ""), .closedByPeer)
/// ```
/// or `withBLIPSessionPair(client:server:) { pair in … }`, which runs and closes it around the body.
public struct BLIPSessionPair: Sendable {
    /// The side that would open the WebSocket.
    public let client: BLIPSession
    /// The side that would accept it.
    public let server: BLIPSession
    private let toServer: AsyncStream<[UInt8]>
    private let toServerInput: AsyncStream<[UInt8]>.Continuation
    private let toClient: AsyncStream<[UInt8]>
    private let toClientInput: AsyncStream<[UInt8]>.Continuation

    /// - Parameters:
    ///   - client, server: each side's request handler.
    ///   - configuration: both sides' connection configuration (tests shrink frames and windows with it).
    public init(
        client clientHandler: any BLIPRequestHandler, server serverHandler: any BLIPRequestHandler,
        configuration: BLIPConnection.Configuration = .init()
    ) {
        let (toServer, toServerInput) = AsyncStream<[UInt8]>.makeStream()
        let (toClient, toClientInput) = AsyncStream<[UInt8]>.makeStream()
        self.toServer = toServer
        self.toServerInput = toServerInput
        self.toClient = toClient
        self.toClientInput = toClientInput
        client = BLIPSession(handler: clientHandler, configuration: configuration) { frame in
            if case .terminated = toServerInput.yield(frame) { throw BLIPConnectionError.closed }
        }
        server = BLIPSession(handler: serverHandler, configuration: configuration) { frame in
            if case .terminated = toClientInput.yield(frame) { throw BLIPConnectionError.closed }
        }
    }

    /// Runs both sessions until both have ended; returns each side's end. Call once.
    public func run() async -> (client: BLIPSession.End, server: BLIPSession.End) {
        async let clientEnd = Self.run(client, inbound: toClient, outbound: toServerInput)
        async let serverEnd = Self.run(server, inbound: toServer, outbound: toClientInput)
        return await (clientEnd, serverEnd)
    }

    private static func run(
        _ session: BLIPSession, inbound: AsyncStream<[UInt8]>, outbound: AsyncStream<[UInt8]>.Continuation
    ) async -> BLIPSession.End {
        let end = await session.run(inbound: inbound)
        // The other side's inbound ends: its transport closed.
        outbound.finish()
        return end
    }
}

/// Runs a `BLIPSessionPair` around `body`: both sessions run while it does; afterwards the client closes (code
/// 1000) and both ends are awaited.
/// - Returns: what `body` returns.
public func withBLIPSessionPair<Result: Sendable>(
    client: any BLIPRequestHandler, server: any BLIPRequestHandler,
    configuration: BLIPConnection.Configuration = .init(),
    _ body: (BLIPSessionPair) async throws -> Result
) async throws -> Result {
    let pair = BLIPSessionPair(client: client, server: server, configuration: configuration)
    let running = Task { await pair.run() }
    do {
        let result = try await body(pair)
        await pair.client.close()
        _ = await running.value
        return result
    } catch {
        await pair.client.close()
        _ = await running.value
        throw error
    }
}
