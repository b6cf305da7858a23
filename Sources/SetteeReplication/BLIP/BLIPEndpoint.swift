import Logging
import SetteeBLIP
import SetteeCore
import SetteeJSON

/// A local database that can name, for revisions it holds, the parent revision and the body's size: what a
/// `proposeChanges` entry carries as the server's revision (replication-protocol.adoc §proposeChanges).
public protocol RevisionParents: Sendable {
    /// Per revision asked, in order: its parent (nil for a first generation or an unknown revision) and its body's
    /// size in bytes when known.
    func parents(of revisions: [(id: String, rev: String)]) async throws -> [(parent: String?, bodySize: Int?)]
}

/// The remote side of a replication over the BLIP protocol (couchbase-lite-core
/// `modules/docs/pages/replication-protocol.adoc`, §4 Algorithm), as a `ReplicationEndpoint`, so the replicator's
/// state machine (`ReplicationState`: batches, checkpoints only after a whole batch is stored, per-document failures,
/// backoff, one-shot end, continuous) and its status reporting drive BLIP exactly as they drive the CouchDB REST
/// protocol. One endpoint serves one direction:
///
/// - **pull** (`Role.pullSource`): the first `changes` call sends `subChanges` (`since`, `continuous`, `batch`,
///   `versioning=rev-trees`, `activeOnly` on a first pull into an empty database, `sendReplacementRevs`, the channel
///   or id filter); each `changes` request the server sends is one batch. `bulkGet` answers that request (`[]` with
///   the revisions known for each wanted revision, 0 otherwise; `maxHistory`, `blobs`) and returns once every wanted
///   revision came as `rev` (its attachments fetched with `getAttachment` unless an ancestor the client has carries
///   them) or `norev`.
///   An empty `changes` request is the end of a one-shot pull.
/// - **push** (`Role.pushTarget`): `revsDiff` is `proposeChanges` (`conflictIncludesRev`); `bulkDocs` sends one `rev`
///   per revision (`history`, `sequence`, `noconflicts`), answering the server's `getAttachment` and
///   `proveAttachment` for its attachments while it is in flight. A 409 whose server revision is an ancestor of the
///   proposed one is no conflict (the client did not know the server's revision): the revision is sent.
///
/// Checkpoints are `getCheckpoint`/`setCheckpoint` with `client=cp-<base64 SHA-1 of the replication id>` and
/// Couchbase Lite's body (`{"local":N}` for a push, `{"remote":M}` for a pull). The replicator keeps its full log in
/// the local database; the server's checkpoint counts as the same log when it names the same sequence, as Couchbase
/// Lite resumes only when both sides agree.
///
/// A `rev` is answered once its attachments are fetched, before the batch is stored: the batch's checkpoint waits for
/// the store (`ReplicationState` invariant 1), so a revision lost to a crash is asked for again, and servers that
/// bound the revisions in flight (Sync Gateway sends a few at a time) are not held up by a whole batch.
public actor BLIPEndpoint: ReplicationEndpoint {
    /// Which side of the replicator this endpoint is.
    public enum Role: Sendable, Equatable {
        case pullSource, pushTarget
    }

    public nonisolated let identity: String
    public nonisolated let role: Role
    let connector: any BLIPConnector
    let local: any ReplicationEndpoint
    let continuous: Bool
    let maxHistory: Int
    /// Take and send JSON deltas (`deltas=true` on `changes` answers; `deltaSrc` on pushed `rev`s when the server
    /// says it takes them), as Couchbase Lite does unless told not to (its `disableDeltaSupport`).
    let deltas: Bool
    let logger: Logger

    private var connection: (any BLIPReplicationConnection)?
    private var connecting: Task<any BLIPReplicationConnection, any Error>?
    /// Counts connections: a request or a close of an older one changes nothing.
    private var epoch = 0
    private var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
    private var nextWaiter = 0

    // Pull.
    private enum Incoming {
        case batch([BLIPReplicationWire.Change], CheckedContinuation<BLIPMessage, Never>)
        case caughtUp
    }
    private var subscribed = false
    /// The `since` a `changes` call continuing the subscription carries (the last batch's last sequence).
    private var cursor: String?
    private var inbox: [Incoming] = []
    /// The `changes` request handed to the replicator and not answered yet.
    private var unanswered: (changes: [BLIPReplicationWire.Change], reply: CheckedContinuation<BLIPMessage, Never>)?
    /// Revisions asked for (`id NUL rev`) with the revisions the client knows of each document.
    private var expected: [String: [String]] = [:]
    private var arrived: [String: FetchedRevision] = [:]

    // Push.
    /// The local sequence of each revision of the batch being pushed (`rev`'s `sequence`).
    private var sequences: [String: SequenceID] = [:]
    /// `proposeChanges` answers other than "send" and "known", by revision.
    private var proposals: [String: BLIPReplicationWire.ProposalAnswer] = [:]
    /// Attachments of the `rev` requests in flight, by digest, with how many requests offer each.
    private var offered: [String: (bytes: [UInt8], users: Int)] = [:]
    /// The server said it takes deltas (`deltas=true` on its `proposeChanges` answer).
    private var serverTakesDeltas = false
    /// The revision the server has of each proposed revision's document (its parent, or the server revision a 409
    /// named that is an ancestor): the source of a delta.
    private var deltaSources: [String: String] = [:]

    /// - Parameters:
    ///   - identity: the remote database's URL without credentials (names the replication's checkpoints).
    ///   - local: the local database (its `_local` replication log is compared with the server's checkpoint; a
    ///     `RevisionParents` one gives `proposeChanges` its server revisions).
    ///   - maxHistory: the longest `history` the client takes in a `rev` (its revision tree's depth).
    public init(
        role: Role, identity: String, connector: any BLIPConnector, local: any ReplicationEndpoint,
        continuous: Bool, maxHistory: Int = 20, deltas: Bool = true,
        logger: Logger = Logger(label: "settee.replicator.blip")
    ) {
        self.role = role
        self.identity = identity
        self.connector = connector
        self.local = local
        self.continuous = continuous
        self.maxHistory = max(1, maxHistory)
        self.deltas = deltas
        self.logger = logger
    }

    // MARK: Connection

    private func connected() async throws -> any BLIPReplicationConnection {
        if let connection { return connection }
        if let connecting { return try await connecting.value }
        let next = epoch + 1
        let handler = ConnectionHandler(endpoint: self, epoch: next)
        let connector = self.connector
        let task = Task { try await connector.connect(handler: handler) }
        connecting = task
        let opened: any BLIPReplicationConnection
        do {
            opened = try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch {
            connecting = nil
            throw Self.replicationError(error)
        }
        connecting = nil
        epoch = next
        connection = opened
        Task { [weak self] in
            await opened.waitUntilClosed()
            await self?.connectionClosed(epoch: next)
        }
        return opened
    }

    private func connectionClosed(epoch closed: Int) {
        guard closed == epoch, connection != nil else { return }
        connection = nil
        resetSession()
    }

    /// Closes the connection (WebSocket code `code`) and forgets its session.
    private func dropConnection(code: UInt16) async {
        guard let c = connection else { return }
        connection = nil
        epoch += 1
        resetSession()
        await c.close(code: code)
    }

    /// Everything of the connection that ended: its subscription, the requests waiting for the replicator (answered
    /// with an error; the connection is gone anyway) and the waits, which then fail as a network error.
    private func resetSession() {
        subscribed = false
        cursor = nil
        for item in inbox {
            if case .batch(_, let reply) = item { reply.resume(returning: Self.gone) }
        }
        inbox = []
        unanswered?.reply.resume(returning: Self.gone)
        unanswered = nil
        expected = [:]
        arrived = [:]
        wakeAll()
    }

    private static let gone = BLIPMessage.error(answering: 0, code: 503, message: "replication connection closed")

    /// Sends a request and returns its answer; an error answer is thrown as its `ReplicationError`.
    private func send(_ request: BLIPMessage) async throws -> BLIPMessage {
        let c = try await connected()
        let answer: BLIPMessage?
        do { answer = try await c.peer.send(request) } catch { throw Self.replicationError(error) }
        guard let answer else { return BLIPMessage(type: .response) }
        if answer.type == .error { throw BLIPReplicationWire.error(of: answer) }
        return answer
    }

    static func replicationError(_ error: any Error) -> any Error {
        switch error {
        case is CancellationError, is ReplicationError: return error
        case BLIPConnectionError.closed: return ReplicationError.network("BLIP connection closed")
        case BLIPConnectionError.protocolError(let m): return ReplicationError.network("BLIP protocol error: \(m)")
        default: return ReplicationError.network("\(error)")
        }
    }

    /// Waits until `done` holds, on the connection current at `epoch`; a closed connection throws a network error.
    private func wait(epoch e: Int, until done: () -> Bool) async throws {
        while true {
            guard e == epoch, connection != nil else { throw ReplicationError.network("BLIP connection closed") }
            if done() { return }
            try Task.checkCancellation()
            let id = nextWaiter
            nextWaiter += 1
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                    if Task.isCancelled { c.resume(throwing: CancellationError()) } else { waiters[id] = c }
                }
            } onCancel: {
                Task { await self.cancelWaiter(id) }
            }
        }
    }

    private func cancelWaiter(_ id: Int) {
        waiters.removeValue(forKey: id)?.resume(throwing: CancellationError())
    }

    private func wakeAll() {
        let all = waiters
        waiters = [:]
        for c in all.values { c.resume() }
    }

    // MARK: Requests from the server

    /// Answers one request the server sent on the connection numbered `epoch`.
    func handle(_ request: BLIPMessage, peer: any BLIPPeer, epoch e: Int) async -> BLIPMessage {
        guard e == epoch, connection != nil else { return Self.gone }
        switch request.profile {
        case "changes": return await receiveChanges(request)
        case "rev": return await receiveRev(request, peer: peer, epoch: e)
        case "norev": return receiveNoRev(request)
        case "getAttachment":
            guard let digest = request["digest"], let bytes = offered[digest]?.bytes else {
                return .error(answering: request.number, code: 404, message: "no such attachment in flight")
            }
            return BLIPMessage(type: .response, compressed: bytes.count >= 128, body: bytes)
        case "proveAttachment":
            guard let digest = request["digest"], let bytes = offered[digest]?.bytes else {
                return .error(answering: request.number, code: 404, message: "no such attachment in flight")
            }
            guard (16...255).contains(request.body.count) else {
                return .error(answering: request.number, code: 400, message: "nonce must be 16 to 255 bytes")
            }
            let proof = BLIPReplicationWire.attachmentProof(nonce: request.body, attachment: bytes)
            return BLIPMessage(type: .response, body: Array(proof.utf8))
        default:
            return .error(
                answering: request.number, domain: "BLIP", code: 404,
                message: "no handler for \(LogText.quoted(request.profile ?? ""))")
        }
    }

    private func receiveChanges(_ request: BLIPMessage) async -> BLIPMessage {
        guard role == .pullSource, subscribed else {
            return .error(answering: request.number, code: 409, message: "not subscribed to changes")
        }
        let changes: [BLIPReplicationWire.Change]
        do { changes = try BLIPReplicationWire.parseChanges(request.body) } catch {
            return .error(answering: request.number, code: 400, message: "\(error)")
        }
        if changes.isEmpty {
            inbox.append(.caughtUp)
            wakeAll()
            return BLIPMessage(type: .response)
        }
        return await withCheckedContinuation { (c: CheckedContinuation<BLIPMessage, Never>) in
            inbox.append(.batch(changes, c))
            wakeAll()
        }
    }

    private func receiveRev(_ request: BLIPMessage, peer: any BLIPPeer, epoch e: Int) async -> BLIPMessage {
        var request = request
        if let source = request["deltaSrc"] {
            switch await undelta(request, source: source, epoch: e) {
            case .success(let whole): request = whole
            case .failure(let answer): return answer.message
            }
        }
        let incoming: BLIPReplicationWire.IncomingRevision
        do { incoming = try BLIPReplicationWire.parseRev(request) } catch {
            return .error(answering: request.number, code: 400, message: "\(error)")
        }
        let asked = [incoming.replacedRev, incoming.rev].compactMap { $0 }.map {
            BLIPReplicationWire.key(incoming.id, $0)
        }
        guard let k = asked.first(where: { expected[$0] != nil }), let known = expected[k] else {
            return .error(answering: request.number, code: 409, message: "revision not asked for")
        }
        let fetched: FetchedRevision
        do {
            fetched = try await Self.withAttachments(incoming, known: known, peer: peer)
        } catch {
            let reason = "attachment not fetched: \(error)"
            fetched = FetchedRevision(
                id: incoming.id, rev: incoming.rev,
                error: RevisionError(status: 502, error: "bad_gateway", reason: reason))
        }
        // The connection may have ended, or the replicator moved on, while the attachments came.
        guard e == epoch, expected.removeValue(forKey: k) != nil else { return Self.gone }
        arrived[k] = fetched
        wakeAll()
        if let error = fetched.error {
            return .error(answering: request.number, code: error.status, message: error.reason)
        }
        return BLIPMessage(type: .response)
    }

    /// A delta `rev` made whole against the local body of its `deltaSrc`. A revision not asked for is refused as
    /// `receiveRev` refuses it; a source this database no longer holds (or holds as a tombstone) and a delta that does
    /// not apply are answered HTTP 422 with the revision still expected, as Couchbase Lite answers them (delta base
    /// unknown, corrupt delta) and waits for the server to send the revision again whole (Sync Gateway does, on 422).
    /// Nothing is stored from a delta that did not apply.
    private func undelta(_ request: BLIPMessage, source: String, epoch e: Int) async -> Result<BLIPMessage, Answer> {
        guard let id = request["id"], let rev = request["rev"] else {
            return .failure(
                Answer(.error(answering: request.number, code: 400, message: "delta rev without id and rev")))
        }
        let asked = [request["replacedRev"], rev].compactMap { $0 }.map { BLIPReplicationWire.key(id, $0) }
        guard deltas, asked.contains(where: { expected[$0] != nil }) else {
            return .failure(Answer(.error(answering: request.number, code: 409, message: "revision not asked for")))
        }
        let found = try? await local.bulkGet([BulkGetRequest(id: id, rev: source, attsSince: [source])]).first
        guard e == epoch else { return .failure(Answer(Self.gone)) }
        guard let body = found?.error == nil ? found?.body : nil else {
            logger.debug("delta source not held; asking for the revision whole", metadata: ["rev": "\(rev)"])
            return .failure(
                Answer(.error(answering: request.number, code: 422, message: "Don't have body of deltaSrc \(source)")))
        }
        do {
            return .success(try BLIPReplicationWire.applyDelta(request, source: body))
        } catch {
            logger.debug("delta does not apply; asking for the revision whole", metadata: ["rev": "\(rev)"])
            return .failure(Answer(.error(answering: request.number, code: 422, message: "Invalid delta: \(error)")))
        }
    }

    /// An error answer as a `Result` failure.
    struct Answer: Error {
        var message: BLIPMessage
        init(_ message: BLIPMessage) { self.message = message }
    }

    private func receiveNoRev(_ request: BLIPMessage) -> BLIPMessage {
        guard let id = request["id"], let rev = request["rev"] else {
            return .error(answering: request.number, code: 400, message: "norev without id and rev")
        }
        let k = BLIPReplicationWire.key(id, rev)
        guard expected.removeValue(forKey: k) != nil else { return BLIPMessage(type: .response) }
        let status = request["error"].flatMap { Int($0) } ?? 404
        arrived[k] = FetchedRevision(
            id: id, rev: rev,
            error: RevisionError(
                status: status, error: CouchError.couchName(status), reason: request["reason"] ?? "norev"))
        wakeAll()
        return BLIPMessage(type: .response)
    }

    /// The revision with the bytes of every attachment added since a revision the client knows (`known`, when one is
    /// an ancestor of it), fetched from the server by digest and checked against it; older ones stay stubs. Shared
    /// with the passive side (`BLIPReplicationServer`), which fetches a pushed revision's attachments the same way.
    static func withAttachments(
        _ incoming: BLIPReplicationWire.IncomingRevision, known: [String], peer: any BLIPPeer
    ) async throws -> FetchedRevision {
        var body = incoming.body
        guard let entries = body["_attachments"]?.objectValue, !entries.isEmpty else {
            return FetchedRevision(id: incoming.id, rev: incoming.rev, body: body)
        }
        let history = BLIPReplicationWire.historyRevs(body["_revisions"])
        let knownGeneration =
            history.filter { known.contains($0) }.compactMap(BLIPReplicationWire.generation).max() ?? 0
        var bytes: [String: [UInt8]] = [:]
        var normalised: [(String, JSON)] = []
        for (name, var entry) in entries {
            defer { normalised.append((name, entry)) }
            if let inline = entry["data"]?.stringValue {
                guard let data = Base64.decode(inline) else {
                    throw ReplicationError.badResponse("attachment \(LogText.quoted(name)): bad base64")
                }
                bytes[name] = data
            } else {
                let revpos = entry["revpos"]?.intValue ?? Int.max
                guard revpos > knownGeneration else { continue }
                guard let digest = entry["digest"]?.stringValue else {
                    throw ReplicationError.badResponse("attachment \(LogText.quoted(name)) has no digest")
                }
                let request = BLIPMessage(properties: [
                    (name: "Profile", value: "getAttachment"), (name: "digest", value: digest),
                    (name: "docID", value: incoming.id),
                ])
                let answer: BLIPMessage?
                do { answer = try await peer.send(request) } catch { throw Self.replicationError(error) }
                guard let answer, answer.type != .error else {
                    throw answer.map(BLIPReplicationWire.error(of:)) ?? ReplicationError.badResponse("no answer")
                }
                // Only a digest of `sha1-` is checked: others are the server's to vouch for.
                if digest.hasPrefix("sha1-"), BLIPReplicationWire.digest(of: answer.body) != digest {
                    throw ReplicationError.badResponse("attachment \(LogText.quoted(name)) does not match its digest")
                }
                if entry["encoding"] == nil, let length = entry["length"]?.intValue, length != answer.body.count {
                    throw ReplicationError.badResponse("attachment \(LogText.quoted(name)) is not its length")
                }
                bytes[name] = answer.body
            }
            entry.set("data", nil)
            entry.set("stub", nil)
            entry.set("follows", .bool(true))
            if entry["length"] == nil, entry["encoding"] == nil, let data = bytes[name] {
                entry.set("length", .int(data.count))
            }
        }
        body.set("_attachments", .object(normalised))
        return FetchedRevision(id: incoming.id, rev: incoming.rev, body: body, attachments: bytes)
    }

    // MARK: ReplicationEndpoint

    public func info() async throws -> JSON { .object([("db_name", .string(identity))]) }

    /// The next batch of the server's changes (pull): subscribes on a new connection, and starts a new subscription
    /// when the replicator resumes elsewhere than where the last batch ended (a retry from the checkpoint).
    public func changes(
        since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
    ) async throws -> ChangesBatch {
        guard role == .pullSource else { throw ReplicationError.invalid("a BLIP push target has no changes feed") }
        // Couchbase Lite skips tombstones only when it pulls into an empty database without a checkpoint (LiteCore's
        // `skipDeleted`): a database that holds a document the server deleted needs that tombstone, and the
        // checkpoint would pass it for good. Asked before any state changes (the actor may run others meanwhile).
        let activeOnly = since == nil ? try await localIsEmpty() : false
        answerUnanswered()
        if subscribed && cursor != since { await dropConnection(code: 1000) }
        _ = try await connected()
        let e = epoch
        if !subscribed {
            subscribed = true
            cursor = since
            do {
                _ = try await send(subChanges(since: since, limit: limit, filter: filter, activeOnly: activeOnly))
            } catch {
                if e == epoch { subscribed = false }
                throw error
            }
        }
        try await wait(epoch: e) { !inbox.isEmpty }
        switch inbox.removeFirst() {
        case .caughtUp:
            return ChangesBatch(rows: [], lastSeq: nil)
        case .batch(let changes, let reply):
            unanswered = (changes, reply)
            // A removal (revoked or left the user's channels) is a row without revisions: its sequence counts, it
            // is fetched from nobody.
            let rows = changes.map { c in
                ChangeRow(seq: c.seq, id: c.id, revs: c.removed ? [] : [c.rev], deleted: c.deleted)
            }
            let batch = ChangesBatch(rows: rows, lastSeq: changes.last?.seq)
            cursor = batch.lastSeq?.description ?? cursor
            return batch
        }
    }

    /// Whether the local database has no change at all (nothing a remote tombstone could delete).
    private func localIsEmpty() async throws -> Bool {
        try await local.changes(since: nil, limit: 1, feed: .normal, filter: nil, heartbeatMs: nil).rows.isEmpty
    }

    private func subChanges(since: String?, limit: Int, filter: ReplicationFilter?, activeOnly: Bool) -> BLIPMessage {
        var p: [(name: String, value: String)] = [(name: "Profile", value: "subChanges")]
        if let since { p.append((name: "since", value: BLIPReplicationWire.encodedSince(since))) }
        if continuous { p.append((name: "continuous", value: "true")) }
        p.append((name: "batch", value: String(limit)))
        p.append((name: "versioning", value: "rev-trees"))
        if activeOnly { p.append((name: "activeOnly", value: "true")) }
        p.append((name: "sendReplacementRevs", value: "1"))
        var body: [UInt8] = []
        switch filter {
        case .channels(let names)?:
            p.append((name: "filter", value: "sync_gateway/bychannel"))
            p.append((name: "channels", value: names.joined(separator: ",")))
        case .docIDs(let ids)?:
            body = JSON.object([("docIDs", .array(ids.map(JSON.string)))]).serialized()
        case .named(let name, let parameters)?:
            p.append((name: "filter", value: name))
            for (k, v) in parameters.sorted(by: { $0.key < $1.key }) { p.append((name: k, value: v)) }
        case nil: break
        }
        return BLIPMessage(properties: p, body: body)
    }

    /// Answers the `changes` request of a batch the replicator passed without fetching anything: nothing wanted.
    private func answerUnanswered() {
        guard let u = unanswered else { return }
        unanswered = nil
        u.reply.resume(returning: changesReply(u.changes, wanted: [:]))
    }

    private func changesReply(_ changes: [BLIPReplicationWire.Change], wanted: [String: [String]]) -> BLIPMessage {
        var properties: [(name: String, value: String)] = [
            (name: "maxHistory", value: String(maxHistory)), (name: "blobs", value: "true"),
        ]
        if deltas { properties.append((name: "deltas", value: "true")) }
        return BLIPMessage(
            type: .response, properties: properties, body: BLIPReplicationWire.changesAnswer(changes, wanted: wanted))
    }

    /// Pull: answers the batch's `changes` request with these revisions wanted, then waits for each as `rev` or
    /// `norev`. A revision the server's request did not offer is not asked for (a per-document error).
    public func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        let notOffered = RevisionError(status: 404, error: "not_found", reason: "not offered by the server's changes")
        guard role == .pullSource, let u = unanswered else {
            return requests.map { FetchedRevision(id: $0.id, rev: $0.rev, error: notOffered) }
        }
        let e = epoch
        let offeredKeys = Set(u.changes.map { BLIPReplicationWire.key($0.id, $0.rev) })
        var wanted: [String: [String]] = [:]
        for r in requests where offeredKeys.contains(BLIPReplicationWire.key(r.id, r.rev)) {
            wanted[BLIPReplicationWire.key(r.id, r.rev)] = r.attsSince
        }
        expected = wanted
        arrived = [:]
        unanswered = nil
        u.reply.resume(returning: changesReply(u.changes, wanted: wanted))
        try await wait(epoch: e) { expected.isEmpty }
        let got = arrived
        arrived = [:]
        return requests.map { r in
            got[BLIPReplicationWire.key(r.id, r.rev)] ?? FetchedRevision(id: r.id, rev: r.rev, error: notOffered)
        }
    }

    /// Push: `proposeChanges` for every revision, answered as `_revs_diff` would be (a revision the server takes or
    /// refuses is "missing"; what it refuses is remembered for `bulkDocs` to report per document).
    public func revsDiff(_ request: [String: [String]]) async throws -> JSON {
        guard role == .pushTarget else { throw ReplicationError.invalid("a BLIP pull source takes no revisions") }
        let items = request.sorted { $0.key < $1.key }.flatMap { id, revs in revs.map { (id: id, rev: $0) } }
        if items.isEmpty { return .object([]) }
        var parents = [(parent: String?, bodySize: Int?)](repeating: (nil, nil), count: items.count)
        if let lookup = local as? any RevisionParents {
            let found = try await lookup.parents(of: items)
            if found.count == items.count { parents = found }
        }
        let proposals = items.indices.map { i in
            BLIPReplicationWire.Proposal(
                id: items[i].id, rev: items[i].rev, serverRev: parents[i].parent ?? "", bodySize: parents[i].bodySize)
        }
        let body = BLIPReplicationWire.proposeChangesBody(proposals)
        let answer = try await send(
            BLIPMessage(
                compressed: true,
                properties: [(name: "Profile", value: "proposeChanges"), (name: "conflictIncludesRev", value: "true")],
                body: body))
        let answers = try BLIPReplicationWire.parseProposalAnswer(answer.body, count: items.count)
        self.proposals = [:]
        self.deltaSources = [:]
        serverTakesDeltas = answer["deltas"] == "true"
        // A conflict-free server holds one branch of a document: once it takes or has one of the revisions proposed
        // for a document (the winner), the others (leaves of branches resolved locally, tombstones) are not pushed,
        // as Couchbase Lite pushes only a document's current revision.
        var settled = Set<String>()
        for (i, item) in items.enumerated() where answers[i] == .send || answers[i] == .known {
            settled.insert(item.id)
        }
        var out: [String: RevsDiffEntry] = [:]
        for (i, item) in items.enumerated() {
            var ancestor: String?
            switch answers[i] {
            case .known: continue
            // 0 says the server will take the revision, not that it has the local parent (a document new to it is 0
            // too): the revision is read with every attachment's bytes, so a `getAttachment` for one added before
            // the parent can be answered. Stubs go in the `rev` either way; the server fetches only what it lacks.
            // The local parent stays the delta source (`deltaSrc`): a server without it answers 422 and the revision
            // goes whole (`pushRevision`).
            case .send:
                ancestor = nil
                if let parent = parents[i].parent, !parent.isEmpty {
                    deltaSources[BLIPReplicationWire.key(item.id, item.rev)] = parent
                }
            case .conflict where settled.contains(item.id): continue
            case .conflict(let serverRev):
                ancestor = serverRev
                self.proposals[BLIPReplicationWire.key(item.id, item.rev)] = answers[i]
            case .refused: self.proposals[BLIPReplicationWire.key(item.id, item.rev)] = answers[i]
            }
            if let ancestor, !ancestor.isEmpty { deltaSources[BLIPReplicationWire.key(item.id, item.rev)] = ancestor }
            var entry = out[item.id] ?? RevsDiffEntry(missing: [])
            entry.missing.append(item.rev)
            if let ancestor, !ancestor.isEmpty, !entry.possibleAncestors.contains(ancestor) {
                entry.possibleAncestors.append(ancestor)
            }
            out[item.id] = entry
        }
        return RevsDiff.answerJSON(out)
    }

    /// Push: one `rev` per revision, `ReplicationLimits.blipRevsInFlight` at a time; a row per revision as
    /// `_bulk_docs` answers. A connection failure fails the whole call (the replicator retries the batch).
    public func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        guard role == .pushTarget else { throw ReplicationError.invalid("a BLIP pull source takes no revisions") }
        var rows = [JSON](repeating: .null, count: docs.count)
        try await withThrowingTaskGroup(of: (Int, JSON).self) { group in
            var next = 0
            while next < min(docs.count, ReplicationLimits.blipRevsInFlight) {
                let (i, doc) = (next, docs[next])
                group.addTask { (i, try await self.pushRevision(doc)) }
                next += 1
            }
            while let (i, row) = try await group.next() {
                rows[i] = row
                guard next < docs.count else { continue }
                let (j, doc) = (next, docs[next])
                group.addTask { (j, try await self.pushRevision(doc)) }
                next += 1
            }
        }
        return rows
    }

    private func pushRevision(_ doc: FetchedRevision) async throws -> JSON {
        let k = BLIPReplicationWire.key(doc.id, doc.rev)
        switch proposals[k] {
        case .refused(let status)?:
            return Self.row(doc, CouchError(status: status, error: CouchError.couchName(status), reason: "refused"))
        case .conflict(let serverRev)?:
            // The server's revision is an ancestor: the client only did not know it had it. Else a true conflict,
            // resolved locally once the server's revision is pulled.
            guard let serverRev, BLIPReplicationWire.historyRevs(doc.body["_revisions"]).contains(serverRev) else {
                return Self.row(doc, CouchError(status: 409, error: "conflict", reason: "Document update conflict"))
            }
        default: break
        }
        let source = await deltaSource(for: doc, key: k)
        let (message, attachments) = BLIPReplicationWire.revRequest(doc, sequence: sequences[k], deltaSource: source)
        offer(attachments)
        defer { withdraw(attachments) }
        do {
            do {
                _ = try await send(message)
            } catch ReplicationError.http(let status, _, _) where status == 422 && message["deltaSrc"] != nil {
                // The server could not use the delta (its source gone, or it refused it): the revision goes whole at
                // once, as Couchbase Lite's pusher retries (CBL-986).
                _ = try await send(BLIPReplicationWire.revRequest(doc, sequence: sequences[k]).message)
            }
            return .object([("id", .string(doc.id)), ("rev", .string(doc.rev)), ("ok", .bool(true))])
        } catch ReplicationError.http(let status, let error, let reason) {
            return Self.row(doc, CouchError(status: status, error: error, reason: reason))
        }
    }

    /// The server's revision of `doc`'s document and its local body, when a delta may be sent against it: deltas on
    /// both sides, a live revision, and the body still held locally.
    private func deltaSource(for doc: FetchedRevision, key: String) async -> (rev: String, body: JSON)? {
        guard deltas, serverTakesDeltas, !doc.isDeleted, let source = deltaSources[key] else { return nil }
        guard let found = try? await local.bulkGet([BulkGetRequest(id: doc.id, rev: source, attsSince: [source])]),
            let first = found.first, first.error == nil
        else { return nil }
        return (source, first.body)
    }

    private static func row(_ doc: FetchedRevision, _ error: CouchError) -> JSON {
        .object([
            ("id", .string(doc.id)), ("rev", .string(doc.rev)), ("error", .string(error.error)),
            ("reason", .string(error.reason)), ("status", .int(error.status)),
        ])
    }

    private func offer(_ attachments: [String: [UInt8]]) {
        for (digest, bytes) in attachments {
            offered[digest] = (bytes, (offered[digest]?.users ?? 0) + 1)
        }
    }

    private func withdraw(_ attachments: [String: [UInt8]]) {
        for digest in attachments.keys {
            guard let o = offered[digest] else { continue }
            offered[digest] = o.users > 1 ? (o.bytes, o.users - 1) : nil
        }
    }

    /// Push: the local sequences of the batch about to be pushed (`BLIPPushSource` reports them).
    func noteSequences(_ rows: [ChangeRow]) {
        sequences = [:]
        for row in rows {
            for rev in row.revs { sequences[BLIPReplicationWire.key(row.id, rev)] = row.seq }
        }
    }

    private var checkpointKey: String { role == .pushTarget ? "local" : "remote" }

    /// `getCheckpoint`: the local replication log when the server's checkpoint names the same sequence, else only
    /// the server checkpoint's `rev` (the replication then starts over); nil when the server has none (404).
    public func getLocal(_ id: String) async throws -> JSON? {
        let answer: BLIPMessage
        do {
            answer = try await send(
                BLIPMessage(properties: [
                    (name: "Profile", value: "getCheckpoint"),
                    (name: "client", value: BLIPReplicationWire.checkpointClient(id)),
                ]))
        } catch ReplicationError.http(let status, _, _) where status == 404 {
            return nil
        }
        var out = JSON.object([])
        let remote = try? JSON.parse(answer.body)
        if let seq = remote?[checkpointKey], let mine = try await local.getLocal(id),
            let log = ReplicationCheckpoint(json: mine), log.sourceLastSeq.description == SequenceID(seq).description
        {
            out = log.json()
        }
        out.set("_rev", answer["rev"].map(JSON.string))
        return out
    }

    /// `setCheckpoint` with the log's sequence as Couchbase Lite's body and the `_rev` last seen as `rev`.
    public func putLocal(_ id: String, _ body: JSON) async throws {
        guard let log = ReplicationCheckpoint(json: body) else {
            throw ReplicationError.invalid("not a replication log")
        }
        var p: [(name: String, value: String)] = [
            (name: "Profile", value: "setCheckpoint"),
            (name: "client", value: BLIPReplicationWire.checkpointClient(id)),
        ]
        if let rev = body["_rev"]?.stringValue { p.append((name: "rev", value: rev)) }
        _ = try await send(
            BLIPMessage(
                properties: p, body: BLIPReplicationWire.checkpointBody(key: checkpointKey, sequence: log.sourceLastSeq)
            ))
    }

    /// The server acknowledges a `rev` once it has stored it (§rev): nothing more to wait for.
    public func ensureFullCommit() async throws -> String? { nil }

    /// Closes the connection with 1000 (normal closure), as Couchbase Lite does at the end of a one-shot replication.
    public func replicationEnded() async {
        await dropConnection(code: 1000)
    }
}

