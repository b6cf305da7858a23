import Logging
import SetteeBLIP
import SetteeCore
import SetteeJSON
import Synchronization

/// The passive side of the BLIP replication protocol (couchbase-lite-core
/// `modules/docs/pages/replication-protocol.adoc` §3 Message Types) over any `ReplicationEndpoint`: what Couchbase
/// Lite's `URLEndpointListener` answers on `/db/_blipsync`, so a peer's `BLIPEndpoint` (or a Couchbase Lite
/// replicator) pushes to and pulls from a Lite database directly. One handler serves one connection. The gateway has
/// its own handler (`BLIPSyncHandler`: users, channels, the sync function); this one has no access control of its
/// own: the listener authenticates the upgrade.
///
/// Profiles:
/// - `getCheckpoint`/`setCheckpoint`: property `client`; stored as the endpoint's `_local/checkpoint/<client>` (Sync
///   Gateway's name), answered with `rev`. A missing checkpoint is 404; a `setCheckpoint` whose `rev` is not the
///   stored one (empty or absent for none) is 409.
/// - `getCollections` (ADR 0149): each name resolved by `collections` (default: `_default` and `_default._default`
///   to `endpoint`, any other name null), answered with that endpoint's stored checkpoint body (`{}` when none). A
///   later request's `collection` property must name a resolved index, and the request (checkpoints, offers, `rev`s,
///   its feed) then runs on that index's endpoint; the requests this side sends for it (the feed's `changes`, `rev`,
///   `norev`, a pushed revision's `getAttachment`) carry the same index. A request without one runs on `endpoint`.
/// - `subChanges` (read by the gateway's parser, `SubChangesRequest`: `since`, `continuous`, `batch`, `activeOnly`,
///   `filter=sync_gateway/bychannel` + `channels`, a `docIDs` body): answered empty, then a feed sends `changes`
///   requests of `[seq, docID, revID, deleted]` (every leaf of a document, so conflicts travel), a `rev` for each
///   revision the peer asks for (its `history`, `sequence`, `deleted`, attachment stubs; `norev` when it cannot be
///   read), and one empty `changes` once caught up; a continuous feed then waits for new changes until the
///   connection closes or `unsubChanges` ends it. One subscription at a time, at most
///   `Limits.liteListenerBLIPMaxLiveFeeds` feeds still running (`BLIPSubscriptionState`; 429 past it), per
///   collection index, and at most `Limits.liteListenerBLIPMaxLiveFeedsPerConnection` over all of them.
/// - Delta sync (ADR 0125, `BLIPDeltaSync`), when `deltaSync` is on (Couchbase Lite's listener `enableDeltaSync`):
///   `proposeChanges` and `changes` answers say `deltas: true`, and a pushed `rev` with `deltaSrc` is made whole
///   against the stored body of that revision (422 with Sync Gateway's texts when it is unknown or the delta does not
///   apply; the peer then sends it whole); a puller whose `changes` answer says `deltas: true` gets each wanted
///   revision as a delta against the first revision it named, when that body is kept and the delta is smaller, and
///   the revision whole when it answers the delta with 422 or 404. Off: no `deltas` property, and a `deltaSrc` is 422.
/// - `proposeChanges` (`[[docID, revID, parentRevID, bodySize], …]`) and `changes` (`[[seq, docID, revID, …],
///   …]`): answered as `_revs_diff` would be, since the endpoint keeps a revision tree: a revision it has is 304
///   (`changes`: 0), any other is 0 (`changes`: the leaves it has of that document, for attachments). No 409:
///   concurrent branches are stored as conflicts and both peers pick the same winner (the revision tree's
///   deterministic rule).
/// - `rev`: made whole first when it is a delta, stored with `new_edits=false`; attachments newer than what the
///   endpoint has of the document are fetched from the peer with `getAttachment` and checked against their digest
///   (`BLIPEndpoint.withAttachments`).
/// - `getAttachment`, `proveAttachment`: only for an attachment of a `rev` this connection has in flight to the peer.
/// - anything else: BLIP/404.
///
/// Bounds (`Limits.liteListenerBLIP*`): the feed's batch, the entries of one offer, the checkpoint client's length,
/// collections, the nonce; the JSON values of a body as the listener's REST side (`GatewayHTTPLimits`); `rev`s in
/// flight as a push's (`ReplicationLimits.blipRevsInFlight`), and with them the attachment bytes held.
public final class BLIPReplicationServer: BLIPRequestHandler {
    /// Resolves a `getCollections` name (`scope.collection`, or `_default`) to the local endpoint serving it; nil
    /// answers the name null. The embedded database's collections plug in here (SetteeLite, brief E); the default
    /// resolves the default collection only.
    public typealias CollectionResolver = @Sendable (_ name: String) -> (any ReplicationEndpoint)?

