import Foundation
import NIOConcurrencyHelpers
import SetteeTLS
import SetteeTestSupport
import Testing

/// `addNode` and the topology lock (issue 16): the trusted-CA handshake with a target runs before the lock.
@Suite(.serialized, .onTestThreads) struct AddNodeLockProcessTests {
    /// Proves a target that never answers the TLS hello (a listener that accepts nothing: the kernel completes the
    /// TCP handshake, nobody reads) holds up no other topology change: while `addNode https://…` without a
    /// fingerprint waits up to 5 s on it, a `setRecoveryType` (which takes the same lock) is answered within 2 s,
    /// and the slow addNode is then refused with nothing joined. Before, addNode held the lock for its handshake
    /// and the other change waited its full 5 s.
    @Test func aSilentTargetDoesNotHoldTheTopologyLock() throws {
        let started = Date()
        let ca = try TestCertificateAuthority("settee test cluster CA")
        let files = NSTemporaryDirectory() + "settee-addnode-lock-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: files) }
        let (n0, _) = try ClusterCAProcessTests.caNode(
            "addnode-lock-0", files: try ClusterCAProcessTests.writeLeaf(ca, to: files, "n0"))
        defer { n0.stopAndRemove() }
        let web = try n0.http(
            "POST", "/settings/web", form: [("username", n0.user), ("password", n0.password), ("port", "SAME")])
        #expect(web.status == 200, "\(web.text)")
        let inbox = n0.dataDir + "/inbox/CA"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try ca.pem.write(toFile: inbox + "/ca.pem", atomically: true, encoding: .utf8)
        let loaded = try n0.http("POST", "/node/controller/loadTrustedCAs")
        #expect(loaded.status == 200, "\(loaded.text)")

        let silent = try LoopbackListener(name: "silent target")
        defer { silent.stop() }
        nonisolated(unsafe) let node = n0
        let slow = NIOLockedValueBox<(status: Int, text: String, seconds: Double)?>(nil)
        let addStarted = Date()
        Thread {
            let reply = try? PeerTLSProcessTests.addNode(node, "https://127.0.0.1:\(silent.port)", fingerprint: nil)
            slow.withLockedValue {
                $0 = (reply?.status ?? -1, reply?.text ?? "no reply", Date().timeIntervalSince(addStarted))
            }
        }.start()
        // A blocking wait in a synchronous test (as the HTTP calls here are): an awaited sleep can resume seconds
        // late when other suites hold the cooperative pool, after the silent addNode already ended (a batch run).
        Thread.sleep(forTimeInterval: 0.7)

        let other = Date()
        let recovery = try n0.http(
            "POST", "/controller/setRecoveryType",
            form: [("otpNode", "ns_1@nowhere.invalid"), ("recoveryType", "full")])
        let otherSeconds = Date().timeIntervalSince(other)
        #expect(recovery.status == 400, "\(recovery.status) \(recovery.text)")
        let otherEnded = Date().timeIntervalSince(addStarted)
        #expect(otherSeconds < 2, "a topology change waited \(otherSeconds) s behind addNode's handshake")

        #expect(try ClusterHarness.eventually(20) { slow.withLockedValue { $0 } != nil }, "addNode never answered")
        let answered = slow.withLockedValue { $0 }
        #expect(answered?.status == 400, "\(String(describing: answered))")
        // The other change was answered while addNode still waited on the silent target.
        #expect(
            otherEnded < (answered?.seconds ?? 0),
            "other change ended at \(otherEnded) s, addNode at \(answered?.seconds ?? -1) s")
        let nodes = ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
        #expect(nodes.count == 1, "the silent target joined: \(nodes)")
        print(
            "addNode lock process test: other change \(String(format: "%.2f", otherSeconds)) s, addNode "
                + "\(String(format: "%.1f", answered?.seconds ?? -1)) s, total "
                + "\(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
