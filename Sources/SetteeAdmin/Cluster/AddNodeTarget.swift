import SetteePeerHTTP
import SetteeTLS

/// Where `/controller/addNode` may send the cluster document (the internal secret, every user's password keys),
/// decided from the request alone before anything is sent (ADR 0030).
///
/// - `hostname=https://HOST[:PORT]` (port 18091 by default) with `tlsFingerprint=sha256:<hex>`: every call to the
///   target goes over a TLS connection pinned to that certificate, so a target presenting another certificate
///   gets no credentials and no document. HTTPS without a fingerprint is refused when the cluster trusts no CA:
///   there is nothing to verify the target against (no "trust anything" mode, as for clients in ADR 0024).
/// - `hostname=https://HOST[:PORT]` without a fingerprint when the cluster has trusted CAs (ADR 0047):
///   `viaAuthorities`; `ClusterManager.addNode` first verifies, in a handshake that sends nothing, that the CAs
///   vouch for the leaf the target shows at that address, then pins that leaf and goes on as above.
/// - `hostname=HOST[:PORT]` or `http://…` (port 8091): plain HTTP, allowed to a loopback address (127.0.0.0/8,
///   `localhost`, `::1`: the traffic stays on this machine, as `cluster/up` and the tests' clusters do), and to any
///   other host only with `allowInsecure=true`, the operator's explicit word that the network is trusted.
/// - A fingerprint with a plain address is refused rather than ignored.
struct AddNodeTarget: Equatable, Sendable {
    /// How the target's admin API is called.
    var endpoint: PeerEndpoint
    /// The address as the operator wrote it, for messages.
    var hostname: String
    /// HTTPS with no fingerprint given: the cluster's trusted CAs must vouch for the target's leaf at
    /// `endpoint.host` before anything is sent; `endpoint.tlsFingerprint` is nil until then (never called as is).
    var viaAuthorities = false

    /// Why a target was refused; `message` is the 400 reply's text.
    enum Refusal: Error, Equatable {
        case invalidHostname(String)
        case httpsNeedsFingerprint(String)
        case invalidFingerprint(String)
        case fingerprintNeedsHTTPS(String)
        case plainHTTPToRemoteHost(String)

        var message: String {
            switch self {
            case .invalidHostname(let h): return "Invalid hostname specified: \(h)"
            case .httpsNeedsFingerprint(let h):
                return "Adding \(h) over https needs tlsFingerprint=sha256:<hex>, the SHA-256 fingerprint of its "
                    + "certificate (settee-server logs it at start; openssl x509 -noout -fingerprint -sha256), or a "
                    + "trusted CA that issued it (POST /node/controller/loadTrustedCAs)."
            case .invalidFingerprint(let f):
                return "tlsFingerprint must be sha256: followed by 64 hex digits, not \(f)"
            case .fingerprintNeedsHTTPS(let h):
                return "tlsFingerprint needs an https:// hostname (the node's admin TLS port), not \(h)"
            case .plainHTTPToRemoteHost(let h):
                return "Refusing to send the cluster's secrets to \(h) over plain HTTP: use "
                    + "hostname=https://HOST:18091 with tlsFingerprint=sha256:<hex>, or pass allowInsecure=true "
                    + "if this network is trusted."
            }
        }
    }

    static let defaultHTTPSPort = 18091

    /// `clusterTrustsCAs`: the cluster document holds trusted CAs (ADR 0047), so HTTPS without a fingerprint is
    /// accepted as `viaAuthorities`.
    static func parse(
        hostname: String, tlsFingerprint: String?, allowInsecure: Bool, clusterTrustsCAs: Bool = false
    ) -> Result<AddNodeTarget, Refusal> {
        let lowered = hostname.lowercased()
        let https = lowered.hasPrefix("https://")
        var rest = hostname
        if https {
            rest.removeFirst("https://".count)
        } else if lowered.hasPrefix("http://") {
            rest.removeFirst("http://".count)
        }
        while rest.hasSuffix("/") { rest.removeLast() }
        if https, !hasPort(rest) { rest += ":\(defaultHTTPSPort)" }
        guard !rest.contains("/"), let (host, port) = ClusterManager.parseHostPort(rest), !host.isEmpty else {
            return .failure(.invalidHostname(hostname))
        }
        let fingerprint = tlsFingerprint.flatMap { $0.isEmpty ? nil : $0 }
        if https {
            guard let fingerprint else {
                guard clusterTrustsCAs else { return .failure(.httpsNeedsFingerprint(hostname)) }
                return .success(
                    AddNodeTarget(
                        endpoint: PeerEndpoint(host: host, port: port, tlsFingerprint: nil), hostname: hostname,
                        viaAuthorities: true))
            }
            guard case .pinned(let pin)? = try? TLSTrust.pin(fingerprint) else {
                return .failure(.invalidFingerprint(fingerprint))
            }
            return .success(
                AddNodeTarget(endpoint: PeerEndpoint(host: host, port: port, tlsFingerprint: pin), hostname: hostname))
        }
        if fingerprint != nil { return .failure(.fingerprintNeedsHTTPS(hostname)) }
        guard allowInsecure || isLoopback(host) else { return .failure(.plainHTTPToRemoteHost(hostname)) }
        return .success(
            AddNodeTarget(endpoint: PeerEndpoint(host: host, port: port, tlsFingerprint: nil), hostname: hostname))
    }

    /// Whether `host:port` text ends in a port (`[::1]` alone does not).
    static func hasPort(_ text: String) -> Bool {
        guard let colon = text.lastIndex(of: ":") else { return false }
        if let bracket = text.lastIndex(of: "]") { return bracket < colon }
        return true
    }

    /// A loopback address: `localhost`, 127.0.0.0/8 in dotted form, `::1` (bracketed or not).
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ $0.count <= 3 && UInt8($0) != nil }) else { return false }
        return parts[0] == "127"
    }
}
