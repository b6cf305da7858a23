import Logging
import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeSync
import Synchronization

/// One `/db/_blipsync` connection's replication handler: the Couchbase Mobile replication protocol
/// (couchbase-lite-core `modules/docs/pages/replication-protocol.adoc` §3 "Message Types") answered over the
/// gateway's own documents, channels, users and sync function, as Sync Gateway's `BlipSyncContext` /
/// `blipHandler` answer it. Every request runs as the connection's user (nil on the admin port), through the same
/// read, write and changes functions as the CouchDB REST API, so both protocols see one database.
///
/// Profiles: `getCheckpoint`, `setCheckpoint`, `getCollections` (the database's keyspaces, ADR 0149),
/// `subChanges` (a feed of `changes` and `rev` requests sent to the client, `BLIPChangesFeed`), `changes` and
/// `proposeChanges` (a push's offers), `rev` (a pushed revision, `BLIPSyncHandler+Push`), `norev`, `getAttachment`,
/// `proveAttachment`. Any other profile is a BLIP/404 error, as go-blip answers an unhandled profile.
/// `unsubChanges` ends the running subscription of its collection index (Sync Gateway's `handleUnsubChanges`),
/// after which a new `subChanges` may start one there. Not done: `getRev`/`putRev`.
///
/// Collections (ADR 0149; replication-protocol.adoc "Collections"; Sync Gateway's `collectionBlipHandler`): after
/// `getCollections`, a request's `collection` property is an index into the list it named and the request runs on
/// that keyspace's `GatewayDatabase` (documents, `_local` checkpoints, changes feed, attachments); a request without
/// one runs on the default collection, and is refused (400) on a database that does not serve it. Users, channels and
/// grants are the database's (`KeyspaceLinks`), so one user reads every keyspace as the REST API lets it.
///
/// A failed request is an `HTTP`-domain error with Sync Gateway's status (404 missing checkpoint, 409 stale
/// checkpoint or conflicting revision, 403 a revision the sync function refused, ...). Each failed request is logged
/// (profile, status, the reason and any document id as `<ud>` user data); `logOpened`/`logClosed` log the
/// connection with its message counts.
///
/// What a client can make this handler hold is bounded (docs/internals/blip.md, "What a client can make the gateway
/// hold"): one subscription per collection index, at most `Limits.gatewayBLIPMaxLiveFeeds` feeds of one index and
/// `Limits.gatewayBLIPMaxLiveFeedsPerConnection` of the connection running or still ending, at most
/// `Limits.gatewayBLIPMaxCollections` resolved indexes, attachment grants, awaited delta answers, checkpoint bodies,
/// `docIDs` and channel lists.
public final class BLIPSyncHandler: BLIPRequestHandler {
    /// The database's primary keyspace (its default collection, else its first configured one): the connection's
    /// traffic counters and log lines.
    let primary: GatewayDatabase
    /// The keyspaces `getCollections` may resolve and requests without `collection` run on.
    let keyspaces: BLIPKeyspaces
    /// Who the connection runs as; nil on the admin port (no access checks).
    let user: UserContext?
    let subprotocol: BLIPSubprotocol
    let logger: Logger

    struct State: Sendable {
        /// Each collection index's `subChanges` subscription (nil: requests without `collection`; one at a time per
        /// index, Sync Gateway #3222) and its feeds still ending (`Limits.gatewayBLIPMaxLiveFeeds`).
        var feeds: [Int?: BLIPSubscriptionState<BLIPChangesFeed>] = [:]
        /// The connection is closing: no more subscriptions.
        var closed = false
        var grants = BLIPAttachmentGrants()
        /// The keyspace `getCollections` resolved each index to (nil: one this database does not serve); nil before
        /// it was asked.
        var collections: [GatewayDatabase?]?
        /// The client takes deltas (`deltas=true` on its last `changes` answer that said) and the database has
        /// delta sync on.
        var useDeltas = false
        /// Delta `rev`s whose answer is awaited (`Limits.gatewayBLIPDeltaAnswersAwaited`).
        var deltaAnswersAwaited = 0
        var traffic = BLIPSyncTraffic()
    }
    let state = Mutex(State())

    /// A handler over a database of one keyspace, `db` (`getCollections` resolves its name and no other).
    public convenience init(db: GatewayDatabase, user: UserContext?, subprotocol: BLIPSubprotocol, logger: Logger) {
        self.init(keyspaces: BLIPKeyspaces(single: db), user: user, subprotocol: subprotocol, logger: logger)
    }

