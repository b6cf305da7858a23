import Foundation
import Logging
import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeGateway

/// The gateway's BLIP replication handler (`BLIPSyncHandler`) as a Couchbase Lite client's requests reach it, in
/// process over a walrus database, no sockets: requests built from the input, answered by `handle` (then
/// `responded`, as `BLIPSession` calls them), while a scripted client answers what the handler sends it.
enum BLIPSyncFuzz {
    /// The profiles a client sends (replication-protocol.adoc §3) and a few it should not.
    static let profiles = [
        "getCheckpoint", "setCheckpoint", "subChanges", "unsubChanges", "changes", "proposeChanges", "rev", "norev",
        "getAttachment", "proveAttachment", "getCollections",
    ]
    /// What the handler may send the client.
    static let outgoing: Set<String> = ["changes", "rev", "norev", "getAttachment", "proveAttachment"]
    /// Requests of one input handled at most (each may start a feed or a write).
    static let maxRequests = 24
    /// Inputs run against one database before it is replaced, so pushed documents do not make every later
    /// `subChanges` slower.
    static let inputsPerDatabase = 300
    /// Longest a feed may take to return once the connection closed before that is a finding.
    static let feedStopSeconds = 20

    static let sync = """
        function(doc, oldDoc) {
            if (doc._deleted) { return; }
            if (doc.reject) { throw({forbidden: "rejected"}); }
            requireAccess(doc.channels);
            channel(doc.channels);
        }
        """

