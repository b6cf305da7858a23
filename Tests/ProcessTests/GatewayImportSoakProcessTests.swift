import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeSubdoc
import SetteeTestSupport
import Synchronization
import Testing

/// Issue 67's soak ("must show"): while an SDK application (the smart client) updates 1,000 documents continuously
/// on a 3-node cluster bucket, one-shot pulls of the same `settee-gateway` database through the project's replicator
/// (PouchDB's algorithm: `_changes`, `_revs_diff`, `_bulk_get` with `latest=true`) all finish without error, in
/// both layouts (shared bucket access, and the 1.x one with `_sync` in the body). Before the revision cache, a
/// revision an import replaced lost its body at once and a pull that `_changes` had told about it failed to fetch it
/// ("There was a problem getting docs." in PouchDB).
///
/// `make test` runs a short shape; `SETTEE_SOAK=1` runs the issue's (60 s, 200 pulls, 1,000 documents).
/// `SETTEE_SOAK_SECONDS`, `SETTEE_SOAK_PULLS`, `SETTEE_SOAK_DOCS`, `SETTEE_SOAK_AT_ONCE` and `SETTEE_SOAK_RATE`
/// (SDK writes per second, 0 = as fast as the writer goes) override either shape; `SETTEE_SOAK_LAYOUT=shared` (or
/// `legacy`) runs one layout only.
@Suite("Gateway import soak (real processes)", .serialized, .onTestThreads)
struct GatewayImportSoakProcessTests {
    /// How big a soak is.
    struct Shape: Sendable, CustomStringConvertible {
        /// How long the SDK writes at least (it keeps writing until the last pull has finished).
        var seconds: Double
        /// One-shot pulls of the whole database, each into a fresh replica.
        var pulls: Int
        var documents: Int
        /// Pulls running at the same time.
        var pullsAtOnce: Int
        /// SDK writes per second, all lanes together; 0: unpaced.
        var writesPerSecond: Int

        static func fromEnvironment() -> Shape {
            let environment = ProcessInfo.processInfo.environment
            // `make test`'s shape proves the kind (no pull fails a fetch while the SDK replaces what `_changes`
            // listed) at a rate a debug build keeps up with beside the rest of the suite on 2 cores: a one-shot pull
            // ends only once it reads a short `_changes` page, so a pull slower than the writes chases the feed and
            // never ends (at 250/s under the full suite's load every shared-access pull did). The issue's shape is
            // the soak's.
            var shape =
                environment["SETTEE_SOAK"] == "1"
                ? Shape(seconds: 60, pulls: 200, documents: 1000, pullsAtOnce: 4, writesPerSecond: 250)
                : Shape(seconds: 8, pulls: 12, documents: 500, pullsAtOnce: 3, writesPerSecond: 40)
            func number(_ name: String) -> Int? { environment[name].flatMap { Int($0) } }
            if let s = environment["SETTEE_SOAK_SECONDS"].flatMap(Double.init), s > 0 { shape.seconds = s }
            if let n = number("SETTEE_SOAK_PULLS"), n > 0 { shape.pulls = n }
            if let n = number("SETTEE_SOAK_DOCS"), n > 0 { shape.documents = n }
            if let n = number("SETTEE_SOAK_AT_ONCE"), n > 0 { shape.pullsAtOnce = n }
            if let n = number("SETTEE_SOAK_RATE"), n >= 0 { shape.writesPerSecond = n }
            return shape
        }

        var description: String {
            "\(documents) documents, SDK writes for at least \(seconds) s at "
                + (writesPerSecond > 0 ? "\(writesPerSecond)/s" : "full speed")
                + ", \(pulls) one-shot pulls \(pullsAtOnce) at a time"
        }
    }

    /// The two ways a gateway database lays out a document, each on its own bucket of the one cluster.
    enum Layout: String, Sendable, CaseIterable {
        /// `enable_shared_bucket_access: true`: the item is the application's body, `_sync` a system XATTR.
        case shared
        /// The 1.x layout: `_sync` inside the body.
        case legacy

        var bucket: String { self == .shared ? "demo" : "legacy" }
    }

