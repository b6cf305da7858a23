import Foundation
import Logging
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Gateways mounted on a bucket of real settee-server processes through `RemoteBucket` (the gateway's
/// `"server": "http://..."`), driven through the `GatewayDatabase` API in this process: each
/// `RemoteBucket` + `GatewayDatabase` pair is one gateway.
@Suite("Gateway on a cluster bucket (real nodes)", .serialized, .onTestThreads)
struct GatewayClusterProcessTests {
    static func url(_ node: ServerProcess) -> String { "http://127.0.0.1:\(node.adminPort)" }

    static func mount(_ node: ServerProcess, user: String = "Administrator", password: String = "password")
        async throws -> RemoteBucket
    {
        try await RemoteBucket(
            url: url(node), bucket: "demo", username: user, password: password, logger: quietClientLogger)
    }

    static func gateway(_ bucket: RemoteBucket) async throws -> GatewayDatabase {
        try await GatewayDatabase(
            options: DatabaseOptions(name: "demo", importDocs: true), bucket: bucket, logger: quietClientLogger)
    }

    static func body(_ text: String) -> JSON { try! JSON.parse(text) }

    /// Every row of the admin `_changes` feed (no access checks): doc id -> (seq, rev ids).
    static func feed(_ db: GatewayDatabase, channels: Set<String>? = nil) async throws -> [String: (UInt64, [String])] {
        let page = try await db.changes(ChangesQuery(channels: channels), user: nil)
        var out: [String: (UInt64, [String])] = [:]
        for row in page.rows { out[row.id] = (row.seq.seq, row.changes.map(\.description)) }
        return out
    }

    /// `RemoteBucket` on one node: clear errors for an unknown bucket, a wrong password, an unreachable
    /// cluster and a user who may read and write but not stream changes (DCP); the KV semantics the gateway relies on (insert refuses an existing key, replace checks the
    /// CAS, remove of a missing key is `notFound`, increment creates then adds); `mutations()` delivers a
    /// write made by another client.
    @Test func remoteBucketSemanticsAndErrors() async throws {
        let a = try ServerProcess.started(name: "gw-rb")
        defer { a.stopAndRemove() }
        try a.initialize(authType: "sasl")

        func mountError(_ body: () async throws -> RemoteBucket) async -> String {
            do {
                let b = try await body()
                await b.close()
                return "mounted"
            } catch { return "\(error)" }
        }
        let unknown = await mountError {
            try await RemoteBucket(url: Self.url(a), bucket: "nosuch", username: "Administrator", password: "password")
        }
        #expect(unknown.contains("no bucket named nosuch"), "\(unknown)")
        let badPassword = await mountError { try await Self.mount(a, password: "wrong") }
        #expect(badPassword.contains("wrong username or password"), "\(badPassword)")
        let port = try freePort()
        let unreachable = await mountError {
            try await RemoteBucket(
                url: "http://127.0.0.1:\(port)", bucket: "demo", username: "Administrator", password: "password")
        }
        #expect(unreachable.contains("cannot reach"), "\(unreachable)")
        let notHTTP = await mountError {
            try await RemoteBucket(url: "walrus:", bucket: "demo", username: nil, password: nil)
        }
        #expect(notHTTP.contains("not an http(s)://"), "\(notHTTP)")

        let r = try a.http(
            "PUT", "/settings/rbac/users/local/app",
            form: [("password", "app-pw"), ("roles", "data_reader[demo],data_writer[demo]")])
        #expect(r.status == 200, "\(r.text)")
        let noStream = await mountError { try await Self.mount(a, user: "app", password: "app-pw") }
        #expect(noStream.contains("may not stream bucket demo"), "\(noStream)")

        let bucket = try await Self.mount(a)
        #expect(try await bucket.get("k") == nil)
        let cas = try await bucket.insert("k", value: Array("{\"v\":1}".utf8), expiry: 0)
        await #expect(throws: GatewayBucketError.exists) {
            _ = try await bucket.insert("k", value: Array("{}".utf8), expiry: 0)
        }
        let cas2 = try await bucket.replace("k", value: Array("{\"v\":2}".utf8), cas: cas, expiry: 0)
        #expect(cas2 != cas)
        await #expect(throws: GatewayBucketError.exists) {
            _ = try await bucket.replace("k", value: Array("{\"v\":3}".utf8), cas: cas, expiry: 0)
        }
        #expect(try await bucket.get("k")?.value == Array("{\"v\":2}".utf8))
        await #expect(throws: GatewayBucketError.notFound) { try await bucket.remove("missing", cas: .zero) }
        #expect(try await bucket.increment("ctr", delta: 1, initial: 1) == 1)
        #expect(try await bucket.increment("ctr", delta: 1, initial: 1) == 2)

        let client = try await BucketClient.connect(
            ChangeStreamProcessTests.options(a), logger: quietClientLogger)
        _ = try await client.upsert("from-sdk", Array("{\"sdk\":true}".utf8))
        await client.close()
        var seen: [String: BucketMutation] = [:]
        for await m in bucket.mutations() {
            seen[m.key] = m
            if seen["from-sdk"] != nil && seen["ctr"] != nil && seen["k"] != nil { break }
        }
        #expect(seen["from-sdk"]?.value == Array("{\"sdk\":true}".utf8))
        #expect(seen["k"]?.cas == cas2)
        await bucket.close()
    }

    /// The cluster bucket's deletions as the gateway sees them (ADR 0074): the CAS `RemoteBucket` returns for a
    /// delete (plain, and the purge's marked MULTI_MUTATION) is the CAS its change stream's deletion carries, and
    /// only the marked one is flagged `purged`; a second gateway with `import_docs` drops a document the first
    /// purged without writing a tombstone revision (before ADR 0074 it imported the deletion as `2-…`).
    @Test func deletionCASAndAPurgeSeenByASecondGateway() async throws {
        let a = try ServerProcess.started(name: "gw-purge")
        defer { a.stopAndRemove() }
        try a.initialize(authType: "sasl")
        let bucket = try await Self.mount(a)
        _ = try await bucket.insert("plain", value: Array("{\"v\":1}".utf8), expiry: 0)
        _ = try await bucket.insert("marked", value: Array("{\"v\":1}".utf8), expiry: 0)
        let plainCAS = try await bucket.remove("plain", cas: .zero)
        let markedCAS = try await bucket.mutateIn("marked", PurgeMarker.deletion, cas: .zero)
        var deletions: [String: BucketMutation] = [:]
        for await m in bucket.mutations() where m.deleted {
            deletions[m.key] = m
            if deletions.count == 2 { break }
        }
        #expect(deletions["plain"]?.cas == plainCAS && deletions["plain"]?.purged == false)
        #expect(deletions["marked"]?.cas == markedCAS && deletions["marked"]?.purged == true)
        await bucket.close()

        let bucket1 = try await Self.mount(a)
        let bucket2 = try await Self.mount(a)
        let gw1 = try await Self.gateway(bucket1)
        let gw2 = try await Self.gateway(bucket2)
        _ = try await gw1.put("doc", body: Self.body("{\"v\":1}"), user: nil)
        var seen = false
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, !seen {
            seen = try await Self.feed(gw2)["doc"] != nil
            if !seen { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(seen)
        _ = try await gw1.purge(["doc": ["*"]])
        // A later document: once gateway 2 lists it, its stream is past the purge on every vBucket it reads.
        _ = try await gw1.put("after", body: Self.body("{\"v\":2}"), user: nil)
        var feed2: [String: (UInt64, [String])] = [:]
        let catchUp = Date().addingTimeInterval(60)
        while Date() < catchUp {
            feed2 = try await Self.feed(gw2)
            if feed2["after"] != nil && feed2["doc"] == nil { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        // Still nothing a second later: no tombstone revision was written back.
        try await Task.sleep(for: .seconds(1))
        feed2 = try await Self.feed(gw2)
        #expect(feed2["after"] != nil && feed2["doc"] == nil, "gateway 2 lists doc as \(feed2["doc"]?.1 ?? [])")
        #expect(try await Self.feed(gw1)["doc"] == nil)
        #expect(try await bucket1.get("doc") == nil)
        await gw1.close()
        await gw2.close()
        await bucket1.close()
        await bucket2.close()
    }

    /// A gateway on a cluster bucket that is flushed under it (every vBucket starts a new history at 0, so its change
    /// stream is told to roll back and restarts every vBucket, finding nothing): every document it had indexed leaves
    /// its `_changes` feed. Before ADR 0096 the stream never said it restarted, and the gateway listed all twelve
    /// documents for as long as it ran (a failover to a copy that lacked writes left the same kind of ghosts).
    @Test func aFlushUnderTheGatewayEmptiesItsFeed() async throws {
        let a = try ServerProcess.started(name: "gw-flush")
        defer { a.stopAndRemove() }
        try a.initialize(authType: "sasl")
        let edit = try a.http("POST", "/pools/default/buckets/demo", form: [("flushEnabled", "1")])
        #expect(edit.status == 200, "\(edit.text)")
        let bucket = try await Self.mount(a)
        let gw = try await Self.gateway(bucket)
        let ids = (0..<12).map { "flushed-\($0)" }
        for id in ids { _ = try await gw.put(id, body: Self.body("{\"v\":1}"), user: nil) }
        #expect(Set(try await Self.feed(gw).keys).isSuperset(of: ids))

        let flush = try a.http("POST", "/pools/default/buckets/demo/controller/doFlush")
        #expect(flush.status == 200, "\(flush.text)")
        var left = Set(ids)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !left.isEmpty {
            try await Task.sleep(for: .milliseconds(100))
            left = Set(try await Self.feed(gw).keys).intersection(ids)
        }
        #expect(left.isEmpty, "still listed after the flush: \(left.sorted())")
        await gw.close()
        await bucket.close()
    }

    /// A failover to a copy that lacked the gateway's last writes (ADR 0096): three nodes, one replica. On vBuckets
    /// whose chain is [a, b], four documents reach both copies; then b is paused, 30 MiB of filler (more than b's
    /// replication window) and four more documents go to a only, a is killed, b resumed and a failed over. b becomes
    /// active without the last four, the gateway's stream is rolled back on those vBuckets, and the four documents
    /// the cluster lost leave the gateway's feed while the first four stay. Before ADR 0096 the gateway listed all
    /// eight for as long as it ran.
    @Test func documentsLostInAFailoverLeaveTheGatewaysFeed() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "gw-fo-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "none", replicaNumber: 1)
        let map = try ClusterHarness.map(nodes[0])
        func index(_ s: ServerProcess) -> Int { map.servers.firstIndex(of: "127.0.0.1:\(s.kvPort)") ?? -1 }
        // The gateway's writes need the sequence counter: b (paused) must not hold its active copy; a does (it is
        // not written after a is killed).
        let counterVB = VBucketHash.vbucket(forKey: Array("_sync:seq".utf8)).index
        let counterActive = counterVB < map.chains.count ? map.chains[counterVB].first ?? -1 : -1
        let a = try #require(nodes.first { index($0) == counterActive }, "\(ClusterHarness.summary(map))")
        let (b, c) = {
            let others = nodes.filter { $0 !== a }
            return (others[0], others[1])
        }()
        let chosen = ClusterHarness.keys(
            for: [index(a), index(b)], in: map, count: 8 + FailoverSafetyProcessTests.fillerCount, prefix: "fo::")
        #expect(chosen.count == 8 + FailoverSafetyProcessTests.fillerCount, "\(ClusterHarness.summary(map))")
        let (kept, lost) = (Array(chosen[0..<4]), Array(chosen[4..<8]))
        let fillers = Array(chosen.dropFirst(8))
        let vbs = Set(chosen.prefix(8).map { VBucketHash.vbucket(forKey: Array($0.utf8)).index })
        func highs(_ s: ServerProcess) throws -> [Int: Int] {
            let rows = try s.http("GET", "/settee/internal/seqnos?bucket=demo").json() as? [[Any]] ?? []
            var out: [Int: Int] = [:]
            for vb in vbs where vb < rows.count { out[vb] = rows[vb].count > 1 ? rows[vb][1] as? Int ?? -1 : -1 }
            return out
        }

        let bucket = try await Self.mount(c)
        let gw = try await Self.gateway(bucket)
        for id in kept { _ = try await gw.put(id, body: Self.body("{\"v\":1}"), user: nil) }
        #expect(try ClusterHarness.eventually { try highs(a) == highs(b) }, "b never caught up with a")

        FailoverSafetyProcessTests.signal(b, SIGSTOP)
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: c.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        let filler = [UInt8](repeating: 0x66, count: FailoverSafetyProcessTests.fillerBytes)
        for key in fillers { _ = try await client.upsert(key, filler) }
        for id in lost { _ = try await gw.put(id, body: Self.body("{\"v\":1}"), user: nil) }
        var before = Set<String>()
        let listedBy = Date().addingTimeInterval(20)
        while Date() < listedBy && !before.isSuperset(of: kept + lost) {
            before = Set(try await Self.feed(gw).keys)
            if !before.isSuperset(of: kept + lost) { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(before.isSuperset(of: kept + lost), "listed before the failover: \(before.sorted())")
        let aHighs = try highs(a)
        a.kill9()
        FailoverSafetyProcessTests.signal(b, SIGCONT)
        try await Task.sleep(for: .seconds(1))
        let bHighs = try highs(b)
        #expect(vbs.contains { (aHighs[$0] ?? 0) > (bHighs[$0] ?? 0) }, "a \(aHighs), b \(bHighs): b must lag")

        var failover = try c.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(a))])
        if failover.status == 400 {
            failover = try c.http(
                "POST", "/controller/failOver",
                form: [("otpNode", ClusterHarness.nodeName(a)), ("allowUnsafe", "true")])
        }
        #expect(failover.status == 200, "\(failover.text)")
        var listed = Set<String>()
        let deadline = Date().addingTimeInterval(60)
        repeat {
            try await Task.sleep(for: .milliseconds(200))
            listed = Set(try await Self.feed(gw).keys).intersection(kept + lost)
        } while Date() < deadline && listed != Set(kept)
        #expect(listed == Set(kept), "listed after the failover: \(listed.sorted()); lost: \(lost.sorted())")
        await client.close()
        await gw.close()
        await bucket.close()
    }

    /// Two gateways on one cluster bucket (two nodes): each writes its own documents; both `_changes`
    /// feeds list all of them with the same sequence per document (sequences are allocated in the bucket);
    /// a document written straight into the bucket with the smart client (as an SDK or `settee kv set`
    /// would) is imported by the gateways: it gets a revision, runs through the sync function (its
    /// `channels` property routes it to channel `public`) and appears in `_changes` and that channel's feed.
    @Test func twoGatewaysAgreeAndImportKVWrites() async throws {
        let a = try ServerProcess(name: "gw-two-a")
        let b = try ServerProcess(name: "gw-two-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "sasl")

        let bucket1 = try await Self.mount(a)
        let bucket2 = try await Self.mount(b)
        let gw1 = try await Self.gateway(bucket1)
        let gw2 = try await Self.gateway(bucket2)
        for i in 0..<40 {
            _ = try await gw1.put("one-\(i)", body: Self.body("{\"n\":\(i),\"channels\":[\"a\"]}"), user: nil)
            _ = try await gw2.put("two-\(i)", body: Self.body("{\"n\":\(i),\"channels\":[\"b\"]}"), user: nil)
        }
        let ids = Set((0..<40).flatMap { ["one-\($0)", "two-\($0)"] })
        var f1: [String: (UInt64, [String])] = [:]
        var f2: [String: (UInt64, [String])] = [:]
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            f1 = try await Self.feed(gw1)
            f2 = try await Self.feed(gw2)
            if ids.isSubset(of: Set(f1.keys)) && ids.isSubset(of: Set(f2.keys)) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(ids.isSubset(of: Set(f1.keys)), "gateway 1 lacks \(ids.subtracting(f1.keys).count) documents")
        #expect(ids.isSubset(of: Set(f2.keys)), "gateway 2 lacks \(ids.subtracting(f2.keys).count) documents")
        let disagreeing = ids.filter { f1[$0]?.0 != f2[$0]?.0 || f1[$0]?.1 != f2[$0]?.1 }
        #expect(disagreeing.isEmpty, "sequences or revisions differ for \(disagreeing.prefix(5))")
        #expect(Set(ids.compactMap { f1[$0]?.0 }).count == ids.count, "two documents share a sequence")

        // A KV write (no _sync metadata) is imported.
        let client = try await BucketClient.connect(ChangeStreamProcessTests.options(a), logger: quietClientLogger)
        _ = try await client.upsert(
            "kv-doc", Array("{\"title\":\"from kv\",\"channels\":[\"public\"]}".utf8), flags: 0x0200_0006,
            datatype: 1)
        await client.close()
        var imported: [String: (UInt64, [String])] = [:]
        var inChannel: [String: (UInt64, [String])] = [:]
        let importDeadline = Date().addingTimeInterval(60)
        while Date() < importDeadline {
            imported = try await Self.feed(gw2)
            inChannel = try await Self.feed(gw1, channels: ["public"])
            if imported["kv-doc"] != nil && inChannel["kv-doc"] != nil { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let rev = imported["kv-doc"]?.1.first ?? ""
        #expect(rev.hasPrefix("1-"), "imported revision: \(rev)")
        #expect(inChannel["kv-doc"] != nil && inChannel.count == 1, "channel public holds \(inChannel.keys)")
        let doc = try await gw1.get("kv-doc", rev: nil, revs: false, attsSince: nil, attachmentBodies: false, user: nil)
        #expect(doc.body["title"]?.stringValue == "from kv" && doc.body["_rev"]?.stringValue == rev)

        await gw1.close()
        await gw2.close()
        await bucket1.close()
        await bucket2.close()
    }

    /// A gateway on a one-node cluster keeps serving pushes (`_bulk_docs` with `new_edits=false`, as a
    /// replicator sends) and pulls (`_changes` + `open_revs`) while a second node is added and half the
    /// vBuckets move: every pushed revision is readable afterwards and listed once in `_changes`, and a
    /// second gateway mounted after the rebalance sees the same documents and sequences.
    @Test func pushAndPullThroughARebalance() async throws {
        let a = try ServerProcess(name: "gw-reb-a")
        let b = try ServerProcess(name: "gw-reb-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try a.initialize(replicaNumber: 1, authType: "sasl")
        let bucket = try await Self.mount(a)
        let gw = try await Self.gateway(bucket)

        func revision(_ i: Int) -> (JSON, RevID) {
            let props = Self.body("{\"n\":\(i),\"channels\":[\"push\"]}")
            // A first revision (no parent) always has one: generation 1.
            let rev = RevID.next(parent: nil, deleted: false, body: props) ?? RevID(generation: 1, digest: "")
            var doc = props
            doc.set("_id", .string("push-\(i)"))
            doc.set("_rev", .string(rev.description))
            doc.set(
                "_revisions",
                .object([("start", .number(1)), ("ids", .array([.string(rev.digest)]))]))
            return (doc, rev)
        }

        let pusher = Task { () -> (pushed: [String: RevID], errors: [String]) in
            var pushed: [String: RevID] = [:]
            var errors: [String] = []
            for batch in 0..<30 {
                let docs = (0..<20).map { revision(batch * 20 + $0) }
                let rows = await gw.bulkDocs(docs.map(\.0), newEdits: false, user: nil)
                for (i, row) in rows.enumerated() {
                    if row["error"] != nil {
                        errors.append("push-\(batch * 20 + i): \(row.text)")
                    } else {
                        pushed["push-\(batch * 20 + i)"] = docs[i].1
                    }
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
            return (pushed, errors)
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b])
        #expect(failure == nil, "\(failure ?? "")")
        let (pushed, errors) = await pusher.value
        #expect(errors.isEmpty, "\(errors.count) pushes failed: \(errors.prefix(3))")
        #expect(pushed.count == 600)

        // Pull: the feed lists each pushed document once, and open_revs returns the pushed revision.
        let page = try await gw.changes(ChangesQuery(), user: nil)
        let pushRows = page.rows.filter { $0.id.hasPrefix("push-") }
        #expect(pushRows.count == pushed.count && Set(pushRows.map(\.id)).count == pushRows.count)
        var wrong: [String] = []
        for (id, rev) in pushed {
            let revs = try await gw.openRevs(id, revs: [rev], revs: false, user: nil)
            guard case .ok(let body)? = revs.first, body["_rev"]?.stringValue == rev.description else {
                wrong.append(id)
                continue
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) pushed revisions not readable: \(wrong.prefix(3))")

        let bucket2 = try await Self.mount(b)
        let gw2 = try await Self.gateway(bucket2)
        let f1 = try await Self.feed(gw)
        var f2: [String: (UInt64, [String])] = [:]
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            f2 = try await Self.feed(gw2)
            if Set(pushed.keys).isSubset(of: Set(f2.keys)) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let differ = pushed.keys.filter { f1[$0]?.0 != f2[$0]?.0 }
        #expect(differ.isEmpty, "\(differ.count) documents with other sequences on the second gateway")
        await gw2.close()
        await bucket2.close()
        await gw.close()
        await bucket.close()
    }
}
