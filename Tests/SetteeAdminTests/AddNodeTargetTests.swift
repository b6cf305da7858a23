import SetteeClusterMap
import SetteeCore
import SetteePeerHTTP
import Testing

@testable import SetteeAdmin

/// `/controller/addNode`'s decision of where (and whether) the cluster document may be sent, made before anything
/// is sent (ADR 0030), and the endpoint a member's admin calls use.
@Suite struct AddNodeTargetTests {
    static let pin = "sha256:" + String(repeating: "ab", count: 32)

    /// Proves the accepted forms: pinned HTTPS (default port 18091, fingerprint normalised from openssl's colon
    /// form), and plain HTTP to loopback addresses without a flag (how cluster/up, the tests and the SDK scripts
    /// add nodes) or to any host with `allowInsecure=true`.
    @Test(
        arguments: [
            ("https://10.0.0.5:18091", pin, false, PeerEndpoint(host: "10.0.0.5", port: 18091, tlsFingerprint: pin)),
            (
                "https://node2.example", pin, false,
                PeerEndpoint(host: "node2.example", port: 18091, tlsFingerprint: pin)
            ),
            (
                "HTTPS://127.0.0.1:19000/", String(repeating: "AB:", count: 31) + "AB", false,
                PeerEndpoint(host: "127.0.0.1", port: 19000, tlsFingerprint: pin)
            ),
            ("127.0.0.1:9001", nil, false, PeerEndpoint(host: "127.0.0.1", port: 9001, tlsFingerprint: nil)),
            ("http://localhost:9001", "", false, PeerEndpoint(host: "localhost", port: 9001, tlsFingerprint: nil)),
            ("127.3.4.5", nil, false, PeerEndpoint(host: "127.3.4.5", port: 8091, tlsFingerprint: nil)),
            ("[::1]:9001", nil, false, PeerEndpoint(host: "[::1]", port: 9001, tlsFingerprint: nil)),
            ("10.0.0.5:8091", nil, true, PeerEndpoint(host: "10.0.0.5", port: 8091, tlsFingerprint: nil)),
        ] as [(String, String?, Bool, PeerEndpoint)])
    func accepted(hostname: String, fingerprint: String?, insecure: Bool, expected: PeerEndpoint) throws {
        let target = try AddNodeTarget.parse(hostname: hostname, tlsFingerprint: fingerprint, allowInsecure: insecure)
            .get()
        #expect(target.endpoint == expected)
        #expect(target.hostname == hostname)
    }

    /// Proves the refusals: plain HTTP to a non-loopback host without `allowInsecure=true` (a lookalike such as
    /// 127.0.0.1.evil.example included), HTTPS without a fingerprint, a malformed fingerprint, a fingerprint with a
    /// plain address, and addresses that are not `host[:port]`.
    @Test func refused() {
        func refusal(_ hostname: String, _ fingerprint: String? = nil, insecure: Bool = false)
            -> AddNodeTarget.Refusal?
        {
            if case .failure(let r) = AddNodeTarget.parse(
                hostname: hostname, tlsFingerprint: fingerprint, allowInsecure: insecure)
            {
                return r
            }
            return nil
        }
        #expect(refusal("10.0.0.5:8091") == .plainHTTPToRemoteHost("10.0.0.5:8091"))
        #expect(refusal("http://node2.example:8091") == .plainHTTPToRemoteHost("http://node2.example:8091"))
        #expect(refusal("127.0.0.1.evil.example:8091") == .plainHTTPToRemoteHost("127.0.0.1.evil.example:8091"))
        #expect(refusal("https://10.0.0.5:18091") == .httpsNeedsFingerprint("https://10.0.0.5:18091"))
        #expect(refusal("https://10.0.0.5:18091", "") == .httpsNeedsFingerprint("https://10.0.0.5:18091"))
        #expect(refusal("https://10.0.0.5:18091", "sha256:1234") == .invalidFingerprint("sha256:1234"))
        #expect(refusal("127.0.0.1:9001", Self.pin) == .fingerprintNeedsHTTPS("127.0.0.1:9001"))
        #expect(refusal("127.0.0.1:0") == .invalidHostname("127.0.0.1:0"))
        #expect(refusal("127.0.0.1:x") == .invalidHostname("127.0.0.1:x"))
        #expect(refusal("https://") == .invalidHostname("https://"))
        #expect(refusal("127.0.0.1:9001/evil") == .invalidHostname("127.0.0.1:9001/evil"))
        // The message tells the operator both ways forward.
        let message = AddNodeTarget.Refusal.plainHTTPToRemoteHost("10.0.0.5:8091").message
        #expect(message.contains("tlsFingerprint") && message.contains("allowInsecure=true"))
    }