/// Hands the requests of one connection to its endpoint, tagged with the connection's number.
struct ConnectionHandler: BLIPRequestHandler {
    let endpoint: BLIPEndpoint
    let epoch: Int

    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        await endpoint.handle(request, peer: peer, epoch: epoch)
    }
}

/// The local database as a BLIP push's source: everything goes to it, and each batch of changes is also told to the
/// BLIP endpoint, whose `rev` requests carry each revision's local `sequence`.
struct BLIPPushSource: ReplicationEndpoint {
    let local: any ReplicationEndpoint
    let remote: BLIPEndpoint

    var identity: String { local.identity }
    func info() async throws -> JSON { try await local.info() }
    func changes(
        since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
    ) async throws -> ChangesBatch {
        let batch = try await local.changes(
            since: since, limit: limit, feed: feed, filter: filter, heartbeatMs: heartbeatMs)
        await remote.noteSequences(batch.rows)
        return batch
    }
    func revsDiff(_ request: [String: [String]]) async throws -> JSON { try await local.revsDiff(request) }
    func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] { try await local.bulkGet(requests) }
    func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        try await local.bulkDocs(docs, newEdits: newEdits)
    }
    func getLocal(_ id: String) async throws -> JSON? { try await local.getLocal(id) }
    func putLocal(_ id: String, _ body: JSON) async throws { try await local.putLocal(id, body) }
    func ensureFullCommit() async throws -> String? { try await local.ensureFullCommit() }
    func replicationEnded() async { await local.replicationEnded() }
}