    /// A flag the soak's tasks share.
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    /// The SDK's last write of one document: its bytes when it was a whole-body upsert (nil after a sub-document
    /// mutation, whose bytes the data node makes), and the body it leaves.
    struct LastWrite: Sendable {
        var bytes: [UInt8]?
        var body: JSON
    }

    /// What the SDK writer did.
    struct Writes: Sendable {
        var last: [Int: LastWrite] = [:]
        var upserts = 0
        var subdocs = 0
        var errors: [String] = []
    }

    /// What the soak's pulls did, shared by their tasks.
    final class Tally: Sendable {
        let nextPull = Atomic<Int>(0)
        let pulls = Mutex<[Pull]>([])
        /// Pulls that could not run at all (no endpoint).
        let pullErrors = Mutex<[String]>([])
        let liteRuns = Mutex<[Run]>([])
        /// The one-shot pulls over, with or without error.
        var oneShotsOver: Int {
            pulls.withLock { $0.count } + pullErrors.withLock { $0.filter { !$0.hasPrefix("lite") }.count }
        }
    }

    /// What one pull did.
    struct Pull: Sendable {
        var run: Run
        /// Seconds into the soak it started.
        var start: Double
        var documents: Int
        var badBodies: [String]
    }

    static func key(_ i: Int) -> String { "soak-\(i)" }

