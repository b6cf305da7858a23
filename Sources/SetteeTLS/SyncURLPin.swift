/// A sync URL's certificate pin: a peer listener's URL ends in `?cert=sha256:<64 hex>` (`PeerListener`'s `syncURL` and
/// `blipSyncURL`, printed and shown as a QR code), naming its self-signed certificate. The one parser of it: the
/// REST replicator's `settee-lite` CLI, the BLIP connector (`WebSocketBLIPConnector`, so `Replicator(db,
/// .push(to: "wss://…?cert=…"))` pins) and tests all split a URL here.
public struct SyncURLPin: Sendable, Equatable {
    /// The URL to dial: the input without its `cert` parameter (other query parameters kept in order; no `?` left
    /// when it was the only one). The pin is never sent to the server.
    public let url: String
    /// The pinned leaf certificate's fingerprint, normalized as `TLSTrust.pin` makes it (`sha256:<64 lowercase
    /// hex>`); nil when the URL has no `cert` parameter.
    public let fingerprint: String?

    /// Splits `syncURL` into the URL to dial and its pin. The value may be `sha256:<hex>`, bare hex or openssl's
    /// `AB:CD:…`, with the colons percent-encoded (`%3A`, as a URL encoder writes them) or not.
    /// - Throws: `TLSSetupError` for a `cert` value that is not a SHA-256 fingerprint, or a second `cert` parameter.
    public init(_ syncURL: String) throws(TLSSetupError) {
        guard let mark = syncURL.firstIndex(of: "?") else {
            url = syncURL
            fingerprint = nil
            return
        }
        let base = syncURL[..<mark]
        var kept: [Substring] = []
        var pin: String?
        for item in syncURL[syncURL.index(after: mark)...].split(separator: "&") {
            guard item.hasPrefix("cert=") else {
                kept.append(item)
                continue
            }
            guard pin == nil else { throw TLSSetupError("a sync URL names one certificate pin (cert=), not two") }
            let value = String(item.dropFirst(5)).replacing("%3A", with: ":").replacing("%3a", with: ":")
            do {
                guard case .pinned(let fingerprint) = try TLSTrust.pin(value) else {
                    throw TLSSetupError("not a pin: \(value)")
                }
                pin = fingerprint
            } catch let error as TLSSetupError {
                throw error
            } catch {
                throw TLSSetupError("\(error)")
            }
        }
        url = kept.isEmpty ? String(base) : base + "?" + kept.joined(separator: "&")
        fingerprint = pin
    }
}
