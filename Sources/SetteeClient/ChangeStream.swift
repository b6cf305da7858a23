import Logging
import NIOCore
import NIOPosix
import SetteeCore
import SetteeProtocol
import SetteeStreams
import Synchronization

/// One change read from a bucket's change stream (DCP).
public struct ChangeEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case mutation
        case deletion
        case expiration
    }

    public var kind: Kind
    public var key: [UInt8]
    /// Empty for deletions and expirations, unless the stream includes XATTRs (`changeStreamIncludesXattrs`): then
    /// a value may start with its XATTR section (datatype 0x04) and a deletion carries the one its tombstone kept.
    public var value: [UInt8]
    public var cas: CAS
    public var flags: UInt32
    public var expiry: UInt32
    public var datatype: UInt8
    public var vbucket: VBucketID
    public var seqno: SeqNo
    public var revSeqno: RevSeqNo

    public init(
        kind: Kind, key: [UInt8], value: [UInt8], cas: CAS, flags: UInt32, expiry: UInt32, datatype: UInt8,
        vbucket: VBucketID, seqno: SeqNo, revSeqno: RevSeqNo
    ) {
        self.kind = kind
        self.key = key
        self.value = value
        self.cas = cas
        self.flags = flags
        self.expiry = expiry
        self.datatype = datatype
        self.vbucket = vbucket
        self.seqno = seqno
        self.revSeqno = revSeqno
    }
}

/// Where one vBucket's stream stands: the end of the last whole snapshot delivered and the history (the
/// vBucket UUID) it belongs to. Persist it to resume a stream later without re-reading everything.
public struct ChangeStreamPosition: Sendable, Hashable, CustomStringConvertible {
    public var seqno: SeqNo
    public var vbucketUUID: VBucketUUID
    public init(seqno: SeqNo, vbucketUUID: VBucketUUID) {
        self.seqno = seqno
        self.vbucketUUID = vbucketUUID
    }
    /// Nothing seen: the stream starts with everything the vBucket holds.
    public static let zero = ChangeStreamPosition(seqno: .zero, vbucketUUID: VBucketUUID(0))
    public var description: String { "\(seqno)@\(vbucketUUID)" }

    var resumePoint: ResumePoint {
        ResumePoint(start: seqno, snapStart: seqno, snapEnd: seqno, uuid: vbucketUUID)
    }
}

/// One whole snapshot of one vBucket: its changes in seqno order (each key at most once) and the position
/// to resume from once they are processed.
public struct ChangeStreamBatch: Sendable {
    public var vbucket: VBucketID
    public var events: [ChangeEvent]
    public var position: ChangeStreamPosition
    /// The vBucket's history no longer contains the position this stream had reached (a failover promoted a
    /// copy that lacked some writes, a bucket flush, purged tombstones): the stream restarts it from seqno 0. Such a
    /// batch is handed out at once, empty, with position `.zero`: later batches of the vBucket may repeat changes
    /// delivered before, and a key delivered before and not delivered again no longer exists in that history (a
    /// consumer holding state per key checks those keys against the bucket). Without it, a consumer of a vBucket left
    /// empty would never learn of the restart.
    public var restarted: Bool
    /// The stream's first open of the vBucket, or its history branched (a failover, a flush, a move: its failover
    /// log has a newer entry than when the stream last opened it) while the position this stream had reached is still
    /// in it, so the stream goes on from there. Changes made above the branch point in the old history (or, at the
    /// first open, in a history the stream never saw) are gone without a deletion ever being streamed; the stream had
    /// not delivered them, but a consumer that learned of some elsewhere (its own acknowledged writes) checks the keys
    /// it holds of this vBucket against the bucket. Handed out at once, empty, at the current position.
    public var branched: Bool = false
    /// Key and value bytes of `events` (what the batch holds in memory; flow control counts it).
    var byteCount: Int
}

