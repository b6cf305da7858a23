import SetteeGateway
import Testing

/// The gateway config's Sync Gateway 1.x TLS keys.
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
}
