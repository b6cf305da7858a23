import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SetteeCore
import SetteeProtocol
import SetteeTLS

/// A smart client for one bucket: hashes each key to its vBucket, sends it to the node holding the
/// active copy on one pipelined connection per node, follows map changes (NOT_MY_VBUCKET bodies,
/// pushed configs, a background poll) and retries only what is safe (see `RetryPolicy`).
///
/// Thread-safe; no actors: the shared state (current config, connections) sits behind one lock that
/// is held only to read or swap it, never across I/O.
public final class BucketClient: Sendable {
    private enum Slot: Sendable {
        case connecting(EventLoopFuture<KVConnection>)
        case ready(KVConnection)
    }

    private struct State: Sendable {
        var config: BucketConfig?
        var slots: [NodeAddress: Slot] = [:]
        /// Nodes whose connection failed, and until when (uptime ns) not to try them again.
        var downUntil: [NodeAddress: UInt64] = [:]
        var refresh: Task<Bool, Never>?
        var poller: Task<Void, Never>?
        var pollCursor = 0
        var closed = false
        /// Resolved collection ids by `scope.collection` (GET_COLLECTION_ID), at most
        /// `Limits.maxCollectionsPerBucket` (emptied when full).
        var collectionIDs: [String: UInt32] = [:]
    }

    public let options: ClientOptions
    let group: any EventLoopGroup
    let logger: Logger
    private let state = NIOLockedValueBox(State())

    /// The TLS context of every connection when `options.tls` is set (the router's admin calls use it too).
    public let tlsContext: TLSClientContext?

    private init(options: ClientOptions, group: any EventLoopGroup, logger: Logger, tlsContext: TLSClientContext?) {
        self.options = options
        self.group = group
        self.logger = logger
        self.tlsContext = tlsContext
    }

    /// Bootstraps from the first seed that yields a config for `options.bucket`.
    public static func connect(
        _ options: ClientOptions, group: (any EventLoopGroup)? = nil, logger: Logger = Logger(label: "settee.client")
    ) async throws -> BucketClient {
        let tlsContext: TLSClientContext?
        do { tlsContext = try options.tls?.makeClientContext() } catch {
            throw ClientError.bootstrapFailed("TLS: \(error)")
        }
        let client = BucketClient(
            options: options, group: group ?? MultiThreadedEventLoopGroup.singleton, logger: logger,
            tlsContext: tlsContext)
        var failures: [String] = []
        var definite: ClientError?
        for seed in options.seeds {
            do {
                if try await client.fetchConfig(from: seed) { break }
            } catch let e as ClientError {
                failures.append("\(seed): \(e)")
                switch e {
                case .authenticationFailed, .bucketNotFound: definite = definite ?? e
                default: break
                }
            } catch {
                failures.append("\(seed): \(error)")
            }
        }
        guard client.currentConfig != nil else {
            await client.close()
            if let definite { throw definite }
            throw ClientError.bootstrapFailed(failures.isEmpty ? "no seeds" : failures.joined(separator: "; "))
        }
        // Like the SDK opening a bucket: one connection per node up front, so the first operations don't
        // pay for connect + SASL (the server's password check can take a while) inside their deadline.
        await client.connectAll()
        client.startPolling()
        return client
    }

    /// The config in use.
    public var currentConfig: BucketConfig? { state.withLockedValue { $0.config } }

    /// The `(revEpoch, rev)` of the config in use.
    public var configRevision: MapRevision? { currentConfig?.revision }

    /// Closes every connection and stops the poller; later operations fail `.closed`.
    public func close() async {
        let (slots, poller, refresh) = state.withLockedValue { s -> ([Slot], Task<Void, Never>?, Task<Bool, Never>?) in
            s.closed = true
            let out = Array(s.slots.values)
            s.slots.removeAll()
            return (out, s.poller, s.refresh)
        }
        poller?.cancel()
        refresh?.cancel()
        for slot in slots {
            switch slot {
            case .ready(let c): c.close()
            case .connecting(let f): f.whenSuccess { $0.close() }
            }
        }
    }