/// Follows every vBucket of a bucket across all nodes of its map, from given positions, as DCP consumer
/// streams (one connection per node). Survives topology changes:
///
/// - a stream that ends because its vBucket moved (STREAM_END state-changed), a stream request answered
///   NOT_MY_VBUCKET (its config body is offered to the map), a lost connection, or a map that names a new
///   owner all reopen that vBucket on the node the current map names, from the last whole snapshot
///   delivered;
/// - a rollback answer (the new owner's history diverged) restarts that vBucket from seqno 0, handing out an
///   empty batch marked `restarted` at once;
/// - a vBucket's first accepted stream, and a reopened one accepted in a newer history than when it last opened (a
///   failover, flush or move branched it at or above the position reached), hand out an empty batch marked
///   `branched` at once.
///
/// Delivery is at least once per vBucket, in seqno order, whole snapshots only: after a move, nothing is
/// lost and nothing is repeated unless the vBucket restarted (Couchbase's DCP rule). The consumer is never
/// dropped for being slow: while more than `ClientLimits.changeStreamMaxPendingBytes` of batches wait to be
/// read, the stream stops acknowledging bytes, and the producers stop sending (DCP flow control).
public final class ChangeStream: Sendable {
    let core: ChangeStreamCore
    private let stream: AsyncStream<ChangeStreamBatch>

    private init(core: ChangeStreamCore, stream: AsyncStream<ChangeStreamBatch>) {
        self.core = core
        self.stream = stream
    }

    /// Bootstraps a smart client for `options.bucket` (its map and config updates), opens a DCP producer
    /// connection to every node of the map and starts a stream on every vBucket from `positions` (missing
    /// vBuckets start at 0). Throws `authenticationFailed` for wrong credentials, `accessDenied` when the user
    /// may not open change streams, `bucketNotFound`, or `bootstrapFailed` when no node answers.
    public static func open(
        _ options: ClientOptions, from positions: [VBucketID: ChangeStreamPosition] = [:], name: String? = nil,
        group: (any EventLoopGroup)? = nil, logger: Logger = Logger(label: "settee.changes")
    ) async throws -> ChangeStream {
        let group = group ?? MultiThreadedEventLoopGroup.singleton
        let client = try await BucketClient.connect(options, group: group, logger: logger)
        guard let config = client.currentConfig else {
            await client.close()
            throw ClientError.bootstrapFailed("no config")
        }
        let (stream, continuation) = AsyncStream.makeStream(of: ChangeStreamBatch.self)
        let connectionName = name ?? "settee-changes:\(UInt64.random(in: 0...UInt64.max))"
        let core = ChangeStreamCore(
            client: client, loop: group.next(), name: connectionName, numVBuckets: config.numVBuckets,
            positions: positions, continuation: continuation, logger: logger)
        continuation.onTermination = { _ in core.loop.execute { core.shutdown() } }
        do {
            try await core.connectEveryNode(config)
        } catch {
            await core.close()
            throw error
        }
        core.loop.execute { core.start() }
        return ChangeStream(core: core, stream: stream)
    }

    /// The batches, in order per vBucket. One consumer only. Ends after `close()`.
    public var batches: Batches { Batches(base: stream, core: core) }

    /// The position of every vBucket as of the last batch handed to `batches` (0 for those never delivered).
    public func positions() -> [VBucketID: ChangeStreamPosition] {
        core.delivered.withLock { d in
            var out: [VBucketID: ChangeStreamPosition] = [:]
            for (vb, p) in d { out[VBucketID(vb)] = p }
            return out
        }
    }

    /// Streams reopened on another node or after an error, and restarts from 0 after a rollback, so far.
    public var reopenCount: Int { core.reopens.load(ordering: .relaxed) }
    public var restartCount: Int { core.restarts.load(ordering: .relaxed) }
    /// Empty batches marked `branched` handed out so far.
    public var branchCount: Int { core.branches.load(ordering: .relaxed) }

    /// vBuckets with an accepted stream right now.
    public var openStreamCount: Int { core.openCount.load(ordering: .relaxed) }

    /// The bucket's number of vBuckets (which vBucket a key is in: `VBucketHash.vbucket(forKey:count:)`).
    public var vbucketCount: Int { core.numVBuckets }

    /// Closes every connection and ends `batches`.
    public func close() async {
        await core.close()
    }

    /// The batches of a change stream; reading one lets the producers send more (flow control).
    public struct Batches: AsyncSequence, Sendable {
        public typealias Element = ChangeStreamBatch
        let base: AsyncStream<ChangeStreamBatch>
        let core: ChangeStreamCore

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: base.makeAsyncIterator(), core: core)
        }

        public struct AsyncIterator: AsyncIteratorProtocol {
            var base: AsyncStream<ChangeStreamBatch>.AsyncIterator
            let core: ChangeStreamCore

            public mutating func next() async -> ChangeStreamBatch? {
                let batch = await base.next()
                if let batch { core.consumed(batch.byteCount) }
                return batch
            }
        }
    }
}