    /// A handler over a database's keyspaces (ADR 0142's one `GatewayDatabase` per collection).
    public init(keyspaces: BLIPKeyspaces, user: UserContext?, subprotocol: BLIPSubprotocol, logger: Logger) {
        self.primary = keyspaces.primary
        self.keyspaces = keyspaces
        self.user = user
        self.subprotocol = subprotocol
        self.logger = logger
    }

    /// Ends the connection's feeds (the connection closed). Later `subChanges` are refused.
    public func close() {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.closed = true
            return BLIPSubscriptionState.closeAll(&s.feeds)
        }
        for t in tasks { t.cancel() }
    }

    public func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        state.withLock { $0.traffic.requestsIn += 1 }
        let answer = await answer(request, peer: BLIPCountingPeer(base: peer, handler: self))
        state.withLock { s in
            if answer.type == .error { s.traffic.errorsOut += 1 } else { s.traffic.responsesOut += 1 }
        }
        return answer
    }

    private func answer(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        let number = request.number
        let profile = request.profile ?? ""
        do {
            var response: BLIPMessage
            switch profile {
            case "getCollections": response = try await getCollections(request)
            case "getCheckpoint": response = try await getCheckpoint(request, db: try keyspace(for: request).db)
            case "setCheckpoint": response = try await setCheckpoint(request, db: try keyspace(for: request).db)
            case "subChanges":
                let target = try keyspace(for: request)
                response = try subChanges(request, peer: peer, db: target.db, index: target.index)
            case "unsubChanges": response = unsubChanges(index: try keyspace(for: request).index)
            case "changes": response = try await changes(request, db: try keyspace(for: request).db)
            case "proposeChanges": response = try await proposeChanges(request, db: try keyspace(for: request).db)
            case "rev": response = try await receiveRevision(request, peer: peer, db: try keyspace(for: request).db)
            case "norev":
                _ = try keyspace(for: request)
                logger.debug(
                    "norev from client",
                    metadata: [
                        "doc": "\(LogText.userData(request["id"] ?? ""))", "rev": "\(request["rev"] ?? "")",
                        "error": "\(request["error"] ?? "")",
                    ])
                response = BLIPMessage()
            case "getAttachment": response = try await getAttachment(request, db: try keyspace(for: request).db)
            case "proveAttachment": response = try await proveAttachment(request, db: try keyspace(for: request).db)
            default:
                logger.info(
                    "BLIP request refused: no handler for its profile",
                    metadata: ["profile": "\(LogText.userData(profile))", "status": "404"])
                return .error(
                    answering: number, domain: "BLIP", code: 404,
                    message: "no handler for profile \(LogText.quoted(profile))")
            }
            response.number = number
            response.type = .response
            return response
        } catch {
            // A missing checkpoint is every new client's first answer, not worth a line.
            if profile != "getCheckpoint" || error.status != 404 {
                var metadata: Logger.Metadata = [
                    "profile": "\(profile)", "status": "\(error.status)", "reason": "\(LogText.userData(error.reason))",
                ]
                if let id = request["id"] ?? request["docID"] { metadata["doc"] = "\(LogText.userData(id))" }
                if let rev = request["rev"] { metadata["rev"] = "\(LogText.escaped(rev))" }
                logger.info("BLIP request failed", metadata: metadata)
            }
            return .error(answering: number, code: error.status, message: error.reason)
        }
    }

    // MARK: logging

    /// Logs the connection's start (info): database, user (`<ud>`; `(admin)` on the admin port), subprotocol and the
    /// peer's address, as Sync Gateway logs a new BLIP connection.
    public func logOpened(database: String, peerAddress: String?) {
        logger.info(
            "BLIP sync connection opened",
            metadata: [
                "db": "\(LogText.escaped(database))", "user": "\(LogText.userData(user?.name ?? "(admin)"))",
                "protocol": "\(subprotocol.rawValue)", "peer": "\(LogText.escaped(peerAddress ?? "-"))",
            ])
    }

    /// Logs the connection's end (info): the WebSocket close code and reason it closed with, and the messages it
    /// carried (`in`: requests received and answers to the gateway's requests; `out`: responses, error responses and
    /// requests sent).
    public func logClosed(code: UInt16, reason: String) {
        let t = traffic
        logger.info(
            "BLIP sync connection closed",
            metadata: [
                "user": "\(LogText.userData(user?.name ?? "(admin)"))", "code": "\(code)",
                "reason": "\(LogText.escaped(reason))", "in": "\(t.messagesIn)", "out": "\(t.messagesOut)",
                "errors": "\(t.errorsOut)",
            ])
    }

    /// The messages this connection has carried so far.
    public var traffic: BLIPSyncTraffic { state.withLock { $0.traffic } }

    // MARK: collections

    /// The keyspace a request runs on (Sync Gateway's `collectionBlipHandler`): the one its `collection` index
    /// resolved to in the last `getCollections`, else the default collection.
    /// - Throws: 400 for a `collection` that is not an integer, one sent before `getCollections`, or no `collection`
    ///   on a database without the default collection (Sync Gateway's text); 404 for an index out of the list or one
    ///   `getCollections` answered null.
    func keyspace(for request: BLIPMessage) throws(GatewayError) -> (db: GatewayDatabase, index: Int?) {
        guard let text = request["collection"] else {
            guard let db = keyspaces.defaultCollection else {
                throw .badRequest(
                    "Collection property not specified and default collection is not configured for this database")
            }
            return (db, nil)
        }
        guard let index = Int(text) else {
            throw .badRequest("collection property needs to be an int, was \"\(LogText.userData(text))\"")
        }
        let known = state.withLock { $0.collections }
        guard let known else { throw .badRequest("Passing collection requires calling getCollections first") }
        guard index >= 0, index < known.count, let db = known[index] else {
            throw .notFound("Collection \(index) is not a collection of this database")
        }
        return (db, index)
    }

    /// `getCollections` (CBMobile_3): body `{"collections": ["_default" or "scope.collection", ...],
    /// "checkpoint_ids": [...]}` (at most `Limits.gatewayBLIPMaxCollections`); answers one entry per collection: the
    /// checkpoint body stored in that keyspace's `_local` (`{}` when none), or null for a collection this database
    /// does not serve (`BLIPKeyspaces.resolve`), as Sync Gateway answers. The list replaces any earlier one; running
    /// subscriptions keep their keyspace.
    func getCollections(_ request: BLIPMessage) async throws(GatewayError) -> BLIPMessage {
        let body = try Self.jsonBody(request)
        guard let names = body["collections"]?.arrayValue, let ids = body["checkpoint_ids"]?.arrayValue else {
            throw .badRequest("getCollections needs collections and checkpoint_ids")
        }
        guard names.count == ids.count else {
            throw .badRequest("Length of collections must match length of checkpoint ids")
        }
        guard names.count <= Limits.gatewayBLIPMaxCollections else {
            throw .badRequest("Too many collections (max \(Limits.gatewayBLIPMaxCollections))")
        }
        var answer: [JSON] = []
        var resolved: [GatewayDatabase?] = []
        for (name, id) in zip(names, ids) {
            guard let name = name.stringValue, let id = id.stringValue else {
                throw .badRequest("collections and checkpoint_ids must be strings")
            }
            guard let db = keyspaces.resolve(name) else {
                answer.append(.null)
                resolved.append(nil)
                continue
            }
            resolved.append(db)
            do {
                let stored = try await db.local(try Self.checkpointID(id))
                answer.append(.object((stored.objectValue ?? []).filter { $0.0 != "_id" }))
            } catch {
                guard error.status == 404 else {
                    throw .unavailable("Unable to fetch client checkpoint: \(error.reason)")
                }
                answer.append(.object([]))
            }
        }
        state.withLock { $0.collections = resolved }
        return BLIPMessage(body: JSON.array(answer).serialized())
    }

    // MARK: checkpoints

    /// The `_local` document a client's checkpoint is stored as: `checkpoint/<client>`, Sync Gateway's
    /// `CheckpointDocIDPrefix`, so REST sees it as `_local/checkpoint/<client>` (`_sync:local:checkpoint/<client>`).
    static func checkpointID(_ client: String) throws(GatewayError) -> String {
        guard !client.isEmpty else { throw .badRequest("Missing client") }
        let id = "checkpoint/" + client
        guard GatewayDatabase.localKey(id).utf8.count <= Limits.maxKeyLength else {
            throw .badRequest("Checkpoint client id too long")
        }
        return id
    }

    /// `getCheckpoint`: property `client`; answers `rev` and the checkpoint's body (404 when none is stored).
    func getCheckpoint(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        let id = try Self.checkpointID(request["client"] ?? "")
        let stored = try await db.local(id)
        let rev = stored["_rev"]?.stringValue ?? "0-1"
        let members = (stored.objectValue ?? []).filter { $0.0 != "_id" && $0.0 != "_rev" }
        return BLIPMessage(properties: [(name: "rev", value: rev)], body: JSON.object(members).serialized())
    }

    /// `setCheckpoint`: properties `client` and `rev` (the stored revision; absent or empty for a new checkpoint),
    /// body the checkpoint; answers the new `rev`. A `rev` that is not the stored one is 409, a `rev` for a
    /// checkpoint never stored 404 (the `_local` rules of REST, `GatewayDatabase.putLocal`).
    ///
    /// Before it stores the checkpoint, every write the database acknowledged is made durable
    /// (`GatewayDatabase.ensureFullCommit`: on disk, on a cluster bucket on a majority of each vBucket's copies): a
    /// pushing client checkpoints past the revisions it sent, and a BLIP client asks for no `_ensure_full_commit` as
    /// the REST replicator does (ADR 0013), so without it a crash or failover could keep the checkpoint and lose the
    /// revisions before it. A full commit that fails answers its error and stores nothing; the client retries.
    func setCheckpoint(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        let id = try Self.checkpointID(request["client"] ?? "")
        guard request.body.count <= Limits.gatewayBLIPMaxCheckpointBytes else {
            throw .status(413, "Checkpoint larger than \(Limits.gatewayBLIPMaxCheckpointBytes) bytes")
        }
        let body = request.body.isEmpty ? JSON.object([]) : try Self.jsonBody(request)
        var members = (body.objectValue ?? []).filter { !$0.0.hasPrefix("_") }
        if let rev = request["rev"], !rev.isEmpty { members.append(("_rev", .string(rev))) }
        try await db.ensureFullCommit()
        let rev = try await db.putLocal(id, .object(members))
        return BLIPMessage(properties: [(name: "rev", value: rev)])
    }

    // MARK: subChanges

    /// `subChanges`: answered at once (empty); the feed (`BLIPChangesFeed`) then sends `changes` requests, the
    /// revisions the client asks for, and an empty `changes` once caught up; a continuous one goes on until the
    /// connection closes. One subscription at a time per collection index (Sync Gateway refuses a second), and at
    /// most `Limits.gatewayBLIPMaxLiveFeedsPerConnection` feeds of the connection running or still ending (429).
    func subChanges(
        _ request: BLIPMessage, peer: any BLIPPeer, db: GatewayDatabase, index: Int?
    ) throws(GatewayError) -> BLIPMessage {
        let params = try SubChangesRequest(request, bounds: .gateway)
        let since = try params.changesSince()
        // A checkpoint from before a purged tombstone's deletion: the subscription is refused (ADR 0145).
        try db.admitPull(since: since)
        let feed = BLIPChangesFeed(
            handler: self, db: db, params: params, since: since, peer: peer,
            collection: request["collection"])
        try state.withLock { s throws(GatewayError) in
            guard !s.closed else { throw .unavailable("The connection is closing") }
            let live = s.feeds.values.reduce(0) { $0 + $1.liveFeeds }
            guard live < Limits.gatewayBLIPMaxLiveFeedsPerConnection else {
                throw .status(429, "Too many changes feeds of this connection are running; try again later")
            }
            var feeds = s.feeds[index] ?? BLIPSubscriptionState(maxLiveFeeds: Limits.gatewayBLIPMaxLiveFeeds)
            try feeds.subscribe(feed)
            s.feeds[index] = feeds
        }
        return BLIPMessage()
    }

    /// Starts the feed `subChanges` accepted, now that its empty response is queued ahead of the first `changes`.
    public func responded(to request: BLIPMessage, peer: any BLIPPeer) async {
        guard request.profile == "subChanges" else { return }
        let index = request["collection"].flatMap { Int($0) }
        state.withLock { s in
            s.feeds[index]?.launch(run: { feed in await feed.run() }) { generation in
                self.state.withLock { $0.feeds[index]?.ended(generation: generation) }
            }
        }
    }

    /// `unsubChanges` (Sync Gateway's `handleUnsubChanges`): ends the collection index's running subscription, or
    /// the one `subChanges` accepted and has not started yet; answered empty whether or not there was one. The feed
    /// is cancelled, not
    /// awaited (one waiting for room in the outgoing queue returns only when there is room), and counts against
    /// `Limits.gatewayBLIPMaxLiveFeeds` until it returns.
    func unsubChanges(index: Int?) -> BLIPMessage {
        state.withLock { $0.feeds[index]?.unsubscribe() }?.cancel()
        return BLIPMessage()
    }

    // MARK: deltas

    /// The client's word on deltas, the `deltas` property of its `changes` answer (Sync Gateway's `setUseDeltas`):
    /// on when it says `true` and the database (`db`, the feed's keyspace) has delta sync on, off when it says
    /// anything else; no property changes nothing.
    func noteClientDeltas(_ value: String?, db: GatewayDatabase) {
        let enabled = db.options.deltaSync.active
        let turnedOn = state.withLock { s in
            let was = s.useDeltas
            s.useDeltas = BLIPDeltaSync.peerTakesDeltas(said: value, enabled: enabled, current: was)
            return s.useDeltas && !was
        }
        if turnedOn { db.deltaStats.pullReplicationUsesDeltas() }
    }

    func usesDeltas(_ db: GatewayDatabase) -> Bool { state.withLock { $0.useDeltas } && db.options.deltaSync.active }

    /// Takes one of the connection's delta-answer slots; false when all are taken (the revision then goes whole).
    func beginDeltaAnswer() -> Bool {
        state.withLock { s in
            guard s.deltaAnswersAwaited < Limits.gatewayBLIPDeltaAnswersAwaited else { return false }
            s.deltaAnswersAwaited += 1
            return true
        }
    }

    func endDeltaAnswer() { state.withLock { $0.deltaAnswersAwaited -= 1 } }

    // MARK: attachments

    /// Lets the client fetch the attachments of a revision it is being sent, in the collection index it was sent on.
    func grantAttachments(docID: String, body: [(String, JSON)], collection: String?) {
        guard let atts = body.first(where: { $0.0 == "_attachments" })?.1.objectValue, !atts.isEmpty else { return }
        let v3 = subprotocol >= .cbMobile3
        state.withLock { s in
            for (_, meta) in atts {
                guard let digest = meta["digest"]?.stringValue else { continue }
                s.grants.grant(
                    BLIPAttachmentGrants.key(docID: v3 ? docID : nil, digest: digest, collection: collection))
            }
        }
    }

    /// `getAttachment`: property `digest` (and, under CBMobile_3, `docID`); answers the bytes, only for an
    /// attachment of a revision this connection was sent (403 otherwise, Sync Gateway's "Attachment's doc not being
    /// synced"), so a digest learnt elsewhere (or in another collection) opens nothing.
    func getAttachment(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        guard let digest = request["digest"], !digest.isEmpty else { throw .badRequest("Missing 'digest'") }
        var docID: String? = nil
        if subprotocol >= .cbMobile3 {
            guard let d = request["docID"], !d.isEmpty else { throw .badRequest("Missing 'docID'") }
            docID = d
        }
        let key = BLIPAttachmentGrants.key(docID: docID, digest: digest, collection: request["collection"])
        guard state.withLock({ $0.grants.allows(key) }) else {
            throw .forbidden("Attachment's doc not being synced")
        }
        let data = try await db.attachmentBlob(digest)
        return BLIPMessage(compressed: request["compress"] == "true", body: data)
    }

    /// `proveAttachment`: property `digest`, body a nonce (1 to 255 bytes); answers
    /// `"sha1-" + base64(SHA-1(nonce length byte + nonce + attachment))` (Sync Gateway's `ProveAttachment`), or 404
    /// when this database has no attachment with that digest.
    func proveAttachment(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        let nonce = request.body
        guard !nonce.isEmpty else { throw .badRequest("no nonce sent with proveAttachment") }
        guard nonce.count <= Limits.gatewayBLIPMaxNonceBytes else { throw .badRequest("nonce too long") }
        guard let digest = request["digest"], !digest.isEmpty else {
            throw .badRequest("no digest sent with proveAttachment")
        }
        let data: [UInt8]
        do { data = try await db.attachmentBlob(digest) } catch {
            throw error.status == 404 ? .notFound("attachment not found") : error
        }
        return BLIPMessage(body: Array(Self.proof(of: data, nonce: nonce).utf8))
    }

    // MARK: helpers

    static func jsonBody(_ request: BLIPMessage) throws(GatewayError) -> JSON {
        do { return try JSON.parse(request.body, maxValues: Limits.gatewayBLIPMaxJSONValues) } catch {
            throw .badRequest("Invalid JSON body")
        }
    }
}
