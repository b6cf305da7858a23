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
    /// Whether something answers on `viewsPort`. Only then do configs advertise `capi`, `couchApiBase`
    /// and the `couchapi` capability: the Python SDK's `wait_until_ready` pings every advertised
    /// service and never becomes ready while a `capi` port refuses connections (seen with 4.6.3).
    public var servesViews: Bool
    /// KV TLS port (Couchbase's 11207, `kvSSL`); nil when the node serves no TLS.
    public var kvTLSPort: Int?
    /// Admin HTTPS port (Couchbase's 18091, `mgmtSSL`); nil when the node serves no TLS.
    public var adminTLSPort: Int?
    /// Views HTTPS port (Couchbase's 18092, `capiSSL`); nil when the node serves no TLS (ADR 0040).
    public var viewsTLSPort: Int?
    /// `sha256:<hex>` of the certificate the node presents on its TLS ports: peers pin it for
    /// node-to-node traffic, so a self-signed certificate needs no CA.
    public var tlsFingerprint: String?

    public init(
        otpNode: NodeID, host: String, adminPort: Int, kvPort: Int, viewsPort: Int, nodeUUID: String,
        servesViews: Bool = false
    ) {
        self.otpNode = otpNode
        self.host = host
        self.adminPort = adminPort
        self.kvPort = kvPort
        self.viewsPort = viewsPort
        self.nodeUUID = nodeUUID
        self.servesViews = servesViews
    }

    /// `n_<kvPort>@host`-style default name when the caller has none.
    public init(host: String, adminPort: Int, kvPort: Int, viewsPort: Int, nodeUUID: String, servesViews: Bool = false)
    {
        self.init(
            otpNode: NodeID("n_\(kvPort)@\(host)"), host: host, adminPort: adminPort, kvPort: kvPort,
            viewsPort: viewsPort, nodeUUID: nodeUUID, servesViews: servesViews)
    }

    private enum CodingKeys: String, CodingKey {
        case otpNode, host, adminPort, kvPort, viewsPort, nodeUUID, servesViews, kvTLSPort, adminTLSPort
        case viewsTLSPort, tlsFingerprint
    }

    /// Decodes, defaulting `servesViews` to false for documents written before it existed.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            otpNode: try c.decode(NodeID.self, forKey: .otpNode), host: try c.decode(String.self, forKey: .host),
            adminPort: try c.decode(Int.self, forKey: .adminPort), kvPort: try c.decode(Int.self, forKey: .kvPort),
            viewsPort: try c.decode(Int.self, forKey: .viewsPort),
            nodeUUID: try c.decode(String.self, forKey: .nodeUUID),
            servesViews: try c.decodeIfPresent(Bool.self, forKey: .servesViews) ?? false)
        kvTLSPort = try c.decodeIfPresent(Int.self, forKey: .kvTLSPort)
        adminTLSPort = try c.decodeIfPresent(Int.self, forKey: .adminTLSPort)
        viewsTLSPort = try c.decodeIfPresent(Int.self, forKey: .viewsTLSPort)
        tlsFingerprint = try c.decodeIfPresent(String.self, forKey: .tlsFingerprint)
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
