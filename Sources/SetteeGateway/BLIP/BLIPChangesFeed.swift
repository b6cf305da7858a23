import Logging
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication

/// The server side of a `subChanges` subscription (replication-protocol.adoc §4 "Pull"; Sync Gateway's
/// `sendChanges` / `handleChangesResponse` / `sendRevision`): the reader's `_changes` rows, read a page at a time by
/// the REST feeds' `ChangesPager`, go to the client as `changes` requests of at most `batch` entries
/// `[sequence, docID, revID, deleted?]`; each answer names, per entry, the ancestors the client has (it wants the
/// revision) or 0/null (it does not, trailing ones omitted), and a `maxHistory`; each wanted revision then goes as a
/// `rev` request (`id`, `rev`, `sequence`, `history` = ancestors newest first up to the first the client has,
/// `deleted`), or a `norev` when it cannot be read. An empty `changes` says the client is caught up; a continuous
/// feed then waits for the database's next change (`GatewayDatabase.waitForChange`, as the websocket `_changes`
/// feed does) and goes on until the connection closes.
///
/// Order: requests are sent one after another from this one task, so the client sees them in the order made. The
/// revisions of the last batch before the first catch-up go after the empty `changes`, as Sync Gateway's do (it
/// sends the empty one without waiting for the batch's answer); `rev` requests are no-reply, as Sync Gateway sends
/// them, so one client answering slowly holds this feed and nothing else.
///
/// Deletion flags (CBMobile_3): 1 deleted, 4 removed from every channel the reader has (sent only when the client
/// asked for `revocations`; its `rev` is a `{"_removed":true}` stub). CBMobile_2 sends `true` for a deletion and
/// removals as ordinary entries whose revision is the `_removed` stub.
struct BLIPChangesFeed: Sendable {
    let handler: BLIPSyncHandler
    /// The keyspace the subscription reads: the one its `collection` index resolved to, else the default collection.
    let db: GatewayDatabase
    let params: SubChangesRequest
    /// The sequence the subscription starts after (`params.since` as the gateway's).
    let since: ChangesSince
    let peer: any BLIPPeer
    /// Echoed on every request the feed sends when the subscription named it (after `getCollections`).
    let collection: String?

    /// One `changes` entry as sent.
    struct Entry: Sendable {
        var seq: ChangesSince
        var id: String
        var rev: RevID
        /// CBMobile_3 flags (1 deleted, 4 removed); CBMobile_2 sends `true` for 1.
        var flags: Int

        func json(_ subprotocol: BLIPSubprotocol) -> JSON {
            var items: [JSON] = [seq.json, .string(id), .string(rev.description)]
            if flags != 0 {
                items.append(subprotocol >= .cbMobile3 ? .number(Double(flags)) : .bool(flags & 1 != 0))
            }
            return .array(items)
        }
    }

    /// A revision the client asked for, with what it said it has.
    struct Wanted: Sendable {
        var entry: Entry
        var known: Set<String>
        var maxHistory: Int
        /// The first revision the client named as one it has: the source of a delta (Sync Gateway's choice; Couchbase
        /// Lite names its current revision first).
        var deltaSource: String? = nil
    }

    /// The client answered a `changes` request with an error: the feed stops (Sync Gateway closes the connection).
    struct Refused: Error {
        var code: String
    }

    func run() async {
        do {
            try await feed()
        } catch {
            handler.logger.debug("BLIP changes feed ended", metadata: ["reason": "\(error)"])
        }
    }

    func feed() async throws {
        var since = self.since
        var caughtUp = false
        var deferred: [Wanted] = []
        while !Task.isCancelled {
            var pager = ChangesPager(params.query(since: since))
            repeat {
                let page = try await pager.next(db, user: handler.user)
                let entries = page.rows.compactMap(entry)
                var start = 0
                while start < entries.count {
                    let end = min(entries.count, start + params.batch)
                    let batch = Array(entries[start..<end])
                    start = end
                    try await send(deferred)
                    deferred = []
                    let wanted = try await offer(batch)
                    if caughtUp { try await send(wanted) } else { deferred = wanted }
                }
            } while !pager.done
            let moved = pager.lastSeq != since
            since = pager.lastSeq
            if !caughtUp {
                _ = try await peer.send(changesRequest([], noReply: true))
                caughtUp = true
                try await send(deferred)
                deferred = []
            }
            guard params.continuous else { return }
            let changed = await db.waitForChange(
                after: since, user: handler.user, channels: params.channels,
                deadline: .now + .seconds(Limits.gatewayBLIPFeedWaitSeconds))
            guard db.isOnline else { return }
            // A wake-up whose rows are all filtered out (activeOnly, a user row) moves nothing: pause as the
            // websocket feed does, so a stream of such changes cannot spin this task.
            if changed && !moved { try await Task.sleep(for: .milliseconds(50)) }
        }
    }