    /// Round `round`'s whole body of document `i`: channels, unicode, a float, nesting.
    static func body(_ i: Int, round: Int) -> [UInt8] {
        Array(
            (#"{"n":\#(i),"round":\#(round),"via":"upsert","channels":["soak","c\#(i % 8)"],"#
                + #""note":"ünïcødé ✓ \#(i)/\#(round)","nested":{"a":[1,2.5,{"b":null}],"t":true}}"#).utf8)
    }

    /// `object` with member `name` set to `value` (replaced in place, or appended).
    static func setting(_ object: JSON, _ name: String, _ value: JSON) -> JSON {
        var members = object.objectValue ?? []
        if let at = members.firstIndex(where: { $0.0 == name }) {
            members[at].1 = value
        } else {
            members.append((name, value))
        }
        return .object(members)
    }

    /// A body's application members (no `_` members).
    static func members(_ body: JSON) -> JSON { .object((body.objectValue ?? []).filter { !$0.0.hasPrefix("_") }) }

    /// A body's application members, canonical: what every reader must agree on.
    static func application(_ body: JSON) -> String { LiteConvergence.canonical(members(body)) }

    static let replicatorLogger: Logger = {
        var logger = Logger(label: "settee.test.soak")
        logger.logLevel = .warning
        return logger
    }()

    /// One whole-body upsert or sub-document mutation of document `i`, tried up to three times (both are
    /// idempotent); the body it leaves.
    static func write(
        _ client: BucketClient, _ i: Int, round: Int, previous: LastWrite?, subdoc: Bool
    ) async throws -> LastWrite {
        var attempt = 0
        while true {
            do {
                if subdoc, let previous {
                    _ = try await client.mutateIn(
                        key(i),
                        .multiMutation([
                            SubdocSpec(
                                operation: .command(.dictUpsert), path: Array("round".utf8),
                                value: Array("\(round)".utf8)),
                            SubdocSpec(
                                operation: .command(.dictUpsert), path: Array("via".utf8),
                                value: Array(#""subdoc""#.utf8)),
                        ]))
                    let body = setting(
                        setting(previous.body, "round", .number(Double(round))), "via", .string("subdoc"))
                    return LastWrite(bytes: nil, body: body)
                }
                let bytes = body(i, round: round)
                _ = try await client.upsert(key(i), bytes, flags: 0x0200_0006, datatype: 1)
                return LastWrite(bytes: bytes, body: try JSON.parse(bytes))
            } catch {
                attempt += 1
                if attempt >= 3 { throw error }
            }
        }
    }

    /// The SDK application: `lanes` tasks, each owning the documents `i % lanes == lane` and updating them round after
    /// round (every fifth write a sub-document mutation of two members, the rest whole-body upserts), paced to
    /// `shape.writesPerSecond`, until `stop` is set or `hardStop` passes.
    static func runWriter(
        _ client: BucketClient, shape: Shape, seeded: [Int: LastWrite], lanes: Int, stop: Flag,
        hardStop: ContinuousClock.Instant
    ) async -> Writes {
        await withTaskGroup(of: Writes.self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    var out = Writes()
                    for i in stride(from: lane, to: shape.documents, by: lanes) { out.last[i] = seeded[i] }
                    let perSecond = Double(shape.writesPerSecond) / Double(lanes)
                    let started = ContinuousClock.now
                    var written = 0
                    var round = 1
                    rounds: while !stop.isSet && ContinuousClock.now < hardStop {
                        for i in stride(from: lane, to: shape.documents, by: lanes) {
                            if stop.isSet || ContinuousClock.now >= hardStop { break rounds }
                            if perSecond > 0 {
                                let due = started + .seconds(Double(written) / perSecond)
                                if due > ContinuousClock.now { try? await Task.sleep(until: due, clock: .continuous) }
                            }
                            let subdoc = (i + round) % 5 == 0
                            do {
                                out.last[i] = try await write(
                                    client, i, round: round, previous: out.last[i], subdoc: subdoc)
                                if subdoc { out.subdocs += 1 } else { out.upserts += 1 }
                            } catch {
                                out.errors.append("\(key(i)) round \(round): \(error)")
                            }
                            written += 1
                        }
                        round += 1
                    }
                    return out
                }
            }
            var all = Writes()
            for await lane in group {
                all.last.merge(lane.last) { _, new in new }
                all.upserts += lane.upserts
                all.subdocs += lane.subdocs
                all.errors += lane.errors
            }
            return all
        }
    }

    /// Runs one one-shot pull of `url` into `target` to its end (stopped after `timeout`). Like PouchDB's one-shot
    /// replication, any failed request ends it with that error (`maxAttempts: 1`): nothing is retried behind the
    /// test's back.
    static func pull(_ url: String, into target: any ReplicationEndpoint, timeout: Duration) async throws -> Run {
        let replicator = Replicator(
            source: try RemoteEndpoint(url: url, logger: replicatorLogger), target: target,
            options: ReplicatorOptions(backoffInitialMs: 20, backoffMaxMs: 500, maxAttempts: 1),
            logger: replicatorLogger)
        let began = ContinuousClock.now
        let timedOut = Flag()
        replicator.start()
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            timedOut.set()
            await replicator.stop()
        }
        let status = await replicator.waitUntilStopped()
        watchdog.cancel()
        return Run(
            status: status, timedOut: timedOut.isSet, seconds: (ContinuousClock.now - began) / .seconds(1),
            timings: replicator.timings)
    }

    /// One replication run: how it ended, how long it took and where the time went (`Replicator.timings`).
    struct Run: Sendable, CustomStringConvertible {
        var status: ReplicationStatus
        /// Stopped by the watchdog, not finished by itself.
        var timedOut: Bool
        var seconds: Double
        var timings: [String: Duration]

        /// Finished by itself, without error and without a per-document failure.
        var clean: Bool {
            !timedOut && status.lastError == nil && status.docWriteFailures == 0 && status.completed == status.total
        }

        var description: String {
            let spent = timings.sorted { $0.key < $1.key }.map {
                "\($0.key) " + String(format: "%.1f", $0.value / .seconds(1))
            }
            return String(format: "%.1f s", seconds) + (timedOut ? " (timed out)" : "")
                + " read \(status.docsRead) completed \(status.completed)/\(status.total) failures \(status.docWriteFailures)"
                + " error \(status.lastError.map { "\($0)" } ?? "none"); " + spent.joined(separator: ", ")
        }
    }

    /// The gateway's documents as an admin `_all_docs?include_docs=true` serves them, by id.
    static func served(_ adminDB: String) async throws -> [String: JSON] {
        let reply = try await GatewayHTTP.request(
            .GET, "\(adminDB)/_all_docs?include_docs=true", headers: [("Accept", "application/json")])
        guard reply.status == 200 else { throw HarnessError("_all_docs: \(reply.status) \(reply.text.prefix(300))") }
        var out: [String: JSON] = [:]
        for row in try JSON.parse(reply.body)["rows"]?.arrayValue ?? [] {
            if let id = row["id"]?.stringValue, let doc = row["doc"] { out[id] = doc }
        }
        return out
    }

    /// The documents whose served application body is not `last`'s (all of them when `_all_docs` fails).
    static func behind(_ adminDB: String, _ last: [Int: LastWrite]) async -> [String] {
        guard let docs = try? await served(adminDB) else { return last.keys.map(key) }
        return last.compactMap { i, write in
            docs[key(i)].map(application) == application(write.body) ? nil : key(i)
        }
    }

    /// Polls (bounded) until the gateway serves every document as `last` says; the documents still behind.
    static func waitUntilServed(_ adminDB: String, _ last: [Int: LastWrite], seconds: Double) async -> [String] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        var missing = await behind(adminDB, last)
        while !missing.isEmpty && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(250))
            missing = await behind(adminDB, last)
        }
        return missing.sorted()
    }

    /// The gateway's `/_expvar` import counters for `db`: (import_count, import_error_count).
    static func importCounters(_ gateway: GatewayProcess, _ db: String) async -> (Int, Int)? {
        guard let reply = try? await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gateway.adminPort)/_expvar"),
            let stats = try? JSON.parse(reply.body)["syncgateway"]?["per_db"]?[db]?["shared_bucket_import"],
            let count = stats["import_count"]?.intValue, let errors = stats["import_error_count"]?.intValue
        else { return nil }
        return (count, errors)
    }

    /// Starts and forms the 3-node cluster: bucket `demo` (shared layout) and `legacy`, each with one replica, `sasl`.
    static func startCluster(_ nodes: [ServerProcess]) async throws {
        let cluster = Unchecked(value: nodes)
        try await offPool {
            for node in cluster.value { try node.start() }
            try ClusterHarness.formCluster(
                cluster.value, authType: "sasl", moreBuckets: [Layout.legacy.bucket], servedTimeout: 60)
        }
    }

    @Test func pullsFinishWhileAnSDKUpdatesDocumentsOnAClusterBucket() async throws {
        // Proves issue 67's soak on real processes (a 3-node cluster, one replica, a `settee-gateway` importing with
        // `import_docs`), once per layout: while the smart client updates every document continuously (whole-body
        // upserts and sub-document mutations), every one-shot pull of the whole database through the public port
        // finishes by itself with no error and no per-document failure, stores every document, and each revision it
        // fetched carries the document's body (no `_sync`, no empty body); a Lite replica pulled again and again
        // meanwhile converges after the writer stops: the same single leaf, winner and body as the gateway, whose
        // bodies are what the SDK wrote last, and the KV items too (shared access: the upsert's bytes, 1.x layout:
        // the body minus `_sync`); the gateway refused no import.
        let shape = Shape.fromEnvironment()
        print("gateway import soak: \(shape)")
        let nodes = try (0..<3).map { try ServerProcess(name: "gw-soak-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        let clusterStart = ContinuousClock.now
        try await Self.startCluster(nodes)
        print(
            "gateway import soak: 3-node cluster with buckets demo and legacy in \(ContinuousClock.now - clusterStart)")
        let only = ProcessInfo.processInfo.environment["SETTEE_SOAK_LAYOUT"].flatMap(Layout.init(rawValue:))
        for layout in Layout.allCases where only == nil || only == layout {
            try await Self.soak(layout, nodes: nodes, shape: shape)
        }
    }

    /// One layout's soak on the running cluster: its own bucket and gateway.
    static func soak(_ layout: Layout, nodes: [ServerProcess], shape: Shape) async throws {
        let started = ContinuousClock.now
        let gateway = try GatewayProcess(
            name: "soak-\(layout.rawValue)",
            config: """
                {"databases": {"db": {"server": "http://127.0.0.1:\(nodes[0].adminPort)", "bucket": "\(layout.bucket)",
                   "username": "Administrator", "password": "password", "import_docs": true,
                   "enable_shared_bucket_access": \(layout == .shared),
                   "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
                """)
        let adminDB = "http://127.0.0.1:\(gateway.adminPort)/db"
        let publicDB = "http://127.0.0.1:\(gateway.port)/db"
        try await gateway.start {
            (try? await GatewayHTTP.request(.GET, adminDB + "/", timeout: .seconds(2)))?.status == 200
        }
        defer { gateway.stop() }
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: nodes[1].adminPort))], bucket: layout.bucket,
                username: "Administrator", password: "password", operationTimeoutMs: 10_000),
            logger: quietClientLogger)
        let liteDirectory = TemporaryDirectory.make("soak-\(layout.rawValue)")
        let lite = try Database(name: "replica", directory: liteDirectory)
        defer {
            lite.close()
            try? FileManager.default.removeItem(atPath: liteDirectory)
        }

        // Round 0 of every document, imported before the soak starts.
        let seeded = Mutex<[Int: LastWrite]>([:])
        let seedErrors = await ClusterDataProcessTests.parallel(shape.documents, width: 16) { i in
            let write = try await Self.write(client, i, round: 0, previous: nil, subdoc: false)
            seeded.withLock { $0[i] = write }
        }
        try #require(seedErrors.isEmpty, "\(seedErrors.count) seed writes failed: \(seedErrors.prefix(3))")
        let seed = seeded.withLock { $0 }
        let notImported = await Self.waitUntilServed(adminDB, seed, seconds: 120)
        try #require(
            notImported.isEmpty, "\(notImported.count) seeded documents never imported: \(notImported.prefix(5))")
        let seedTime = ContinuousClock.now - started

        // The soak: the writer, the one-shot pulls into fresh replicas, and the Lite replica pulled again and again.
        let stop = Flag()
        let soakStart = ContinuousClock.now
        let hardStop = soakStart + .seconds(shape.seconds * 10 + 600)
        let writer = Task {
            await Self.runWriter(client, shape: shape, seeded: seed, lanes: 8, stop: stop, hardStop: hardStop)
        }
        let pullTimeout = Duration.seconds(max(120, shape.seconds * 2))
        let tally = Tally()
        let documents = shape.documents
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<shape.pullsAtOnce {
                group.addTask {
                    while true {
                        let n = tally.nextPull.add(1, ordering: .relaxed).oldValue
                        guard n < shape.pulls else { return }
                        let sink = ReplicaSink(documents: documents)
                        let start = (ContinuousClock.now - soakStart) / .seconds(1)
                        do {
                            let run = try await Self.pull(publicDB, into: sink, timeout: pullTimeout)
                            let pull = Pull(
                                run: run, start: start, documents: sink.documentCount, badBodies: sink.badBodies)
                            tally.pulls.withLock { $0.append(pull) }
                        } catch {
                            tally.pullErrors.withLock { $0.append("pull \(n): \(error)") }
                        }
                    }
                }
            }
            // The Lite replica keeps pulling (each pull resumes from its checkpoint) until the writer stops.
            group.addTask {
                let local = LocalEndpoint(lite, feedTimeoutMs: 1000)
                while !stop.isSet && ContinuousClock.now < hardStop {
                    do {
                        let run = try await Self.pull(publicDB, into: local, timeout: pullTimeout)
                        tally.liteRuns.withLock { $0.append(run) }
                    } catch {
                        tally.pullErrors.withLock { $0.append("lite pull: \(error)") }
                    }
                }
            }
            // The writer runs for the shape's time and until the last one-shot pull has finished, so every pull
            // overlaps the writes.
            group.addTask {
                try? await Task.sleep(until: soakStart + .seconds(shape.seconds), clock: .continuous)
                while tally.oneShotsOver < shape.pulls && ContinuousClock.now < hardStop {
                    try? await Task.sleep(for: .milliseconds(100))
                }
                stop.set()
            }
        }
        let writes = await writer.value
        let soakTime = ContinuousClock.now - soakStart

        // After the writer: the gateway catches up, a last pull converges.
        let catchUpStart = ContinuousClock.now
        let stale = await Self.waitUntilServed(adminDB, writes.last, seconds: 120)
        let catchUp = ContinuousClock.now - catchUpStart
        let final = try await Self.pull(
            publicDB, into: LocalEndpoint(lite, feedTimeoutMs: 1000), timeout: .seconds(120))

        let done = tally.pulls.withLock { $0 }
        let errors = tally.pullErrors.withLock { $0 }
        let liteRuns = tally.liteRuns.withLock { $0 }
        let failed = done.filter { !$0.run.clean }
        let incomplete = done.filter { $0.documents != shape.documents }
        let bad = done.flatMap(\.badBodies)
        let counters = await Self.importCounters(gateway, "db")
        let docsRead = done.map(\.run.status.docsRead).reduce(0, +)
        let slowest = done.sorted { $0.run.seconds > $1.run.seconds }
        print(
            "gateway import soak [\(layout.rawValue)]: \(done.count) of \(shape.pulls) pulls finished "
                + "(\(done.count - failed.count) clean), \(docsRead) docs read, longest pull "
                + (slowest.first.map { String(format: "%.1f s", $0.run.seconds) } ?? "none")
                + "; SDK \(writes.upserts) upserts + \(writes.subdocs) "
                + "sub-document mutations in \(soakTime); Lite replica pulled \(liteRuns.count) times "
                + "(\(liteRuns.map(\.status.docsRead).reduce(0, +)) docs read), final pull \(final.status.docsRead) docs; seeding "
                + "\(seedTime), catch-up \(catchUp); imports \(counters.map { "\($0.0), \($0.1) refused" } ?? "?"); "
                + "mode total \(ContinuousClock.now - started); gateway log \(gateway.logURL.path)")
        for pull in slowest.prefix(3) {
            print("  slow pull at " + String(format: "%.1f s", pull.start) + ": \(pull.run)")
        }

        #expect(writes.errors.isEmpty, "\(writes.errors.count) SDK writes failed: \(writes.errors.prefix(3))")
        #expect(errors.isEmpty, "\(errors.count) pulls could not start: \(errors.prefix(3))")
        #expect(done.count == shape.pulls, "\(done.count) of \(shape.pulls) pulls finished")
        #expect(
            failed.isEmpty,
            "\(failed.count) pulls failed, first: \(failed.prefix(3).map { "\($0.run)" }) (\(gateway.logURL.path))")
        #expect(incomplete.isEmpty, "pulls missing documents: \(incomplete.prefix(3).map(\.documents))")
        #expect(bad.isEmpty, "\(bad.count) revisions fetched without their body: \(bad.prefix(3))")
        #expect(
            liteRuns.allSatisfy { $0.clean }, "Lite pulls: \(liteRuns.filter { !$0.clean }.prefix(3))")
        #expect(final.clean, "final pull: \(final)")
        #expect(stale.isEmpty, "\(stale.count) documents not served as last written: \(stale.prefix(5))")
        #expect(counters?.1 == 0, "import errors: \(String(describing: counters))")

        // Convergence: the Lite replica's single leaf, winner and body are the gateway's, which are the SDK's.
        var diverged: [String] = []
        for i in 0..<shape.documents {
            let id = Self.key(i)
            let replica = try LiteConvergence.liteState(lite, id)
            let served = try await LiteConvergence.gatewayState(adminDB, id)
            let expected = writes.last[i].map {
                LiteConvergence.bodyText(properties: Self.members($0.body), attachmentDigests: [:])
            }
            if replica != served || served?.leaves.count != 1 || served?.body != expected {
                diverged.append(
                    "\(id): replica \(replica.map { "\($0)" } ?? "none"), gateway \(served.map { "\($0)" } ?? "none")")
            }
        }
        #expect(diverged.isEmpty, "\(diverged.count) documents diverged: \(diverged.prefix(3))")

        // The KV items: what the SDK wrote last (shared access: the upsert's very bytes; 1.x: the body minus `_sync`).
        let kvDiffers = Mutex<[String]>([])
        let last = writes.last
        let kvErrors = await ClusterDataProcessTests.parallel(shape.documents, width: 16) { i in
            guard let write = last[i] else { return }
            let item = try await client.get(Self.key(i)).value
            let json = try JSON.parse(item)
            let same: Bool
            switch layout {
            case .shared:
                same =
                    json["_sync"] == nil
                    && (write.bytes.map { $0 == item } ?? (Self.application(json) == Self.application(write.body)))
            case .legacy:
                same =
                    json["_sync"] != nil
                    && Self.application(json) == Self.application(write.body)
                    && (json.objectValue ?? []).filter { $0.0.hasPrefix("_") && $0.0 != "_sync" }.isEmpty
            }
            if !same { kvDiffers.withLock { $0.append("\(Self.key(i)): \(String(decoding: item, as: UTF8.self))") } }
        }
        #expect(kvErrors.isEmpty, "\(kvErrors.count) KV reads failed: \(kvErrors.prefix(3))")
        let differing = kvDiffers.withLock { $0 }
        #expect(
            differing.isEmpty, "\(differing.count) KV items differ from the SDK's last write: \(differing.prefix(3))")
        await client.close()
    }
}