    // MARK: config

    /// Offers a config document (from an NMVB body, a push, a poll); adopts it when strictly newer.
    /// Returns whether it was adopted.
    @discardableResult
    public func offerConfig<C: Collection>(_ bytes: C, sourceHost: String) -> Bool where C.Element == UInt8 {
        guard let config = try? parseConfig(bytes, sourceHost: sourceHost) else { return false }
        return adopt(config)
    }

    /// Parses a config document; over TLS, its nodes' addresses are their TLS ports.
    private func parseConfig<C: Collection>(_ bytes: C, sourceHost: String) throws(ConfigError) -> BucketConfig
    where C.Element == UInt8 {
        let config = try BucketConfig.parse(bytes, sourceHost: sourceHost)
        return tlsContext == nil ? config : config.usingTLSPorts()
    }

    /// Adopts `config` if strictly newer than the current one.
    @discardableResult
    public func adopt(_ config: BucketConfig) -> Bool {
        // A config of another bucket (a misdirected push) is never adopted.
        if let name = config.bucket, name != options.bucket { return false }
        let now = nowNs()
        let (adopted, old, stale, joined) = state.withLockedValue {
            s -> (Bool, MapRevision?, [Slot], [NodeAddress]) in
            guard !s.closed, config.isNewer(than: s.config) else { return (false, nil, [], []) }
            let old = s.config?.revision
            s.config = config
            // Connections to nodes that left the map are retired (closed below, after a grace period).
            let keep = Set(config.nodes.compactMap(\.kv))
            var stale: [Slot] = []
            for (addr, slot) in s.slots where !keep.contains(addr) {
                stale.append(slot)
                s.slots[addr] = nil
            }
            let joined = keep.filter { s.slots[$0] == nil && (s.downUntil[$0] ?? 0) <= now }
            return (true, old, stale, Array(joined))
        }
        if let old {
            logger.info("adopted newer cluster map", metadata: ["from": "\(old)", "to": "\(config.revision)"])
            // Nodes new to the map get their connection now, as `connect` does for the first map: a node joins
            // the map before a rebalance moves vBuckets to it, so the first operation routed there after a
            // move finds the connection ready instead of paying connect + SASL inside its deadline.
            let deadline = NIODeadline.now() + .milliseconds(Int64(options.connectTimeoutMs))
            for addr in joined { _ = connectionFuture(to: addr, deadline: deadline) }
        }
        // Close connections to departed nodes only after in-flight requests had their deadline to finish:
        // closing now would turn their pending replies into "connection lost".
        if !stale.isEmpty {
            let grace = TimeAmount.milliseconds(Int64(options.operationTimeoutMs))
            for slot in stale {
                guard case .ready(let c) = slot else { continue }
                c.channel.eventLoop.scheduleTask(in: grace) { c.close() }
            }
        }
        return adopted
    }

    /// Fetches a config from one seed; true when it was strictly newer and adopted.
    private func fetchConfig(from seed: Seed) async throws -> Bool {
        switch seed {
        case .http(let addr):
            let r = try await AdminHTTP.request(
                .GET, "/pools/default/b/\(PercentEncoding.encode(options.bucket))", at: addr,
                username: options.username, password: options.password, group: group,
                timeoutMs: options.connectTimeoutMs, tls: tlsContext)
            switch r.status {
            case 200: break
            case 401, 403:
                guard options.username != nil else {
                    throw ClientError.authenticationFailed(
                        "\(addr) refused bucket \(options.bucket) without credentials (HTTP \(r.status)): it has a "
                            + "password or does not exist")
                }
                throw ClientError.authenticationFailed("\(addr) answered HTTP \(r.status)")
            case 404: throw ClientError.bucketNotFound(options.bucket)
            default: throw ClientError.bootstrapFailed("\(addr) answered HTTP \(r.status)")
            }
            let config: BucketConfig
            do { config = try parseConfig(r.body, sourceHost: addr.host) } catch {
                throw ClientError.invalidConfig(error.description)
            }
            return adopt(config)
        case .kv(let addr):
            let conn = try await connection(to: addr, deadline: .now() + .milliseconds(Int64(options.connectTimeoutMs)))
            return try await fetchConfig(over: conn)
        }
    }

