import NIOSSL

/// Which TLS versions and TLS 1.2 cipher suites a server port offers: Couchbase Server's `tlsMinVersion` and
/// `cipherSuites` security settings (ADR 0144).
///
/// The default offers TLS 1.3 (whose suites are all AEAD with ephemeral key exchange; BoringSSL does not let them
/// be chosen) and, for TLS 1.2 clients, only ECDHE key exchange with an AEAD cipher (AES-GCM, ChaCha20-Poly1305):
/// forward secrecy and no CBC. NIOSSL's own default also offered static-RSA key exchange (no forward secrecy) and
/// AES-CBC-SHA1 suites, which issue 72 found on the node's and the gateway's ports.
public struct TLSPolicy: Equatable, Sendable {
    /// `tlsMinVersion`: the oldest protocol version accepted.
    public enum MinimumVersion: String, CaseIterable, Equatable, Sendable {
        case tls12 = "tlsv1.2"
        case tls13 = "tlsv1.3"
    }

    public var minimumVersion: MinimumVersion
    /// `cipherSuites`: the TLS 1.2 suites offered, by IANA name (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), in
    /// preference order; never empty.
    public var cipherSuites: [String]

    /// TLS 1.2 and later; the six ECDHE + AEAD suites.
    public static let `default` = TLSPolicy(minimumVersion: .tls12, cipherSuites: defaultCipherSuites)

    /// The ECDHE + AEAD TLS 1.2 suites, ECDSA certificates' first (the self-signed identity's key is P-256).
    public static let defaultCipherSuites = [
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ]

    /// Every TLS 1.2 suite a policy may name: the ones BoringSSL implements. Weak ones (CBC, static RSA) can be
    /// named on purpose, for an old client, as Couchbase allows.
    static let known: [String: NIOTLSCipher] = [
        "TLS_RSA_WITH_AES_128_CBC_SHA": .TLS_RSA_WITH_AES_128_CBC_SHA,
        "TLS_RSA_WITH_AES_256_CBC_SHA": .TLS_RSA_WITH_AES_256_CBC_SHA,
        "TLS_RSA_WITH_AES_128_GCM_SHA256": .TLS_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_RSA_WITH_AES_256_GCM_SHA384": .TLS_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": .TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": .TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": .TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": .TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": .TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": .TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": .TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": .TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": .TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": .TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ]

    public init(minimumVersion: MinimumVersion, cipherSuites: [String]) {
        self.minimumVersion = minimumVersion
        self.cipherSuites = cipherSuites
    }

    /// A policy from the settings' text: `tlsMinVersion` (`tlsv1.2` or `tlsv1.3`; nil keeps the default) and
    /// `cipherSuites` (IANA names; nil or empty keeps the default). Throws `TLSSetupError` naming an unknown or
    /// refused value: TLS 1.0 and 1.1 are not offered at all (BoringSSL's TLS 1.2 floor here).
    public static func parse(minimumVersion: String?, cipherSuites: [String]?) throws -> TLSPolicy {
        var policy = TLSPolicy.default
        if let minimumVersion {
            guard let v = MinimumVersion(rawValue: minimumVersion.lowercased()) else {
                throw TLSSetupError(
                    "tlsMinVersion \(minimumVersion) is not one of \(MinimumVersion.allCases.map(\.rawValue))")
            }
            policy.minimumVersion = v
        }
        if let cipherSuites, !cipherSuites.isEmpty {
            for name in cipherSuites where known[name] == nil {
                throw TLSSetupError("cipher suite \(name) is not one this server implements")
            }
            policy.cipherSuites = cipherSuites
        }
        return policy
    }

    /// Sets `config`'s protocol floor and TLS 1.2 suites to this policy's.
    public func apply(to config: inout TLSConfiguration) {
        config.minimumTLSVersion = minimumVersion == .tls13 ? .tlsv13 : .tlsv12
        config.cipherSuiteValues = cipherSuites.compactMap { Self.known[$0] }
    }
}
