import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// The flusher's window against a real `settee-server` (ADR 0107): plain writes wait for it, a client polling
/// OBSERVE_SEQNO for its write's persistence (an SDK's `persistTo`) does not.
@Suite struct FlusherWindowProcessTests {
    /// Proves an OBSERVE_SEQNO poll gets its vBucket written in an express batch: with `--flusher-window-ms 30000`,
    /// two plain writes in two vBuckets are both unpersisted after 0.5 s (STAT `vbucket-seqno` reads the persisted
    /// seqno without asking for it); polling OBSERVE_SEQNO for one of them sees it persisted well within the
    /// window, and the other vBucket, which nobody asked about, is still unpersisted then.
    @Test func anObserveSeqnoPollerDoesNotWaitForTheWindow() throws {
        let server = try ServerProcess(name: "flusher-window")
        server.extraArguments = ["--flusher-window-ms", "30000"]
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize()
        let client = try TestKVClient(port: server.kvPort)
        try client.hello([.mutationSeqno, .xerror])
        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)
        let polled = "polled"
        let pvb = VBucketHash.vbucket(forKey: Array(polled.utf8)).rawValue
        var other = 0
        while VBucketHash.vbucket(forKey: Array("other\(other)".utf8)).rawValue == pvb { other += 1 }
        let otherKey = "other\(other)"
        let ovb = VBucketHash.vbucket(forKey: Array(otherKey.utf8)).rawValue

        let p = try client.request(.set, key: polled, value: Array("1".utf8), extras: extras)
        let o = try client.request(.set, key: otherKey, value: Array("1".utf8), extras: extras)
        #expect(p.status == .success && o.status == .success)
        let pToken = try #require(p.mutationToken)
        let oToken = try #require(o.mutationToken)
        usleep(500_000)
        #expect(try persisted(client, ovb) < oToken.1, "a plain write waits for the window")
        #expect(try persisted(client, pvb) < pToken.1, "a plain write waits for the window")

        let start = Date()
        var seen: UInt64 = 0
        while Date().timeIntervalSince(start) < 10 {
            var v = ByteBuffer()
            v.writeInteger(pToken.0)
            let r = try client.request(.observeSeqno, value: Array(v.readableBytesView), vbucket: pvb)
            #expect(r.status == .success)
            var body = r.value
            _ = body.readInteger(as: UInt8.self)
            _ = body.readInteger(as: UInt16.self)
            _ = body.readInteger(as: UInt64.self)
            seen = body.readInteger(as: UInt64.self) ?? 0
            if seen >= pToken.1 { break }
            usleep(20_000)
        }
        #expect(seen >= pToken.1, "the polled write was persisted within 10 s of a 30 s window")
        #expect(try persisted(client, ovb) < oToken.1, "the vBucket nobody polled still waits for the window")
    }

    /// `vb_N:last_persisted_seqno` from STAT `vbucket-seqno N`.
    private func persisted(_ client: TestKVClient, _ vb: UInt16) throws -> UInt64 {
        let stats = try client.stats("vbucket-seqno \(vb)")
        return try #require(stats["vb_\(vb):last_persisted_seqno"].flatMap { UInt64($0) })
    }
}
