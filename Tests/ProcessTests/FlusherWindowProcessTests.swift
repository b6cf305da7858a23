import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// The flusher's window against a real `settee-server` (ADR 0107): plain writes wait for it, a client polling
/// OBSERVE_SEQNO or OBSERVE for its write's persistence (an SDK's `persistTo`) does not.
@Suite(.onTestThreads) struct FlusherWindowProcessTests {
    /// Proves an OBSERVE_SEQNO poll gets its vBucket written in an express batch: with `--flusher-window-ms 30000`,
    /// two plain writes in two vBuckets are both unpersisted after 0.5 s (STAT `vbucket-seqno` reads the persisted
    /// seqno without asking for it); polling OBSERVE_SEQNO for one of them sees it persisted well within the
    /// window, and the other vBucket, which nobody asked about, is still unpersisted then.
    @Test func anObserveSeqnoPollerDoesNotWaitForTheWindow() throws {
        try withLongWindowServer("flusher-window") { _, client in
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
    }

    /// OBSERVE (0x92), as SDKs without mutation tokens poll for persistTo: with a 30 s window a new key is "not
    /// persisted" with its CAS, and a poll makes its vBucket persisted within seconds (not the window); a deletion is
    /// "logically deleted", then "not found" once on disk. A key of a vBucket the node does not have answers
    /// NOT_MY_VBUCKET; a cut key list, EINVAL.
    @Test func anObservePollerSeesItsWritePersistedWithoutWaitingForTheWindow() throws {
        try withLongWindowServer("observe") { server, client in
            let k = "observed"
            let vb = VBucketHash.vbucket(forKey: Array(k.utf8)).rawValue
            let set = try client.request(
                .set, key: k, value: Array("1".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
            #expect(set.status == .success)

            func observe(_ keys: [Observe.Key]) throws -> [Observe.Answer] {
                let r = try client.request(.observe, value: Observe.requestValue(keys), vbucket: 0)
                #expect(r.status == .success)
                return try #require(Observe.answers(decoding: r.value))
            }
            let keys = [
                Observe.Key(vbucket: vb, key: Array(k.utf8)), Observe.Key(vbucket: vb, key: Array("absent".utf8)),
            ]
            let first = try observe(keys)
            #expect(first.map(\.state) == [.notPersisted, .notFound])
            #expect(first[0].cas == set.cas && first[1].cas == 0)
            #expect(first.map(\.key) == keys.map(\.key) && first.map(\.vbucket) == [vb, vb])
            func pollUntil(_ wanted: Observe.KeyState) throws -> Double {
                let start = Date()
                while Date().timeIntervalSince(start) < 10 {
                    if try observe([keys[0]])[0].state == wanted { break }
                    usleep(20_000)
                }
                return Date().timeIntervalSince(start)
            }
            #expect(try pollUntil(.persisted) < 10, "the polled write was not persisted within 10 s of a 30 s window")

            let del = try client.request(.delete, key: k)
            #expect(del.status == .success)
            #expect(try observe([keys[0]]).first?.state == .logicallyDeleted)
            #expect(try pollUntil(.notFound) < 10)

            let foreign = try client.request(
                .observe, value: Observe.requestValue([Observe.Key(vbucket: 4_000, key: Array(k.utf8))]), vbucket: 0)
            #expect(foreign.status == .notMyVBucket)
            let cut = try client.request(.observe, value: Array(Observe.requestValue(keys).dropLast()), vbucket: 0)
            #expect(cut.status == .invalidArguments)
            // The connection still works after both refusals.
            #expect(try observe([keys[1]]).first?.state == .notFound)

            // A collection-aware client prefixes each key with its collection: the default one (0) is observed, any
            // other is refused as unknown.
            let scoped = try TestKVClient(port: server.kvPort)
            try scoped.hello([.collections, .mutationSeqno, .xerror])
            let againVB = VBucketHash.vbucket(forKey: Array("again".utf8)).rawValue
            let again = try scoped.request(
                .set, key: "\u{0}again", value: Array("1".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                vbucket: againVB)
            #expect(again.status == .success)
            let inDefault = try scoped.request(
                .observe, value: Observe.requestValue([Observe.Key(vbucket: againVB, key: [0] + Array("again".utf8))]),
                vbucket: 0)
            #expect(inDefault.status == .success)
            let seen = try #require(Observe.answers(decoding: inDefault.value)).first
            #expect(seen?.key == [0] + Array("again".utf8) && seen?.cas == again.cas)
            #expect(seen?.state == .notPersisted || seen?.state == .persisted)
            let elsewhere = try scoped.request(
                .observe, value: Observe.requestValue([Observe.Key(vbucket: againVB, key: [8] + Array("again".utf8))]),
                vbucket: 0)
            #expect(elsewhere.status == .unknownCollection)
        }
    }

    /// Runs `body` against a new initialized server whose flusher window is 30 s, with a client that negotiated
    /// mutation tokens; stops the server afterwards.
    private func withLongWindowServer(_ name: String, _ body: (ServerProcess, TestKVClient) throws -> Void) throws {
        let server = try ServerProcess(name: name)
        server.extraArguments = ["--flusher-window-ms", "30000"]
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize()
        let client = try TestKVClient(port: server.kvPort)
        try client.hello([.mutationSeqno, .xerror])
        try body(server, client)
    }

    /// `vb_N:last_persisted_seqno` from STAT `vbucket-seqno N`.
    private func persisted(_ client: TestKVClient, _ vb: UInt16) throws -> UInt64 {
        let stats = try client.stats("vbucket-seqno \(vb)")
        return try #require(stats["vb_\(vb):last_persisted_seqno"].flatMap { UInt64($0) })
    }
}
