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
/// Profiles: `getCheckpoint`, `setCheckpoint`, `getCollections` (the default collection), `subChanges` (a feed of
/// `changes` and `rev` requests sent to the client, `BLIPChangesFeed`), `changes` and `proposeChanges` (a push's
/// offers), `rev` (a pushed revision, `BLIPSyncHandler+Push`), `norev`, `getAttachment`, `proveAttachment`. Any
/// other profile is a BLIP/404 error, as go-blip answers an unhandled profile. `unsubChanges` ends the running
/// subscription (Sync Gateway's `handleUnsubChanges`), after which a new `subChanges` may start one. Not done:
/// `getRev`/`putRev`.
///
/// A failed request is an `HTTP`-domain error with Sync Gateway's status (404 missing checkpoint, 409 stale
/// checkpoint or conflicting revision, 403 a revision the sync function refused, ...). Each failed request is logged
/// (profile, status, the reason and any document id as `<ud>` user data); `logOpened`/`logClosed` log the
/// connection with its message counts.
///
/// What a client can make this handler hold is bounded (docs/internals/blip.md, "What a client can make the gateway
/// hold"): one subscription and at most `Limits.gatewayBLIPMaxLiveFeeds` feeds still ending, attachment grants,
/// awaited delta answers, checkpoint bodies, `docIDs` and channel lists.
public final class BLIPSyncHandler: BLIPRequestHandler {
    let db: GatewayDatabase
    /// Who the connection runs as; nil on the admin port (no access checks).
    let user: UserContext?
    let subprotocol: BLIPSubprotocol
    let logger: Logger

    struct State: Sendable {
        /// The `subChanges` subscription (one at a time per connection, Sync Gateway #3222) and the feeds still
        /// ending (`Limits.gatewayBLIPMaxLiveFeeds`).
        var feeds = BLIPSubscriptionState<BLIPChangesFeed>(maxLiveFeeds: Limits.gatewayBLIPMaxLiveFeeds)
        var grants = BLIPAttachmentGrants()
        /// What `getCollections` resolved each index to (true: the default collection); nil before it was asked.
        var collections: [Bool]?
        /// The client takes deltas (`deltas=true` on its last `changes` answer that said) and the database has
        /// delta sync on.
        var useDeltas = false
        /// Delta `rev`s whose answer is awaited (`Limits.gatewayBLIPDeltaAnswersAwaited`).
        var deltaAnswersAwaited = 0
        var traffic = BLIPSyncTraffic()
    }
    let state = Mutex(State())

    public init(db: GatewayDatabase, user: UserContext?, subprotocol: BLIPSubprotocol, logger: Logger) {
        self.db = db
        self.user = user
        self.subprotocol = subprotocol
        self.logger = logger
    }

