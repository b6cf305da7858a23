import Foundation
import SetteeGateway
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `_ensure_full_commit` on a cluster bucket waits for the active copies to persist the gateway's acknowledged
/// writes (ADR 0039), on a real node.
@Suite("Gateway full commit on a cluster bucket (real node)", .serialized)
struct GatewayFullCommitProcessTests {
    /// Proves: after 40 acknowledged writes, with the node paused (SIGSTOP) the barrier does not pretend: it fails
    /// as temporary after its bound (it used to return at once, waiting for nothing); resumed, the same barrier (the
    /// marks were kept) passes; with nothing written since, the next one returns at once.
    @Test func barrierWaitsForTheNodeAndKeepsItsMarks() async throws {
        let node = try ServerProcess.started(name: "gw-fullcommit")
        defer { node.stopAndRemove() }
        try node.initialize(authType: "sasl")
        let bucket = try await GatewayClusterProcessTests.mount(node)
        for i in 0..<40 { _ = try await bucket.upsert("fc-\(i)", value: Array("{\"n\":\(i)}".utf8), expiry: 0) }

        if let p = node.process { kill(p.processIdentifier, SIGSTOP) }
        let started = Date()
        var refused: GatewayBucketError? = nil
        do { try await bucket.ensureFullCommit() } catch { refused = error }
        let waited = Date().timeIntervalSince(started)
        if let p = node.process { kill(p.processIdentifier, SIGCONT) }
        print(
            "full-commit barrier against a paused node failed after \(String(format: "%.1f", waited)) s: \(refused.map { "\($0)" } ?? "-")"
        )
        guard case .temporary? = refused else {
            Issue.record("the barrier passed with the node paused: \(String(describing: refused))")
            await bucket.close()
            return
        }
        #expect(waited >= 9)

        try await bucket.ensureFullCommit()
        let again = Date()
        try await bucket.ensureFullCommit()
        #expect(Date().timeIntervalSince(again) < 1)
        await bucket.close()
    }
}
