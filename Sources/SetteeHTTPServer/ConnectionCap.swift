import HummingbirdCore
import Logging

/// A port's connection cap that holds exactly: at most `maxConnections` connections are open at once, the rest wait
/// in the listen backlog until one closes (`Limits.maxAdminConnections`, `Limits.gatewayMaxPublicConnections`,
/// `Limits.liteListenerMaxConnections`, ...).
///
/// Hummingbird's `MaximumAvailableConnections` stops issuing reads on the listening socket once the count reaches
/// the cap, but one read accepts up to `acceptsPerRead` connections (SwiftNIO's `maxMessagesPerRead`, 4 by default on
/// a server channel), so a burst that arrives while the count is just under the cap took it up to three past it
/// (found by `ListenerLimitsTests` on a loaded machine: the 65th connection was answered at once). This delegate
/// stops reading while fewer than `acceptsPerRead` places are left, so no burst can pass the cap; between
/// `maxConnections - acceptsPerRead + 1` and `maxConnections` connections are served at once, depending on how
/// connections arrive.
public struct ConnectionCap: AvailableConnectionsDelegate {
    /// SwiftNIO's default `ChannelOptions.maxMessagesPerRead` for a listening socket (`BaseSocketChannel`), which
    /// Hummingbird does not change: the most connections one read accepts.
    public static let defaultAcceptsPerRead = 4

    /// The most connections open at once (≥ 1).
    public let maxConnections: Int
    /// The most connections one read of the listening socket accepts.
    public let acceptsPerRead: Int
    /// Connections open now (accepted and not yet closed).
    public private(set) var openConnections = 0
    let logger: Logger

    /// A cap of `maxConnections` (clamped to ≥ 1) on a port whose reads accept up to `acceptsPerRead` connections.
    public init(_ maxConnections: Int, acceptsPerRead: Int = defaultAcceptsPerRead, logger: Logger) {
        self.maxConnections = max(1, maxConnections)
        self.acceptsPerRead = max(1, acceptsPerRead)
        self.logger = logger
    }

    public mutating func connectionOpened() {
        openConnections += 1
        logger.trace("connection opened", metadata: ["connections": "\(openConnections)"])
    }

    public mutating func connectionClosed() {
        openConnections -= 1
        logger.trace("connection closed", metadata: ["connections": "\(openConnections)"])
    }

    /// Whether the next read may accept: only while a full read's worth of connections still fits under the cap.
    /// A cap below `acceptsPerRead` still accepts while none is open (else the port would never accept), so there
    /// one read can pass it; Settee's caps are all in the hundreds or more.
    public func isAcceptingNewConnections() -> Bool {
        openConnections == 0 || openConnections + acceptsPerRead <= maxConnections
    }
}