    /// Ends the connection's feed (the connection closed). Later `subChanges` are refused.
    public func close() {
        state.withLock { $0.feeds.close() }?.cancel()
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
            try checkCollection(request)
            var response: BLIPMessage
            switch profile {
            case "getCheckpoint": response = try await getCheckpoint(request)
            case "setCheckpoint": response = try await setCheckpoint(request)
            case "getCollections": response = try await getCollections(request)
            case "subChanges": response = try subChanges(request, peer: peer)
            case "unsubChanges": response = unsubChanges()
            case "changes": response = try await changes(request)
            case "proposeChanges": response = try await proposeChanges(request)
            case "rev": response = try await receiveRevision(request, peer: peer)
            case "norev":
                logger.debug(
                    "norev from client",
                    metadata: [
                        "doc": "\(LogText.userData(request["id"] ?? ""))", "rev": "\(request["rev"] ?? "")",
                        "error": "\(request["error"] ?? "")",
                    ])
                response = BLIPMessage()
            case "getAttachment": response = try await getAttachment(request)
            case "proveAttachment": response = try await proveAttachment(request)
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

    /// A `collection` property names an index `getCollections` resolved to the default collection (Sync Gateway's
    /// `collectionBlipHandler`); without one the request is for the default collection.
    func checkCollection(_ request: BLIPMessage) throws(GatewayError) {
        guard let text = request["collection"] else { return }
        guard let index = Int(text) else {
            throw .badRequest("collection property needs to be an int, was \"\(LogText.userData(text))\"")
        }
        let known = state.withLock { $0.collections }
        guard let known else { throw .badRequest("Passing collection requires calling getCollections first") }
        guard index >= 0, index < known.count, known[index] else {
            throw .notFound("Collection \(index) is not a collection of this database")
        }
    }

    /// `getCollections` (CBMobile_3): body `{"collections": ["_default" or "scope.collection", ...],
    /// "checkpoint_ids": [...]}`; answers one entry per collection: its checkpoint body (`{}` when none is stored),
    /// or null for a collection this database does not have (every one but `_default._default`).
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
        var resolved: [Bool] = []
        for (name, id) in zip(names, ids) {
            guard let name = name.stringValue, let id = id.stringValue else {
                throw .badRequest("collections and checkpoint_ids must be strings")
            }
            guard name == "_default" || name == "_default._default" else {
                answer.append(.null)
                resolved.append(false)
                continue
            }
            resolved.append(true)
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
    func getCheckpoint(_ request: BLIPMessage) async throws(GatewayError) -> BLIPMessage {
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
    func setCheckpoint(_ request: BLIPMessage) async throws(GatewayError) -> BLIPMessage {
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
    /// connection closes. One subscription at a time per connection (Sync Gateway refuses a second).
    func subChanges(_ request: BLIPMessage, peer: any BLIPPeer) throws(GatewayError) -> BLIPMessage {
        let params = try SubChangesRequest(request, bounds: .gateway)
        let since = try params.changesSince()
        // A checkpoint from before a purged tombstone's deletion: the subscription is refused (ADR 0145).
        try db.admitPull(since: since)
        let feed = BLIPChangesFeed(
            handler: self, params: params, since: since, peer: peer,
            collection: request["collection"])
        try state.withLock { s throws(GatewayError) in try s.feeds.subscribe(feed) }
        return BLIPMessage()
    }

    /// Starts the feed `subChanges` accepted, now that its empty response is queued ahead of the first `changes`.
    public func responded(to request: BLIPMessage, peer: any BLIPPeer) async {
        guard request.profile == "subChanges" else { return }
        state.withLock { s in
            s.feeds.launch(run: { feed in await feed.run() }) { generation in
                self.state.withLock { $0.feeds.ended(generation: generation) }
            }
        }
    }

    /// `unsubChanges` (Sync Gateway's `handleUnsubChanges`): ends the running subscription, or the one `subChanges`
    /// accepted and has not started yet; answered empty whether or not there was one. The feed is cancelled, not
    /// awaited (one waiting for room in the outgoing queue returns only when there is room), and counts against
    /// `Limits.gatewayBLIPMaxLiveFeeds` until it returns.
    func unsubChanges() -> BLIPMessage {
        state.withLock { $0.feeds.unsubscribe() }?.cancel()
        return BLIPMessage()
    }

    // MARK: deltas

    /// The client's word on deltas, the `deltas` property of its `changes` answer (Sync Gateway's `setUseDeltas`):
    /// on when it says `true` and the database has delta sync on, off when it says anything else; no property
    /// changes nothing.
    func noteClientDeltas(_ value: String?) {
        let enabled = db.options.deltaSync.active
        let turnedOn = state.withLock { s in
            let was = s.useDeltas
            s.useDeltas = BLIPDeltaSync.peerTakesDeltas(said: value, enabled: enabled, current: was)
            return s.useDeltas && !was
        }
        if turnedOn { db.deltaStats.pullReplicationUsesDeltas() }
    }

    var usesDeltas: Bool { state.withLock { $0.useDeltas } && db.options.deltaSync.active }

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

    /// Lets the client fetch the attachments of a revision it is being sent.
    func grantAttachments(docID: String, body: [(String, JSON)]) {
        guard let atts = body.first(where: { $0.0 == "_attachments" })?.1.objectValue, !atts.isEmpty else { return }
        let v3 = subprotocol >= .cbMobile3
        state.withLock { s in
            for (_, meta) in atts {
                guard let digest = meta["digest"]?.stringValue else { continue }
                s.grants.grant(BLIPAttachmentGrants.key(docID: v3 ? docID : nil, digest: digest))
            }
        }
    }

    /// `getAttachment`: property `digest` (and, under CBMobile_3, `docID`); answers the bytes, only for an
    /// attachment of a revision this connection was sent (403 otherwise, Sync Gateway's "Attachment's doc not being
    /// synced"), so a digest learnt elsewhere opens nothing.
    func getAttachment(_ request: BLIPMessage) async throws(GatewayError) -> BLIPMessage {
        guard let digest = request["digest"], !digest.isEmpty else { throw .badRequest("Missing 'digest'") }
        var docID: String? = nil
        if subprotocol >= .cbMobile3 {
            guard let d = request["docID"], !d.isEmpty else { throw .badRequest("Missing 'docID'") }
            docID = d
        }
        let key = BLIPAttachmentGrants.key(docID: docID, digest: digest)
        guard state.withLock({ $0.grants.allows(key) }) else {
            throw .forbidden("Attachment's doc not being synced")
        }
        let data = try await db.attachmentBlob(digest)
        return BLIPMessage(compressed: request["compress"] == "true", body: data)
    }

    /// `proveAttachment`: property `digest`, body a nonce (1 to 255 bytes); answers
    /// `"sha1-" + base64(SHA-1(nonce length byte + nonce + attachment))` (Sync Gateway's `ProveAttachment`), or 404
    /// when this database has no attachment with that digest.
    func proveAttachment(_ request: BLIPMessage) async throws(GatewayError) -> BLIPMessage {
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
