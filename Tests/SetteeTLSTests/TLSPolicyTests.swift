import Testing

@testable import SetteeTLS

/// What the TLS ports offer (`TLSPolicy`, ADR 0144): by default TLS 1.3 and TLS 1.2 with ECDHE + AEAD suites only,
/// configurable as Couchbase's `tlsMinVersion` and `cipherSuites`: the settings' parsing.
@Suite struct TLSPolicyTests {
    /// Proves `tlsMinVersion` and `cipherSuites` are read as Couchbase names them: `tlsv1.3` keeps the default suites,
    /// a named list is taken as given (a weak one only when named on purpose), an empty list is the default, and
    /// unknown or older values are refused with the value named. (The handshakes themselves are checked against a
    /// real node with `openssl s_client` in `TLSProcessTests.theNodeOffersOnlyECDHEAEADAndTLS13`.)
    @Test func theSettingsChooseVersionAndSuites() throws {
        let only13 = try TLSPolicy.parse(minimumVersion: "tlsv1.3", cipherSuites: nil)
        #expect(only13.minimumVersion == .tls13 && only13.cipherSuites == TLSPolicy.defaultCipherSuites)
        let named = try TLSPolicy.parse(
            minimumVersion: nil, cipherSuites: ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"])
        #expect(named.cipherSuites == ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"] && named.minimumVersion == .tls12)
        #expect(throws: TLSSetupError.self) { try TLSPolicy.parse(minimumVersion: "tlsv1.1", cipherSuites: nil) }
        #expect(throws: TLSSetupError.self) { try TLSPolicy.parse(minimumVersion: nil, cipherSuites: ["RC4-MD5"]) }
        #expect(try TLSPolicy.parse(minimumVersion: nil, cipherSuites: []) == .default)
    }
}
