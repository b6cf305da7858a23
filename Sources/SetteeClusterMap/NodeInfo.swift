import SetteeCore

/// One data node as the cluster map and the admin API describe it.
public struct NodeInfo: Sendable, Codable, Equatable, Hashable {
    /// Couchbase's `otpNode`: the node's stable name.
    public var otpNode: NodeID
    /// Address clients use to reach the node (an IP literal in tests: hostnames trigger DNS-SRV in SDKs).
    public var host: String
    /// Admin REST port (Couchbase's 8091, `mgmt`).
    public var adminPort: Int
    /// Memcached-binary KV port (Couchbase's 11210, `kv`).
    public var kvPort: Int
    /// Views port (Couchbase's 8092, `capi`).
    public var viewsPort: Int
    /// 32 lowercase hex characters, fixed when the node's data directory is created.
    public var nodeUUID: String

    public init(otpNode: NodeID, host: String, adminPort: Int, kvPort: Int, viewsPort: Int, nodeUUID: String) {
        self.otpNode = otpNode
        self.host = host
        self.adminPort = adminPort
        self.kvPort = kvPort
        self.viewsPort = viewsPort
        self.nodeUUID = nodeUUID
    }

    /// `n_<kvPort>@host`-style default name when the caller has none.
    public init(host: String, adminPort: Int, kvPort: Int, viewsPort: Int, nodeUUID: String) {
        self.init(
            otpNode: NodeID("n_\(kvPort)@\(host)"), host: host, adminPort: adminPort, kvPort: kvPort,
            viewsPort: viewsPort, nodeUUID: nodeUUID)
    }

    /// The otpNode string.
    public var name: String { otpNode.rawValue }

    /// Whether clients may be handed the `$HOST` placeholder for this node's address (Couchbase does this
    /// when a node is bound to loopback only: the client substitutes the address it connected to).
    public var isLoopback: Bool {
        host == "127.0.0.1" || host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// `host:port`, bracketing IPv6 literals.
public func hostPort(_ host: String, _ port: Int) -> String {
    if host.contains(":") && !host.hasPrefix("[") { return "[\(host)]:\(port)" }
    return "\(host):\(port)"
}