    private func fetchConfig(over conn: KVConnection) async throws -> Bool {
        let deadline = NIODeadline.now() + .milliseconds(Int64(options.connectTimeoutMs))
        let r = try await conn.send(RequestFrame(opcode: .getClusterConfig), deadline: deadline).get()
        guard r.status == .success else {
            throw ClientError.from(status: r.status, opcode: .getClusterConfig, message: "")
                ?? .bootstrapFailed("GET_CLUSTER_CONFIG")
        }
        let config: BucketConfig
        do { config = try parseConfig(r.value.readableBytesView, sourceHost: conn.address.host) } catch {
            throw ClientError.invalidConfig(error.description)
        }
        return adopt(config)
    }

    /// Looks for a strictly newer config anywhere but `avoiding`: other connected nodes, then the map's
    /// admin and KV ports, then the seeds; stops at the first newer one. Concurrent callers share one
    /// refresh. Returns whether a newer config was adopted.
    @discardableResult
    func refreshConfig(avoiding: NodeAddress?) async -> Bool {
        let task = state.withLockedValue { s -> Task<Bool, Never>? in
            if s.closed { return nil }
            if let t = s.refresh { return t }
            let t = Task { [self] in
                let ok = await self.doRefresh(avoiding: avoiding)
                self.state.withLockedValue { $0.refresh = nil }
                return ok
            }
            s.refresh = t
            return t
        }
        return await task?.value ?? false
    }

    private func doRefresh(avoiding: NodeAddress?) async -> Bool {
        let (config, ready) = state.withLockedValue { s -> (BucketConfig?, [KVConnection]) in
            var ready: [KVConnection] = []
            for case .ready(let c) in s.slots.values where c.isActive && c.address != avoiding { ready.append(c) }
            return (s.config, ready)
        }
        // Nodes that answered over KV are not asked again over HTTP: both answers come from the same
        // registry, and an admin request (a new connection, Basic auth) is far slower.
        var answered = Set<NodeAddress>()
        for conn in ready {
            switch try? await fetchConfig(over: conn) {
            case true?: return true
            case false?: answered.insert(conn.address)
            case nil: break
            }
        }
        var seen = Set<Seed>()
        for node in config?.nodes ?? [] {
            if let k = node.kv, let m = node.mgmt, answered.contains(k) { seen.insert(.http(m)) }
        }
        var seeds: [Seed] = []
        for node in config?.nodes ?? [] {
            if let m = node.mgmt, node.kv != avoiding { seeds.append(.http(m)) }
        }
        for node in config?.nodes ?? [] {
            if let k = node.kv, k != avoiding, !ready.contains(where: { $0.address == k }) { seeds.append(.kv(k)) }
        }
        seeds += options.seeds.filter { $0 != .kv(avoiding ?? NodeAddress(host: "", port: 0)) }
        for seed in seeds where seen.insert(seed).inserted {
            if Task.isCancelled { return false }
            if (try? await fetchConfig(from: seed)) == true { return true }
        }
        return false
    }

