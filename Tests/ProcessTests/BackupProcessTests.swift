import Foundation
import Logging
import SetteeBackup
import SetteeClient
import SetteeCore
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

    /// What a key should be after a restore.
    struct Expected: Sendable {
        var value: [UInt8]
        var flags: UInt32
    }

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

    /// A 3-node cluster under a steady writer: a full backup, more writes and deletes, a rebalance (a third node
    /// joins), an incremental backup; both restored into a fresh 2-node cluster under another bucket name. Every
    /// write acknowledged before the incremental began is there with its value and flags, XATTRs and expiry of the
    /// documents written with them, deleted keys stay deleted; a byte flipped in a segment file is found by
    /// `settee backup verify` and by a restore, which writes nothing of that segment.
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
        let nodes = Unchecked(value: (a, b, d, e))
        try await offPool {
            let (a, b, d, e) = nodes.value
            try ClusterHarness.formCluster([a, b], authType: "sasl")
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
        // The steady writer: what it has had acknowledged, key by key.
        let acked = Mutex<[String: Expected]>([:])
        let stop = Atomic<Bool>(false)
        let writer = Task {
            var i = 0
            while !stop.load(ordering: .relaxed) {
                let key = "live::\(i % 2_000)"
                let v = Array(#"{"w":\#(i)}"#.utf8)
                if (try? await client.upsert(key, v, flags: 7, datatype: 1)) != nil {
                    acked.withLock { $0[key] = Expected(value: v, flags: 7) }
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

        // More writes and deletes, then a third node joins (a rebalance moves vBuckets under the writer).
        for i in 0..<100 { _ = try await Self.retrying { try await client.remove("pre::\(i)") } }
        for i in 100..<200 {
            _ = try await Self.retrying {
                try await client.upsert("pre::\(i)", Array(#"{"i":\#(i),"v":2}"#.utf8), flags: 2, datatype: 1)
            }
        }
        #expect(try ClusterHarness.addNode(a, c).status == 200)
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c])
        #expect(failure == nil, "\(failure ?? "")")
        let beforeIncremental = acked.withLock { $0 }
        let incremental = try await runner.run(collections: [.defaultCollection])
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
        for (key, want) in beforeIncremental {
            let got = try? await target.get(key)
            // The writer may have overwritten the key again before the incremental's end: a newer value of its own.
            guard let got, got.flags == want.flags, String(decoding: got.value, as: UTF8.self).hasPrefix(#"{"w":"#)
            else {
                wrong.append("\(key) missing or wrong")
                continue
            }
        }
        for i in 0..<20 {
            let (exptime, app) = try await Self.lookup(target, "x::\(i)")
            if exptime != Int(expiry) || app != #"{"n":\#(i)}"# {
                wrong.append("x::\(i): exptime \(String(describing: exptime)) app \(String(describing: app))")
            }
        }
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
}