/// A fresh replica for one one-shot pull, in memory: takes what the replicator uploads (`new_edits=false`) and checks
/// each revision's body as it arrives: the document's own members, `_id`/`_rev`/`_revisions` agreeing, no `_sync`, not
/// deleted (the soak deletes nothing). Cheaper than a database per pull, so the gateway is what the soak loads.
final class ReplicaSink: ReplicationEndpoint {
    private struct State {
        var revisions: [String: Set<String>] = [:]
        var locals: [String: JSON] = [:]
        var bad: [String] = []
    }
    private let state = Mutex(State())
    private let documents: Int
    let identity = "memory:soak-\(UUID().uuidString)"

    init(documents: Int) { self.documents = documents }

    var documentCount: Int { state.withLock { $0.revisions.count } }
    var badBodies: [String] { state.withLock { $0.bad } }

    func info() async throws -> JSON { .object([("db_name", .string("sink")), ("update_seq", .number(0))]) }

    func changes(
        since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
    ) async throws -> ChangesBatch {
        throw ReplicationError.invalid("the sink is only a target")
    }

    func revsDiff(_ request: [String: [String]]) async throws -> JSON {
        state.withLock { s in
            var answer: [(String, JSON)] = []
            for (id, revs) in request.sorted(by: { $0.key < $1.key }) {
                let missing = revs.filter { !(s.revisions[id]?.contains($0) ?? false) }
                if !missing.isEmpty { answer.append((id, .object([("missing", .array(missing.map(JSON.string)))]))) }
            }
            return .object(answer)
        }
    }