    /// Proves HTTPS without a fingerprint is taken on the strength of the cluster's trusted CAs (ADR 0047) only when
    /// it has some: marked `viaAuthorities` (checked against the CAs, then pinned, before anything is sent); a given
    /// fingerprint still pins; plain HTTP's rules are unchanged; without CAs the refusal names both ways forward.
    @Test func httpsWithoutAFingerprintNeedsTrustedCAs() throws {
        let target = try AddNodeTarget.parse(
            hostname: "https://10.0.0.5", tlsFingerprint: nil, allowInsecure: false, clusterTrustsCAs: true
        ).get()
        #expect(target.viaAuthorities)
        #expect(target.endpoint == PeerEndpoint(host: "10.0.0.5", port: 18091, tlsFingerprint: nil))
        let pinned = try AddNodeTarget.parse(
            hostname: "https://10.0.0.5", tlsFingerprint: Self.pin, allowInsecure: false, clusterTrustsCAs: true
        ).get()
        #expect(!pinned.viaAuthorities && pinned.endpoint.tlsFingerprint == Self.pin)
        let empty = try AddNodeTarget.parse(
            hostname: "https://10.0.0.5:19000", tlsFingerprint: "", allowInsecure: false, clusterTrustsCAs: true
        ).get()
        #expect(empty.viaAuthorities && empty.endpoint.port == 19000)
        let plain = AddNodeTarget.parse(
            hostname: "10.0.0.5:8091", tlsFingerprint: nil, allowInsecure: false, clusterTrustsCAs: true)
        #expect(plain == .failure(.plainHTTPToRemoteHost("10.0.0.5:8091")))
        let noCA = AddNodeTarget.parse(hostname: "https://10.0.0.5", tlsFingerprint: nil, allowInsecure: false)
        #expect(noCA == .failure(.httpsNeedsFingerprint("https://10.0.0.5")))
        let message = AddNodeTarget.Refusal.httpsNeedsFingerprint("https://10.0.0.5").message
        #expect(message.contains("tlsFingerprint") && message.contains("loadTrustedCAs"))
    }

    /// Proves a member's admin calls use its admin TLS port pinned to its fingerprint when its cluster-document
    /// entry has both, and the plain admin port otherwise (never TLS without a pin).
    @Test func memberEndpointFollowsTheClusterDocument() {
        var node = NodeInfo(
            otpNode: NodeID("n_9000@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 11210, viewsPort: 9002,
            nodeUUID: "u")
        #expect(PeerEndpoint.admin(node) == PeerEndpoint(host: "127.0.0.1", port: 9000, tlsFingerprint: nil))
        #expect(PeerEndpoint.admin(node).baseURL == "http://127.0.0.1:9000")
        node.adminTLSPort = 19000
        #expect(PeerEndpoint.admin(node).tlsFingerprint == nil)
        node.tlsFingerprint = Self.pin
        #expect(PeerEndpoint.admin(node) == PeerEndpoint(host: "127.0.0.1", port: 19000, tlsFingerprint: Self.pin))
        #expect(PeerEndpoint.admin(node).baseURL == "https://127.0.0.1:19000")
    }
}