    /// The entry a `_changes` row becomes, or nil for rows a BLIP client is not sent (`_user/` rows; removals a
    /// CBMobile_3 client did not ask for).
    func entry(_ row: ChangeRow) -> Entry? {
        guard !row.id.hasPrefix("_"), let rev = row.changes.first else { return nil }
        var flags = row.deleted ? 1 : 0
        if !row.removed.isEmpty, handler.subprotocol >= .cbMobile3, !row.deleted {
            guard params.revocations else { return nil }
            flags |= 4
        }
        return Entry(seq: row.seq, id: row.id, rev: rev, flags: flags)
    }

    func changesRequest(_ entries: [Entry], noReply: Bool) -> BLIPMessage {
        var properties: [(name: String, value: String)] = [(name: "Profile", value: "changes")]
        if let collection { properties.append((name: "collection", value: collection)) }
        let body = JSON.array(entries.map { $0.json(handler.subprotocol) }).serialized()
        return BLIPMessage(noReply: noReply, properties: properties, body: body)
    }

    /// Sends one batch and reads which revisions the client wants.
    func offer(_ batch: [Entry]) async throws -> [Wanted] {
        guard let answer = try await peer.send(changesRequest(batch, noReply: false)) else { return [] }
        guard answer.type != .error else { throw Refused(code: answer["Error-Code"] ?? "?") }
        handler.noteClientDeltas(answer["deltas"], db: db)
        return Self.wanted(answer, batch: batch)
    }

    /// The entries of `batch` an answer asks for: an array (the ancestors the client has) wants the revision; 0,
    /// null, anything else or a missing trailing item does not.
    static func wanted(_ answer: BLIPMessage, batch: [Entry]) -> [Wanted] {
        guard !answer.body.isEmpty,
            let items = (try? JSON.parse(answer.body, maxValues: Limits.gatewayBLIPMaxJSONValues))?.arrayValue
        else { return [] }
        let maxHistory = answer["maxHistory"].flatMap { Int($0) }.map { max(0, $0) } ?? 0
        var out: [Wanted] = []
        for (entry, item) in zip(batch, items) {
            guard let known = item.arrayValue else { continue }
            out.append(
                Wanted(
                    entry: entry, known: Set(known.compactMap(\.stringValue)), maxHistory: maxHistory,
                    deltaSource: known.first?.stringValue))
        }
        return out
    }

    /// Sends the wanted revisions in their order: read `Limits.gatewayBLIPRevReadAhead` at a time concurrently
    /// (each read is a bucket round trip; read one after another they left the feed waiting more than working: a
    /// pull of 10,000 documents took 2.3 s over BLIP and 0.8 s over REST's `_bulk_get`, issue 71's long run), then
    /// sent one after another from this task, so the client still sees them in the order its answer asked.
    func send(_ wanted: [Wanted]) async throws {
        var start = 0
        while start < wanted.count {
            let end = min(wanted.count, start + Limits.gatewayBLIPRevReadAhead)
            let chunk = Array(wanted[start..<end])
            start = end
            let prepared = await withTaskGroup(of: (Int, Outgoing).self) { group in
                for (i, w) in chunk.enumerated() { group.addTask { (i, await self.prepare(w)) } }
                var out = [Outgoing?](repeating: nil, count: chunk.count)
                for await (i, o) in group { out[i] = o }
                return out
            }
            for case let o? in prepared { try await perform(o) }
        }
    }

    /// A wanted revision read and made ready to send: its `rev` (with a delta when one can be made) or its `norev`.
    enum Outgoing: Sendable {
        case norev(Entry, status: Int, reason: String)
        case rev(properties: [(name: String, value: String)], full: [UInt8], delta: (bytes: [UInt8], source: String)?)
    }

    /// A `rev` request for one wanted revision, read as the reader may see it (a revision of a document the reader
    /// lost access to is the `_removed` stub); a `norev` when it cannot be read. Sends nothing (`perform` does).
    func prepare(_ w: Wanted) async -> Outgoing {
        let e = w.entry
        let body: JSON
        do {
            body = try await db.get(e.id, rev: e.rev, revs: true, user: handler.user).body
        } catch {
            return .norev(e, status: error.status, reason: error.reason)
        }
        var members: [(String, JSON)] = []
        var revisions: JSON? = nil
        var deleted = false
        for (k, v) in body.objectValue ?? [] {
            switch k {
            case "_id", "_rev": continue
            case "_revisions": revisions = v
            case "_deleted": deleted = v.boolValue ?? false
            default: members.append((k, v))
            }
        }
        handler.grantAttachments(docID: e.id, body: members, collection: collection)
        var properties: [(name: String, value: String)] = [
            (name: "Profile", value: "rev"), (name: "id", value: e.id), (name: "rev", value: e.rev.description),
            (name: "sequence", value: String(decoding: e.seq.json.serialized(), as: UTF8.self)),
        ]
        let history = Self.history(revisions, of: e.rev, known: w.known, maxHistory: w.maxHistory)
        if !history.isEmpty { properties.append((name: "history", value: history.joined(separator: ","))) }
        if deleted { properties.append((name: "deleted", value: "1")) }
        if let collection { properties.append((name: "collection", value: collection)) }
        let full = JSON.object(members).serialized()
        if !deleted, let source = w.deltaSource, handler.usesDeltas(db),
            let delta = await delta(to: members, full: full, docID: e.id, source: source)
        {
            return .rev(properties: properties, full: full, delta: (delta, source))
        }
        return .rev(properties: properties, full: full, delta: nil)
    }