    private func startPolling() {
        let interval = options.configPollIntervalMs
        guard interval > 0 else { return }
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(interval))
                guard let self, !Task.isCancelled else { return }
                let conn = self.state.withLockedValue { s -> KVConnection? in
                    let ready = s.slots.values.compactMap { slot -> KVConnection? in
                        if case .ready(let c) = slot, c.isActive { return c }
                        return nil
                    }
                    guard !ready.isEmpty else { return nil }
                    s.pollCursor &+= 1
                    return ready[s.pollCursor % ready.count]
                }
                if let conn { _ = try? await self.fetchConfig(over: conn) }
            }
        }
        state.withLockedValue { $0.poller = task }
    }

    // MARK: connections

    private func nowNs() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

    private enum ConnectionLookup {
        case ready(KVConnection)
        case opening(EventLoopFuture<KVConnection>)
        /// A connection to open: its promise is already in the slot, so concurrent callers wait for it.
        case open(EventLoopPromise<KVConnection>)
        case failed(any Error)
    }

    /// Routes `key` on the current map and finds the owner's open connection under one lock (an operation's
    /// first attempt): nil when the client has no map (closed); the connection is nil when there is no owner or
    /// no ready connection to it.
    func route(key: ByteBuffer) -> (VBucketID, NodeAddress?, KVConnection?)? {
        state.withLockedValue { s -> (VBucketID, NodeAddress?, KVConnection?)? in
            guard let (vb, target) = s.config?.route(key: key.readableBytesView) else { return nil }
            guard !s.closed, let target, case .ready(let c)? = s.slots[target], c.isActive else {
                return (vb, target, nil)
            }
            return (vb, target, c)
        }
    }

    /// The id cached for collection `path` (`scope.collection`), if resolved before.
    func cachedCollectionID(_ path: String) -> UInt32? {
        state.withLockedValue { $0.collectionIDs[path] }
    }

    /// Caches `id` for `path`, or forgets `path` when `id` is nil. The cache holds at most
    /// `Limits.maxCollectionsPerBucket` paths (a bucket's collections); a new one past that empties it first.
    func cacheCollectionID(_ path: String, _ id: UInt32?) {
        state.withLockedValue { s in
            if id != nil, s.collectionIDs[path] == nil, s.collectionIDs.count >= Limits.maxCollectionsPerBucket {
                s.collectionIDs.removeAll()
            }
            s.collectionIDs[path] = id
        }
    }

    /// The KV addresses to ask something any node can answer (GET_COLLECTION_ID): nodes with a ready connection
    /// first, then the rest of the current map.
    func anyNodeAddresses() -> [NodeAddress] {
        state.withLockedValue { s in
            let all = s.config?.nodes.compactMap(\.kv) ?? []
            let ready = all.filter {
                if case .ready(let c)? = s.slots[$0], c.isActive { return true } else { return false }
            }
            return ready + all.filter { !ready.contains($0) }
        }
    }

    /// The open connection to `addr`, if there is one (no I/O, no waiting).
    func readyConnection(to addr: NodeAddress) -> KVConnection? {
        state.withLockedValue { s -> KVConnection? in
            guard !s.closed, case .ready(let c)? = s.slots[addr], c.isActive else { return nil }
            return c
        }
    }

    /// Sends `request` as it is (its vBucket included) to the node at `node`, without routing or retries: for
    /// diagnostics and fault tests that must ask one particular node something (does it still serve vb N?).
    public func send(_ request: RequestFrame, to node: NodeAddress, timeoutMs: Int) async throws -> Frame {
        let deadline = NIODeadline.now() + .milliseconds(Int64(timeoutMs))
        return try await connectionFuture(to: node, deadline: deadline).flatMap { $0.send(request, deadline: deadline) }
            .get()
    }

    /// The ready connection to `addr`, opening it if needed; fails `AttemptError(.notSent)` when the node
    /// is marked down, refuses, or does not finish the handshake by `deadline`.
    func connection(to addr: NodeAddress, deadline: NIODeadline) async throws -> KVConnection {
        try await connectionFuture(to: addr, deadline: deadline).get()
    }

    /// `connection(to:deadline:)` as a future, so a routed operation waits for it without a task: fails
    /// `ClientError.closed` after `close()`, `AttemptError(.notSent)` when the node is marked down, refuses,
    /// or does not finish the handshake by `deadline`, and with the handshake's `ClientError` (wrong
    /// credentials, unknown bucket) when the node answers it so.
    func connectionFuture(to addr: NodeAddress, deadline: NIODeadline) -> EventLoopFuture<KVConnection> {
        let lookup = state.withLockedValue { s -> ConnectionLookup in
            if s.closed { return .failed(ClientError.closed) }
            switch s.slots[addr] {
            case .ready(let c) where c.isActive:
                return .ready(c)
            case .connecting(let f):
                return .opening(f)
            default:
                if let until = s.downUntil[addr], until > nowNs() { return .failed(AttemptError(failure: .notSent)) }
                let promise = group.next().makePromise(of: KVConnection.self)
                s.slots[addr] = .connecting(promise.futureResult)
                return .open(promise)
            }
        }
        let future: EventLoopFuture<KVConnection>
        switch lookup {
        case .ready(let c): return c.channel.eventLoop.makeSucceededFuture(c)
        case .opening(let f): future = f
        case .open(let promise):
            // Outside the lock: a connect that fails at once may complete these callbacks inline.
            promise.futureResult.whenComplete { [weak self] result in
                guard let self else { return }
                switch result {
                case .success(let c):
                    let keep = self.state.withLockedValue { s -> Bool in
                        guard !s.closed else { return false }
                        s.slots[addr] = .ready(c)
                        s.downUntil[addr] = nil
                        return true
                    }
                    if !keep { c.close() }
                    c.channel.closeFuture.whenComplete { _ in self.connectionClosed(c) }
                case .failure:
                    self.markDown(addr)
                }
            }
            let sink = WeakBox(self)
            promise.completeWith(
                KVConnection.connect(
                    to: addr, bucket: options.bucket, username: options.username, password: options.password,
                    allowPlain: options.allowPlainAuthentication, group: group, timeoutMs: options.connectTimeoutMs,
                    tls: tlsContext, unordered: options.unorderedExecution, collections: options.collections,
                    logger: logger,
                    onConfigPush: { bytes in _ = sink.value?.offerConfig(bytes, sourceHost: addr.host) }))
            future = promise.futureResult
        case .failed(let e): return group.any().makeFailedFuture(e)
        }
        // Wait no longer than the operation's deadline (the connect itself may take longer).
        let bounded = future.eventLoop.makePromise(of: KVConnection.self)
        let timer = future.eventLoop.scheduleTask(deadline: deadline) {
            bounded.fail(AttemptError(failure: .notSent))
        }
        future.whenComplete { result in
            timer.cancel()
            bounded.completeWith(result)
        }
        return bounded.futureResult
    }

    private func markDown(_ addr: NodeAddress) {
        let until = nowNs() + UInt64(ClientLimits.nodeDownHoldOffMs) * 1_000_000
        state.withLockedValue { s in
            s.slots[addr] = nil
            s.downUntil[addr] = until
        }
    }

    private func connectionClosed(_ c: KVConnection) {
        let wasCurrent = state.withLockedValue { s -> Bool in
            guard !s.closed, case .ready(let cur) = s.slots[c.address], cur === c else { return false }
            s.slots[c.address] = nil
            s.downUntil[c.address] = nowNs() + UInt64(ClientLimits.nodeDownHoldOffMs) * 1_000_000
            return true
        }
        if wasCurrent {
            logger.warning("connection to node lost", metadata: ["node": "\(c.address)"])
            // The cluster may fail the node over: look for a newer map elsewhere.
            Task { [weak self] in await self?.refreshConfig(avoiding: c.address) }
        }
    }

    // MARK: routed execution

    /// The retryable failure a response stands for, if any: NOT_MY_VBUCKET (offering its config body), TMPFAIL
    /// and SYNC_WRITE_IN_PROGRESS. Any other status is the operation's answer.
    func failure(of frame: Frame, from target: NodeAddress) -> AttemptFailure? {
        switch frame.status {
        case .notMyVBucket:
            let adopted = frame.datatype & 1 == 1 && offerConfig(frame.value.readableBytesView, sourceHost: target.host)
            return .notMyVBucket(adoptedNewerConfig: adopted)
        case .temporaryFailure:
            return .temporaryFailure
        case .syncWriteInProgress:
            return .syncWriteInProgress
        default:
            return nil
        }
    }

    /// Starts (or joins) the shared config refresh; the future completes on `loop` when it is over, with
    /// whether a newer config was adopted.
    func refreshFuture(avoiding: NodeAddress?, on loop: any EventLoop) -> EventLoopFuture<Bool> {
        let promise = loop.makePromise(of: Bool.self)
        promise.completeWithTask { [weak self] in await self?.refreshConfig(avoiding: avoiding) ?? false }
        return promise.futureResult
    }

    /// Sends `request` to the node owning `key` (its vBucket field is set from the current map) and
    /// completes with the response, following NOT_MY_VBUCKET and retrying TMPFAIL and unsent requests until
    /// the deadline (`RoutedOperation`). Any other status is returned as is. Fails with `ClientError`.
    ///
    /// The first attempt runs before this returns: when the owning node's connection is ready, the request
    /// is written (handed to its channel) already. Everything after runs on event-loop callbacks and timers.
    func executeFuture(_ request: RequestFrame, key: ByteBuffer, operation: String, timeoutMs: Int? = nil)
        -> EventLoopFuture<Frame>
    {
        RoutedOperation.start(
            client: self, request: request, key: key, operation: operation,
            timeoutMs: timeoutMs ?? options.operationTimeoutMs)
    }

    /// `executeFuture` for async callers. The outcome is decided on event loops, so a caller whose task is
    /// resumed late (a starved cooperative pool) still gets the answer the node gave in time.
    func execute(_ request: RequestFrame, key: ByteBuffer, operation: String, timeoutMs: Int? = nil) async throws
        -> Frame
    {
        try await executeFuture(request, key: key, operation: operation, timeoutMs: timeoutMs).get()
    }

    /// Router use: sends an already-decoded memcached request for its key, routed and retried like any
    /// operation (the request's vBucket is recomputed; its opaque is replaced). Completes with the node's
    /// response frame, whatever its status (NOT_MY_VBUCKET and TMPFAIL are handled here), or fails with
    /// `ClientError` (`timeout`, `ambiguous`, ...) when there is no response to give.
    ///
    /// Ordering: when the owning node's connection is ready, the request is written **before this call
    /// returns**, so requests forwarded one after another from one thread reach a node in that order.
    /// Only retries (and requests that must first open a connection) may overtake each other.
    public func forward(_ request: RequestFrame, timeoutMs: Int? = nil) -> EventLoopFuture<Frame> {
        executeFuture(request, key: request.key, operation: "opcode \(request.opcode)", timeoutMs: timeoutMs)
    }

    /// Opens connections to every node of the current map (a router calls this at start so that the
    /// first pipelined requests already take the ordered fast path of `forward`).
    public func connectAll() async {
        guard let config = currentConfig else { return }
        let deadline = NIODeadline.now() + .milliseconds(Int64(options.connectTimeoutMs))
        await withTaskGroup(of: Void.self) { group in
            for addr in Set(config.nodes.compactMap(\.kv)) {
                group.addTask { _ = try? await self.connection(to: addr, deadline: deadline) }
            }
        }
    }
}

/// A weak reference that can cross concurrency domains (the client is Sendable).
final class WeakBox<T: AnyObject & Sendable>: Sendable {
    nonisolated(unsafe) weak var value: T?
    init(_ value: T?) { self.value = value }
}