    /// The endpoint of requests without `collection` (the default collection).
    let defaultEndpoint: any ReplicationEndpoint
    let collections: CollectionResolver
    let logger: Logger
    /// Take and send JSON deltas.
    let deltaSync: Bool
    /// Counts the deltas taken and sent (shared by a listener's connections).
    let deltaStats: DeltaSyncStats

    struct State: Sendable {
        /// Each collection index's `subChanges` subscription and feeds still ending (nil: requests without
        /// `collection`).
        var feeds: [Int?: BLIPSubscriptionState<Feed>] = [:]
        /// The connection is closing: no more subscriptions.
        var closed = false
        /// The puller takes deltas (`deltas: true` on its last `changes` answer that said) and `deltaSync` is on.
        var peerTakesDeltas = false
        /// Attachments of the `rev`s in flight to the peer, by digest, with how many `rev`s offer each.
        var offered: [String: (bytes: [UInt8], users: Int)] = [:]
        /// What `getCollections` resolved each index to (nil: a name answered null); nil before it was asked.
        var collections: [(any ReplicationEndpoint)?]?
    }

    /// An accepted subscription: its parameters, the endpoint it reads and the `collection` index it named.
    struct Feed: Sendable {
        var params: SubChangesRequest
        var endpoint: any ReplicationEndpoint
        var index: Int?
    }
    let state = Mutex(State())

    /// `endpoint`: the database served (Lite's `LocalEndpoint`); a continuous feed's longpolls wait as long as its
    /// own feed timeout says. `deltaSync`: take and send JSON deltas (default on; Couchbase Lite's listener's
    /// `enableDeltaSync` defaults to off, ADR 0137); `deltaStats`: where they are counted.
    /// `collections`: resolves `getCollections` names (nil: the default collection only, `endpoint`).
    public init(
        endpoint: any ReplicationEndpoint, deltaSync: Bool = true, deltaStats: DeltaSyncStats = DeltaSyncStats(),
        collections: CollectionResolver? = nil,
        logger: Logger = Logger(label: "settee.replication.blip.server")
    ) {
        self.defaultEndpoint = endpoint
        self.collections =
            collections ?? { name in name == "_default" || name == "_default._default" ? endpoint : nil }
        self.deltaSync = deltaSync
        self.deltaStats = deltaStats
        self.logger = logger
    }

    /// The subprotocol a passive side answers a `Sec-WebSocket-Protocol` offer with: the first name offered (a
    /// comma-separated list, preferred first) of those a `WebSocketBLIPConnector` offers (`BLIP_3+CBMobile_3`,
    /// `BLIP_3+CBMobile_2`); nil when none is, or nothing was offered.
    public static func subprotocol(offered header: String?) -> String? {
        let speaks = WebSocketBLIPConnector.subprotocols.split(separator: ",").map(String.init)
        return (header ?? "").split(separator: ",").map { String($0).trimmed }.first(where: speaks.contains)
    }