/// The loop-confined state behind `ChangeStream`.
///
/// Per vBucket: `closed stream` ──open──▶ `requesting` (on the node the map names) ──accepted──▶ `streaming`
/// ──end / NMVB / lost connection / moved in the map──▶ `closed stream` + reopen after a backoff. A rollback
/// answer restarts from seqno 0. The per-stream protocol is `SetteeStreams.StreamConsumer` (the same
/// machine replicas use): items are staged and handed out only when their snapshot is whole.
///
/// Invariants: (1) all mutable state except `delivered` and the counters is touched only on `loop` (every
/// connection's channel lives on it too); (2) a vBucket has at most one open stream, named by a unique
/// opaque: messages carrying any other opaque are stale and dropped; (3) `vbs[vb].resume` is the end of the
/// last batch yielded for it, so a reopen never skips a change; (4) bytes are acknowledged to a producer only
/// while less than `ClientLimits.changeStreamMaxPendingBytes` of batches wait for the consumer; (5) the events staged
/// on one node's connection hold at most `maxStagedBytes` of keys and values: an item past it closes its vBucket's
/// stream (its staged events dropped) and reopens it, as a broken stream contract does.
final class ChangeStreamCore: @unchecked Sendable {
    /// What the consumer was told of a vBucket's history.
    enum History: Equatable {
        /// Nothing yet: the stream was never accepted (what the consumer holds of it came from elsewhere).
        case unknown
        /// A restart from 0 was handed out; the next accepted history is the one that restart meant.
        case restarted
        /// The newest failover entry's UUID at the last accepted stream request.
        case uuid(UInt64)
    }

    struct VBStream {
        var resume: ResumePoint
        var machine: StreamConsumer?
        var node: NodeAddress?
        var opaque: UInt32 = 0
        var staged: [ChangeEvent] = []
        /// Key + value bytes of `staged` (counted in `stagedBytes` of `node`).
        var stagedBytes = 0
        var restarted = false
        var history: History = .unknown
        /// Reopens since the stream last opened: the first goes at once, the next wait `Backoff.doubling` from
        /// `ClientLimits.changeStreamBackoffInitialMs`.
        var reopensSinceOpen = 0
        var reopenScheduled = false
        var open = false
    }

    let client: BucketClient
    let loop: any EventLoop
    let name: String
    let numVBuckets: Int
    let logger: Logger
    let continuation: AsyncStream<ChangeStreamBatch>.Continuation
    /// `options.changeStreamMaxStagedBytes`.
    let maxStagedBytes: Int
    let delivered: Mutex<[UInt16: ChangeStreamPosition]>
    let reopens = Atomic<Int>(0)
    let restarts = Atomic<Int>(0)
    let branches = Atomic<Int>(0)
    let openCount = Atomic<Int>(0)
    /// Bytes of batches yielded and not yet read by the consumer.
    let pending = Atomic<Int>(0)
    let ackPaused = Atomic<Bool>(false)

    var vbs: [VBStream]
    var connections: [NodeAddress: ChangeStreamConnection] = [:]
    var opaques: [UInt32: UInt16] = [:]
    var nextOpaque: UInt32 = ChangeStreamConnection.streamOpaqueBase
    /// Key + value bytes staged per node's connection, across its streams' open snapshots (at most
    /// `options.changeStreamMaxStagedBytes` each): `StreamConsumer` bounds one snapshot, this all of them at once.
    var stagedBytes: [NodeAddress: Int] = [:]
    var watchTask: RepeatedTask?
    var isShutDown = false

    init(
        client: BucketClient, loop: any EventLoop, name: String, numVBuckets: Int,
        positions: [VBucketID: ChangeStreamPosition], continuation: AsyncStream<ChangeStreamBatch>.Continuation,
        logger: Logger
    ) {
        self.client = client
        self.loop = loop
        self.name = name
        self.numVBuckets = numVBuckets
        self.logger = logger
        self.continuation = continuation
        maxStagedBytes = client.options.changeStreamMaxStagedBytes
        var vbs: [VBStream] = []
        var delivered: [UInt16: ChangeStreamPosition] = [:]
        for i in 0..<numVBuckets {
            let p = positions[VBucketID(UInt16(i))] ?? .zero
            vbs.append(VBStream(resume: p.resumePoint))
            delivered[UInt16(i)] = p
        }
        self.vbs = vbs
        self.delivered = Mutex(delivered)
    }

