import SetteeBLIP
import SetteeCore
import SetteeJSON
import Synchronization

/// Several collections' replications over one BLIP connection, as Couchbase Lite 3.1+ runs a replicator over
/// several collections (replication-protocol.adoc "Collections"; ADR 0149): one connection opened through `base`,
/// one `getCollections` naming every collection of `collections` on it, then each collection's `BLIPEndpoint`s
/// (a pull and a push each) work on the connection with their collection's index in the `collection` property of
/// every request they send, and get the requests the server sends with that index.
///
/// Use: `connector(for: "s.c1", role: .pullSource)` is the `BLIPConnector` of that collection's pulling
/// `BLIPEndpoint` (`Replicator(blip:...)`). Each endpoint's "connection" is a view of the shared one: its peer adds
/// the index, and its `close` detaches it; the shared connection closes (with the last view's close code) once no
/// view is attached, or when the server closes it, which every attached endpoint then sees as its connection
/// closing (each reconnects through here, and the first opens the next connection).
///
/// Routing of the server's requests (by `collection` index, then by profile): `changes`,`rev`, `norev` go to the
/// collection's pulling endpoint, `getAttachment` and `proveAttachment` to its pushing one (the server asks while a
/// pushed `rev` is in flight). A request without a `collection`, with an index not attached, or with a profile no
/// attached endpoint takes is a BLIP/404 error, as an unhandled profile is.
///
/// The `getCollections` answer's checkpoint bodies are not used: each endpoint reads its own checkpoint with
/// `getCheckpoint` on its index (stored in that collection's `_local` on the server). A collection the server
/// answers null for is refused to its endpoints as HTTP 404 (`ReplicationError.http`, not transient).
public actor BLIPCollectionsConnector {
    /// The collections named by `getCollections`, in order: index `i` is `collections[i]` (`scope.collection`, or
    /// `_default`).
    public nonisolated let collections: [String]
    let base: any BLIPConnector

    private struct Shared {
        let connection: any BLIPReplicationConnection
        let router: BLIPCollectionsRouter
        /// Per index: the server serves it (its `getCollections` answer is not null).
        let served: [Bool]
        let generation: Int
    }
    private var current: Shared?
    private var opening: Task<Shared, any Error>?
    private var generation = 0
    /// Attached views, by id: their connection's generation and the waits for their end.
    private var views: [Int: (generation: Int, waiters: [CheckedContinuation<Void, Never>])] = [:]
    private var nextView = 0

    /// - Parameters:
    ///   - connector: opens the one connection (`WebSocketBLIPConnector` to `ws://host/db/_blipsync`).
    ///   - collections: the collections to name, at most `Limits.gatewayBLIPMaxCollections` (the gateway's bound;
    ///     more are left out).
    public init(connector: any BLIPConnector, collections: [String]) {
        self.base = connector
        self.collections = Array(collections.prefix(Limits.gatewayBLIPMaxCollections))
    }

    /// The connector of `collection`'s endpoint in `role`; nil when `collection` is not one of `collections`.
    public nonisolated func connector(for collection: String, role: BLIPEndpoint.Role) -> (any BLIPConnector)? {
        guard let index = collections.firstIndex(of: collection) else { return nil }
        return CollectionConnector(owner: self, index: index, role: role)
    }

    /// Connections opened so far (each with its `getCollections`).
    public var connectionsOpened: Int { generation }

    private func shared() async throws -> Shared {
        if let current { return current }
        if let opening { return try await opening.value }
        let base = self.base
        let names = collections
        let next = generation + 1
        let task = Task { () throws -> Shared in
            let router = BLIPCollectionsRouter()
            let connection = try await base.connect(handler: router)
            let body = JSON.object([
                ("collections", .array(names.map(JSON.string))),
                // Any non-empty client id: the answer's checkpoints are not used (each endpoint asks for its own).
                ("checkpoint_ids", .array(names.map { _ in JSON.string("cp-collections") })),
            ])
            let answer: BLIPMessage?
            do {
                answer = try await connection.peer.send(
                    BLIPMessage(properties: [(name: "Profile", value: "getCollections")], body: body.serialized()))
            } catch {
                await connection.close(code: 1001)
                throw BLIPEndpoint.replicationError(error)
            }
            guard let answer, answer.type != .error else {
                await connection.close(code: 1000)
                throw answer.map(BLIPReplicationWire.error(of:))
                    ?? ReplicationError.network("no answer to getCollections")
            }
            let entries = (try? JSON.parse(answer.body))?.arrayValue ?? []
            let served = names.indices.map { i in i < entries.count && entries[i] != .null }
            return Shared(connection: connection, router: router, served: served, generation: next)
        }
        opening = task
        let opened: Shared
        do { opened = try await task.value } catch {
            opening = nil
            throw error
        }
        opening = nil
        generation = next
        current = opened
        Task { [weak self] in
            await opened.connection.waitUntilClosed()
            await self?.closed(generation: next)
        }
        return opened
    }

    /// The shared connection closed: every view of it ends.
    private func closed(generation closed: Int) {
        if current?.generation == closed { current = nil }
        for (id, view) in views where view.generation == closed {
            views[id] = nil
            for w in view.waiters { w.resume() }
        }
    }

    /// Attaches `handler` as `index`'s endpoint in `role` on the shared connection (opening it when none is open).
    fileprivate func attach(
        index: Int, role: BLIPEndpoint.Role, handler: any BLIPRequestHandler
    ) async throws -> any BLIPReplicationConnection {
        let s = try await shared()
        guard s.served[index] else {
            if views.values.allSatisfy({ $0.generation != s.generation }) { await closeShared(s, code: 1000) }
            throw ReplicationError.http(
                status: 404, error: "not_found",
                reason: "collection \(LogText.quoted(collections[index])) is not served by the remote database")
        }
        let id = nextView
        nextView += 1
        views[id] = (s.generation, [])
        s.router.set(index: index, role: role, view: id, handler: handler)
        return CollectionView(owner: self, id: id, index: index, role: role, shared: s.connection, router: s.router)
    }

    /// A view closed: it ends, its handler is removed (unless another view took its place), and the shared connection
    /// closes with `code` when it was the last view on it.
    fileprivate func detach(id: Int, index: Int, role: BLIPEndpoint.Role, code: UInt16) async {
        guard let view = views.removeValue(forKey: id) else { return }
        for w in view.waiters { w.resume() }
        guard let s = current, s.generation == view.generation else { return }
        s.router.remove(index: index, role: role, view: id)
        if views.values.allSatisfy({ $0.generation != s.generation }) { await closeShared(s, code: code) }
    }

    private func closeShared(_ s: Shared, code: UInt16) async {
        if current?.generation == s.generation { current = nil }
        await s.connection.close(code: code)
    }

    /// Returns once the view `id` has ended (detached, or its connection closed).
    fileprivate func waitEnded(id: Int) async {
        guard views[id] != nil else { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            if views[id] != nil { views[id]?.waiters.append(c) } else { c.resume() }
        }
    }
}