    func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        throw ReplicationError.invalid("the sink is only a target")
    }

    func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        state.withLock { s in
            docs.map { doc in
                if let problem = Self.problem(doc, documents: documents) {
                    s.bad.append("\(doc.id) \(doc.rev): \(problem)")
                }
                s.revisions[doc.id, default: []].insert(doc.rev)
                return .object([("id", .string(doc.id)), ("rev", .string(doc.rev)), ("ok", .bool(true))])
            }
        }
    }

    /// What is wrong with a pulled revision of a soak document, or nil.
    static func problem(_ doc: FetchedRevision, documents: Int) -> String? {
        let body = doc.body
        guard doc.id.hasPrefix("soak-"), let n = Int(doc.id.dropFirst(5)), n >= 0, n < documents else {
            return "not a soak document"
        }
        guard body["_id"]?.stringValue == doc.id, body["_rev"]?.stringValue == doc.rev else { return "bad _id/_rev" }
        guard let generation = doc.rev.split(separator: "-").first.flatMap({ Int($0) }),
            body["_revisions"]?["start"]?.intValue == generation,
            body["_revisions"]?["ids"]?.arrayValue?.isEmpty == false
        else { return "bad _revisions \(body["_revisions"]?.text ?? "none")" }
        if body["_deleted"]?.boolValue == true { return "deleted" }
        if body["_sync"] != nil { return "carries _sync" }
        guard body["n"]?.intValue == n, body["round"]?.intValue != nil, body["channels"]?.arrayValue != nil,
            body["via"]?.stringValue != nil, body["nested"]?["t"]?.boolValue == true
        else { return "body \(body.text.prefix(200))" }
        return nil
    }

    func getLocal(_ id: String) async throws -> JSON? { state.withLock { $0.locals[id] } }

    func putLocal(_ id: String, _ body: JSON) async throws { state.withLock { $0.locals[id] = body } }

    func ensureFullCommit() async throws -> String? { nil }
}