    var options: ClientOptions { client.options }

    // MARK: lifecycle (any thread)

    /// Opens a connection to every node of `config`; fails on the first definite refusal (credentials,
    /// rights, bucket), or when no node could be reached at all.
    func connectEveryNode(_ config: BucketConfig) async throws {
        let addresses = Array(Set(config.nodes.compactMap(\.kv)))
        let futures = try await loop.submit {
            addresses.map { self.connection(to: $0).ready.futureResult }
        }.get()
        var failures: [String] = []
        for (addr, f) in zip(addresses, futures) {
            do { try await f.get() } catch let e as ClientError {
                switch e {
                case .authenticationFailed, .accessDenied, .bucketNotFound: throw e
                default: failures.append("\(addr): \(e)")
                }
            } catch {
                failures.append("\(addr): \(error)")
            }
        }
        if !addresses.isEmpty && failures.count == addresses.count {
            throw ClientError.bootstrapFailed(failures.joined(separator: "; "))
        }
    }

    func close() async {
        try? await loop.submit { self.shutdown() }.get()
        await client.close()
    }

    /// The consumer read a batch.
    func consumed(_ bytes: Int) {
        let left = pending.wrappingSubtract(bytes, ordering: .acquiringAndReleasing).newValue
        if left <= ClientLimits.changeStreamMaxPendingBytes / 2 && ackPaused.load(ordering: .acquiring) {
            loop.execute { self.resumeAcks() }
        }
    }

    // MARK: on the loop

    func start() {
        guard !isShutDown else { return }
        for vb in 0..<vbs.count { open(UInt16(vb)) }
        // Safety net beside STREAM_END: a vBucket whose owner changed in the map is reopened there.
        watchTask = loop.scheduleRepeatedTask(
            initialDelay: .milliseconds(ClientLimits.changeStreamMapCheckMs),
            delay: .milliseconds(ClientLimits.changeStreamMapCheckMs)
        ) { _ in self.checkMap() }
    }

    func shutdown() {
        guard !isShutDown else { return }
        isShutDown = true
        watchTask?.cancel()
        for c in connections.values { c.close() }
        connections = [:]
        continuation.finish()
    }

    func connection(to addr: NodeAddress) -> ChangeStreamConnection {
        if let c = connections[addr] { return c }
        let c = ChangeStreamConnection(address: addr, core: self)
        connections[addr] = c
        c.connect()
        return c
    }

    /// Opens the stream of `vb` on the node the current map names.
    func open(_ vb: UInt16) {
        guard !isShutDown else { return }
        vbs[Int(vb)].reopenScheduled = false
        guard vbs[Int(vb)].machine == nil else { return }
        guard let config = client.currentConfig, let i = config.activeNode(of: VBucketID(vb)),
            let addr = config.nodes[i].kv
        else {
            scheduleReopen(vb, refresh: true)
            return
        }
        let conn = connection(to: addr)
        var machine = StreamConsumer(vbucket: VBucketID(vb), resume: vbs[Int(vb)].resume, failoverLog: nil)
        let directives = machine.start()
        let opaque = nextOpaque
        nextOpaque = nextOpaque == UInt32.max ? ChangeStreamConnection.streamOpaqueBase : nextOpaque + 1
        opaques[opaque] = vb
        clearStaged(vb)
        vbs[Int(vb)].machine = machine
        vbs[Int(vb)].node = addr
        vbs[Int(vb)].opaque = opaque
        run(vb, directives)
        _ = conn
    }

    /// Sends `vb`'s stream request when its connection is ready (else it is sent by `connectionReady`).
    private func sendRequest(_ vb: UInt16, _ r: StreamRequest) {
        guard let addr = vbs[Int(vb)].node, let conn = connections[addr], conn.isReady else { return }
        conn.sendStreamRequest(r, opaque: vbs[Int(vb)].opaque)
    }

    func connectionReady(_ conn: ChangeStreamConnection) {
        for vb in 0..<vbs.count where vbs[vb].node == conn.address {
            guard let m = vbs[vb].machine, m.state == .requesting else { continue }
            conn.sendStreamRequest(m.request, opaque: vbs[vb].opaque)
        }
    }

