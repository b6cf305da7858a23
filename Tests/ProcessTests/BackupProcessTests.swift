import Foundation
import Logging
import SetteeBackup
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeSubdoc
import SetteeTestSupport
import Synchronization
import Testing

/// Backup and restore against real clusters (ADR 0147, issue 72's must-show).
@Suite(.serialized, .onTestThreads) struct BackupProcessTests {
    static func options(_ s: ServerProcess, bucket: String = "demo") -> ClientOptions {
        ClientOptions(
            seeds: [.http(NodeAddress(host: "127.0.0.1", port: s.adminPort))], bucket: bucket, username: s.user,
            password: s.password, operationTimeoutMs: 10_000)
    }

    /// One write of the steady writer: its sequence number `i` (the value is `{"w":i}`) and, once acknowledged,
    /// the CAS the source gave it.
    struct Write: Sendable {
        var i: Int
        var cas: CAS
    }

    /// The steady writer's key for write `i`, and the absolute expiry it gives every tenth key (else 0).
    static func liveKey(_ i: Int) -> String { "live::\(i % 2_000)" }
    static func liveExpiry(_ i: Int, _ expiry: UInt32) -> UInt32 { i % 2_000 % 10 == 0 ? expiry : 0 }

    static func retrying<T>(_ body: () async throws -> T) async throws -> T {
        let deadline = Date().addingTimeInterval(30)
        while true {
            do { return try await body() } catch {
                if Date() > deadline { throw error }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    static func lookup(_ c: BucketClient, _ key: String) async throws -> (exptime: Int?, app: String?) {
        guard
            let r = try await c.lookupIn(
                key,
                .multiLookup([
                    SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("$document.exptime".utf8)),
                    SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("app".utf8)),
                ]))
        else { return (nil, nil) }
        let exptime = r.results.first.flatMap { Int(String(decoding: $0.value, as: UTF8.self)) }
        let app =
            r.results.count > 1 && r.results[1].status == 0 ? String(decoding: r.results[1].value, as: UTF8.self) : nil
        return (exptime, app)
    }

    /// Issue 72's must-show: a 3-node cluster under a steady writer, a full backup, more writes, XATTR changes and
    /// deletes, then an incremental backup taken while the third node is rebalanced out (vBuckets move under the writer
    /// and the backup's streams); both restored into a fresh 2-node cluster under another bucket name. Every
    /// item acknowledged before the incremental began is there with the same value, CAS, expiry, flags and XATTRs
    /// (or, for a key the writer kept writing, a later write of its own), deleted keys stay deleted; a byte flipped
    /// in a segment file is found by `settee backup verify` and by a restore, which writes nothing of that segment.
    @Test func fullIncrementalThroughRebalanceThenRestoreUnderAnotherName() async throws {
        let (a, b, c) = (
            try ServerProcess(name: "bk-a"), try ServerProcess(name: "bk-b"), try ServerProcess(name: "bk-c")
        )
        let (d, e) = (try ServerProcess(name: "bk-d"), try ServerProcess(name: "bk-e"))
        let all = [a, b, c, d, e]
        defer { all.forEach { $0.stopAndRemove() } }
        for s in all { try s.start() }
        let repoDir = TestOutput.scratch("backup-repo")
        defer { try? FileManager.default.removeItem(at: repoDir) }
        let nodes = Unchecked(value: (a, b, c, d, e))
        try await offPool {
            let (a, b, c, d, e) = nodes.value
            try ClusterHarness.formCluster([a, b, c], authType: "sasl")
            try ClusterHarness.formCluster([d, e], authType: "sasl", moreBuckets: ["restored"])
        }
        let client = try await BucketClient.connect(Self.options(a), logger: quietClientLogger)
        let expiry = UInt32(Date().timeIntervalSince1970) + 86_400
        for i in 0..<500 {
            _ = try await Self.retrying {
                try await client.upsert("pre::\(i)", Array(#"{"i":\#(i)}"#.utf8), flags: UInt32(i), datatype: 1)
            }
        }
        for i in 0..<20 {
            _ = try await client.mutateIn(
                "x::\(i)",
                .multiMutation(
                    [
                        SubdocSpec(
                            operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: Array("app".utf8),
                            value: Array(#"{"n":\#(i)}"#.utf8)),
                        SubdocSpec(operation: .wholeDocumentSet, path: [], value: Array(#"{"x":\#(i)}"#.utf8)),
                    ], docFlags: .mkdoc, expiry: expiry))
        }
        // A key that is not UTF-8 (the protocol's keys are bytes): restore writes back these exact bytes, not a
        // text rewritten from them ("k\u{FFFD}y").
        let rawKey: [UInt8] = [0x6b, 0xff, 0xfe, 0x79]
        let rawMeta = DocumentMeta(
            cas: CAS(0x1700_0000_0000_0001), revSeqno: RevSeqNo(3), flags: 9, expiry: 0, datatype: 0)
        _ = try await client.collection("_default", "_default").setWithMeta(rawKey, Array("raw".utf8), meta: rawMeta)
        // The steady writer: write i sets `{"w":i}` (flags 7, every tenth key with an expiry); `acked` holds every
        // acknowledged write key by key.
        let acked = Mutex<[String: [Write]]>([:])
        let stop = Atomic<Bool>(false)
        let writer = Task {
            var i = 0
            while !stop.load(ordering: .relaxed) {
                let key = Self.liveKey(i)
                let v = Array(#"{"w":\#(i)}"#.utf8)
                let expiry = Self.liveExpiry(i, expiry)
                if let r = try? await client.upsert(key, v, flags: 7, expiry: expiry, datatype: 1) {
                    acked.withLock { $0[key, default: []].append(Write(i: i, cas: r.cas)) }
                }
                i += 1
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        var logger = Logger(label: "backup-test")
        logger.logLevel = .warning
        let repo = BackupRepository(repoDir.path)
        try repo.create()
        let runner = BackupRunner(repository: repo, options: Self.options(a), logger: logger)
        let full = try await runner.run(collections: [.defaultCollection])
        #expect(full.isFull)
        #expect(full.items >= 520, "full backup held \(full.items) items")

        // More writes, XATTR changes and deletes, then the third node is rebalanced out (vBuckets move under the
        // writer).
        for i in 0..<100 { _ = try await Self.retrying { try await client.remove("pre::\(i)") } }
        for i in 100..<200 {
            _ = try await Self.retrying {
                try await client.upsert("pre::\(i)", Array(#"{"i":\#(i),"v":2}"#.utf8), flags: 2, datatype: 1)
            }
        }
        for i in 0..<10 {
            _ = try await Self.retrying {
                try await client.mutateIn(
                    "x::\(i)",
                    .multiMutation(
                        [
                            SubdocSpec(
                                operation: .command(.dictUpsert), flags: [.xattrPath], path: Array("app".utf8),
                                value: Array(#"{"n":\#(i),"v":2}"#.utf8))
                        ], expiry: expiry))
            }
        }
        // What was acknowledged before the incremental began, key by key.
        let beforeIncremental = acked.withLock { $0 }
        // The incremental runs while the third node is rebalanced out: started once the rebalance runs, its streams'
        // vBuckets move under it (a stream of a vBucket that left its node ends and is reopened on the new one).
        let nodes3 = Unchecked(value: (a, b, c))
        let rebalance = Task { () throws -> String? in
            let (a, b, c) = nodes3.value
            return try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c], ejected: [c])
        }
        let started = try await offPool {
            try ClusterHarness.eventually(10) {
                let tasks = try nodes3.value.0.http("GET", "/pools/default/tasks").text
                return tasks.contains(#""type":"rebalance""#) && tasks.contains(#""status":"running""#)
            }
        }
        let incremental = try await runner.run(collections: [.defaultCollection])
        let failure = try await rebalance.value
        #expect(failure == nil, "\(failure ?? "")")
        print("backup during rebalance: rebalance seen running \(started); incremental \(incremental.items) items")
        stop.store(true, ordering: .relaxed)
        await writer.value
        #expect(incremental.parent == full.name)
        #expect(try repo.verify(full) > 0 && repo.verify(incremental) > 0)

        // Restore the chain into the other cluster under the name "restored".
        var mapping = DataMapping()
        mapping.buckets["demo"] = "restored"
        let restorer = RestoreRunner(repository: repo, options: Self.options(d, bucket: "restored"), logger: logger)
        let summary = try await restorer.run(
            chain: try repo.chain("demo", to: incremental.name), mapping: mapping, filter: nil, policy: .overwrite)
        #expect(summary.written > 0)
        let target = try await BucketClient.connect(Self.options(d, bucket: "restored"), logger: quietClientLogger)
        var wrong: [String] = []
        for i in 0..<500 {
            let key = "pre::\(i)"
            let got = try? await target.get(key)
            if i < 100 {
                if got != nil { wrong.append("\(key) deleted but restored") }
            } else {
                let v = i < 200 ? #"{"i":\#(i),"v":2}"# : #"{"i":\#(i)}"#
                let flags = i < 200 ? UInt32(2) : UInt32(i)
                if got?.value != Array(v.utf8) || got?.flags != flags {
                    wrong.append("\(key): \(String(describing: got))")
                }
            }
        }
        // Every key the writer had acknowledged: its last acknowledged write, or a later write of the writer's to that
        // key (the incremental may catch one; an unacknowledged write may have been applied), with the CAS the source
        // acknowledged for that write, flags 7 and the write's expiry.
        let ackedAtEnd = acked.withLock { $0 }
        #expect(beforeIncremental.count >= 100, "the writer had \(beforeIncremental.count) keys acknowledged")
        for (key, writes) in beforeIncremental {
            guard let last = writes.last else { continue }
            let got = try? await target.get(key)
            let w = got.flatMap { try? JSONSerialization.jsonObject(with: Data($0.value)) as? [String: Int] }?["w"]
            guard let got, let w, got.flags == 7, w >= last.i, Self.liveKey(w) == key else {
                wrong.append("\(key) missing or wrong: \(String(describing: got))")
                continue
            }
            if let ack = (ackedAtEnd[key] ?? []).first(where: { $0.i == w }), ack.cas != got.cas {
                wrong.append("\(key): CAS \(got.cas) != acknowledged \(ack.cas)")
            }
            let (exptime, _) = try await Self.lookup(target, key)
            if exptime != Int(Self.liveExpiry(w, expiry)) {
                wrong.append("\(key): exptime \(String(describing: exptime))")
            }
        }
        for i in 100..<500 where i % 20 == 0 {
            if try await Self.lookup(target, "pre::\(i)").exptime != 0 { wrong.append("pre::\(i) gained an expiry") }
        }
        for i in 0..<20 {
            let (exptime, app) = try await Self.lookup(target, "x::\(i)")
            let want = i < 10 ? #"{"n":\#(i),"v":2}"# : #"{"n":\#(i)}"#
            if exptime != Int(expiry) || app != want {
                wrong.append("x::\(i): exptime \(String(describing: exptime)) app \(String(describing: app))")
            }
        }
        let raw = try await target.collection("_default", "_default").get(rawKey)
        #expect(raw.value == Array("raw".utf8) && raw.flags == 9 && raw.cas == rawMeta.cas)
        await #expect(throws: ClientError.keyNotFound) { _ = try await target.get("k\u{FFFD}\u{FFFD}y") }
        #expect(wrong.isEmpty, "\(wrong.count) wrong, e.g. \(wrong.prefix(5))")
        // Every restored item keeps its CAS (SET_WITH_META): the same as the source's, whose pre:: and x:: keys have
        // not changed since the incremental; a live:: key holding the source's value has the source's CAS too.
        var casWrong: [String] = []
        var casCompared = 0
        for key in (100..<500).map({ "pre::\($0)" }) + (0..<20).map({ "x::\($0)" }) + beforeIncremental.keys.sorted() {
            let source = try await Self.retrying { try await client.get(key) }
            let restored = try? await target.get(key)
            if key.hasPrefix("live::") && restored?.value != source.value { continue }
            casCompared += 1
            if restored?.cas != source.cas {
                casWrong.append("\(key): \(String(describing: restored?.cas)) != \(source.cas)")
            }
        }
        #expect(
            casWrong.isEmpty && casCompared >= 420,
            "\(casCompared) compared, \(casWrong.count) wrong: \(casWrong.prefix(5))")

        // The CLI's restore with a key filter and the skip policy leaves a key the target changed alone; with
        // overwrite the backup's version comes back.
        _ = try await target.upsert("pre::150", Array(#"{"changed":1}"#.utf8), datatype: 1)
        let cli = Unchecked(value: d)
        let skip = try await offPool {
            try runCLI(
                [
                    "restore", "--repo", repoDir.path, "--bucket", "demo", "--map-data", "demo=restored",
                    "--filter-keys", "pre::1[0-9][0-9]", "--conflict", "skip",
                ], server: cli.value)
        }
        #expect(skip.status == 0, "\(skip.stderr)")
        #expect(skip.stdout.contains("0 written") && skip.stdout.contains("100 skipped"), "\(skip.stdout)")
        #expect(try await target.get("pre::150").value == Array(#"{"changed":1}"#.utf8))
        let overwrite = try await offPool {
            try runCLI(
                [
                    "restore", "--repo", repoDir.path, "--bucket", "demo", "--map-data", "demo=restored",
                    "--filter-keys", "pre::150", "--conflict", "overwrite",
                ], server: cli.value)
        }
        #expect(overwrite.stdout.contains("1 written"), "\(overwrite.stdout) \(overwrite.stderr)")
        #expect(try await target.get("pre::150").value == Array(#"{"i":150,"v":2}"#.utf8))
        #expect(try await target.get("pre::150").cas == client.get("pre::150").cas)

        // An interrupted backup (no backup.json, one segment missing) is resumed by the next run: same backup,
        // the kept segments read back, the missing one streamed again.
        let third = try await runner.run(collections: [.defaultCollection])
        try FileManager.default.removeItem(
            at: repo.backupDirectory("demo", third.name).appendingPathComponent("backup.json"))
        try FileManager.default.removeItem(at: repo.segmentURL("demo", third.name, .defaultCollection, VBucketID(5)))
        #expect(try repo.backups("demo").last?.manifest == nil)
        let resumed = try await runner.run(collections: [.defaultCollection])
        #expect(resumed.name == third.name && resumed.parent == incremental.name)
        #expect(resumed.segments[0]?.count == full.vbuckets)
        #expect(try repo.verify(resumed) == full.vbuckets)

        // A flipped byte in one of the incremental's segment files: verify and restore both refuse the backup.
        let seg = try #require(incremental.segments[0]?.first { $0.records > 0 })
        let url = repo.segmentURL("demo", incremental.name, .defaultCollection, seg.vbucket)
        var bytes = try Data(contentsOf: url)
        bytes[bytes.count / 2] ^= 0x5a
        try bytes.write(to: url)
        let verify = try runCLI(["backup", "verify", "--repo", repoDir.path, "--bucket", "demo"])
        #expect(verify.status != 0, "verify passed a corrupted file: \(verify.stdout)")
        #expect(verify.stderr.contains(url.lastPathComponent), "\(verify.stderr)")
        await #expect(throws: BackupError.self) {
            _ = try await restorer.run(
                chain: try repo.chain("demo", to: incremental.name), mapping: mapping, filter: nil, policy: .overwrite)
        }
        await target.close()
        await client.close()
    }

    /// A bucket with named collections backs up whole and restores into the same collections of another bucket
    /// (`settee backup` / `settee restore`, every collection of the manifest), though a collection created after
    /// the last write leaves every vBucket's last seqno a system event the `_default` stream never receives: the
    /// node's SEQNO_ADVANCED tells each collection's stream where a snapshot of others' records ends. Before, the
    /// backup waited for those seqnos until its deadline (600 s) and failed. Then `--conflict newer`: the higher
    /// CAS wins, tombstones included, whatever either side's revision count: a key the target wrote after the backup
    /// (once there, five times in the source) keeps the target's version, a key the target wrote before it takes
    /// the backup's, a key the target deleted after the backup stays deleted. And the with-meta writes into a named
    /// collection land there: SET_WITH_META's key was not stripped of its collection prefix (it was stored as a key
    /// of the default collection).
    @Test func namedCollectionsBackUpWholeAndNewerMeansTheHigherCAS() async throws {
        let server = try ServerProcess(name: "bk-coll")
        defer { server.stopAndRemove() }
        try server.start()
        let repoDir = TestOutput.scratch("backup-coll-repo")
        defer { try? FileManager.default.removeItem(at: repoDir) }
        let node = Unchecked(value: server)
        try await offPool {
            try ClusterHarness.formCluster([node.value], authType: "sasl", moreBuckets: ["restored"])
            for bucket in ["demo", "restored"] {
                for (path, name) in [("", "s1"), ("/s1/collections", "c1")] {
                    let r = try node.value.http(
                        "POST", "/pools/default/buckets/\(bucket)/scopes\(path)", form: [("name", name)])
                    guard r.status == 200 else { throw HarnessError("\(bucket) \(name): \(r.status) \(r.text)") }
                }
            }
        }
        var options = Self.options(server)
        options.collections = true
        var targetOptions = Self.options(server, bucket: "restored")
        targetOptions.collections = true
        let source = try await BucketClient.connect(options, logger: quietClientLogger)
        let target = try await BucketClient.connect(targetOptions, logger: quietClientLogger)
        let (sourceC1, targetC1) = (source.collection("s1", "c1"), target.collection("s1", "c1"))
        let (sourceDefault, targetDefault) = (
            source.collection("_default", "_default"), target.collection("_default", "_default")
        )
        // Written in the target first: older than the backup's version.
        _ = try await Self.retrying { try await targetDefault.upsert("n::older", Array(#"{"t":1}"#.utf8), datatype: 1) }
        for i in 0..<50 {
            _ = try await Self.retrying {
                try await sourceDefault.upsert("d::\(i)", Array(#"{"d":\#(i)}"#.utf8), datatype: 1)
            }
            _ = try await Self.retrying {
                try await sourceC1.upsert("c::\(i)", Array(#"{"c":\#(i)}"#.utf8), flags: 3, datatype: 1)
            }
        }
        for k in ["n::older", "n::tomb"] {
            _ = try await sourceDefault.upsert(k, Array(#"{"s":1}"#.utf8), datatype: 1)
        }
        for round in 1...5 {
            _ = try await sourceDefault.upsert("n::newer", Array(#"{"s":\#(round)}"#.utf8), datatype: 1)
        }
        // The last seqno of every vBucket a system event.
        let c2 = try server.http("POST", "/pools/default/buckets/demo/scopes/s1/collections", form: [("name", "c2")])
        #expect(c2.status == 200, "\(c2.text)")

        let backup = try await offPool {
            try runCLI(["backup", "--repo", repoDir.path, "--bucket", "demo"], server: node.value)
        }
        #expect(backup.status == 0, "\(backup.stdout) \(backup.stderr)")
        // The CLI reported it (issue 72 item 4): `/pools/default/tasks` shows the backup, completed, with its items.
        let tasks = try server.http("GET", "/pools/default/tasks").text
        #expect(
            tasks.contains(#""type":"backup""#) && tasks.contains(#""status":"completed""#)
                && tasks.contains(#""items":103"#), "\(tasks)")
        // Written in the target after the backup: newer than the backup's versions.
        _ = try await targetDefault.upsert("n::newer", Array(#"{"t":2}"#.utf8), datatype: 1)
        _ = try await targetDefault.upsert("n::tomb", Array(#"{"t":3}"#.utf8), datatype: 1)
        _ = try await targetDefault.remove("n::tomb")

        let restore = try await offPool {
            try runCLI(
                [
                    "restore", "--repo", repoDir.path, "--bucket", "demo", "--map-data", "demo=restored",
                    "--filter-keys", "[dc]::.*",
                ], server: node.value)
        }
        #expect(restore.status == 0, "\(restore.stdout) \(restore.stderr)")
        #expect(try server.http("GET", "/pools/default/tasks").text.contains(#""type":"restore""#))
        for i in 0..<50 {
            let d = try? await targetDefault.get("d::\(i)")
            #expect(d?.value == Array(#"{"d":\#(i)}"#.utf8), "d::\(i)")
            let c = try? await targetC1.get("c::\(i)")
            #expect(c?.value == Array(#"{"c":\#(i)}"#.utf8) && c?.flags == 3, "c::\(i)")
        }
        await #expect(throws: ClientError.keyNotFound) { _ = try await targetDefault.get("c::0") }

        let newer = try await offPool {
            try runCLI(
                [
                    "restore", "--repo", repoDir.path, "--bucket", "demo", "--map-data", "demo=restored",
                    "--filter-keys", "n::.*", "--conflict", "newer",
                ], server: node.value)
        }
        #expect(newer.status == 0, "\(newer.stderr)")
        #expect(newer.stdout.contains("1 written") && newer.stdout.contains("2 skipped"), "\(newer.stdout)")
        let older = try? await targetDefault.get("n::older")
        #expect(older?.value == Array(#"{"s":1}"#.utf8))
        #expect(try await older?.cas == sourceDefault.get("n::older").cas)
        let kept = try? await targetDefault.get("n::newer")
        #expect(kept?.value == Array(#"{"t":2}"#.utf8))
        await #expect(throws: ClientError.keyNotFound) { _ = try await targetDefault.get("n::tomb") }
        await source.close()
        await target.close()
    }

    /// Issue 72 items 1-2 for the gateway. A gateway database keeps its users and roles (`_sync:user:`,
    /// `_sync:role:`), sessions (`_sync:session:`), sequence counter (`_sync:seq`) and each document's revision tree
    /// (the `_sync` XATTR) in its bucket's default collection, so a bucket backup carries them: restored into a fresh
    /// cluster under another bucket name, a gateway mounted there authenticates the user with its password and its
    /// role's channels, knows the session and the role, and sees every document (one it wrote, one it deleted, one an
    /// SDK wrote and it imported) as its own at the same sequence and revisions, not as a new import: CAS kept by the
    /// with-meta writes matches the `_sync` XATTR's, so the next update continues the history on one leaf and takes a
    /// sequence after the restored ones.
    @Test func gatewayUsersRolesSessionsAndHistoriesComeBackWithTheBucket() async throws {
        let (s, t) = (try ServerProcess(name: "bk-gw-s"), try ServerProcess(name: "bk-gw-t"))
        defer { [s, t].forEach { $0.stopAndRemove() } }
        for p in [s, t] { try p.start() }
        let nodes = Unchecked(value: (s, t))
        try await offPool {
            try ClusterHarness.formCluster([nodes.value.0], authType: "sasl", replicaNumber: 0)
            try ClusterHarness.formCluster(
                [nodes.value.1], authType: "sasl", replicaNumber: 0, moreBuckets: ["restored"])
        }
        let body = GatewayClusterProcessTests.body
        let sourceBucket = try await GatewayClusterProcessTests.mount(s)
        let source = try await GatewayClusterProcessTests.gateway(sourceBucket)
        _ = try await source.putPrincipal("editors", isRole: true, body(#"{"admin_channels":["e"]}"#))
        _ = try await source.putPrincipal(
            "alice", isRole: false,
            body(#"{"password":"alice-pw-1","admin_channels":["a"],"admin_roles":["editors"],"email":"a@example.com"}"#)
        )
        let session = try await source.createSession(user: "alice", ttlSeconds: 3_600)
        let r1 = try await source.put("doc", body: body(#"{"channels":["a"],"v":1}"#), user: nil)
        let r2 = try await source.put("doc", body: body(#"{"_rev":"\#(r1)","channels":["a"],"v":2}"#), user: nil)
        let r3 = try await source.put("doc", body: body(#"{"_rev":"\#(r2)","channels":["a"],"v":3}"#), user: nil)
        let g1 = try await source.put("gone", body: body(#"{"channels":["a"]}"#), user: nil)
        _ = try await source.delete("gone", rev: g1, user: nil)
        let client = try await BucketClient.connect(Self.options(s), logger: quietClientLogger)
        _ = try await client.upsert("sdk", Array(#"{"channels":["e"],"v":1}"#.utf8), datatype: 1)
        let imported = try await Self.retrying { () async throws -> JSON in
            let (doc, _) = try await source.get("sdk", revs: true, user: nil)
            guard doc["_rev"]?.stringValue?.hasPrefix("1-") == true else { throw HarnessError("not imported: \(doc)") }
            return doc
        }
        let sourceDoc = try await source.get("doc", revs: true, user: nil).body
        #expect(sourceDoc["_rev"]?.stringValue == r3.description)
        let sourceFeed = try await GatewayClusterProcessTests.feed(source)
        #expect(Set(sourceFeed.keys) == ["doc", "gone", "sdk"], "\(sourceFeed)")
        var sourceCAS: [String: CAS] = [:]
        for key in ["doc", "sdk", "_sync:user:alice", "_sync:role:editors", "_sync:session:\(session.id)"] {
            sourceCAS[key] = try await client.get(key).cas
        }
        await source.close()
        await sourceBucket.close()

        var logger = Logger(label: "backup-test")
        logger.logLevel = .warning
        let repo = BackupRepository(TestOutput.scratch("backup-gw-repo").path)
        defer { try? FileManager.default.removeItem(atPath: repo.root.path) }
        try repo.create()
        let backup = try await BackupRunner(repository: repo, options: Self.options(s), logger: logger).run(
            collections: [.defaultCollection])
        var mapping = DataMapping()
        mapping.buckets["demo"] = "restored"
        let restored = try await RestoreRunner(
            repository: repo, options: Self.options(t, bucket: "restored"), logger: logger
        ).run(chain: try repo.chain("demo", to: backup.name), mapping: mapping, filter: nil, policy: .overwrite)
        #expect(restored.written >= 8, "\(restored)")

        let targetBucket = try await RemoteBucket(
            url: GatewayClusterProcessTests.url(t), bucket: "restored", username: t.user, password: t.password,
            logger: quietClientLogger)
        let target = try await GatewayDatabase(
            options: DatabaseOptions(name: "demo", importDocs: true), bucket: targetBucket, logger: quietClientLogger)
        // The user, with its password, its own channel and its role's; the role; the session.
        let alice = try await Self.retrying {
            guard let u = await target.authenticate(name: "alice", password: "alice-pw-1") else {
                throw HarnessError("alice not known yet")
            }
            return u
        }
        let aliceInfo = try await target.principal("alice", isRole: false)
        #expect(aliceInfo["roles"] == body(#"["editors"]"#), "\(aliceInfo)")
        let channels = Set(aliceInfo["all_channels"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        #expect(channels.isSuperset(of: ["a", "e"]), "\(aliceInfo)")
        #expect(await target.authenticate(name: "alice", password: "wrong") == nil)
        #expect(try await target.principal("editors", isRole: true)["admin_channels"] == body(#"["e"]"#))
        #expect(aliceInfo["email"]?.stringValue == "a@example.com")
        #expect(await target.sessionInfo(session.id)?.user == "alice")
        #expect(await target.session(session.id) != nil)
        // Every document at the source's sequence and revisions: indexed as the gateway's own, never imported again
        // (an import would have written a new revision at a new sequence, and a new CAS).
        let targetFeed = try await Self.retrying { () async throws -> [String: (UInt64, [String])] in
            let feed = try await GatewayClusterProcessTests.feed(target)
            guard Set(feed.keys) == Set(sourceFeed.keys) else { throw HarnessError("feed so far: \(feed)") }
            return feed
        }
        for (id, (seq, revs)) in sourceFeed {
            #expect(
                targetFeed[id]?.0 == seq && targetFeed[id]?.1 == revs, "\(id): \(String(describing: targetFeed[id]))")
        }
        let targetClient = try await BucketClient.connect(
            Self.options(t, bucket: "restored"), logger: quietClientLogger)
        for (key, cas) in sourceCAS {
            #expect(try await targetClient.get(key).cas == cas, "\(key)")
        }
        #expect(try await target.get("doc", revs: true, user: nil).body == sourceDoc)
        #expect(try await target.get("sdk", revs: true, user: nil).body == imported)
        await #expect(throws: GatewayError.self) { _ = try await target.get("gone", user: nil) }
        // The next update continues the history: a child of the restored leaf, one leaf, a sequence after them all.
        let r4 = try await target.put("doc", body: body(#"{"_rev":"\#(r3)","channels":["a"],"v":4}"#), user: alice)
        #expect(r4.generation == 4)
        #expect(try await target.openRevs("doc", revs: nil, revs: true, user: nil).count == 1)
        let ids = try await target.get("doc", revs: true, user: nil).body["_revisions"]?["ids"]?.arrayValue ?? []
        #expect(ids.compactMap(\.stringValue) == [r4.digest, r3.digest, r2.digest, r1.digest])
        let after = try await Self.retrying { () async throws -> UInt64 in
            guard let (seq, revs) = try await GatewayClusterProcessTests.feed(target)["doc"], revs == [r4.description]
            else { throw HarnessError("update not in the feed yet") }
            return seq
        }
        #expect(after > sourceFeed.values.map(\.0).max() ?? 0)
        await targetClient.close()
        await client.close()
        await target.close()
        await targetBucket.close()
    }
}