    /// Ends the connection's feed (the connection closed); later `subChanges` are refused.
    public func close() {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.closed = true
            return BLIPSubscriptionState.closeAll(&s.feeds)
        }
        for t in tasks { t.cancel() }
    }

    public func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        let profile = request.profile ?? ""
        do {
            let (endpoint, index) = try target(of: request)
            // What this side sends back for the request (a pushed revision's `getAttachment`) names its index too.
            let peer: any BLIPPeer = index.map { CollectionPeer(base: peer, index: $0) } ?? peer
            var response: BLIPMessage
            switch profile {
            case "getCheckpoint": response = try await getCheckpoint(request, endpoint: endpoint)
            case "setCheckpoint": response = try await setCheckpoint(request, endpoint: endpoint)
            case "getCollections": response = try await getCollections(request)
            case "subChanges": response = try subChanges(request, endpoint: endpoint, index: index)
            case "unsubChanges": response = unsubChanges(index: index)
            case "proposeChanges": response = try await proposeChanges(request, endpoint: endpoint)
            case "changes": response = try await changes(request, endpoint: endpoint)
            case "rev": response = try await receiveRev(request, peer: peer, endpoint: endpoint)
            case "norev": response = BLIPMessage()
            case "getAttachment": response = try getAttachment(request)
            case "proveAttachment": response = try proveAttachment(request)
            default:
                return .error(
                    answering: request.number, domain: "BLIP", code: 404,
                    message: "no handler for \(LogText.quoted(profile))")
            }
            response.number = request.number
            response.type = .response
            return response
        } catch {
            let (status, reason) = Self.status(of: error)
            if profile != "getCheckpoint" || status != 404 {
                logger.debug("BLIP request failed", metadata: ["profile": "\(profile)", "status": "\(status)"])
            }
            return .error(answering: request.number, code: status, message: reason)
        }
    }

    /// The HTTP status and reason an error is answered with.
    static func status(of error: any Error) -> (Int, String) {
        switch error {
        case ReplicationError.http(let status, _, let reason): return (status, reason)
        case let e as CouchError: return (e.status, e.reason)
        case ReplicationError.badResponse(let m), ReplicationError.invalid(let m): return (400, m)
        case ReplicationError.network(let m): return (503, m)
        default: return (500, "\(error)")
        }
    }

    static func refuse(_ status: Int, _ reason: String) -> ReplicationError {
        .http(status: status, error: CouchError.couchName(status), reason: reason)
    }

    static func jsonBody(_ request: BLIPMessage) throws(ReplicationError) -> JSON {
        do { return try JSON.parse(request.body, maxValues: GatewayHTTPLimits.maxRequestJSONValues) } catch {
            throw refuse(400, "Invalid JSON body")
        }
    }

    // MARK: collections

    /// The endpoint a request runs on and the `collection` index it named (none: `defaultEndpoint`).
    func target(of request: BLIPMessage) throws(ReplicationError) -> (any ReplicationEndpoint, Int?) {
        guard let text = request["collection"] else { return (defaultEndpoint, nil) }
        guard let index = Int(text) else { throw Self.refuse(400, "collection property needs to be an int") }
        guard let known = state.withLock({ $0.collections }) else {
            throw Self.refuse(400, "Passing collection requires calling getCollections first")
        }
        guard index >= 0, index < known.count, let endpoint = known[index] else {
            throw Self.refuse(404, "Collection \(index) is not a collection of this database")
        }
        return (endpoint, index)
    }

    func getCollections(_ request: BLIPMessage) async throws -> BLIPMessage {
        let body = try Self.jsonBody(request)
        guard let names = body["collections"]?.arrayValue, let ids = body["checkpoint_ids"]?.arrayValue,
            names.count == ids.count
        else { throw Self.refuse(400, "getCollections needs collections and checkpoint_ids of one length") }
        guard names.count <= Limits.liteListenerBLIPMaxCollections else {
            throw Self.refuse(400, "Too many collections (max \(Limits.liteListenerBLIPMaxCollections))")
        }
        var answer: [JSON] = []
        var resolved: [(any ReplicationEndpoint)?] = []
        for (name, id) in zip(names, ids) {
            guard let name = name.stringValue, let id = id.stringValue else {
                throw Self.refuse(400, "collections and checkpoint_ids must be strings")
            }
            guard let endpoint = collections(name) else {
                answer.append(.null)
                resolved.append(nil)
                continue
            }
            resolved.append(endpoint)
            let stored = try await endpoint.getLocal(try Self.checkpointID(id))
            answer.append(.object((stored?.objectValue ?? []).filter { !$0.0.hasPrefix("_") }))
        }
        state.withLock { $0.collections = resolved }
        return BLIPMessage(body: JSON.array(answer).serialized())
    }

    // MARK: checkpoints

    /// `checkpoint/<client>`, the `_local` id Sync Gateway keeps a client's checkpoint under.
    static func checkpointID(_ client: String) throws(ReplicationError) -> String {
        guard !client.isEmpty else { throw refuse(400, "Missing client") }
        guard client.utf8.count <= Limits.liteListenerBLIPMaxClientBytes else {
            throw refuse(400, "Checkpoint client id too long (max \(Limits.liteListenerBLIPMaxClientBytes) bytes)")
        }
        return "checkpoint/" + client
    }

    func getCheckpoint(_ request: BLIPMessage, endpoint: any ReplicationEndpoint) async throws -> BLIPMessage {
        let id = try Self.checkpointID(request["client"] ?? "")
        guard let stored = try await endpoint.getLocal(id) else { throw Self.refuse(404, "missing") }
        let rev = stored["_rev"]?.stringValue ?? ""
        let members = (stored.objectValue ?? []).filter { !$0.0.hasPrefix("_") }
        return BLIPMessage(properties: [(name: "rev", value: rev)], body: JSON.object(members).serialized())
    }

    func setCheckpoint(_ request: BLIPMessage, endpoint: any ReplicationEndpoint) async throws -> BLIPMessage {
        let id = try Self.checkpointID(request["client"] ?? "")
        let body = request.body.isEmpty ? JSON.object([]) : try Self.jsonBody(request)
        guard let members = body.objectValue else { throw Self.refuse(400, "checkpoint body must be an object") }
        let stored = try await endpoint.getLocal(id)?["_rev"]?.stringValue ?? ""
        guard (request["rev"] ?? "") == stored else { throw Self.refuse(409, "Document update conflict") }
        // The stored `rev` goes along: an endpoint that checks it (CouchDB's `_local` rules) takes the update.
        var saved = members.filter { !$0.0.hasPrefix("_") }
        if !stored.isEmpty { saved.append(("_rev", .string(stored))) }
        try await endpoint.putLocal(id, .object(saved))
        let rev = try await endpoint.getLocal(id)?["_rev"]?.stringValue ?? ""
        return BLIPMessage(properties: [(name: "rev", value: rev)])
    }

    // MARK: push (the peer offers revisions)

    /// Parses an offer's body: an array of arrays, at most `liteListenerBLIPMaxProposals` entries.
    static func offers(_ request: BLIPMessage) throws(ReplicationError) -> [[JSON]] {
        if request.body.isEmpty { return [] }
        guard let items = try jsonBody(request).arrayValue else { throw refuse(400, "body must be an array") }
        guard items.count <= Limits.liteListenerBLIPMaxProposals else {
            throw refuse(413, "Too many changes (max \(Limits.liteListenerBLIPMaxProposals))")
        }
        return try items.map { item throws(ReplicationError) in
            guard let a = item.arrayValue else { throw refuse(400, "each change must be an array") }
            return a
        }
    }

    /// `_revs_diff` of `(docID, revID)` pairs.
    func missing(
        _ pairs: [(id: String, rev: String)], endpoint: any ReplicationEndpoint
    ) async throws -> [String: RevsDiffEntry] {
        var request: [String: [String]] = [:]
        for p in pairs { request[p.id, default: []].append(p.rev) }
        if request.isEmpty { return [:] }
        return try RevsDiff.parseAnswer(try await endpoint.revsDiff(request))
    }

    /// `proposeChanges`: per entry 0 (send it) or 304 (have it); trailing zeros left out.
    func proposeChanges(_ request: BLIPMessage, endpoint: any ReplicationEndpoint) async throws -> BLIPMessage {
        let entries = try Self.offers(request)
        let pairs = try entries.map { a throws(ReplicationError) -> (id: String, rev: String) in
            guard a.count >= 2, let id = a[0].stringValue, let rev = a[1].stringValue, !id.isEmpty, !rev.isEmpty else {
                throw Self.refuse(400, "proposeChanges entry is not [docID, revID, ...]")
            }
            return (id, rev)
        }
        let diff = try await missing(pairs, endpoint: endpoint)
        var answer: [JSON] = pairs.map { p in
            diff[p.id]?.missing.contains(p.rev) == true ? .integer(0) : .integer(304)
        }
        while let last = answer.last, last == .integer(0) { answer.removeLast() }
        return BLIPMessage(properties: deltaProperties, body: JSON.array(answer).serialized())
    }

    /// `changes` from a pushing peer: per entry the revisions known of a wanted one, 0 for one held.
    func changes(_ request: BLIPMessage, endpoint: any ReplicationEndpoint) async throws -> BLIPMessage {
        _ = try Self.offers(request)
        let offered = try BLIPReplicationWire.parseChanges(request.body)
        let diff = try await missing(offered.map { (id: $0.id, rev: $0.rev) }, endpoint: endpoint)
        var wanted: [String: [String]] = [:]
        for c in offered where diff[c.id]?.missing.contains(c.rev) == true {
            wanted[BLIPReplicationWire.key(c.id, c.rev)] = diff[c.id]?.possibleAncestors ?? []
        }
        return BLIPMessage(
            properties: deltaProperties, body: BLIPReplicationWire.changesAnswer(offered, wanted: wanted))
    }

    /// An offer's answer says `deltas: true` when this side takes deltas.
    var deltaProperties: [(name: String, value: String)] { deltaSync ? [BLIPDeltaSync.property] : [] }

    /// `rev`: the revision with the attachments this database lacks fetched from the peer, stored as it is.
    func receiveRev(
        _ request: BLIPMessage, peer: any BLIPPeer, endpoint: any ReplicationEndpoint
    ) async throws -> BLIPMessage {
        var request = request
        // A tombstone's body is taken whole even when it names a source, as Sync Gateway takes it.
        if let source = request["deltaSrc"], !SubChangesRequest.flag(request["deleted"]) {
            request = try await undelta(request, source: source, endpoint: endpoint)
        }
        let incoming = try BLIPReplicationWire.parseRev(request)
        guard let entry = try await missing([(incoming.id, incoming.rev)], endpoint: endpoint)[incoming.id],
            entry.missing.contains(incoming.rev)
        else { return BLIPMessage() }
        let revision = try await BLIPEndpoint.withAttachments(incoming, known: entry.possibleAncestors, peer: peer)
        let rows = try await endpoint.bulkDocs([revision], newEdits: false)
        if let row = rows.first, let error = row["error"]?.stringValue {
            let status = row["status"]?.intValue ?? CouchError.status(named: error) ?? 500
            throw Self.refuse(status, row["reason"]?.stringValue ?? error)
        }
        return BLIPMessage()
    }

    /// A pushed `rev` whose body is a JSON delta against `source`, made whole against that revision's stored body.
    /// - Throws: `CouchError` 422 (Sync Gateway's texts) when deltas are off, the source is not a revision of the
    ///   document this database can read, a tombstone, or the delta does not apply; 400 without a document id or for
    ///   a delta that is not JSON.
    func undelta(
        _ request: BLIPMessage, source: String, endpoint: any ReplicationEndpoint
    ) async throws -> BLIPMessage {
        guard deltaSync else { throw CouchError.status(422, "Deltas are disabled for this peer") }
        guard let id = request["id"], !id.isEmpty else { throw Self.refuse(400, "Missing docID or rev") }
        let delta = try Self.jsonBody(request)
        guard BLIPReplicationWire.generation(source) != nil else { throw BLIPDeltaSync.invalidSource(source) }
        let found = try await endpoint.bulkGet([BulkGetRequest(id: id, rev: source, attsSince: [source])]).first
        guard let found, found.error == nil else {
            throw BLIPDeltaSync.sourceUnreadable(
                docID: id, source: source, reason: found?.error?.reason ?? "missing")
        }
        let body = try BLIPDeltaSync.applyPushed(delta, docID: id, source: source, sourceBody: found.body)
        deltaStats.deltaPushed()
        var whole = request
        whole.properties.removeAll { $0.name == "deltaSrc" }
        whole.body = body.serialized()
        return whole
    }

    // MARK: pull (the peer subscribes)

    func subChanges(
        _ request: BLIPMessage, endpoint: any ReplicationEndpoint, index: Int?
    ) throws(CouchError) -> BLIPMessage {
        let params = try SubChangesRequest(request, bounds: .liteListener)
        let feed = Feed(params: params, endpoint: endpoint, index: index)
        try state.withLock { s throws(CouchError) in
            guard !s.closed else { throw .unavailable("The connection is closing") }
            let live = s.feeds.values.reduce(0) { $0 + $1.liveFeeds }
            guard live < Limits.liteListenerBLIPMaxLiveFeedsPerConnection else {
                throw .status(429, "Too many changes feeds of this connection are running; try again later")
            }
            var feeds = s.feeds[index] ?? BLIPSubscriptionState(maxLiveFeeds: Limits.liteListenerBLIPMaxLiveFeeds)
            try feeds.subscribe(feed)
            s.feeds[index] = feeds
        }
        return BLIPMessage()
    }

    /// `unsubChanges`: ends the running subscription (or the accepted one not started yet), answered empty either
    /// way; the feed is cancelled and counts against `Limits.liteListenerBLIPMaxLiveFeeds` until it returns.
    func unsubChanges(index: Int?) -> BLIPMessage {
        state.withLock { $0.feeds[index]?.unsubscribe() }?.cancel()
        return BLIPMessage()
    }

    /// Starts the feed `subChanges` accepted, now that its answer is queued ahead of the first `changes`.
    public func responded(to request: BLIPMessage, peer: any BLIPPeer) async {
        guard request.profile == "subChanges" else { return }
        let index = request["collection"].flatMap { Int($0) }
        state.withLock { s in
            s.feeds[index]?.launch(run: { feed in
                let peer: any BLIPPeer = feed.index.map { CollectionPeer(base: peer, index: $0) } ?? peer
                await self.run(feed.params, peer: peer, endpoint: feed.endpoint)
            }) { generation in
                self.state.withLock { $0.feeds[index]?.ended(generation: generation) }
            }
        }
    }

    /// The feed: batches of changes as `changes` requests, the revisions asked for as `rev`s, an empty `changes`
    /// once caught up; a continuous feed then longpolls the endpoint until the connection closes.
    func run(_ feed: SubChangesRequest, peer: any BLIPPeer, endpoint: any ReplicationEndpoint) async {
        var since = feed.since
        var caughtUp = false
        do {
            while !Task.isCancelled {
                let kind: ChangesFeedKind = caughtUp && feed.continuous ? .longpoll : .normal
                let batch = try await endpoint.changes(
                    since: since, limit: feed.batch, feed: kind, filter: feed.filter, heartbeatMs: nil)
                if let last = batch.lastSeq { since = last.description }
                let entries = Self.entries(batch.rows, activeOnly: feed.activeOnly && !caughtUp)
                if !entries.isEmpty {
                    try await send(entries, to: peer, endpoint: endpoint)
                } else if batch.rows.isEmpty {
                    if !caughtUp {
                        caughtUp = true
                        _ = try await peer.send(
                            BLIPMessage(properties: [(name: "Profile", value: "changes")], body: Array("[]".utf8)))
                    }
                    if !feed.continuous { break }
                }
            }
        } catch {
            logger.debug("BLIP changes feed ended", metadata: ["error": "\(error)"])
        }
    }

    /// One `changes` entry per leaf revision of each row (a removal, with no revision, has none).
    static func entries(_ rows: [ChangeRow], activeOnly: Bool) -> [BLIPReplicationWire.Change] {
        rows.flatMap { row -> [BLIPReplicationWire.Change] in
            if activeOnly && row.deleted { return [] }
            return row.revs.map {
                BLIPReplicationWire.Change(seq: row.seq, id: row.id, rev: $0, deleted: row.deleted, removed: false)
            }
        }
    }

    /// Sends one `changes` request and the revisions its answer asks for, `blipRevsInFlight` at a time.
    func send(
        _ changes: [BLIPReplicationWire.Change], to peer: any BLIPPeer, endpoint: any ReplicationEndpoint
    ) async throws {
        let body = JSON.array(
            changes.map { c in .array([c.seq.json, .string(c.id), .string(c.rev), .int(c.deleted ? 1 : 0)]) }
        ).serialized()
        guard
            let answer = try await peer.send(
                BLIPMessage(
                    compressed: body.count >= 128, properties: [(name: "Profile", value: "changes")], body: body))
        else { return }
        if answer.type == .error { throw BLIPReplicationWire.error(of: answer) }
        noteDeltas(answer["deltas"])
        let wanted = try Self.wanted(answer.body, count: changes.count)
        let maxHistory = answer["maxHistory"].flatMap { Int($0) }
        let asked = zip(changes, wanted).compactMap { c, known in known.map { (change: c, known: $0) } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            for (change, known) in asked {
                if next >= ReplicationLimits.blipRevsInFlight { try await group.next() }
                next += 1
                group.addTask {
                    try await self.sendRevision(
                        change, known: known, maxHistory: maxHistory, to: peer, endpoint: endpoint)
                }
            }
            try await group.waitForAll()
        }
    }

    /// The peer's answer to a `changes` request: per entry the revisions it knows (wanted) or nil (not wanted).
    static func wanted(_ body: [UInt8], count: Int) throws(ReplicationError) -> [[String]?] {
        var entries: [JSON] = []
        if !body.isEmpty {
            do {
                entries = try JSON.parse(body, maxValues: GatewayHTTPLimits.maxRequestJSONValues).arrayValue ?? []
            } catch {
                throw .badResponse("changes answer: \(error)")
            }
        }
        return (0..<count).map { i in
            guard i < entries.count, let known = entries[i].arrayValue else { return nil }
            return known.compactMap(\.stringValue)
        }
    }

    /// One `rev` (or `norev`) for a revision the peer asked for, its attachments offered while it is in flight.
    func sendRevision(
        _ change: BLIPReplicationWire.Change, known: [String], maxHistory: Int?, to peer: any BLIPPeer,
        endpoint: any ReplicationEndpoint
    ) async throws {
        let found = try await endpoint.bulkGet([BulkGetRequest(id: change.id, rev: change.rev, attsSince: known)])
        guard var revision = found.first, revision.error == nil else {
            let status = found.first?.error?.status ?? 404
            _ = try await peer.send(
                BLIPMessage(
                    noReply: true,
                    properties: [
                        (name: "Profile", value: "norev"), (name: "id", value: change.id),
                        (name: "rev", value: change.rev), (name: "error", value: String(status)),
                        (name: "reason", value: found.first?.error?.reason ?? "missing"),
                    ]))
            return
        }
        if let maxHistory, maxHistory > 0, let revisions = revision.body["_revisions"],
            let ids = revisions["ids"]?.arrayValue, ids.count > maxHistory
        {
            var trimmed = revisions
            trimmed.set("ids", .array(Array(ids.prefix(maxHistory))))
            revision.body.set("_revisions", trimmed)
        }
        let source = await deltaSource(
            of: change.id, known: known, deleted: revision.isDeleted, endpoint: endpoint)
        let built = BLIPReplicationWire.revRequest(revision, sequence: change.seq, deltaSource: source)
        var message = built.message
        let attachments = built.attachments
        offer(attachments)
        defer { withdraw(attachments) }
        if message["deltaSrc"] != nil { deltaStats.deltaSent() }
        guard var answer = try await peer.send(message) else { return }
        if message["deltaSrc"] != nil, BLIPDeltaSync.sendWholeAfter(answer) {
            logger.debug(
                "peer could not apply a delta; sending the revision whole",
                metadata: ["doc": "\(LogText.userData(change.id))", "rev": "\(change.rev)"])
            message = BLIPReplicationWire.revRequest(revision, sequence: change.seq).message
            guard let whole = try await peer.send(message) else { return }
            answer = whole
        }
        if answer.type == .error {
            logger.debug(
                "peer refused a revision",
                metadata: ["doc": "\(LogText.userData(change.id))", "error": "\(answer["Error-Code"] ?? "")"])
        }
    }

    /// The peer's word on deltas, the `deltas` property of its `changes` answer.
    func noteDeltas(_ value: String?) {
        let turnedOn = state.withLock { s in
            let was = s.peerTakesDeltas
            s.peerTakesDeltas = BLIPDeltaSync.peerTakesDeltas(said: value, enabled: deltaSync, current: was)
            return s.peerTakesDeltas && !was
        }
        if turnedOn { deltaStats.pullReplicationUsesDeltas() }
    }

    /// The source of a delta for a wanted live revision: the first revision the peer named as one it has (Sync
    /// Gateway's choice; Couchbase Lite names its current one first) and its body here, when the peer takes deltas
    /// and the body is still kept; nil sends the revision whole.
    func deltaSource(
        of id: String, known: [String], deleted: Bool, endpoint: any ReplicationEndpoint
    ) async -> (rev: String, body: JSON)? {
        guard deltaSync, !deleted, let source = known.first, state.withLock({ $0.peerTakesDeltas }) else { return nil }
        deltaStats.deltaRequested()
        guard let found = try? await endpoint.bulkGet([BulkGetRequest(id: id, rev: source, attsSince: [source])]),
            let first = found.first, first.error == nil
        else { return nil }
        return (source, first.body)
    }

    // MARK: attachments

    func offer(_ attachments: [String: [UInt8]]) {
        state.withLock { s in
            for (digest, bytes) in attachments { s.offered[digest] = (bytes, (s.offered[digest]?.users ?? 0) + 1) }
        }
    }

    func withdraw(_ attachments: [String: [UInt8]]) {
        state.withLock { s in
            for digest in attachments.keys {
                guard let o = s.offered[digest] else { continue }
                s.offered[digest] = o.users > 1 ? (o.bytes, o.users - 1) : nil
            }
        }
    }

    func offeredBytes(_ request: BLIPMessage) throws(ReplicationError) -> [UInt8] {
        guard let digest = request["digest"], !digest.isEmpty else { throw Self.refuse(400, "Missing 'digest'") }
        guard let bytes = state.withLock({ $0.offered[digest]?.bytes }) else {
            throw Self.refuse(403, "Attachment's doc not being synced")
        }
        return bytes
    }

    /// `getAttachment`: the bytes of an attachment of a `rev` in flight to the peer (403 otherwise).
    func getAttachment(_ request: BLIPMessage) throws(ReplicationError) -> BLIPMessage {
        let bytes = try offeredBytes(request)
        return BLIPMessage(compressed: request["compress"] == "true" || bytes.count >= 128, body: bytes)
    }

    /// `proveAttachment`: SHA-1 over the nonce's length, the nonce and the attachment (`attachmentProof`).
    func proveAttachment(_ request: BLIPMessage) throws(ReplicationError) -> BLIPMessage {
        guard (1...Limits.liteListenerBLIPMaxNonceBytes).contains(request.body.count) else {
            throw Self.refuse(400, "nonce must be 1 to \(Limits.liteListenerBLIPMaxNonceBytes) bytes")
        }
        let bytes = try offeredBytes(request)
        let proof = BLIPReplicationWire.attachmentProof(nonce: request.body, attachment: bytes)
        return BLIPMessage(body: Array(proof.utf8))
    }
}
