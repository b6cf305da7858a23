import Crypto
import Foundation
import NIOConcurrencyHelpers
import SetteeCore
import SetteeTestSupport
import SwiftASN1
import Testing
import X509

@testable import SetteeTLS

/// The cluster-CA trust decisions (ADR 0047), with certificates made in the test: which CA certificates may be
/// loaded (`TrustedCA.parse`) and which peers they vouch for (`ClusterAuthorities.verify`, swift-certificates'
/// `Verifier`): a leaf of a trusted CA for the address it names, not another CA's leaf, not a leaf for another
/// address, not an expired one.
@Suite struct ClusterAuthoritiesTests {
    typealias TestCA = TestCertificateAuthority

    static func decide(_ leaf: Certificate, _ host: String, _ roots: [TestCA], at now: Date = Date()) async
        -> ClusterAuthorities.Decision
    {
        await ClusterAuthorities.verify(chain: [leaf], host: host, roots: roots.map(\.certificate), now: now)
    }

    /// Proves a leaf issued by a trusted CA is trusted at the IP address or DNS name its SANs carry, and so is a
    /// second, fresh leaf with another key from the same CA (a node restarted with new files: no pin involved).
    @Test func aLeafOfATrustedCAIsTrustedForItsNames() async throws {
        let ca = try TestCA("cluster CA")
        #expect(await Self.decide(try ca.leafCertificate(["127.0.0.1"]), "127.0.0.1", [ca]) == .trusted)
        #expect(await Self.decide(try ca.leafCertificate(["127.0.0.1"]), "127.0.0.1", [ca]) == .trusted)
        #expect(await Self.decide(try ca.leafCertificate(["node1.example.com"]), "node1.example.com", [ca]) == .trusted)
        // One of several trusted CAs is enough.
        let other = try TestCA("second CA")
        #expect(await Self.decide(try ca.leafCertificate(["127.0.0.1"]), "127.0.0.1", [other, ca]) == .trusted)
    }

    /// Proves a leaf is refused when its SANs do not name the address it is called at (another IP, another name),
    /// when another CA issued it, when no CA is trusted, and when it has expired or is not valid yet.
    @Test func otherAddressOtherCAOrExpiredIsRefused() async throws {
        let ca = try TestCA("cluster CA")
        let stranger = try TestCA("someone else's CA")
        let leaf = try ca.leafCertificate(["127.0.0.1"])
        #expect(await Self.decide(leaf, "127.0.0.2", [ca]) != .trusted)
        #expect(await Self.decide(leaf, "node1.example.com", [ca]) != .trusted)
        #expect(await Self.decide(try ca.leafCertificate(["node1.example.com"]), "node2.example.com", [ca]) != .trusted)
        #expect(await Self.decide(try stranger.leafCertificate(["127.0.0.1"]), "127.0.0.1", [ca]) != .trusted)
        #expect(await Self.decide(leaf, "127.0.0.1", []) == .refused("the cluster trusts no CA"))
        let old = try ca.leafCertificate(["127.0.0.1"], notBefore: Date().addingTimeInterval(-10 * 86_400), days: 2)
        #expect(await Self.decide(old, "127.0.0.1", [ca]) != .trusted)
        #expect(await Self.decide(leaf, "127.0.0.1", [ca], at: Date().addingTimeInterval(8 * 86_400)) != .trusted)
        #expect(await Self.decide(leaf, "127.0.0.1", [ca], at: Date().addingTimeInterval(-7200)) != .trusted)
        // A leaf signed by the stranger's key but naming the cluster CA as issuer does not pass either.
        if case .refused(let why) = await Self.decide(try stranger.leafCertificate(["127.0.0.1"]), "127.0.0.1", [ca]) {
            #expect(why.contains("127.0.0.1"))
        }
    }

