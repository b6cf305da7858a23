import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeTLS

/// Real TLS handshakes with an in-process listener whose leaf a test CA issued for 127.0.0.1, against a stale pin:
/// the trust every node-to-node HTTP call uses (`PinnedPeerTrust` with the cluster's CAs: admin peer calls, and the
/// views port's scatter and design-document forwarding since `NodeViews.peerTrust`), and the KV replication
/// context (`TLSClientContext`), whose CA check is bounded (`Limits.maxConcurrentCAChecks`).
@Suite struct PeerTrustThroughCAsTests {
    static let stalePin = "sha256:" + String(repeating: "ab", count: 32)

    /// A TLS listener on 127.0.0.1 presenting `chainPEM` (leaf, then CA) with `keyPEM`; it only handshakes.
    /// A TLS listener on 127.0.0.1 showing a leaf (for 127.0.0.1) from a fresh test CA, its port and the CA's PEM.
    static func caListener() async throws -> (server: any Channel, port: Int, caPEM: String) {
        let ca = try TestCertificateAuthority("cluster CA")
        let (chain, key) = try ca.leafFiles(["127.0.0.1"])
        let server = try await listener(chainPEM: chain, keyPEM: key)
        return (server, try #require(server.localAddress?.port), try ca.pem)
    }

    static func listener(chainPEM: String, keyPEM: String) async throws -> any Channel {
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(chainPEM.utf8)).map {
            NIOSSLCertificateSource.certificate($0)
        }
        let key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
        let context = try NIOSSLContext(
            configuration: .makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key)))
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    /// Proves a peer showing another leaf than its (stale) pin is trusted through the cluster's CAs when one of them
    /// issued that leaf for the address called (the configuration then trusts the CAs), and refused with
    /// `CertificatePin.Mismatch` by a trust without CAs (the views port's trust before it took the CAs) or with
    /// another CA only.
    @Test func aStalePinIsTrustedThroughTheCAsOnly() async throws {
        let (server, port, caPEM) = try await Self.caListener()
        let trust = PinnedPeerTrust(authorities: ClusterAuthorities { [caPEM] })
        let config = try await trust.configuration(
            host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        let caCertificate = try NIOSSLCertificate(bytes: Array(caPEM.utf8), format: .pem)
        #expect(config.trustRoots == .certificates([caCertificate]))
        #expect(config.certificateVerification == .fullVerification)
        // The CAs admitted the call; a second call uses the kept configuration, admitted by the CAs again.
        #expect(trust.counts.count(.ca) == 1 && trust.counts.count(.pin) == 0)
        _ = try await trust.configuration(
            host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        #expect(trust.counts.count(.ca) == 2 && trust.counts.count(.pin) == 0)

        await #expect(throws: CertificatePin.Mismatch.self) {
            _ = try await PinnedPeerTrust().configuration(
                host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        }
        let otherPEM = try TestCertificateAuthority("someone else's CA").pem
        await #expect(throws: CertificatePin.Mismatch.self) {
            _ = try await PinnedPeerTrust(authorities: ClusterAuthorities { [otherPEM] }).configuration(
                host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        }
        try await server.close()
    }

    /// Proves the counts tell which trust admitted a peer: the same listener (a CA-issued leaf, the CA in its chain)
    /// called with its own leaf's pin counts `pin` through a trust without CAs, and through a trust whose only CA
    /// is another one (the check is refused, then the pin admits), both for the first call and a kept one; with the
    /// issuing CA, the same pin counts `ca`, since the CAs are consulted first.
    @Test func countsTellTheCAsFromThePin() async throws {
        let ca = try TestCertificateAuthority("cluster CA")
        let (chainPEM, key) = try ca.leafFiles(["127.0.0.1"])
        let server = try await Self.listener(chainPEM: chainPEM, keyPEM: key)
        let port = try #require(server.localAddress?.port)
        let leaf = try #require(try NIOSSLCertificate.fromPEMBytes(Array(chainPEM.utf8)).first)
        let pin = SelfSignedIdentity.fingerprint(ofDER: try leaf.toDERBytes())
        let otherPEM = try TestCertificateAuthority("someone else's CA").pem
        for trust in [PinnedPeerTrust(), PinnedPeerTrust(authorities: ClusterAuthorities { [otherPEM] })] {
            for call in 1...2 {
                _ = try await trust.configuration(
                    host: "127.0.0.1", port: port, fingerprint: pin, timeout: .seconds(10))
                #expect(trust.counts.count(.pin) == call && trust.counts.count(.ca) == 0)
            }
        }
        let caPEM = try ca.pem
        let throughCA = PinnedPeerTrust(authorities: ClusterAuthorities { [caPEM] })
        _ = try await throughCA.configuration(host: "127.0.0.1", port: port, fingerprint: pin, timeout: .seconds(10))
        #expect(throughCA.counts.count(.ca) == 1 && throughCA.counts.count(.pin) == 0)
        try await server.close()
    }

    /// Completes when the client's TLS handshake does, fails on an error or a close before that.
    final class Handshake: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let done: EventLoopPromise<Void>
        init(done: EventLoopPromise<Void>) { self.done = done }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls { done.succeed(()) }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { done.fail(error) }
        func channelInactive(context: ChannelHandlerContext) { done.fail(ChannelError.alreadyClosed) }
    }

    /// Whether a KV-replication style client (`TLSClientContext` pinned to a stale pin, with `authorities`)
    /// completes its handshake with the listener on `port`.
    static func handshakes(port: Int, authorities: ClusterAuthorities?) async throws -> Bool {
        let context = try TLSTrust.pinned(fingerprint: stalePin).makeClientContext(authorities: authorities)
        let group = MultiThreadedEventLoopGroup.singleton
        let done = group.next().makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try context.makeHandler(host: "127.0.0.1"))
                    try channel.pipeline.syncOperations.addHandler(Handshake(done: done))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        do { try await done.futureResult.get() } catch { return false }
        return true
    }

    /// Proves the replication context accepts a stale-pinned peer the CAs vouch for, refuses it without CAs, and
    /// refuses it at once, starting no check, when every check slot is taken (the bound, `peerSlots`);
    /// no slot stays taken after the handshakes.
    @Test func theReplicationContextChecksThroughTheCAsWithinTheBound() async throws {
        let (server, port, caPEM) = try await Self.caListener()
        let authorities = ClusterAuthorities(maxConcurrentChecks: 1) { [caPEM] }
        #expect(try await Self.handshakes(port: port, authorities: authorities))
        #expect(try await !Self.handshakes(port: port, authorities: nil))
        #expect(authorities.peerSlots.take())
        #expect(try await !Self.handshakes(port: port, authorities: authorities))
        authorities.peerSlots.release()
        #expect(try await Self.handshakes(port: port, authorities: authorities))
        #expect(authorities.peerSlots.running == 0)
        try await server.close()
    }

    /// Proves this node's own CA checks (`CertificatePin.fetchChain(trustedBy:)`, used by the admin and views
    /// peer calls and `addNode`) are bounded apart from the peers' handshakes: with every peer slot taken the
    /// check still runs; with every own slot taken it is refused at once (`busyReason`), and `PinnedPeerTrust`
    /// does not remember the peer as outside the CAs, so the next call is trusted through them. Before, the check
    /// used the unbounded `verify` and ran whatever was running.
    @Test func ownChecksHaveTheirOwnBound() async throws {
        let (server, port, caPEM) = try await Self.caListener()
        let authorities = ClusterAuthorities(maxConcurrentChecks: 1, maxConcurrentOwnChecks: 1) { [caPEM] }
        #expect(authorities.peerSlots.take())
        let shown = try await CertificatePin.fetchChain(
            host: "127.0.0.1", port: port, trustedBy: authorities, timeout: .seconds(10))
        #expect(shown.count == 2)
        authorities.peerSlots.release()

        #expect(authorities.ownSlots.take())
        do {
            _ = try await CertificatePin.fetchChain(
                host: "127.0.0.1", port: port, trustedBy: authorities, timeout: .seconds(10))
            Issue.record("an own check beyond the bound ran")
        } catch let untrusted as ClusterAuthorities.Untrusted {
            #expect(untrusted.reason == ClusterAuthorities.busyReason)
        }
        let trust = PinnedPeerTrust(authorities: authorities)
        await #expect(throws: CertificatePin.Mismatch.self) {
            _ = try await trust.configuration(
                host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        }
        authorities.ownSlots.release()
        let config = try await trust.configuration(
            host: "127.0.0.1", port: port, fingerprint: Self.stalePin, timeout: .seconds(10))
        #expect(config.certificateVerification == .fullVerification)
        #expect(authorities.ownSlots.running == 0)
        #expect(authorities.peerSlots.running == 0)
        try await server.close()
    }
}
