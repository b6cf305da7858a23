import Foundation
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Failover on real processes never loses a majority-acknowledged write, and refuses when it cannot show that.
@Suite("Failover safety (real processes)", .serialized, .onTestThreads)
struct FailoverSafetyProcessTests {
    static func value(_ i: Int) -> [UInt8] { Array("{\"n\":\(i),\"safety\":true}".utf8) }
    /// Filler writes while the first replica is paused: 240 × 128 KiB = 30 MiB, three times the 10 MiB window
    /// (`Limits.dcpConsumerBufferBytes`) a replica grants its source.
    static let fillerCount = 240
    static let fillerBytes = 128 * 1024

    static func signal(_ s: ServerProcess, _ sig: Int32) {
        if let p = s.process { kill(p.processIdentifier, sig) }
    }

    /// When `s` first logged a line containing `text`, at `since` or later (the log's own clock, to the second).
    static func loggedAt(_ text: String, in s: ServerProcess, since: Date = .distantPast) -> Date? {
        let log = (try? String(contentsOf: s.logURL, encoding: .utf8)) ?? ""
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = "yyyy-MM-dd'T'HH:mm:ssZ"
        let from = since.timeIntervalSince1970.rounded(.down)
        for line in log.split(separator: "\n") where line.contains(text) {
            if let at = f.date(from: String(line.prefix(24))), at.timeIntervalSince1970 >= from { return at }
        }
        return nil
    }

    /// The smart client on bucket `demo`, seeded with `seeds`' admin ports.
    static func connect(_ seeds: [ServerProcess], operationTimeoutMs: Int = 10_000) async throws -> BucketClient {
        try await BucketClient.connect(
            ClientOptions(
                seeds: seeds.map { .http(NodeAddress(host: "127.0.0.1", port: $0.adminPort)) }, bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: operationTimeoutMs))
    }

    typealias Writer = Task<(acknowledged: [Int], failed: [String]), Never>

    /// `lanes` writers of unique keys (`prefix` + n, lane n of every `lanes`), majority-durable through `client`,
    /// until `flags.stop`; each counts its successes in `flags.progress`.
    static func durableWriters(
        _ client: BucketClient, lanes: Int, prefix: String, flags: DurableRebalanceProcessTests.Flags
    ) -> [Writer] {
        (0..<lanes).map { lane in
            Task {
                var acknowledged: [Int] = []
                var failed: [String] = []
                var i = lane
                while !flags.stop.load(ordering: .relaxed) {
                    do {
                        _ = try await client.upsert("\(prefix)\(i)", Self.value(i), durability: .majority)
                        acknowledged.append(i)
                        flags.progress.add(1, ordering: .relaxed)
                    } catch {
                        failed.append("\(prefix)\(i): \(error)")
                    }
                    i += lanes
                }
                return (acknowledged, failed)
            }
        }
    }

    /// What the writers acknowledged, and what failed, once they stopped.
    static func collect(_ writers: [Writer]) async -> (acknowledged: [Int], failed: [String]) {
        var acknowledged: [Int] = []
        var failed: [String] = []
        for w in writers {
            let r = await w.value
            acknowledged += r.acknowledged
            failed += r.failed
        }
        return (acknowledged, failed)
    }

    /// Proves, on three nodes with replicaNumber=2, that failover promotes the copy holding the most: with the
    /// first replica (b) paused, 30 MiB of filler and then 200 durable writes to vBuckets whose chain is [c, b, a]
    /// are acknowledged by c and a (a majority); c is SIGKILLed, b resumed, c failed over. The old rule promoted the first replica, b,
    /// which never received those writes; every one of them must now read back. Then failing over b as well
    /// (two of three copies gone) is refused as unsafe with 400 and changes nothing, until allowUnsafe=true.
    @Test func failoverPromotesTheCopyHoldingEveryMajorityWrite() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "fosafe-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b, c], authType: "none", replicaNumber: 2)