    /// Sends what `prepare` made: a delta while the client's delta answers are within their bound
    /// (`beginDeltaAnswer`), else the revision whole.
    func perform(_ o: Outgoing) async throws {
        switch o {
        case .norev(let e, let status, let reason):
            try await sendNoRev(e, status: status, reason: reason)
        case .rev(let properties, let full, let delta):
            if let delta, handler.beginDeltaAnswer() {
                db.deltaStats.deltaSent()
                sendDelta(delta.bytes, source: delta.source, properties: properties, full: full)
                return
            }
            _ = try await peer.send(BLIPMessage(noReply: true, properties: properties, body: full))
        }
    }

    /// The revision's body as a JSON delta against `source` (ADR 0125), when the source's body is still kept (the
    /// revision tree's window of ancestor bodies, or the winner), the reader may read it, and the delta is smaller
    /// than the body; nil sends the body whole. Both sides are the bodies as a `rev` carries them: the members with
    /// `_attachments` as stubs (Sync Gateway diffs its bodies with `_attachments` stamped in too), so a client applies
    /// it to its own copy of `source` as it was sent.
    func delta(to members: [(String, JSON)], full: [UInt8], docID: String, source: String) async -> [UInt8]? {
        guard let rev = RevID(source) else { return nil }
        db.deltaStats.deltaRequested()
        guard let read = try? await db.get(docID, rev: rev, user: handler.user) else { return nil }
        // A tombstone, or a revision the reader cannot see (its `_removed` stub), has nothing to patch: nil.
        return BLIPDeltaSync.delta(from: read.body, to: members, whole: full)
    }

    /// Sends a `rev` as a delta and, in a task of its own, waits for its answer: a client that cannot apply it
    /// answers 422 (Couchbase Lite's delta base unknown or corrupt delta) or 404, and then gets the revision whole,
    /// as Sync Gateway resends it. The feed goes on meanwhile; `beginDeltaAnswer` bounded the waits.
    func sendDelta(_ delta: [UInt8], source: String, properties: [(name: String, value: String)], full: [UInt8]) {
        let peer = self.peer
        let handler = self.handler
        let message = BLIPMessage(properties: properties + [(name: "deltaSrc", value: source)], body: delta)
        let whole = BLIPMessage(noReply: true, properties: properties, body: full)
        Task {
            defer { handler.endDeltaAnswer() }
            guard BLIPDeltaSync.sendWholeAfter(try? await peer.send(message)) else { return }
            handler.logger.debug(
                "client could not apply a delta; sending the revision whole",
                metadata: ["doc": "\(LogText.userData(message["id"] ?? ""))", "rev": "\(message["rev"] ?? "")"])
            _ = try? await peer.send(whole)
        }
    }

    func sendNoRev(_ e: Entry, status: Int, reason: String) async throws {
        var properties: [(name: String, value: String)] = [
            (name: "Profile", value: "norev"), (name: "id", value: e.id), (name: "rev", value: e.rev.description),
            (name: "sequence", value: String(decoding: e.seq.json.serialized(), as: UTF8.self)),
            (name: "error", value: String(status)), (name: "reason", value: reason),
        ]
        if let collection { properties.append((name: "collection", value: collection)) }
        _ = try await peer.send(BLIPMessage(noReply: true, properties: properties))
    }

    /// A revision's ancestors, newest first, from its `_revisions`: up to and including the first the client has,
    /// and at most `maxHistory` (0: no bound) of them (Sync Gateway's `toHistory`).
    static func history(_ revisions: JSON?, of rev: RevID, known: Set<String>, maxHistory: Int) -> [String] {
        guard let start = revisions?["start"]?.intValue, let ids = revisions?["ids"]?.arrayValue, ids.count > 1
        else { return [] }
        var out: [String] = []
        for i in 1..<ids.count {
            let (generation, overflow) = start.subtractingReportingOverflow(i)
            guard !overflow, generation >= 1, let digest = ids[i].stringValue else { break }
            let r = "\(generation)-\(digest)"
            out.append(r)
            if known.contains(r) || (maxHistory > 0 && out.count >= maxHistory) { break }
        }
        return out
    }
}