    func connectionLost(_ conn: ChangeStreamConnection) {
        guard connections[conn.address] === conn else { return }
        connections[conn.address] = nil
        var any = false
        for vb in 0..<vbs.count where vbs[vb].node == conn.address && vbs[vb].machine != nil {
            any = true
            end(UInt16(vb), .disconnected)
        }
        if any && !isShutDown {
            Task { await self.client.refreshConfig(avoiding: conn.address) }
        }
    }

    /// Ends `vb`'s stream locally (the machine discards a half-received snapshot) and schedules a reopen.
    private func end(_ vb: UInt16, _ reason: StreamEndReason) {
        guard var m = vbs[Int(vb)].machine else { return }
        let directives = m.streamEnd(reason)
        vbs[Int(vb)].machine = m
        run(vb, directives)
    }

    func streamResponse(_ frame: Frame, conn: ChangeStreamConnection) {
        guard let vb = opaques[frame.opaque], vbs[Int(vb)].opaque == frame.opaque, var m = vbs[Int(vb)].machine
        else { return }
        var directives: [ConsumerDirective]
        switch DCPStreamAnswer(status: frame.status, value: frame.value) {
        case .accepted(let log):
            directives = m.accepted(
                producerEntries: log.map { FailoverEntry(uuid: VBucketUUID($0.uuid), seqno: SeqNo($0.seqno)) })
            if case .failed = m.state { break }
            if let newest = log.first?.uuid {
                switch vbs[Int(vb)].history {
                case .unknown where vbs[Int(vb)].resume.uuid.rawValue != newest:
                    // Opened from 0 (or from a position of another history) for the first time.
                    branched(vb, first: true)
                case .uuid(let known) where known != newest: branched(vb, first: false)
                default: break
                }
                vbs[Int(vb)].history = .uuid(newest)
            }
            vbs[Int(vb)].open = true
            vbs[Int(vb)].reopensSinceOpen = 0
            openCount.wrappingAdd(1, ordering: .relaxed)
        case .rollback(let to):
            directives = m.rollbackRequested(to: SeqNo(to))
        case .notMyVBucket(let config):
            if config.readableBytes > 0 {
                client.offerConfig(config.readableBytesView, sourceHost: conn.address.host)
            }
            directives = m.streamEnd(.stateChanged)
        case .refused(let status):
            logger.debug("change stream request refused", metadata: ["vb": "\(vb)", "status": "\(status)"])
            directives = m.streamEnd(.closed)
        }
        vbs[Int(vb)].machine = m
        run(vb, directives)
    }

    /// A DCP message for a stream (marker, item, stream end), decoded by the connection.
    func streamMessage(opaque: UInt32, _ message: DCPMessage) {
        guard let vb = opaques[opaque], vbs[Int(vb)].opaque == opaque else { return }
        let directives: [ConsumerDirective]?
        switch message {
        case .snapshotMarker(let m):
            let marker = SnapshotMarker(
                start: SeqNo(m.start), end: SeqNo(m.end), source: m.isMemory ? .memory : .disk)
            directives = vbs[Int(vb)].machine?.snapshotMarker(marker)
        case .change(let change):
            guard let item = Self.item(change, collection: options.changeStreamCollection) else { return }
            directives = vbs[Int(vb)].machine?.item(item)
        case .streamEnd(let flag):
            directives = vbs[Int(vb)].machine?.streamEnd(StreamEndReason(wireFlag: flag))
        case .seqnoAdvanced(let seqno):
            directives = vbs[Int(vb)].machine?.seqnoAdvanced(SeqNo(seqno))
        case .systemEvent(let event):
            // A collection's creation or drop: not handed out, but its seqno is one the stream passed (at a
            // snapshot's end it completes the snapshot, as SEQNO_ADVANCED would).
            directives = vbs[Int(vb)].machine?.seqnoAdvanced(SeqNo(event.bySeqno))
        case .noop, .setVBucketState, .other:
            return
        }
        if let directives { run(vb, directives) }
    }