        let client = try await Self.connect([a])
        let map = try ClusterHarness.map(a)
        func index(_ s: ServerProcess) -> Int { map.servers.firstIndex(of: "127.0.0.1:\(s.kvPort)") ?? -1 }
        let chain = [index(c), index(b), index(a)]
        let chosen = ClusterHarness.keys(for: chain, in: map, count: 200 + Self.fillerCount, prefix: "fo::")
        #expect(chosen.count == 200 + Self.fillerCount && !chain.contains(-1), "\(ClusterHarness.summary(map))")
        let keys = Array(chosen.prefix(200))
        let fillers = Array(chosen.dropFirst(200))

        // Replica streams of a just-created bucket connect within a few seconds: retry until durable writes pass.
        for (i, key) in keys.prefix(8).enumerated() {
            let deadline = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert(key, Self.value(-i), durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }

        // b stops: c's writes are acknowledged by c and a only. The fillers (more than the replication stream's
        // flow-control window plus socket buffers) make sure b cannot find the checked writes queued in its socket
        // when it resumes: it really is behind a.
        Self.signal(b, SIGSTOP)
        var rng = SplitMix64(seed: 20)
        for key in fillers {
            let filler = (0..<Self.fillerBytes / 8).flatMap { _ in withUnsafeBytes(of: rng.next()) { Array($0) } }
            _ = try await client.upsert(key, filler, durability: .majority)
        }
        var acked: [Int] = []
        for (i, key) in keys.enumerated() {
            do {
                _ = try await client.upsert(key, Self.value(i), durability: .majority)
                acked.append(i)
            } catch {
                Issue.record("durable write \(key) failed with b paused: \(error)")
            }
        }
        #expect(acked.count == keys.count)
        c.kill9()
        Self.signal(b, SIGCONT)
        // b drains what its socket held, then is still behind a where the last checked write went.
        try await Task.sleep(for: .seconds(1))
        let lastVB = VBucketHash.vbucket(forKey: Array((keys.last ?? "").utf8)).index
        func high(_ s: ServerProcess) throws -> Int {
            let rows = try s.http("GET", "/settee/internal/seqnos?bucket=demo").json() as? [[Any]] ?? []
            return lastVB < rows.count ? rows[lastVB][1] as? Int ?? -1 : -1
        }
        let (aHigh, bHigh) = (try high(a), try high(b))
        #expect(aHigh > bHigh && bHigh >= 0, "a at \(aHigh), b at \(bHigh): b must lag for this test to mean anything")

        let failover = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(c))])
        #expect(failover.status == 200, "\(failover.text)")
        let after = try ClusterHarness.map(a)
        #expect(after.epoch == map.epoch + 1)
        var missing: [String] = []
        for i in acked {
            let r = try? await client.get(keys[i])
            if r?.value != Self.value(i) { missing.append(keys[i]) }
        }
        #expect(
            missing.isEmpty, "\(missing.count) of \(acked.count) acknowledged durable writes lost: \(missing.prefix(5))"
        )

        // Failing over b too would leave one copy of three: refused, nothing published.
        let unsafe = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(b))])
        #expect(unsafe.status == 400 && unsafe.text.contains("unsafe"), "\(unsafe.status) \(unsafe.text)")
        #expect(try ClusterHarness.map(a).rev == after.rev)
        #expect(try ClusterHarness.members(a)[ClusterHarness.nodeName(b)] == "active")
        let forced = try a.http(
            "POST", "/controller/failOver",
            form: [("otpNode", ClusterHarness.nodeName(b)), ("allowUnsafe", "true")])
        #expect(forced.status == 200, "\(forced.text)")
        #expect(try ClusterHarness.members(a)[ClusterHarness.nodeName(b)] == "inactiveFailed")
        await client.close()
    }

    /// Proves, on five nodes with replicaNumber=2, that an operator's failover of a node that is serving
    /// majority-durable writes loses none it acknowledged (the case a Jepsen-style test found, ADR 0120): eight
    /// writers write unique keys through the smart client before, during and after the failover of e; e is asked
    /// to fence, confirms, and only then are the survivors' seqnos sampled (both sides log it); every write
    /// answered SUCCESS reads back afterwards, and e ends failed over with nothing active.
    @Test func failoverOfAServingNodeOnFiveNodesKeepsEveryAcknowledgedWrite() async throws {
        let nodes = try (0..<5).map { try ServerProcess(name: "fofive-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, e) = (nodes[0], nodes[4])
        try ClusterHarness.formCluster(nodes, authType: "none", replicaNumber: 2)
        let client = try await Self.connect([a])
        try await ClusterDataProcessTests.waitForReplicaStreams(client)
        let before = try ClusterHarness.map(a)
        let flags = DurableRebalanceProcessTests.Flags()
        let writers = Self.durableWriters(client, lanes: 8, prefix: "five::", flags: flags)
        for _ in 0..<100 where flags.progress.load(ordering: .relaxed) < 200 {
            try await Task.sleep(for: .milliseconds(50))
        }
        let victim = ClusterHarness.nodeName(e)
        let via = Unchecked(value: a)
        let failover = try await offPool {
            try via.value.http("POST", "/controller/failOver", form: [("otpNode", victim)])
        }
        let atFailover = flags.progress.load(ordering: .relaxed)
        try await Task.sleep(for: .seconds(2))
        flags.stop.store(true, ordering: .relaxed)
        let (written, failed) = await Self.collect(writers)
        #expect(failover.status == 200, "\(failover.status) \(failover.text)")
        #expect(try ClusterHarness.members(a)[victim] == "inactiveFailed")
        let after = try ClusterHarness.map(a)
        #expect(after.epoch == before.epoch + 1 && !after.servers.contains("127.0.0.1:\(e.kvPort)"))
        #expect(flags.progress.load(ordering: .relaxed) > atFailover, "no durable write succeeded after the failover")
        await ClusterDataProcessTests.expectEveryWriteReadsBack(
            client, written, key: { "five::\($0)" }, value: Self.value)
        // The victim stopped before the sample: asked, it fenced and said so.
        let victimLog = (try? String(contentsOf: e.logURL, encoding: .utf8)) ?? ""
        let orchestratorLog = (try? String(contentsOf: a.logURL, encoding: .utf8)) ?? ""
        #expect(victimLog.contains("fenced=true") && victimLog.contains("fence requested for a failover"))
        #expect(orchestratorLog.contains("answer=fenced") && orchestratorLog.contains("failover fence request"))
        print(
            "five-node failover: \(written.count) acknowledged (\(atFailover) before the failover answered), "
                + "\(failed.count) failed\(failed.isEmpty ? "" : ", first: \(failed[0])")")
        await client.close()
    }

    /// Proves, on three nodes with replicaNumber=2 and the failover timeout at 5 s, the case ADR 0120's repair is
    /// for, and a victim restarted in it: c is SIGSTOPped while four majority-durable writers run; an operator asks
    /// a to fail c over; a claims the epoch (b promised it) and asks c to fence, and is SIGKILLed right then, before
    /// any sample or push. c is then SIGKILLed and restarted: behind b's promise of an epoch nobody published, it
    /// must not serve (none of its actives is active) until the orchestrator of the day (b or c) republishes the unchanged config at
    /// a later epoch (after the failover timeout plus 13 s); then c serves again. The operator fails a over through
    /// b; every write answered SUCCESS reads back, and durable writes succeed afterwards.
    @Test func anOrchestratorKilledMidFailoverLeavesItsVictimFencedUntilTheRepair() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "forepair-\($0)") }
        defer {
            for s in nodes { Self.signal(s, SIGCONT) }
            nodes.forEach { $0.stopAndRemove() }
        }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b, c], authType: "none", replicaNumber: 2)
        // Auto-failover off, so the repair (not an automatic failover of a) is what ends c's wait.
        let settings = try a.http("POST", "/settings/autoFailover", form: [("enabled", "false"), ("timeout", "5")])
        #expect(settings.status == 200, "\(settings.text)")
        let client = try await Self.connect([a, b], operationTimeoutMs: 2_500)
        try await ClusterDataProcessTests.waitForReplicaStreams(client)
        let before = try ClusterHarness.map(a)
        let cIndex = before.servers.firstIndex(of: "127.0.0.1:\(c.kvPort)") ?? -1
        let cActives = before.chains.indices.filter { before.chains[$0].first == cIndex }
        #expect(!cActives.isEmpty)
        func cStates() throws -> [String] {
            let rows = try c.http("GET", "/settee/internal/seqnos?bucket=demo").json() as? [[Any]] ?? []
            return cActives.map { $0 < rows.count ? rows[$0].first as? String ?? "?" : "?" }
        }
        let flags = DurableRebalanceProcessTests.Flags()
        let writers = Self.durableWriters(client, lanes: 4, prefix: "repair::", flags: flags)
        for _ in 0..<100 where flags.progress.load(ordering: .relaxed) < 100 {
            try await Task.sleep(for: .milliseconds(50))
        }

        Self.signal(c, SIGSTOP)
        let via = Unchecked(value: a)
        let victim = ClusterHarness.nodeName(c)
        let failover = Task {
            try? await offPool { try via.value.http("POST", "/controller/failOver", form: [("otpNode", victim)]) }
        }
        // Polled without blocking a thread: the failover's request runs on the same (two-thread) task pool, and a
        // blocking poll beside another test's starved it in CI (the request was never sent).
        let asked = await waitUntil(10) {
            ((try? String(contentsOf: a.logURL, encoding: .utf8)) ?? "").contains("failover asks its victim to fence")
        }
        #expect(asked, "a never asked c to fence")
        a.kill9()
        _ = await failover.value
        let aLog = (try? String(contentsOf: a.logURL, encoding: .utf8)) ?? ""
        #expect(!aLog.contains("failover fence request"), "a heard c's answer before it was killed: not this case")
        let promised = try b.http("GET", "/settee/internal/heartbeat").json() as? [String: Any] ?? [:]
        let stuckEpoch = promised["promised"] as? Int ?? 0
        #expect(stuckEpoch > before.epoch, "b promised no epoch past the config: \(promised)")

        c.kill9()
        try c.start()
        let restarted = Date()
        // Restarted behind a promise of an epoch nobody published: it must not serve.
        try await Task.sleep(for: .seconds(3))
        let states = try cStates()
        #expect(!states.contains("active"), "c serves behind b's promise: \(states)")
        #expect(try ClusterHarness.map(b).epoch == before.epoch)
        let repairedInTime = await waitUntil(60) { ((try? ClusterHarness.map(b).epoch) ?? 0) > stuckEpoch }
        #expect(repairedInTime, "b never republished past the stuck epoch \(stuckEpoch)")
        let repaired = try ClusterHarness.map(b)
        #expect(repaired.servers == before.servers && repaired.chains == before.chains, "the repair changed the map")
        // b or c (whichever orchestrates now) republished; c's start fence lifted only then (its vBuckets held after
        // the unclean shutdown then wait for a's seqnos or a's failover: a hold of its own). By the logs' clocks,
        // a second's slack: a node logs its adoption after it installed the config, which may lift the fence first.
        let republished = "cluster config republished unchanged"
        // The republishing node logs the line after it installed the config others read, so under load b's map can
        // show the new epoch before the line is in the file: wait for it as for the fence's below.
        func repairLoggedAt() -> Date? {
            [b, c].compactMap { Self.loggedAt(republished, in: $0, since: restarted) }.min()
        }
        let repairLogged = await waitUntil(20) { repairLoggedAt() != nil }
        let repairedAt = repairLoggedAt()
        #expect(repairLogged && repairedAt != nil, "nobody logged the repair within 20 s of b's new epoch")
        let lifted = await waitUntil(20) { Self.loggedAt("fence lifted", in: c, since: restarted) != nil }
        #expect(lifted, "c's fence never lifted")
        let liftedAt = Self.loggedAt("fence lifted", in: c, since: restarted)
        let inOrder = liftedAt.flatMap { l in repairedAt.map { l.timeIntervalSince($0) >= -1 } } ?? false
        #expect(
            inOrder,
            "c lifted its fence at \(String(describing: liftedAt)), before the repair at \(String(describing: repairedAt))"
        )
        let waited = liftedAt.map { Int($0.timeIntervalSince(restarted).rounded()) } ?? -1

        let dropA = try b.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(a))])
        #expect(dropA.status == 200, "\(dropA.status) \(dropA.text)")
        let atFailover = flags.progress.load(ordering: .relaxed)
        let resumed = await waitUntil(20) { flags.progress.load(ordering: .relaxed) > atFailover + 50 }
        flags.stop.store(true, ordering: .relaxed)
        let (written, failed) = await Self.collect(writers)
        #expect(resumed, "durable writes did not resume after a's failover")
        #expect(try ClusterHarness.members(b)[ClusterHarness.nodeName(a)] == "inactiveFailed")
        await ClusterDataProcessTests.expectEveryWriteReadsBack(
            client, written, key: { "repair::\($0)" }, value: Self.value)
        print(
            "orchestrator killed mid-failover: c's fence lifted \(waited) s after its restart; "
                + "\(written.count) acknowledged, \(failed.count) failed")
        await client.close()
    }

    /// Proves quorum and self-fencing on real processes: 3 nodes, auto-failover on (timeout 5 s), b and c
    /// SIGSTOPped. a, a minority of one, fails nobody over; a bucket change asked of it answers 503 naming the
    /// missing quorum, and so do a cluster rename (it used to take a new revision there) and a manual failover;
    /// once the timeout has passed it fences itself: its active vBuckets turn pending (clients get
    /// NOT_MY_VBUCKET) and `/pools/default` lists it unhealthy. After SIGCONT the fence lifts, a durable write
    /// succeeds, and every member is still active.
    @Test func minorityMakesNoChangesAndFencesItself() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "foquorum-\($0)") }
        defer {
            for s in nodes { Self.signal(s, SIGCONT) }
            nodes.forEach { $0.stopAndRemove() }
        }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b, c], authType: "none", replicaNumber: 1)
        let enable = try a.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "5")])
        #expect(enable.status == 200, "\(enable.text)")
        let map = try ClusterHarness.map(a)
        let aIndex = map.servers.firstIndex(of: "127.0.0.1:\(a.kvPort)") ?? -1
        let aActives = map.chains.indices.filter { map.chains[$0].first == aIndex }
        #expect(!aActives.isEmpty)
        func aStates() throws -> [String] {
            let rows = try a.http("GET", "/settee/internal/seqnos?bucket=demo").json() as? [[Any]] ?? []
            return aActives.map { $0 < rows.count ? rows[$0].first as? String ?? "?" : "?" }
        }
        #expect(try aStates().allSatisfy { $0 == "active" })

        Self.signal(b, SIGSTOP)
        Self.signal(c, SIGSTOP)
        // Past the 4 s after which a peer not heard from counts as unreachable.
        try await Task.sleep(for: .seconds(6))
        let refused = try ClusterHarness.eventually(20) {
            let r = try a.http(
                "POST", "/pools/default/buckets",
                form: [("name", "other"), ("ramQuotaMB", "100"), ("replicaNumber", "1"), ("authType", "none")])
            return r.status == 503 && r.text.contains("No quorum")
        }
        #expect(refused)
        // A cluster setting takes a new config revision too: a minority's higher revision would win after the heal.
        let rename = try a.http("POST", "/pools/default", form: [("clusterName", "minority")])
        #expect(rename.status == 503 && rename.text.contains("No quorum"), "\(rename.status) \(rename.text)")
        let failover = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(b))])
        #expect(failover.status == 503 && failover.text.contains("No quorum"), "\(failover.status) \(failover.text)")
        let fenced = try ClusterHarness.eventually(30) { try aStates().allSatisfy { $0 == "pending" } }
        #expect(fenced)
        let pools = ClusterHarness.json(try a.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
        let aStatus = pools.first { $0["otpNode"] as? String == ClusterHarness.nodeName(a) }?["status"] as? String
        #expect(aStatus == "unhealthy")

        Self.signal(b, SIGCONT)
        Self.signal(c, SIGCONT)
        let lifted = try ClusterHarness.eventually(30) { try aStates().allSatisfy { $0 == "active" } }
        #expect(lifted)
        let client = try await Self.connect([a])
        let key = ClusterHarness.keys(for: map.chains[aActives[0]], in: map, count: 1, prefix: "fo::").first ?? "fo::0"
        // Replica streams reconnect after the pause: retry until the durable write is acknowledged.
        let deadline = Date().addingTimeInterval(30)
        while true {
            do {
                _ = try await client.upsert(key, Self.value(1), durability: .majority)
                break
            } catch {
                if Date() > deadline { throw error }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        #expect(try await client.get(key).value == Self.value(1))
        #expect(try ClusterHarness.members(a).values.allSatisfy { $0 == "active" })
        await client.close()
    }
}
