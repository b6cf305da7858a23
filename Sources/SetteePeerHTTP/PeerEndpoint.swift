import SetteeClusterMap

/// Where and how a node reaches another node's HTTP API: over HTTPS pinned to the peer's certificate when the
/// peer has one, else plain HTTP.
///
/// A member's admin endpoint follows its entry in the cluster document (`admin(_:)`): a node that advertises an
/// admin TLS port and a certificate fingerprint is called there, pinned to that fingerprint, as DCP replication
/// connects to its KV TLS port (`ReplicationManager.replicationEndpoint`); the plain admin port only when it
/// advertises no TLS. A failed TLS call is never retried in clear (ADR 0030).
public struct PeerEndpoint: Equatable, Sendable {
    public var host: String
    public var port: Int
    /// The peer's certificate fingerprint (`sha256:<hex>`): calls go over HTTPS pinned to it. Nil: plain HTTP.
    public var tlsFingerprint: String?

    public init(host: String, port: Int, tlsFingerprint: String?) {
        self.host = host
        self.port = port
        self.tlsFingerprint = tlsFingerprint
    }

    /// A member's admin API, as its cluster-document entry describes it.
    public static func admin(_ node: NodeInfo) -> PeerEndpoint {
        if let port = node.adminTLSPort, let pin = node.tlsFingerprint {
            return PeerEndpoint(host: node.host, port: port, tlsFingerprint: pin)
        }
        return PeerEndpoint(host: node.host, port: node.adminPort, tlsFingerprint: nil)
    }

    /// A member's views port: its views TLS port pinned to its certificate when it advertises both, else the plain
    /// views port (ADR 0030, 0040).
    public static func views(_ node: NodeInfo) -> PeerEndpoint {
        if let port = node.viewsTLSPort, let pin = node.tlsFingerprint {
            return PeerEndpoint(host: node.host, port: port, tlsFingerprint: pin)
        }
        return PeerEndpoint(host: node.host, port: node.viewsPort, tlsFingerprint: nil)
    }

    public var usesTLS: Bool { tlsFingerprint != nil }

    /// `http(s)://host:port`, to which a request's path is appended.
    public var baseURL: String { (usesTLS ? "https://" : "http://") + hostPort(host, port) }
}