    /// What a client stream hands out of a change: values of mutations (bodies, or with
    /// `changeStreamIncludesXattrs` the XATTR section then the body), keys of deletions and expirations (with
    /// XATTRs, also the section their tombstone kept). Prepares go to replicas only: a client never sees
    /// uncommitted writes.
    /// `collection`: the stream follows that collection (`ClientOptions.changeStreamCollection`), so keys arrive
    /// as `LEB128(id) ‖ key`; the prefix is removed, and a record of another collection (or with a malformed prefix,
    /// peer bytes) is left out.
    static func item(_ change: DCPChange, collection: UInt32? = nil) -> StreamItem? {
        let kind: StreamItem.Kind
        switch change.kind {
        case .mutation: kind = .mutation
        case .deletion: kind = .deletion
        case .expiration: kind = .expiration
        case .prepare: return nil
        }
        let body = kind == .mutation || change.datatype & Datatype.xattr.rawValue != 0
        var key = Array(change.key.readableBytesView)
        if let collection {
            guard let prefix = CollectionKey.decodePrefix(key), prefix.id == collection else { return nil }
            key.removeFirst(prefix.length)
        }
        return StreamItem(
            kind: kind, seqno: SeqNo(change.bySeqno), key: key,
            value: body ? Array(change.value.readableBytesView) : [], cas: CAS(change.cas),
            revSeqno: RevSeqNo(change.revSeqno), flags: change.flags, expiry: change.expiry,
            datatype: body ? Datatype(rawValue: change.datatype) : .raw)
    }

    private func run(_ vb: UInt16, _ directives: [ConsumerDirective]) {
        for d in directives {
            switch d {
            case .sendRequest(let r):
                sendRequest(vb, r)
            case .persistFailoverLog, .persistResumePoint:
                break  // the position handed out with each batch is what a caller persists
            case .rollBack:
                // A client holds no data to roll back: restart the vBucket from the beginning.
                restarts.wrappingAdd(1, ordering: .relaxed)
                vbs[Int(vb)].restarted = true
                vbs[Int(vb)].history = .restarted
                clearStaged(vb)
                logger.notice("change stream restarts from 0 after a rollback", metadata: ["vb": "\(vb)"])
                // Told now, not with the vBucket's next snapshot: an emptied vBucket may never send one.
                deliver(vb, .empty)
                guard var m = vbs[Int(vb)].machine else { break }
                let more = m.rolledBack(to: .zero)
                vbs[Int(vb)].machine = m
                vbs[Int(vb)].resume = .empty
                run(vb, more)
            case .stage(let item):
                let n = item.key.count + item.value.count
                let node = vbs[Int(vb)].node  // set when the stream opened, before anything of it arrived
                let staged = node.map { stagedBytes[$0, default: 0] } ?? 0
                guard let node, staged + n <= maxStagedBytes else {
                    // Each snapshot is bounded by the machine; this bounds them all at once (a producer holding a
                    // snapshot open on every vBucket of the connection). Nothing of the snapshot was handed out.
                    logger.warning(
                        "change streams staged past the connection's bound; reopening",
                        metadata: ["vb": "\(vb)", "staged": "\(staged)"])
                    closeOnProducer(vb)
                    finish(vb, reopen: true)
                    return
                }
                stagedBytes[node, default: 0] += n
                vbs[Int(vb)].stagedBytes += n
                vbs[Int(vb)].staged.append(
                    ChangeEvent(
                        kind: item.kind == .mutation ? .mutation : item.kind == .deletion ? .deletion : .expiration,
                        key: item.key, value: item.value, cas: item.cas, flags: item.flags, expiry: item.expiry,
                        datatype: item.datatype.rawValue, vbucket: VBucketID(vb), seqno: item.seqno,
                        revSeqno: item.revSeqno))
            case .commitSnapshot(_, let resume):
                deliver(vb, resume)
            case .discardStaged:
                clearStaged(vb)
            case .close(let violation):
                logger.warning(
                    "change stream contract broken; reopening", metadata: ["vb": "\(vb)", "why": "\(violation)"])
                closeOnProducer(vb)
                finish(vb, reopen: true)
            case .finished(let reason):
                finish(vb, reopen: reason != .reachedEnd, refresh: reason == .stateChanged)
            }
        }
    }

    /// Hands out an empty batch marked `branched` at `vb`'s current position (`first`: its first open).
    private func branched(_ vb: UInt16, first: Bool) {
        branches.wrappingAdd(1, ordering: .relaxed)
        if !first {
            logger.notice(
                "change stream's vBucket history branched at or above its position", metadata: ["vb": "\(vb)"])
        }
        let position = ChangeStreamPosition(seqno: vbs[Int(vb)].resume.start, vbucketUUID: vbs[Int(vb)].resume.uuid)
        var batch = ChangeStreamBatch(
            vbucket: VBucketID(vb), events: [], position: position, restarted: false, byteCount: 0)
        batch.branched = true
        continuation.yield(batch)
    }