/// One collection endpoint's connector (`BLIPCollectionsConnector.connector(for:role:)`).
private struct CollectionConnector: BLIPConnector {
    let owner: BLIPCollectionsConnector
    let index: Int
    let role: BLIPEndpoint.Role

    func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection {
        try await owner.attach(index: index, role: role, handler: handler)
    }
}

/// One endpoint's view of the shared connection.
private struct CollectionView: BLIPReplicationConnection {
    let owner: BLIPCollectionsConnector
    let id: Int
    let index: Int
    let role: BLIPEndpoint.Role
    let shared: any BLIPReplicationConnection
    let router: BLIPCollectionsRouter

    var peer: any BLIPPeer { CollectionPeer(base: shared.peer, index: index) }

    func close(code: UInt16) async { await owner.detach(id: id, index: index, role: role, code: code) }

    func waitUntilClosed() async { await owner.waitEnded(id: id) }
}

/// A peer that names collection `index` on every request it sends.
struct CollectionPeer: BLIPPeer {
    let base: any BLIPPeer
    let index: Int

    func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        var request = request
        request.properties.removeAll { $0.name == "collection" }
        request.properties.append((name: "collection", value: String(index)))
        return try await base.send(request)
    }
}

/// The shared connection's handler: hands each request the server sends to the endpoint its `collection` index and
/// profile name (see `BLIPCollectionsConnector`), with a peer that names the same index on what it sends back.
final class BLIPCollectionsRouter: BLIPRequestHandler {
    private struct Entry {
        var view: Int
        var handler: any BLIPRequestHandler
    }
    private let handlers = Mutex<[Int: [BLIPEndpoint.Role: Entry]]>([:])

    func set(index: Int, role: BLIPEndpoint.Role, view: Int, handler: any BLIPRequestHandler) {
        handlers.withLock { $0[index, default: [:]][role] = Entry(view: view, handler: handler) }
    }

    func remove(index: Int, role: BLIPEndpoint.Role, view: Int) {
        handlers.withLock { h in
            if h[index]?[role]?.view == view { h[index]?[role] = nil }
        }
    }

    /// The role whose endpoint answers `profile`: the puller takes the feed, the pusher the attachment requests.
    static func role(for profile: String?) -> BLIPEndpoint.Role? {
        switch profile {
        case "changes", "rev", "norev": return .pullSource
        case "getAttachment", "proveAttachment": return .pushTarget
        default: return nil
        }
    }

    private func target(_ request: BLIPMessage) -> (any BLIPRequestHandler, Int)? {
        guard let index = request["collection"].flatMap({ Int($0) }), let role = Self.role(for: request.profile)
        else { return nil }
        return handlers.withLock { $0[index]?[role] }.map { ($0.handler, index) }
    }

    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        guard let (handler, index) = target(request) else {
            return .error(
                answering: request.number, domain: "BLIP", code: 404,
                message: "no handler for \(LogText.quoted(request.profile ?? "")) in collection "
                    + LogText.quoted(request["collection"] ?? "(none)"))
        }
        return await handler.handle(request, peer: CollectionPeer(base: peer, index: index))
    }

    func responded(to request: BLIPMessage, peer: any BLIPPeer) async {
        guard let (handler, index) = target(request) else { return }
        await handler.responded(to: request, peer: CollectionPeer(base: peer, index: index))
    }
}
