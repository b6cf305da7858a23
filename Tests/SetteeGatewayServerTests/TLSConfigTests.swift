import SetteeGateway
import SetteeTLS
import Testing

/// The gateway config's TLS keys: Sync Gateway 1.x's certificate pair, and the TLS policy (ADR 0144).
@Suite struct TLSConfigTests {
    /// Proves `SSLCert`/`SSLKey` are read from the top level (the config parser refused them as unknown
    /// before), and that one without the other is refused, naming the missing half: serving plain HTTP when
    /// the operator asked for TLS would be a silent downgrade.
    @Test func sslCertAndKeyGoTogether() throws {
        let both = try GatewayConfig.parse(
            Array(#"{"SSLCert": "/etc/sg/cert.pem", "SSLKey": "/etc/sg/key.pem", "databases": {}}"#.utf8))
        #expect(both.sslCert == "/etc/sg/cert.pem" && both.sslKey == "/etc/sg/key.pem")
        let neither = try GatewayConfig.parse(Array(#"{"databases": {}}"#.utf8))
        #expect(neither.sslCert == nil && neither.sslKey == nil)
        #expect {
            _ = try GatewayConfig.parse(Array(#"{"SSLCert": "/etc/sg/cert.pem", "databases": {}}"#.utf8))
        } throws: { ($0 as? ConfigError)?.path == "SSLKey" }
        #expect {
            _ = try GatewayConfig.parse(Array(#"{"SSLKey": "/etc/sg/key.pem", "databases": {}}"#.utf8))
        } throws: { ($0 as? ConfigError)?.path == "SSLCert" }
    }

    /// Proves `tls_minimum_version` and `tls_cipher_suites` choose the listeners' TLS policy (ADR 0144): absent, the
    /// default (TLS 1.2 and later, the six ECDHE + AEAD suites); given, the version and the named suites; an unknown
    /// version or suite is refused naming its key, never served as the default.
    @Test func theTLSPolicyKeysChooseVersionAndSuites() throws {
        #expect(try GatewayConfig.parse(Array(#"{"databases": {}}"#.utf8)).tlsPolicy == .default)
        let suite = "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
        let text = #"{"tls_minimum_version": "tlsv1.3", "tls_cipher_suites": [""# + suite + #""], "databases": {}}"#
        let chosen = try GatewayConfig.parse(Array(text.utf8))
        #expect(
            chosen.tlsPolicy
                == TLSPolicy(minimumVersion: .tls13, cipherSuites: [suite]))
        #expect {
            _ = try GatewayConfig.parse(Array(#"{"tls_minimum_version": "tlsv1.0", "databases": {}}"#.utf8))
        } throws: { ($0 as? ConfigError)?.path == "tls_minimum_version" }
        #expect {
            _ = try GatewayConfig.parse(
                Array(#"{"tls_cipher_suites": ["TLS_NULL_WITH_NULL_NULL"], "databases": {}}"#.utf8))
        } throws: { ($0 as? ConfigError)?.path == "tls_cipher_suites" }
    }
}
