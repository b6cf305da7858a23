import SetteeBLIP

/// One open BLIP connection to a replication peer (`ws[s]://host/db/_blipsync`), as the transport hands it to the
/// replicator: the peer to send requests to, a close, and a wait for the end.
public protocol BLIPReplicationConnection: Sendable {
    var peer: any BLIPPeer { get }
    /// Closes the connection with a WebSocket close code (RFC 6455 §7.4.1: 1000 after a one-shot replication).
    func close(code: UInt16) async
    /// Returns once the connection has closed, by either side.
    func waitUntilClosed() async
}

/// Opens BLIP connections: a WebSocket client in production (`Sec-WebSocket-Protocol: BLIP_3+CBMobile_3,
/// BLIP_3+CBMobile_2`, credentials in the upgrade request), an in-memory pair in tests. `handler` answers the
/// requests the peer sends on the new connection.
/// - Throws: `ReplicationError` (`http` for a refused upgrade: 401 is not transient; `network` otherwise).
public protocol BLIPConnector: Sendable {
    func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection
}