    private func deliver(_ vb: UInt16, _ resume: ResumePoint) {
        let position = ChangeStreamPosition(seqno: resume.start, vbucketUUID: resume.uuid)
        // Each event also costs its fixed fields (~64 bytes) beside key and value.
        let bytes = vbs[Int(vb)].staged.reduce(0) { $0 + $1.key.count + $1.value.count + 64 }
        let batch = ChangeStreamBatch(
            vbucket: VBucketID(vb), events: vbs[Int(vb)].staged, position: position,
            restarted: vbs[Int(vb)].restarted, byteCount: bytes)
        clearStaged(vb)
        vbs[Int(vb)].restarted = false
        vbs[Int(vb)].resume = resume
        delivered.withLock { $0[vb] = position }
        guard !batch.events.isEmpty || batch.restarted || options.changeStreamReportsProgress else { return }
        let n = pending.wrappingAdd(batch.byteCount, ordering: .acquiringAndReleasing).newValue
        if n > ClientLimits.changeStreamMaxPendingBytes { ackPaused.store(true, ordering: .releasing) }
        continuation.yield(batch)
    }

    /// Forgets `vb`'s stream; reopens it after a backoff when asked.
    private func finish(_ vb: UInt16, reopen: Bool, refresh: Bool = false) {
        let s = vbs[Int(vb)]
        opaques[s.opaque] = nil
        if s.open { openCount.wrappingSubtract(1, ordering: .relaxed) }
        vbs[Int(vb)].machine = nil
        vbs[Int(vb)].open = false
        clearStaged(vb)
        if reopen { scheduleReopen(vb, refresh: refresh) }
    }

    /// Drops `vb`'s staged events and their share of its connection's `stagedBytes`.
    private func clearStaged(_ vb: UInt16) {
        let n = vbs[Int(vb)].stagedBytes
        if n > 0, let node = vbs[Int(vb)].node {
            let left = stagedBytes[node, default: 0] - n
            stagedBytes[node] = left > 0 ? left : nil
        }
        vbs[Int(vb)].staged = []
        vbs[Int(vb)].stagedBytes = 0
    }

    private func closeOnProducer(_ vb: UInt16) {
        guard let addr = vbs[Int(vb)].node, let conn = connections[addr], conn.isReady else { return }
        conn.closeStream(vb)
    }

    private func scheduleReopen(_ vb: UInt16, refresh: Bool) {
        guard !isShutDown, !vbs[Int(vb)].reopenScheduled else { return }
        vbs[Int(vb)].reopenScheduled = true
        reopens.wrappingAdd(1, ordering: .relaxed)
        let attempt = vbs[Int(vb)].reopensSinceOpen
        let delay =
            attempt == 0
            ? 0
            : Backoff.doubling(
                ClientLimits.changeStreamBackoffInitialMs, attempt: attempt - 1,
                cap: ClientLimits.changeStreamBackoffMaxMs)
        vbs[Int(vb)].reopensSinceOpen = min(attempt + 1, Int.bitWidth)
        if refresh {
            let avoid = vbs[Int(vb)].node
            Task { await self.client.refreshConfig(avoiding: avoid) }
        }
        loop.scheduleTask(in: .milliseconds(Int64(delay))) { self.open(vb) }
    }

    /// Reopens streams whose vBucket the map now gives to another node.
    private func checkMap() {
        guard !isShutDown, let config = client.currentConfig else { return }
        for vb in 0..<vbs.count where vbs[vb].machine != nil {
            guard let i = config.activeNode(of: VBucketID(UInt16(vb))), let owner = config.nodes[i].kv else { continue }
            if owner != vbs[vb].node {
                closeOnProducer(UInt16(vb))
                end(UInt16(vb), .closed)
            }
        }
        // Connections to nodes that left the map and carry no stream are closed.
        let members = Set(config.nodes.compactMap(\.kv))
        for (addr, c) in connections
        where !members.contains(addr) && !vbs.contains(where: { $0.machine != nil && $0.node == addr }) {
            connections[addr] = nil
            c.close()
        }
    }

    private func resumeAcks() {
        guard pending.load(ordering: .acquiring) <= ClientLimits.changeStreamMaxPendingBytes / 2 else { return }
        ackPaused.store(false, ordering: .releasing)
        for c in connections.values { c.flushAcks() }
    }

    var mayAck: Bool { !ackPaused.load(ordering: .acquiring) }
}