    /// One request of an input: `Profile` on the first line, `name:value` property lines, a blank line, the body;
    /// requests are separated by 0x1E.
    static func requests(_ bytes: ArraySlice<UInt8>) -> [BLIPMessage] {
        var out: [BLIPMessage] = []
        for (n, chunk) in bytes.split(separator: 0x1E, omittingEmptySubsequences: false).prefix(maxRequests)
            .enumerated()
        {
            var lines = chunk.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false)
            let profile = String(decoding: lines.first ?? [], as: UTF8.self)
            var properties: [(name: String, value: String)] = [(name: "Profile", value: profile)]
            var rest = lines.count > 1 ? lines.removeLast() : []
            while let nl = rest.firstIndex(of: 0x0A) {
                let line = rest[rest.startIndex..<nl]
                rest = rest[(nl + 1)...]
                if line.isEmpty { break }
                let parts = line.split(separator: UInt8(ascii: ":"), maxSplits: 1, omittingEmptySubsequences: false)
                properties.append(
                    (
                        name: String(decoding: parts[0], as: UTF8.self),
                        value: parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
                    ))
            }
            out.append(
                BLIPMessage(
                    number: UInt64(n + 1), urgent: profile.count % 2 == 0, properties: properties, body: Array(rest)))
        }
        return out
    }

    /// A database with a user `alice` (channel `a`) and documents in channels `a` and `b`, one with an attachment.
    static func openDatabase() async throws -> (bucket: EmbeddedBucket, db: GatewayDatabase) {
        var logger = Logger(label: "settee.fuzz.blip-sync")
        logger.logLevel = .critical
        let bucket = try EmbeddedBucket(server: "walrus:", name: "fuzz", logger: logger)
        var options = DatabaseOptions(
            name: "db", syncSource: sync, allowConflicts: true,
            users: ["alice": try JSON.parse(#"{"password":"pass","admin_channels":["a"]}"#)])
        // Delta sync on, so `deltaSrc` and the deltas the feed sends are reached.
        options.deltaSync = DeltaSyncConfig(enabled: true)
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: logger)
        for i in 0..<8 {
            let channel = i % 2 == 0 ? "a" : "b"
            let body = try JSON.parse(
                #"{"channels":["\#(channel)"],"n":\#(i),"_attachments":{"t.txt":{"data":"aGVsbG8="}}}"#)
            _ = try await db.put("doc\(i)", body: body, user: nil)
        }
        return (bucket, db)
    }

    /// The database the inputs share, replaced every `inputsPerDatabase` inputs.
    actor World {
        var current: (bucket: EmbeddedBucket, db: GatewayDatabase)?
        var uses = 0

        func database() async throws -> GatewayDatabase {
            uses += 1
            if let current, uses <= inputsPerDatabase { return current.db }
            if let old = current {
                await old.db.close()
                await old.bucket.close()
            }
            let fresh = try await openDatabase()
            current = fresh
            uses = 1
            return fresh.db
        }

        func close() async {
            if let old = current {
                await old.db.close()
                await old.bucket.close()
            }
            current = nil
        }
    }

    /// A client scripted by `mode`: 0 wants every revision and serves attachments, 1 answers everything with an
    /// error, 2 answers empty, 3 answers garbage. Every request it gets must be one the handler may send, and a
    /// `changes` one a JSON array of at most `Limits.gatewayBLIPMaxChangesBatch` entries.
    final class Client: BLIPPeer {
        let mode: UInt8
        let problems = Mutex<[String]>([])
        init(mode: UInt8) { self.mode = mode }

        func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
            let profile = request.profile ?? ""
            if !BLIPSyncFuzz.outgoing.contains(profile) {
                problems.withLock { $0.append("the handler sent a \(profile) request") }
            }
            if profile == "changes" {
                let entries = (try? JSON.parse(request.body))?.arrayValue
                if (entries?.count ?? Int.max) > Limits.gatewayBLIPMaxChangesBatch {
                    problems.withLock { $0.append("a changes request that is no array of at most a batch") }
                }
            }
            if request.noReply { return nil }
            switch mode {
            case 0:
                if profile == "changes", let entries = try? JSON.parse(request.body).arrayValue {
                    return BLIPMessage(
                        type: .response, body: JSON.array(entries.map { _ in JSON.array([]) }).serialized())
                }
                return BLIPMessage(type: .response, body: Array("hello".utf8))
            case 1: return .error(answering: request.number, code: 500, message: "no")
            case 2: return BLIPMessage(type: .response)
            default:
                return BLIPMessage(
                    type: .response, properties: [(name: "deltas", value: "true"), (name: "maxHistory", value: "-1")],
                    body: Array(#"[[1e400],{"a":1},null,"x",[["1-a"]],0,-1]"#.utf8))
            }
        }
    }

    /// The answer to `request` is a response or an error response to it, an error with its domain and code.
    static func checkAnswer(_ answer: BLIPMessage, to request: BLIPMessage) throws {
        guard answer.number == request.number else {
            throw FuzzFinding("answer numbered \(answer.number) for request \(request.number)")
        }
        switch answer.type {
        case .response: break
        case .error:
            guard answer["Error-Domain"] != nil, answer["Error-Code"].flatMap({ Int($0) }) != nil else {
                throw FuzzFinding("an error answer without Error-Domain and a numeric Error-Code: \(answer)")
            }
        default:
            throw FuzzFinding("a \(answer.type) answer to \(request.profile ?? "?")")
        }
    }

    /// What the handler holds stays within its named bounds.
    static func checkBounds(_ handler: BLIPSyncHandler) throws {
        let s = handler.state.withLock { s in
            (
                grants: s.grants.count, deltas: s.deltaAnswersAwaited,
                feeds: s.feeds.values.reduce(0) { $0 + $1.liveFeeds },
                perIndex: s.feeds.values.map(\.liveFeeds).max() ?? 0
            )
        }
        if s.grants > Limits.gatewayBLIPAttachmentGrants { throw FuzzFinding("\(s.grants) attachment grants") }
        if s.deltas < 0 || s.deltas > Limits.gatewayBLIPDeltaAnswersAwaited {
            throw FuzzFinding("\(s.deltas) delta answers awaited")
        }
        if s.feeds < 0 || s.feeds > Limits.gatewayBLIPMaxLiveFeedsPerConnection {
            throw FuzzFinding("\(s.feeds) live feeds")
        }
        if s.perIndex > Limits.gatewayBLIPMaxLiveFeeds { throw FuzzFinding("\(s.perIndex) live feeds of one index") }
    }

    /// Closes `handler` and waits for its feed to return; a feed still running `feedStopSeconds` after the close is
    /// a finding (it would outlive its connection).
    static func closeAndDrain(_ handler: BLIPSyncHandler) async throws {
        handler.close()
        let tasks = handler.state.withLock { $0.feeds.values.compactMap(\.task) }
        guard !tasks.isEmpty else { return }
        let stopped = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for task in tasks { await task.value }
                return true
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(feedStopSeconds))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        if !stopped { throw FuzzFinding("a changes feed still ran \(feedStopSeconds) s after its connection closed") }
    }

    static func target(world: World) -> FuzzTarget {
        FuzzTarget(
            name: "blip-sync", defaultIterations: 400,
            dictionary: FuzzTargets.tokens(
                profiles.map { $0 + "\n" } + [
                    "\u{1E}", "\n\n", "client:cp-1\n", "rev:0-1\n", "rev:1-a\n", "rev:2-b\n", "id:doc1\n", "id:doc0\n",
                    "history:1-a,1-b\n", "since:0\n", "since:\"5:3\"\n", "since:99999999999999999999\n",
                    "continuous:true\n", "activeOnly:true\n", "filter:sync_gateway/bychannel\n", "channels:a,b\n",
                    "batch:-1\n", "batch:0\n", "deltaSrc:1-a\n", "deleted:1\n", "noconflicts:true\n",
                    "collection:0\n", "collection:-9223372036854775808\n", "digest:sha1-qvTGHdzF6KLavt4PO0gs2a6pQ00=\n",
                    "docID:doc0\n", "compress:true\n", "conflictIncludesRev:true\n", "ignoreNoConflicts:true\n",
                    "revocations:true\n", "sequence:1\n", #"{"docIDs":["doc0","doc1"]}"#, #"[["doc9","1-a"]]"#,
                    #"[[1,"doc9","1-a"]]"#, #"{"channels":["a"]}"#,
                    #"{"_attachments":{"f":{"digest":"sha1-x","length":5}}}"#,
                    #"{"collections":["_default"],"checkpoint_ids":["cp-1"]}"#, #"{"reject":true}"#, #"{"_sync":1}"#,
                ])
        ) { input in
            guard let mode = input.first else { return }
            let db = try await world.database()
            let user = mode & 1 == 0 ? db.userContext("alice") : nil
            let handler = BLIPSyncHandler(
                db: db, user: user, subprotocol: mode & 2 == 0 ? .cbMobile3 : .cbMobile2,
                logger: Logger(label: "settee.fuzz.blip-sync", factory: { _ in SwiftLogNoOpLogHandler() }))
            let client = Client(mode: (mode >> 2) & 3)
            var failure: FuzzFinding?
            for request in requests(input.dropFirst()) {
                let answer = await handler.handle(request, peer: client)
                await handler.responded(to: request, peer: client)
                do {
                    try checkAnswer(answer, to: request)
                    try checkBounds(handler)
                } catch let f as FuzzFinding {
                    failure = f
                    break
                }
            }
            try await closeAndDrain(handler)
            if let failure { throw failure }
            if let problem = client.problems.withLock({ $0.first }) { throw FuzzFinding(problem) }
            try checkBounds(handler)
        }
    }
}

extension FuzzTests {
    @Test func blipSyncRequests() async throws {
        // Proves the gateway's BLIP replication handler answers every request of its corpus and of seeded mutations
        // of it (any profile, hostile properties and bodies, a client that errs or answers garbage) with a response
        // or an error response numbered for it, without a trap, keeps its grants, delta waits and feeds within
        // their named bounds, sends the client only the requests it may, and stops its feed when the connection
        // closes.
        guard Fuzz.selected("blip-sync") else { return }
        let world = BLIPSyncFuzz.World()
        Self.check(await Fuzz.run(BLIPSyncFuzz.target(world: world)))
        await world.close()
    }
}

extension FuzzTests {
    @Test func blipSyncCorpusReachesTheHandler() async throws {
        // Proves the blip-sync input format reaches the handler's real paths, so mutations start from working
        // requests: the `checkpoints` input stores and reads a checkpoint (404, 0-1, 0-2, then the stored body), and
        // the `push-propose` input (as alice) gets its proposals answered and writes the revision in her channel
        // while the one in channel b is refused with 403.
        let dir = Fuzz.corpusRoot.appendingPathComponent("blip-sync")
        let (bucket, db) = try await BLIPSyncFuzz.openDatabase()
        let client = BLIPSyncFuzz.Client(mode: 0)
        func run(_ name: String, user: String?) async throws -> [BLIPMessage] {
            let input = Array(try Data(contentsOf: dir.appendingPathComponent(name)))
            let handler = BLIPSyncHandler(
                db: db, user: user.flatMap { db.userContext($0) }, subprotocol: .cbMobile3,
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
            var answers: [BLIPMessage] = []
            for request in BLIPSyncFuzz.requests(input.dropFirst()) {
                answers.append(await handler.handle(request, peer: client))
            }
            handler.close()
            return answers
        }
        let checkpoints = try await run("checkpoints", user: nil)
        #expect(checkpoints.map { $0["Error-Code"] } == ["404", nil, nil, nil])
        #expect(checkpoints.map { $0["rev"] } == [nil, "0-1", "0-2", "0-2"])
        #expect(checkpoints.last.map { String(decoding: $0.body, as: UTF8.self) } == #"{"local":9}"#)
        let push = try await run("push-propose", user: "alice")
        #expect(push.map(\.type) == [.response, .response, .error])
        #expect(push.last?["Error-Code"] == "403")
        #expect(try await db.get("new1", user: nil).body["channels"] == .array([.string("a")]))
        await db.close()
        await bucket.close()
    }
}
