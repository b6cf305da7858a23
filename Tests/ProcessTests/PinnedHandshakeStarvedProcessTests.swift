import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOSSL
import SetteeTLS
import SetteeTestSupport
import Testing

/// A node's pinned handshake with a peer (`CertificatePin.fetchChain`: `PinnedPeerTrust`'s first call to a peer, for
/// admin and views peer calls) with the calling process's threads busy (issue 16, ADR 0057): the certificate check
/// ran in a task of the cooperative pool and the probe connection was closed by the calling task, so with both busy
/// the peer's head deadline closed a connection left mid-handshake, and counted it as unanswered.
@Suite(.serialized, .onTestThreads) struct PinnedHandshakeStarvedProcessTests {
    /// The sum of `settee_http_closed_without_response_total{port="admin_tls",...}` on `node`'s `/metrics`.
    static func adminTLSCloses(_ node: ServerProcess) throws -> Double {
        let text = try node.http("GET", "/metrics").text
        return text.split(separator: "\n")
            .filter { $0.hasPrefix("settee_http_closed_without_response_total{port=\"admin_tls\"") }
            .compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
    }

    /// Proves a pinned handshake and its close need neither a cooperative-pool thread nor the caller's executor:
    /// every pool thread sleeps 3 s (`activeProcessorCount` detached tasks) and the calling task's executor is held
    /// 3 s right after it starts connecting, against a node whose head deadline is 1 s (`--http-idle-timeout 1`).
    /// The fetch returns the pinned leaf and the node counts no connection of its admin TLS port closed unanswered.
    /// Before, the check waited for a pool thread and the close for the caller: the node closed the connection at
    /// its deadline, mid-handshake (counted 1). A probe task started after the holders checks the pool was held.
    @Test func aPinnedHandshakeNeedsNoPoolThreadNorTheCaller() async throws {
        let (node, _, adminTLS) = try TLSProcessTests.tlsNode(name: "starved-pin", extra: ["--http-idle-timeout", "1"])
        defer { node.stopAndRemove() }
        let pin = try PeerTLSProcessTests.fingerprint(node)
        let before = try Self.adminTLSCloses(node)

        let width = ProcessInfo.processInfo.activeProcessorCount
        let holding = NIOLockedValueBox(0)
        for _ in 0..<width {
            Task.detached {
                holding.withLockedValue { $0 += 1 }
                usleep(3_000_000)
            }
        }
        let executor = OneQueueExecutor()
        let started = Date()
        let probeRan = NIOLockedValueBox<Date?>(nil)
        let call = Task(executorPreference: executor) { () async throws -> [NIOSSLCertificate] in
            // On the executor's queue, not the pool: wait until every pool thread is held, then probe it.
            while holding.withLockedValue({ $0 }) < width { usleep(1_000) }
            Task.detached { probeRan.withLockedValue { $0 = Date() } }
            return try await CertificatePin.fetchChain(
                host: "127.0.0.1", port: adminTLS, fingerprint: pin, timeout: .seconds(20))
        }
        // Queued behind the task's first job, which runs up to its first suspension (the connect).
        executor.queue.async { usleep(3_000_000) }
        let chain = try await call.value
        let leaf = try #require(chain.first)
        #expect(SelfSignedIdentity.fingerprint(ofDER: try leaf.toDERBytes()) == pin)
        let probe = try #require(probeRan.withLockedValue { $0 })
        #expect(probe.timeIntervalSince(started) >= 2.5, "the pool was not held: a task ran at once")
        // The node's deadline (1 s) has passed for any connection it kept; give its close a moment to be counted.
        try await Task.sleep(for: .seconds(2))
        #expect(try Self.adminTLSCloses(node) == before, "the node closed the pinned handshake unanswered")
    }
}
