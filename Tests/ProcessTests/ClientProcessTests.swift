import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// BucketClient against one real `settee-server`, plus scripted fakes for the cases one node cannot
/// produce (NOT_MY_VBUCKET, pushed configs, silent sockets).
@Suite(.serialized, .onTestThreads) struct ClientProcessTests {
    static func options(_ server: ServerProcess, seeds: [Seed]? = nil, timeoutMs: Int = 15_000) -> ClientOptions {
        ClientOptions(
            seeds: seeds ?? [.http(NodeAddress(host: "127.0.0.1", port: server.adminPort))], bucket: "demo",
            username: server.user, password: server.password, operationTimeoutMs: timeoutMs, configPollIntervalMs: 0)
    }

    /// Proves the KV API end to end on a real node, bootstrapped over HTTP: upsert/get round-trip with
    /// flags and CAS, insert of an existing key is keyExists, replace and remove with a stale CAS are
    /// casMismatch, remove then get is keyNotFound, counters, append, mutation tokens, and expiry.
    @Test func kvOperationsOnRealNode() async throws {
        let server = try ServerProcess.started(name: "client-kv")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        // A generous deadline: in full CI runs (every suite in parallel on two cores) this test's first upsert
        // has twice missed a 15 s deadline although it never does alone or under synthetic CPU load; the cause
        // is not found yet (see the stop note). The semantics below are what this test is about.
        let client = try await BucketClient.connect(Self.options(server, timeoutMs: 60_000))
        defer { Task { await client.close() } }

        let first = try await client.upsert("user::1", Array(#"{"name":"jane"}"#.utf8), flags: 0x0200_0000, datatype: 1)
        #expect(first.cas != .zero)
        #expect(first.token?.seqno.rawValue ?? 0 > 0)
        #expect(first.token?.vbucket == VBucketHash.vbucket(forKey: "user::1"))
        let got = try await client.get("user::1")
        #expect(got.value == Array(#"{"name":"jane"}"#.utf8) && got.flags == 0x0200_0000 && got.cas == first.cas)

        await #expect(throws: ClientError.keyExists) { try await client.insert("user::1", [1]) }
        let second = try await client.replace("user::1", Array("v2".utf8), cas: first.cas)
        #expect(second.cas != first.cas)
        await #expect(throws: ClientError.casMismatch) { try await client.replace("user::1", [9], cas: first.cas) }
        await #expect(throws: ClientError.casMismatch) { try await client.remove("user::1", cas: first.cas) }
        _ = try await client.remove("user::1", cas: second.cas)
        await #expect(throws: ClientError.keyNotFound) { try await client.get("user::1") }
        await #expect(throws: ClientError.keyNotFound) { try await client.replace("user::1", [1]) }

        let c1 = try await client.increment("ctr", delta: 5, initial: 10)
        let c2 = try await client.increment("ctr", delta: 5)
        let c3 = try await client.decrement("ctr", delta: 100)
        #expect(c1.value == 10 && c2.value == 15 && c3.value == 0)
        _ = try await client.upsert("s", Array("b".utf8))
        _ = try await client.append("s", Array("c".utf8))
        _ = try await client.prepend("s", Array("a".utf8))
        #expect(try await client.get("s").value == Array("abc".utf8))

        // Expiry is whole seconds from the node's current second, so `expiry: 1` can end a few milliseconds
        // after the write (it failed this way in a loaded run); 3 s leaves the read before it at least 2 s.
        _ = try await client.upsert("ttl", [1], expiry: 3)
        _ = try await client.upsert("ttl2", [1])
        _ = try await client.touch("ttl2", expiry: 3)
        #expect(try await client.get("ttl").value == [1])
        try await Task.sleep(for: .milliseconds(4_200))
        await #expect(throws: ClientError.keyNotFound) { try await client.get("ttl") }
        await #expect(throws: ClientError.keyNotFound) { try await client.get("ttl2") }
    }

    /// Proves durable writes at level 2 (majorityAndPersistToActive) succeed on a one-node bucket with no
    /// replicas and the value is readable; bootstrap here is over the KV port (GET_CLUSTER_CONFIG), after
    /// skipping a dead seed.
    @Test func durabilityAndKVBootstrap() async throws {
        let server = try ServerProcess.started(name: "client-durable")
        defer { server.stopAndRemove() }
        try server.initialize(replicaNumber: 0, authType: "sasl")
        let dead = try freePort()
        let client = try await BucketClient.connect(
            Self.options(
                server,
                seeds: [
                    .kv(NodeAddress(host: "127.0.0.1", port: dead)),
                    .kv(NodeAddress(host: "127.0.0.1", port: server.kvPort)),
                ]))
        defer { Task { await client.close() } }
        #expect(client.configRevision != nil)
        let r = try await client.upsert("durable", Array("x".utf8), durability: .majorityAndPersistActive)
        #expect(r.cas != .zero)
        let p = try await client.upsert("durable3", Array("y".utf8), durability: .persistToMajority)
        #expect(p.cas != .zero)
        _ = try await client.remove("durable", durability: .majorityAndPersistActive)
        await #expect(throws: ClientError.keyNotFound) { try await client.get("durable") }
        #expect(try await client.get("durable3").value == Array("y".utf8))
    }

    /// Proves bootstrap reports a clear error for wrong credentials and for an unknown bucket.
    @Test func bootstrapErrors() async throws {
        let server = try ServerProcess.started(name: "client-boot")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        var bad = Self.options(server)
        bad.password = "wrong"
        await #expect(throws: ClientError.self) { try await BucketClient.connect(bad) }
        var missing = Self.options(server)
        missing.bucket = "nope"
        await #expect(throws: ClientError.bucketNotFound("nope")) { try await BucketClient.connect(missing) }
    }

    /// Proves NOT_MY_VBUCKET handling against a real node. The client bootstraps from a fake node whose
    /// forged config (revision 0.0) says it owns every vBucket. (a) The fake answers a write with
    /// NOT_MY_VBUCKET carrying the real node's config: the client adopts it and retries at once on the
    /// real node. (b) The fake answers with its own stale config: the client refreshes from its HTTP
    /// seed, then retries on the real node (asking the fake again while a slow refresh is pending is allowed:
    /// the fake refuses it). Neither write is lost or duplicated.
    @Test func notMyVBucketFollowsNewerMap() async throws {
        let server = try ServerProcess.started(name: "client-nmvb")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let real = try server.http("GET", "/pools/default/b/demo")
        #expect(real.status == 200)
        let realConfig = Array(real.body)
        let realRev = try BucketConfig.parse(realConfig, sourceHost: "127.0.0.1").revision

        for carriesNewer in [true, false] {
            let portBox = NIOLockedValueBox(0)
            let fake = try FakeKVNode { f in
                let forged = FakeKVNode.forgedConfig(kvPort: portBox.withLockedValue { $0 })
                if let r = FakeKVNode.handshake(f, config: { forged }) { return r }
                return FakeKVNode.response(
                    to: f, status: .notMyVBucket, datatype: 1, value: carriesNewer ? realConfig : forged)
            }
            defer { fake.stop() }
            portBox.withLockedValue { $0 = fake.port }
            var seeds: [Seed] = [.kv(NodeAddress(host: "127.0.0.1", port: fake.port))]
            if !carriesNewer { seeds.append(.http(NodeAddress(host: "127.0.0.1", port: server.adminPort))) }
            // The retry must open (and SASL-authenticate) a connection to the real node inside the deadline.
            let client = try await BucketClient.connect(Self.options(server, seeds: seeds, timeoutMs: 15_000))
            #expect(client.configRevision == MapRevision(epoch: 0, rev: 0))
            let key = "nmvb-\(carriesNewer)"
            _ = try await client.upsert(key, Array("v".utf8))
            #expect(client.configRevision == realRev)
            let dataOps = fake.received.withLockedValue { $0.filter { $0 == .set } }.count
            if carriesNewer {
                // The map came in the answer: the retry goes straight to the real node.
                #expect(dataOps == 1, "the fake saw \(dataOps) SETs")
            } else {
                // A retry waits for the HTTP refresh at most `ClientLimits.refreshWaitMaxMs`; on a loaded
                // machine the refresh can take longer and the retry asks the fake again, which refuses it
                // (nothing is stored there). The write still ends on the real node, within the deadline.
                #expect(dataOps >= 1, "the fake saw \(dataOps) SETs")
            }
            // The write is on the real node, once.
            let c = try TestKVClient(port: server.kvPort)
            try c.hello([.json])
            #expect(try c.authenticate(user: server.user, password: server.password) == .success)
            #expect(try c.request(.selectBucket, key: "demo").status == .success)
            #expect(try c.request(.get, key: key).valueBytes == Array("v".utf8))
            await client.close()
        }
    }

    /// Proves a server-pushed ClustermapChangeNotification (magic 0x82, opcode 0x01) is adopted: the
    /// fake pushes the real node's config before answering a GET with NOT_MY_VBUCKET without a body, so
    /// the retry can only reach the real node through the pushed map.
    @Test func pushedConfigIsAdopted() async throws {
        let server = try ServerProcess.started(name: "client-push")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let realConfig = Array(try server.http("GET", "/pools/default/b/demo").body)
        let portBox = NIOLockedValueBox(0)
        let fake = try FakeKVNode { f in
            let forged = FakeKVNode.forgedConfig(kvPort: portBox.withLockedValue { $0 })
            if let r = FakeKVNode.handshake(f, config: { forged }) { return r }
            var b = FakeKVNode.mapPush(realConfig)
            var nmvb = FakeKVNode.response(to: f, status: .notMyVBucket)
            b.writeBuffer(&nmvb)
            return b
        }
        defer { fake.stop() }
        portBox.withLockedValue { $0 = fake.port }
        let client = try await BucketClient.connect(
            Self.options(server, seeds: [.kv(NodeAddress(host: "127.0.0.1", port: fake.port))], timeoutMs: 15_000))
        defer { Task { await client.close() } }
        _ = try await client.upsert("pushed", [7])
        #expect(try await client.get("pushed").value == [7])
        #expect(client.configRevision != MapRevision(epoch: 0, rev: 0))
    }

    /// Proves deadlines: against a node that completes the handshake but never answers data requests, a
    /// GET fails `timeout` and an upsert fails `ambiguous` (sent, outcome unknown, not retried), each
    /// within its deadline plus slack; and bootstrap from a socket that accepts but never speaks fails
    /// with a bootstrap error instead of hanging.
    @Test func timeoutsAgainstSilentSockets() async throws {
        let portBox = NIOLockedValueBox(0)
        let fake = try FakeKVNode { f in
            FakeKVNode.handshake(f, config: { FakeKVNode.forgedConfig(kvPort: portBox.withLockedValue { $0 }) })
        }
        defer { fake.stop() }
        portBox.withLockedValue { $0 = fake.port }
        let options = ClientOptions(
            seeds: [.kv(NodeAddress(host: "127.0.0.1", port: fake.port))], bucket: "demo", username: "u",
            password: "p", operationTimeoutMs: 300, configPollIntervalMs: 0)
        let client = try await BucketClient.connect(options)
        defer { Task { await client.close() } }
        let start = ContinuousClock.now
        await #expect(throws: ClientError.timeout(operation: "get", afterMs: 300)) { try await client.get("k") }
        let getElapsed = ContinuousClock.now - start
        // The upper bound tells a deadline from a hang, with room for a loaded run: the fresh-clone rehearsal at
        // 20e44ff, 3 process tests at once on 2 cores, took 2.02 s against the 300 ms deadline.
        #expect(getElapsed >= .milliseconds(290) && getElapsed < .seconds(5), "\(getElapsed)")
        do {
            _ = try await client.upsert("k", [1])
            Issue.record("upsert against a silent node succeeded")
        } catch let e as ClientError {
            guard case .ambiguous(let op, _) = e else {
                Issue.record("expected ambiguous, got \(e)")
                return
            }
            #expect(op == "upsert")
        }
        #expect(fake.received.withLockedValue { $0.filter { $0 == .set } }.count == 1, "mutation was retried")

        let mute = try FakeKVNode { _ in nil }
        defer { mute.stop() }
        var muteOptions = options
        muteOptions.seeds = [.kv(NodeAddress(host: "127.0.0.1", port: mute.port))]
        muteOptions.connectTimeoutMs = 300
        let bootStart = ContinuousClock.now
        await #expect(throws: ClientError.self) { try await BucketClient.connect(muteOptions) }
        #expect(ContinuousClock.now - bootStart < .seconds(3))
    }

    /// Proves what happens when a node's process dies: reads fail `timeout` (not a hang), a write made
    /// after the loss was detected fails `timeout` rather than `ambiguous` (it was never sent), and once the
    /// node is back on the same ports the client reconnects by itself and reads the durably written
    /// value.
    @Test func nodeLossAndReconnect() async throws {
        let server = try ServerProcess.started(name: "client-loss")
        defer { server.stopAndRemove() }
        try server.initialize(replicaNumber: 0, authType: "sasl")
        let client = try await BucketClient.connect(Self.options(server, timeoutMs: 1_000))
        defer { Task { await client.close() } }
        _ = try await client.upsert("before", Array("kept".utf8), durability: .majorityAndPersistActive)

        server.kill9()
        await #expect(throws: ClientError.timeout(operation: "get", afterMs: 1_000)) { try await client.get("before") }
        await #expect(throws: ClientError.timeout(operation: "upsert", afterMs: 1_000)) {
            try await client.upsert("during", [1])
        }

        try server.start()
        var value: [UInt8]?
        for _ in 0..<30 where value == nil {
            value = try? await client.get("before").value
            if value == nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(value == Array("kept".utf8))
        _ = try await client.upsert("after", [2])
        #expect(try await client.get("after").value == [2])
    }
}
