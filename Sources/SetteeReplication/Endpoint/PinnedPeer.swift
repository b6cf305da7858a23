import NIOSSL
import SetteeCore
import SetteeTLS

/// A replication peer whose URL pins its certificate (`?cert=sha256:<hex>`, `SyncURLPin`), as a peer listener's sync
/// URL does: before each connection (BLIP, `WebSocketBLIPConnector`) or once per endpoint (REST, `RemoteEndpoint`)
/// the peer's certificate is fetched and accepted only with the pinned fingerprint, then trusted alone. Neither
/// HTTP client takes a pin itself, hence the fetch (`CertificatePin`).
enum PinnedPeer {
    /// The host of a `scheme://host[:port]/…` URL without credentials (an IPv6 address with its brackets).
    static func host(of url: String) -> String {
        guard let schemeEnd = afterScheme(url) else { return "" }
        let rest = url[schemeEnd...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        if authority.hasPrefix("[") { return String(authority.prefix { $0 != "]" }) + "]" }
        return String(authority.prefix { $0 != ":" })
    }

    /// The port of a `scheme://host[:port]/…` URL without credentials: the one written, else 443 (`wss`, `https`)
    /// or 80.
    static func port(of url: String) -> Int {
        let host = host(of: url)
        guard let schemeEnd = afterScheme(url) else { return 80 }
        let rest = url[schemeEnd...].dropFirst(host.count)
        let written = rest.hasPrefix(":") ? Int(rest.dropFirst().prefix { $0.isASCII && $0.isNumber }) : nil
        return written ?? (url.hasPrefix("wss://") || url.hasPrefix("https://") ? 443 : 80)
    }

    /// The TLS configuration for connections to the pinned peer at `url`: its certificate, fetched and accepted only
    /// with `fingerprint` (the handshake is aborted for another, so nothing is sent to an impostor), then the only
    /// trust root, without a hostname check (the pin is the identity). The fetch may take
    /// `ReplicationLimits.requestTimeoutMs`.
    /// - Throws: `ReplicationError.invalid` when the peer presents another certificate (not retried: a wrong pin
    ///   does not fix itself); `ReplicationError.network` when it cannot be reached or the handshake fails
    ///   (retried); `CancellationError` when cancelled.
    static func tlsConfiguration(url: String, fingerprint: String) async throws -> TLSConfiguration {
        var host = host(of: url)
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        do {
            let certificate = try await CertificatePin.fetch(
                host: host, port: port(of: url), fingerprint: fingerprint,
                timeout: .milliseconds(ReplicationLimits.requestTimeoutMs))
            return SelfSignedIdentity.clientConfiguration(trusting: certificate)
        } catch let mismatch as CertificatePin.Mismatch {
            throw ReplicationError.invalid(
                "TLS: \(url) presented a certificate that is not the pinned one (presented \(mismatch.presented), "
                    + "pinned \(fingerprint)); the sync URL's cert= must name the peer's certificate")
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw ReplicationError.network("TLS: fetching \(url)'s certificate to check its pin failed: \(error)")
        }
    }
}