    /// Proves what may be loaded as a trusted CA: a self-signed CA certificate valid now (several in one file);
    /// not a leaf without the CA constraint, not a CA-issued (non-root) certificate, not an expired or
    /// not-yet-valid CA, not text without a certificate, not a certificate over the PEM size bound.
    @Test func onlyValidSelfSignedCAsLoad() throws {
        let now = Date()
        let ca = try TestCA("root one")
        let two = try TestCA("root two")
        let loaded = try TrustedCA.parse(pemText: try ca.pem + "\n" + two.pem, now: now)
        #expect(loaded.map(\.certificate) == [ca.certificate, two.certificate])
        #expect(loaded[0].pem == (try ca.pem))
        #expect(throws: TrustedCA.Refusal.self) {
            try TrustedCA.parse(pemText: try TestCA("x", isCA: false).pem, now: now)
        }
        let leafPEM = try ca.leafCertificate(["127.0.0.1"]).serializeAsPEM().pemString
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: leafPEM, now: now) }
        let expired = try TestCA("old", notBefore: now.addingTimeInterval(-40 * 86_400), days: 30)
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: try expired.pem, now: now) }
        let future = try TestCA("future", notBefore: now.addingTimeInterval(86_400))
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: try future.pem, now: now) }
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: "hello", now: now) }
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: "", now: now) }
        let body = String(repeating: "QUFB", count: Limits.maxTrustedCAPEMBytes / 4 + 16)
        let huge = "-----BEGIN CERTIFICATE-----\n\(body)\n-----END CERTIFICATE-----\n"
        #expect(throws: TrustedCA.Refusal.self) { try TrustedCA.parse(pemText: huge, now: now) }
    }

    /// Proves `ClusterAuthorities` follows its source: no roots while the list is empty, the loaded CA's after it
    /// changes (a peer's document adopted), unparseable entries skipped, at most `Limits.maxTrustedCAs` used; and
    /// the chain of DER certificates a handshake shows is decided like the parsed one.
    @Test func rootsFollowTheClusterDocument() async throws {
        let ca = try TestCA("cluster CA")
        let list = NIOLockedValueBox<[String]>([])
        let authorities = ClusterAuthorities { list.withLockedValue { $0 } }
        #expect(authorities.roots() == nil)
        let pem = try ca.pem
        list.withLockedValue { $0 = ["garbage", pem] }
        #expect(authorities.roots()?.certificates == [ca.certificate])
        let leaf = try ca.leafCertificate(["127.0.0.1"])
        var serializer = DER.Serializer()
        try serializer.serialize(leaf)
        #expect(await authorities.verify(presented: [serializer.serializedBytes], host: "127.0.0.1") == .trusted)
        #expect(await authorities.verify(presented: [[1, 2, 3]], host: "127.0.0.1") != .trusted)
        let many = try (0..<(Limits.maxTrustedCAs + 3)).map { try TestCA("ca \($0)").pem }
        list.withLockedValue { $0 = many }
        #expect(authorities.roots()?.certificates.count == Limits.maxTrustedCAs)
        list.withLockedValue { $0 = [] }
        #expect(authorities.roots() == nil)
        #expect(await authorities.verify(presented: [serializer.serializedBytes], host: "127.0.0.1") != .trusted)
    }

    /// Proves the chain checks a peer's handshakes start are bounded (`Limits.maxConcurrentCAChecks`): with every
    /// slot taken a check is refused at once as `busy` without running (a valid leaf included), through both the
    /// async form and the callback form NIOSSL's verification uses (which then starts no task); a freed slot
    /// checks again; and many concurrent checks never hold more than the bound and leave no slot taken.
    @Test func checksBeyondTheBoundAreRefusedWithoutStarting() async throws {
        let ca = try TestCA("cluster CA")
        let pem = try ca.pem
        let authorities = ClusterAuthorities(maxConcurrentChecks: 2) { [pem] }
        #expect(ClusterAuthorities(source: { [] }).peerSlots.limit == Limits.maxConcurrentCAChecks)
        var serializer = DER.Serializer()
        try serializer.serialize(try ca.leafCertificate(["127.0.0.1"]))
        let der = [serializer.serializedBytes]
        #expect(authorities.peerSlots.take() && authorities.peerSlots.take())
        #expect(!authorities.peerSlots.take())
        #expect(authorities.peerSlots.running == 2)
        #expect(await authorities.verifyBounded(presented: der, host: "127.0.0.1") == ClusterAuthorities.busy)
        let answered = NIOLockedValueBox<ClusterAuthorities.Decision?>(nil)
        authorities.verifyBounded(presented: der, host: "127.0.0.1") { d in answered.withLockedValue { $0 = d } }
        // Answered synchronously: no task was started for it.
        #expect(answered.withLockedValue { $0 } == ClusterAuthorities.busy)
        #expect(authorities.peerSlots.running == 2)
        authorities.peerSlots.release()
        #expect(await authorities.verifyBounded(presented: der, host: "127.0.0.1") == .trusted)
        authorities.peerSlots.release()
        #expect(authorities.peerSlots.running == 0)

        let peak = NIOLockedValueBox<Int>(0)
        let decisions = await withTaskGroup(of: ClusterAuthorities.Decision.self) { group in
            for _ in 0..<40 {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        authorities.verifyBounded(presented: der, host: "127.0.0.1") { decision in
                            continuation.resume(returning: decision)
                        }
                        let now = authorities.peerSlots.running
                        peak.withLockedValue { $0 = max($0, now) }
                    }
                }
            }
            var all: [ClusterAuthorities.Decision] = []
            for await d in group { all.append(d) }
            return all
        }
        #expect(decisions.count == 40)
        #expect(decisions.allSatisfy { $0 == .trusted || $0 == ClusterAuthorities.busy })
        #expect(decisions.contains(.trusted))
        #expect(peak.withLockedValue { $0 } <= 2)
        #expect(authorities.peerSlots.running == 0)
    }

    /// Proves the IP-literal test used to pick an IP SAN or a DNS-name check.
    @Test(arguments: [
        ("127.0.0.1", true), ("10.1.2.3", true), ("::1", true), ("[fe80::1]", true), ("node1.example.com", false),
        ("localhost", false), ("1.2.3", false), ("", false), ("1.2.3.4.5", false),
    ])
    func ipLiterals(host: String, isIP: Bool) {
        #expect(IPLiteral.isIP(host) == isIP)
    }
}

extension TestCertificateAuthority {
    /// A leaf's certificate alone.
    func leafCertificate(
        _ names: [String], notBefore: Date = Date().addingTimeInterval(-3600), days: Double = 7
    ) throws -> Certificate {
        try leaf(names, notBefore: notBefore, days: days).certificate
    }
}
