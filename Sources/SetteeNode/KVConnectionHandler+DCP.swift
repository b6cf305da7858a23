import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeStreams
import Synchronization

/// The producer side of DCP on one KV connection: the connection sent DCP_OPEN(producer) and now
/// receives server-initiated frames. Touched only on the connection's event loop.
///
/// Per stream (one vBucket): `idle(sentThrough)` ──high seqno moved──▶ `scanning` (a change-feed read: from
/// memory on the event loop when close behind, ADR 0079, else a scan on the blocking pool) ──batch──▶ marker +
/// items written, `sentThrough` = the batch's end ──▶ idle.
/// Backfill is the same loop: the feed reads evicted values from disk, resident ones from memory.
///
/// Invariants: (1) at most one scan per stream is in flight, so snapshots go out in seqno order and are
/// contiguous; (2) no scan starts while `unacked` (bytes sent, not acknowledged by BUFFER_ACK) is at or
/// above `bufferSize` (flow control: a slow consumer holds at most one batch per stream beyond it);
/// (3) a stream whose vBucket is no longer active or pending ends with STREAM_END(stateChanged);
/// (4) at most `Limits.dcpScansPerConnection` scans run per connection, each bounded by
/// `Limits.dcpBatchItems` and `Limits.dcpBatchBytes`, so one connection holds a bounded amount of data; the scans
/// that one wake or one delivery starts go to the pool as one task and come back as one loop task (ADR 0055);
/// (5) no scan starts while more than `Limits.kvMaxQueuedResponseBytes` of responses wait in the connection's
/// ordered queue behind one still unanswered (a login, a durable write, a flush): batches emitted then are queued,
/// not written, so the socket's water marks never stop the stream. `complete` restarts every stream once the queue
/// is down to half the bound (`dcpQueueDrained`), so a stream stops for at most as long as the answer it waits for.
final class DCPProducerState {
    struct Stream {
        var opaque: UInt32
        var sentThrough: SeqNo
        var end: SeqNo
        /// The history the stream follows; a bucket flush starts a new one (and seqnos restart at 0).
        var uuid: VBucketUUID
        /// The vBucket's purge seqno when the stream was accepted, raised by its reads from 0: tombstones purged up
        /// to here left nothing this stream sent behind; a purge above it and above `sentThrough` ends the stream
        /// (`PurgeFloor.missesDeletions`, ADR 0095).
        var purgeFloor = PurgeFloor()
        var scanning = false
        /// The collections this stream carries (`.collections` key mode only; ADR 0138).
        var filter = DCPCollectionFilter.all
    }

    let name: String
    let engine: BucketEngine
    let bucket: String
    var streams: [UInt16: Stream] = [:]
    /// Flow-control window in bytes (CONTROL connection_buffer_size); 0 until the consumer sets one.
    var bufferSize = 0
    var unacked = 0
    /// The consumer asked for snapshot markers carrying the purge seqno (`DCPControlKey.purgeSeqnoMarkers`).
    var purgeSeqnoMarkers = false
    var observerToken: UInt64?
    let wakeup = DCPWakeup()
    /// Scans running for this connection, at most `Limits.dcpScansPerConnection`; streams ready to scan
    /// beyond that wait in `waiting` (so a connection holds a bounded number of batches in memory).
    var scansInFlight = 0
    var waiting: Set<UInt16> = []
    /// Set when a stream did not scan because responses queued behind a waiting one passed the bound
    /// (invariant 5); `dcpQueueDrained` clears it and steps every stream.
    var queuePaused = false
    /// Set while a wake or a delivery steps several streams: the scans they start are gathered here and go to
    /// the scan pool as one task (`dcpGathered`, ADR 0055), instead of one pool hop and one loop hop each.
    var gathering: [(vb: UInt16, since: SeqNo)]?
    /// Set while batches read on the event loop are delivered: the scans those deliveries start go to the scan pool,
    /// so one wake reads in memory at most once per stream and never recurses (ADR 0079).
    var inlining = false

    /// The distinct filters this connection's streams hold, each with how many streams share it, and their ids in all
    /// (at most `Limits.dcpFilterIDsPerConnection`; ADR 0143). `.all` is not counted.
    private(set) var filters: [DCPCollectionFilter: Int] = [:]
    private(set) var filterIDs = 0

    /// Opened by the cluster administrator: only such a connection may speak for a replica (its
    /// SEQNO_ACKNOWLEDGED counts towards durability); a user's change stream never does.
    let trusted: Bool
    /// DCP_OPEN asked for XATTRs (INCLUDE_XATTRS, 0x04): values go out whole, with their XATTR section, and
    /// deletions carry the XATTRs their tombstone kept. Otherwise bodies only (ADR 0029).
    let includeXattrs: Bool
    /// Which collections' records go out and with which keys (ADR 0138): engine keys to a replica, the default
    /// collection's logical keys to a consumer without HELLO Collections, LEB128-prefixed keys to one with it.
    let keyMode: DCPKeyMode

    init(
        name: String, engine: BucketEngine, bucket: String, trusted: Bool, includeXattrs: Bool = false,
        collectionAware: Bool = false
    ) {
        self.name = name
        self.engine = engine
        self.bucket = bucket
        self.trusted = trusted
        self.includeXattrs = includeXattrs
        if trusted && name.hasPrefix(DCPNames.replicaPrefix) {
            keyMode = .engine
        } else {
            keyMode = collectionAware ? .collections : .defaultCollection
        }
    }

    /// The collection or scope event `r` is, when this connection is collection-aware, `r` is an event item (ADR 0143)
    /// and `filter` admits it; nil otherwise (a consumer without HELLO Collections never sees events, a replica gets
    /// the event items themselves through `streamKey`).
    func streamEvent(_ r: ChangeRecord, filter: DCPCollectionFilter) -> CollectionSystemEvent? {
        guard keyMode == .collections, !r.meta.deleted, CollectionSystemEvent.isSystemKey(r.key),
            let event = CollectionSystemEvent.decode(r.value), filter.admits(event)
        else { return nil }
        return event
    }

    /// Adds `stream` on `vb`, its filter shared with an equal one already held. False (nothing added) when its filter is
    /// new and its ids would take the connection past `Limits.dcpFilterIDsPerConnection`.
    func addStream(_ stream: Stream, vb: UInt16) -> Bool {
        var stream = stream
        if stream.filter != .all {
            if let i = filters.index(forKey: stream.filter) {
                stream.filter = filters.keys[i]  // the held copy: one set's storage for every stream
                filters.values[i] += 1
            } else {
                guard filterIDs + stream.filter.idCount <= Limits.dcpFilterIDsPerConnection else { return false }
                filters[stream.filter] = 1
                filterIDs += stream.filter.idCount
            }
        }
        streams[vb] = stream
        return true
    }

    /// Removes and returns `vb`'s stream, releasing its share of its filter.
    func removeStream(_ vb: UInt16) -> Stream? {
        guard let s = streams.removeValue(forKey: vb) else { return nil }
        if s.filter != .all, let n = filters[s.filter] {
            if n > 1 {
                filters[s.filter] = n - 1
            } else {
                filters[s.filter] = nil
                filterIDs -= s.filter.idCount
            }
        }
        return s
    }

    func removeAllStreams() {
        streams = [:]
        filters = [:]
        filterIDs = 0
    }

    /// The key `r` goes out with on a stream admitting `admitted` (nil: every live collection, looked up in `live`),
    /// or nil when the record is not this stream's: another collection's, a dropped collection's, a malformed key.
    func streamKey(
        _ r: ChangeRecord, admitted: Set<UInt32>?, live: [UInt32: CollectionsManifest.Collection]
    ) -> [UInt8]? {
        switch keyMode {
        case .engine:
            return r.key
        case .defaultCollection:
            return r.inDefaultCollection()?.key
        case .collections:
            // Collection and scope events go out as SYSTEM_EVENT (`streamEvent`), never as mutations.
            guard let (id, logical) = CollectionKey.split(engineKey: r.key),
                id != CollectionSystemEvent.systemCollectionID
            else { return nil }
            if let admitted {
                guard admitted.contains(id) else { return nil }
            } else if id != CollectionsManifest.defaultCollectionID && live[id] == nil {
                return nil
            }
            var out = CollectionKey.encodePrefix(id)
            out.append(contentsOf: logical)
            return out
        }
    }

    /// A record's value and datatype as this consumer gets them.
    func wire(_ r: ChangeRecord) -> (value: [UInt8], datatype: UInt8) {
        guard r.meta.datatype.contains(.xattr) else { return (r.meta.deleted ? [] : r.value, r.meta.datatype.rawValue) }
        if includeXattrs { return (r.value, r.meta.datatype.rawValue) }
        return (r.body, r.meta.deleted ? 0 : r.meta.datatype.rawValue & ~Datatype.xattr.rawValue)
    }

    /// The consumer's node when it is one of our replicas (name `settee-replica:<nodeID>`, admin only).
    var consumerNode: NodeID? {
        guard trusted, name.hasPrefix(DCPNames.replicaPrefix) else { return nil }
        return NodeID(String(name.dropFirst(DCPNames.replicaPrefix.count)))
    }
}

/// What the engine's change observer (on writer threads) shares with the connection's event loop.
final class DCPWakeup: Sendable {
    private struct State {
        /// vBuckets with new mutations since the last wake.
        var dirty: Set<UInt16> = []
        /// vBuckets this connection streams: a change of any other vBucket (one this node is a replica of, one
        /// another connection streams) wakes nothing (ADR 0084).
        var streamed: Set<UInt16> = []
    }
    private let state = Mutex(State())
    let scheduled = Atomic<Bool>(false)

    /// The observer saw a change of `vb`: true when it is streamed here, and so recorded for the next wake.
    /// Ordering: a stream is recorded here before its first step reads the vBucket (under its lock), and a writer
    /// changes the vBucket (under its lock) before it calls this; so a change either wakes the loop or is seen by
    /// that first step.
    func changed(_ vb: UInt16) -> Bool {
        state.withLock { s in
            guard s.streamed.contains(vb) else { return false }
            s.dirty.insert(vb)
            return true
        }
    }

    /// The vBuckets changed since the last call.
    func take() -> Set<UInt16> {
        state.withLock { s in
            let x = s.dirty
            s.dirty = []
            return x
        }
    }

    func stream(_ vb: UInt16) { state.withLock { _ = $0.streamed.insert(vb) } }
    func unstream(_ vb: UInt16) { state.withLock { _ = $0.streamed.remove(vb) } }
    func unstreamAll() { state.withLock { $0.streamed = [] } }
}

/// Connection names the replication manager uses, so a producer knows which node a stream feeds.
public enum DCPNames {
    public static let replicaPrefix = "settee-replica:"
}

extension KVConnectionHandler {
    func dcpDispatch(_ frame: Frame, context: ChannelHandlerContext) {
        switch frame.opcode {
        case .dcpOpen: dcpOpen(frame)
        case .dcpStreamRequest: dcpStreamRequest(frame)
        case .dcpCloseStream: dcpCloseStream(frame)
        case .dcpGetFailoverLog: dcpGetFailoverLog(frame)
        case .dcpControl: dcpControl(frame)
        case .dcpBufferAcknowledgement: dcpBufferAck(frame)
        case .dcpSeqnoAcknowledged: dcpSeqnoAck(frame)
        case .dcpNoop: emit { $0.writeResponseHeader(opcode: .dcpNoop, status: .success, opaque: frame.opaque) }
        case .setVBucket: setVBucket(frame)
        case .getVBucket: getVBucket(frame)
        default:
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .unknownCommand, opaque: frame.opaque) }
        }
    }

    private func reply(_ frame: Frame, _ status: Status, value: [UInt8] = []) {
        emit { $0.writeResponse(opcode: frame.opcode, status: status, opaque: frame.opaque, value: value) }
    }

    /// DCP needs a selected bucket and a principal allowed to stream it: the admin (replication runs as the
    /// cluster administrator), the bucket's own credentials, a user whose roles grant `streamChanges` on
    /// it (Couchbase's DcpProducer privilege: full admin, cluster admin, `bucket_full_access[b]`), or an
    /// unauthenticated connection on an `authType=none` bucket (`BucketGrants.anonymous`).
    private func dcpBucket(_ frame: Frame) -> (BucketEngine, BucketSettings)? {
        guard case .ok(let bucket) = currentBucket() else {
            reply(frame, state.principal == nil ? .accessDenied : .noBucket)
            return nil
        }
        let (engine, settings) = (bucket.engine, bucket.settings)
        let allowed: Bool
        switch state.principal {
        case .admin?: allowed = true
        case .bucket(let name)?: allowed = name == settings.name
        case .user(_, let roles)?: allowed = roles.grants(onBucket: settings.name).contains(.streamChanges)
        case nil:
            // No credentials: only an authType=none bucket, as for its data (ADR 0015).
            allowed = BucketGrants.anonymous(bucketHasNoPassword: settings.authType == .none).contains(.streamChanges)
        }
        guard allowed else {
            reply(frame, .accessDenied)
            return nil
        }
        return (engine, settings)
    }

    func dcpOpen(_ frame: Frame) {
        guard let (engine, settings) = dcpBucket(frame) else { return }
        guard frame.extras.readableBytes == 8, frame.key.readableBytes > 0, dcp == nil else {
            reply(frame, .invalidArguments)
            return
        }
        let flags = frame.extras.getInteger(at: frame.extras.readerIndex + 4, as: UInt32.self)!
        guard flags & DCPOpenFlags.producer != 0 else {
            // This server only produces; consumers live in the replication manager.
            reply(frame, .notSupported)
            return
        }
        let producer = DCPProducerState(
            name: String(buffer: frame.key), engine: engine, bucket: settings.name,
            trusted: state.principal == .admin, includeXattrs: flags & DCPOpenFlags.includeXattrs != 0,
            collectionAware: state.collections)
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let wakeup = producer.wakeup
        producer.observerToken = engine.addChangeObserver { vb, _ in
            guard wakeup.changed(vb.rawValue) else { return }
            if !wakeup.scheduled.exchange(true, ordering: .acquiringAndReleasing) {
                loop.execute {
                    wakeup.scheduled.store(false, ordering: .releasing)
                    handler.value.dcpWake()
                }
            }
        }
        dcp = producer
        logger.info(
            "DCP producer opened",
            metadata: ["remote": "\(remote)", "name": "\(producer.name)", "keys": "\(producer.keyMode)"])
        reply(frame, .success)
    }

    func dcpControl(_ frame: Frame) {
        guard let p = dcp else {
            reply(frame, .invalidArguments)
            return
        }
        let key = String(buffer: frame.key)
        let value = String(buffer: frame.value)
        if key == DCPControlKey.prepareLevels {
            // DCP_PREPARE carries each prepare's real level (ADR 0073): say so, so the replica may trust it.
            reply(frame, .success, value: Array(DCPControlKey.yes.utf8))
            return
        }
        if key == DCPControlKey.purgeSeqnoMarkers {
            // Snapshots over purged tombstones will say so (ADR 0095).
            p.purgeSeqnoMarkers = value == DCPControlKey.yes
            reply(frame, .success, value: p.purgeSeqnoMarkers ? Array(DCPControlKey.yes.utf8) : [])
            return
        }
        if key == DCPControlKey.connectionBufferSize {
            guard let n = Int(value), n >= 0 else {
                reply(frame, .invalidArguments)
                return
            }
            p.bufferSize = min(n, Limits.dcpMaxBufferBytes)
        }
        reply(frame, .success)  // other controls (noops, priorities) are accepted and ignored
    }

    func dcpStreamRequest(_ frame: Frame) {
        guard let p = dcp else {
            reply(frame, .invalidArguments)
            return
        }
        guard let x = DCPExtras.StreamRequest(frame.extras), Int(frame.vbucket) < p.engine.settings.numVBuckets else {
            reply(frame, .invalidArguments)
            return
        }
        let vb = VBucketID(frame.vbucket)
        if p.streams[frame.vbucket] != nil {
            reply(frame, .keyExists)  // kv_engine: a stream already exists for the vBucket
            return
        }
        // The value filters a collection-aware stream by collection (ADR 0138); a consumer that is not
        // collection-aware gets the default collection and may not name others.
        var filter = DCPCollectionFilter.all
        if frame.value.readableBytes > 0 {
            guard p.keyMode == .collections, case .ok(let bucket) = currentBucket() else {
                reply(frame, .invalidArguments)
                return
            }
            switch DCPCollectionFilter.parse(Array(frame.value.readableBytesView), manifest: bucket.manifest) {
            case .success(let f): filter = f
            case .failure(let refusal):
                let body = refusal.carriesManifestUID ? bucket.manifest.unknownBody : []
                emit {
                    $0.writeResponse(
                        opcode: frame.opcode, status: refusal.status, opaque: frame.opaque,
                        datatype: body.isEmpty ? 0 : 1,
                        value: body)
                }
                return
            }
        }
        let (vbState, log, high, purge) = p.engine.streamHistory(vb)
        // A replica's adopted log may name branch points above what it holds; never judge against those.
        guard vbState == .active || vbState == .pending, log.newest.seqno <= high else {
            emit { writeNotMyVBucket(frame, bucket: p.bucket, into: &$0) }
            return
        }
        let request = StreamRequest(
            vbucket: vb,
            resume: ResumePoint(
                start: SeqNo(x.start), snapStart: SeqNo(x.snapStart), snapEnd: SeqNo(x.snapEnd),
                uuid: VBucketUUID(x.uuid)), end: SeqNo(x.end))
        let history = ProducerHistory(failoverLog: log, highSeqno: high, purgeSeqno: purge)
        switch history.decide(request) {
        case .invalidRange:
            reply(frame, .rangeError)
        case .rollback(let to):
            emit {
                $0.writeResponseHeader(
                    opcode: .dcpStreamRequest, status: .rollback, opaque: frame.opaque, valueLength: 8)
                $0.writeInteger(to.rawValue)
            }
        case .accept:
            let stream = DCPProducerState.Stream(
                opaque: frame.opaque, sentThrough: SeqNo(x.start), end: SeqNo(x.end), uuid: log.newest.uuid,
                purgeFloor: PurgeFloor(purge), filter: filter)
            // Bounded before the answer: a refused stream's request gets E2BIG and no failover log.
            guard p.addStream(stream, vb: frame.vbucket) else {
                reply(frame, .valueTooLarge)
                return
            }
            emit {
                $0.writeResponseHeader(
                    opcode: .dcpStreamRequest, status: .success, opaque: frame.opaque,
                    valueLength: log.entries.count * 16)
                $0.writeDCPFailoverLog(log.entries.map { ($0.uuid.rawValue, $0.seqno.rawValue) })
            }
            p.wakeup.stream(frame.vbucket)
            dcpStep(frame.vbucket)
        }
    }

    func dcpCloseStream(_ frame: Frame) {
        guard let p = dcp, p.removeStream(frame.vbucket) != nil else {
            reply(frame, .keyNotFound)
            return
        }
        p.wakeup.unstream(frame.vbucket)
        reply(frame, .success)
    }

    func dcpGetFailoverLog(_ frame: Frame) {
        guard let (engine, settings) = dcp.map({ ($0.engine, $0.engine.settings) }) ?? dcpBucket(frame) else {
            return
        }
        guard Int(frame.vbucket) < settings.numVBuckets else {
            reply(frame, .notMyVBucket)
            return
        }
        let log = engine.failoverHistory(VBucketID(frame.vbucket))
        emit {
            $0.writeResponseHeader(
                opcode: .dcpGetFailoverLog, status: .success, opaque: frame.opaque, valueLength: log.entries.count * 16)
            $0.writeDCPFailoverLog(log.entries.map { ($0.uuid.rawValue, $0.seqno.rawValue) })
        }
    }

    func dcpBufferAck(_ frame: Frame) {
        guard let p = dcp, frame.extras.readableBytes == 4 else { return }
        let n = Int(frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self)!)
        let wasBlocked = p.bufferSize > 0 && p.unacked >= p.bufferSize
        p.unacked = max(0, p.unacked - n)
        if wasBlocked && p.unacked < p.bufferSize {
            dcpGathered {
                for vb in p.streams.keys { dcpStep(vb) }
            }
        }
    }

    /// SEQNO_ACKNOWLEDGED from a replica: extras are the seqno it holds in memory and (our extension)
    /// the seqno it has persisted. No response, as in kv_engine.
    func dcpSeqnoAck(_ frame: Frame) {
        guard let p = dcp, let replica = p.consumerNode, frame.extras.readableBytes >= 8 else { return }
        // Only a stream following the vBucket's current history speaks for it (not one a flush ended).
        guard let s = p.streams[frame.vbucket], Int(frame.vbucket) < p.engine.settings.numVBuckets,
            p.engine.seqnoInfo(VBucketID(frame.vbucket)).uuid == s.uuid
        else { return }
        let base = frame.extras.readerIndex
        let memory = SeqNo(frame.extras.getInteger(at: base, as: UInt64.self)!)
        let persisted =
            frame.extras.readableBytes >= 16 ? SeqNo(frame.extras.getInteger(at: base + 8, as: UInt64.self)!) : .zero
        node.replication?.acknowledged(
            bucket: p.bucket, vb: VBucketID(frame.vbucket), replica: replica, memory: memory, persisted: persisted,
            history: s.uuid)
    }

    /// The observer saw mutations: step every stream of a vBucket that changed.
    func dcpWake() {
        guard let p = dcp else { return }
        let changed = p.wakeup.take()
        dcpGathered {
            for vb in changed where p.streams[vb] != nil { dcpStep(vb) }
        }
    }

    /// Runs `body`; the scans its `dcpStep`s start go to the pool together, in one task (each still counts in
    /// `scansInFlight`, so invariant 4 bounds what the task holds). Nested calls join the outer one.
    func dcpGathered(_ body: () -> Void) {
        guard let p = dcp, p.gathering == nil else { return body() }
        p.gathering = []
        body()
        let scans = p.gathering ?? []
        p.gathering = nil
        if !scans.isEmpty { dcpScan(scans) }
    }

    /// Reads each `(vb, since)` close behind its high seqno from memory on this event loop and delivers it at once
    /// (`changesInMemory`: at most `Limits.recentChangesPerVBucket` entries, no disk, no pass over the vBucket);
    /// the rest are scanned on the scan pool, in one task, and their batches delivered in the same order in one
    /// event-loop task. A replicated write thus costs no pool wake and no loop hop on the active (ADR 0079).
    private func dcpScan(_ scans: [(vb: UInt16, since: SeqNo)]) {
        guard let p = dcp, let loop = context?.eventLoop else { return }
        let engine = p.engine
        // Replicas get prepares (they acknowledge them; durable writes wait for that); other consumers see a
        // durable write once committed.
        let forReplica = p.consumerNode != nil
        var pooled = scans
        if !p.inlining {
            pooled = []
            var read: [(vb: UInt16, since: SeqNo, batch: ChangeBatch)] = []
            for scan in scans {
                // An error (the vBucket went away, say) is the pool's to report, as before.
                let batch = try? engine.changesInMemory(
                    VBucketID(scan.vb), since: scan.since, limit: Limits.dcpBatchItems,
                    maxBytes: Limits.dcpBatchBytes, includePrepares: forReplica)
                if let batch { read.append((scan.vb, scan.since, batch)) } else { pooled.append(scan) }
            }
            if !read.isEmpty {
                p.inlining = true
                dcpGathered {
                    for r in read { dcpDeliver(r.vb, since: r.since, .success(r.batch)) }
                }
                p.inlining = false
            }
        }
        guard !pooled.isEmpty else { return }
        let scans = pooled
        let handler = NIOLoopBound(self, eventLoop: loop)
        node.streamPool.submit { _ in
            let results = scans.map { scan in
                Result { () throws(EngineError) in
                    try engine.changes(
                        VBucketID(scan.vb), since: scan.since, limit: Limits.dcpBatchItems,
                        maxBytes: Limits.dcpBatchBytes, includePrepares: forReplica)
                }
            }
            loop.execute {
                let h = handler.value
                h.dcpGathered {
                    for (scan, r) in zip(scans, results) { h.dcpDeliver(scan.vb, since: scan.since, r) }
                }
            }
        }
    }

    /// Starts the next scan of stream `vb` if it has something to send and flow control allows.
    func dcpStep(_ vb: UInt16) {
        guard let p = dcp, var s = p.streams[vb], !s.scanning, !closing else { return }
        if p.bufferSize > 0 && p.unacked >= p.bufferSize { return }
        if let context, !context.channel.isWritable { return }
        // Invariant 5: behind an unanswered request, what is emitted stays in `slots` and the channel never turns
        // unwritable, so without this the scans would go on and the connection hold all they read.
        if queuedBytes > Limits.kvMaxQueuedResponseBytes {
            p.queuePaused = true
            return
        }
        let id = VBucketID(vb)
        let info = p.engine.seqnoInfo(id)
        if info.state != .active && info.state != .pending {
            dcpEnd(vb, .stateChanged)
            return
        }
        // Flushed (the history changed, or the high seqno went below what was sent): the consumer must ask
        // again and be told to roll back, as kv_engine ends streams of a deleted vBucket.
        if info.uuid != s.uuid || info.highSeqno < s.sentThrough {
            dcpEnd(vb, .stateChanged)
            return
        }
        if s.sentThrough >= s.end {
            dcpEnd(vb, .ok)
            return
        }
        guard info.highSeqno > s.sentThrough else { return }
        if p.scansInFlight >= Limits.dcpScansPerConnection {
            p.waiting.insert(vb)
            return
        }
        p.scansInFlight += 1
        s.scanning = true
        p.streams[vb] = s
        if p.gathering != nil {
            p.gathering?.append((vb, s.sentThrough))
        } else {
            dcpScan([(vb, s.sentThrough)])
        }
    }

    func dcpDeliver(_ vb: UInt16, since: SeqNo, _ result: Result<ChangeBatch, EngineError>) {
        guard let p = dcp else { return }
        p.scansInFlight -= 1
        // Once per batch: a user's producer whose user was deleted or may no longer stream is closed here, since it
        // streams without sending requests (`dispatch` checks those).
        guard userRolesCurrent() else { return }
        defer { dcpStepWaiting() }
        guard var s = p.streams[vb], s.scanning, s.sentThrough == since, let context else { return }
        s.scanning = false
        let batch: ChangeBatch
        switch result {
        case .success(let b) where s.purgeFloor.missesDeletions(since: since, purgeSeqno: b.purgeSeqno):
            // Tombstones above what was sent were purged meanwhile (ADR 0095): asked again, the consumer is told
            // to roll back to 0 instead of keeping documents whose deletions it never saw.
            p.streams[vb] = s
            dcpEnd(vb, .rollback)
            return
        case .success(let b): batch = b
        case .failure(let error):
            logger.error("DCP backfill failed", metadata: ["vb": "\(vb)", "error": "\(error)"])
            p.streams[vb] = s
            dcpEnd(vb, .closed)
            return
        }
        let snapEnd = min(batch.lastSeqno, s.end)
        // Which collections go out (ADR 0138): read once per batch from the connection's resolved bucket, so a
        // collection dropped since the last batch is left out from this one on.
        var admitted: Set<UInt32>? = nil
        var live: [UInt32: CollectionsManifest.Collection] = [:]
        if p.keyMode == .collections, case .ok(let bucket) = currentBucket() {
            admitted = s.filter.admitted(in: bucket.manifest)
            live = bucket.collectionsByID
        }
        // Every collection the stream asked for was dropped: kv_engine ends it with FilterEmpty, after the end events
        // the vBucket holds by then (those in this batch go out first).
        let filterEmpty = admitted?.isEmpty == true
        if snapEnd > since {
            // Replicas get every record with its engine key; other consumers their collections' records only (ADR
            // 0138). When the snapshot's last seqnos send nothing to a consumer (another collection's records, a
            // prepare it does not get, a tombstone purged before ADR 0161 kept the one at the high seqno), a
            // collection-aware consumer gets the snapshot's whole range and then SEQNO_ADVANCED to its end, as
            // kv_engine sends it (a snapshot with nothing for it is then the marker and SEQNO_ADVANCED alone): it
            // commits the snapshot there and its position reaches the vBucket's high seqno (a backup waits for that,
            // ADR 0147). A legacy consumer (no HELLO Collections) cannot be told: its snapshot ends at the last record
            // it gets (a consumer commits a snapshot when the item at its end arrives, `StreamConsumer`, and would
            // otherwise hold what it got until the vBucket's next write, ADR 0161), and a snapshot with nothing for it
            // is not sent (resuming from its last seqno it would fall below the marker's start). A replica gets
            // every record there is, so its snapshot keeps its range (one ending in purged tombstones reaches past
            // them, ADR 0095).
            var out: [(record: ChangeRecord, key: [UInt8], event: CollectionSystemEvent?)] = []
            out.reserveCapacity(batch.records.count)
            for r in batch.records where r.meta.bySeqno <= snapEnd {
                if let event = p.streamEvent(r, filter: s.filter) {
                    out.append((r, [], event))
                } else if let key = p.streamKey(r, admitted: admitted, live: live) {
                    out.append((r, key, nil))
                }
            }
            let lastSent = out.last?.record.meta.bySeqno ?? since
            let tailUnsent = lastSent < snapEnd && p.keyMode != .engine
            let advances = tailUnsent && p.keyMode == .collections
            let markerEnd = tailUnsent && !advances ? lastSent : snapEnd
            if markerEnd > since {
                var b = ByteBuffer()
                var flags =
                    batch.consistent && snapEnd == batch.lastSeqno ? DCPSnapshotFlags.memory : DCPSnapshotFlags.disk
                flags |= DCPSnapshotFlags.checkpoint
                // A snapshot whose range holds purged tombstones tells a consumer that asked (ADR 0095).
                let purge = p.purgeSeqnoMarkers && batch.purgeSeqno > since ? min(batch.purgeSeqno, markerEnd) : nil
                b.writeDCPSnapshotMarker(
                    opaque: s.opaque, vbucket: vb, start: since.rawValue + 1, end: markerEnd.rawValue, flags: flags,
                    purgeSeqno: purge?.rawValue)
                for (r, key, event) in out {
                    if let event {
                        b.writeDCPSystemEvent(
                            opaque: s.opaque, vbucket: vb, bySeqno: r.meta.bySeqno.rawValue,
                            event: UInt32(event.kind.rawValue), version: event.dcpVersion, key: event.dcpKey,
                            value: event.dcpValue)
                        continue
                    }
                    let (value, datatype) = p.wire(r)
                    if r.prepare {
                        b.writeDCPPrepare(
                            opaque: s.opaque, vbucket: vb, key: key, value: value, cas: r.meta.cas.rawValue,
                            datatype: datatype, bySeqno: r.meta.bySeqno.rawValue,
                            revSeqno: r.meta.revSeqno.rawValue, flags: r.meta.flags, expiry: r.meta.expiry,
                            deleted: r.meta.deleted, level: r.level)
                    } else if r.meta.deleted {
                        b.writeDCPDeletion(
                            opaque: s.opaque, vbucket: vb, key: key, cas: r.meta.cas.rawValue,
                            bySeqno: r.meta.bySeqno.rawValue, revSeqno: r.meta.revSeqno.rawValue, value: value,
                            datatype: datatype)
                    } else {
                        b.writeDCPMutation(
                            opaque: s.opaque, vbucket: vb, key: key, value: value, cas: r.meta.cas.rawValue,
                            datatype: datatype, bySeqno: r.meta.bySeqno.rawValue,
                            revSeqno: r.meta.revSeqno.rawValue, flags: r.meta.flags, expiry: r.meta.expiry)
                    }
                }
                if advances {
                    b.writeDCPSeqnoAdvanced(opaque: s.opaque, vbucket: vb, seqno: snapEnd.rawValue)
                }
                p.unacked += b.readableBytes
                emit { $0.writeBuffer(&b) }
            }
            s.sentThrough = snapEnd
        }
        p.streams[vb] = s
        if filterEmpty {
            dcpEnd(vb, .filterEmpty)
            return
        }
        // Batches of other streams back from the pool in the same tick go out in the same write.
        flushSoon(context: context)
        dcpStep(vb)
    }

    /// Restarts the streams invariant 5 stopped, once the responses queued behind a waiting one are down to half
    /// the bound (as `resumeIfOutputDrained` resumes request processing). `complete` calls it after each drain.
    func dcpQueueDrained() {
        guard let p = dcp, p.queuePaused, !closing, queuedBytes <= Limits.kvMaxQueuedResponseBytes / 2 else { return }
        p.queuePaused = false
        dcpGathered {
            for vb in p.streams.keys { dcpStep(vb) }
        }
    }

    /// Starts scans of streams that waited for a free scan slot.
    func dcpStepWaiting() {
        guard let p = dcp else { return }
        dcpGathered {
            while p.scansInFlight < Limits.dcpScansPerConnection, let vb = p.waiting.popFirst() { dcpStep(vb) }
        }
    }

    func dcpEnd(_ vb: UInt16, _ flag: DCPStreamEndFlag) {
        guard let p = dcp, let s = p.removeStream(vb) else { return }
        p.wakeup.unstream(vb)
        emit { $0.writeDCPStreamEnd(opaque: s.opaque, vbucket: vb, flag: flag) }
        if let context { flushOut(context: context) }
    }

    func dcpClosed() {
        guard let p = dcp else { return }
        if let token = p.observerToken { p.engine.removeChangeObserver(token) }
        p.removeAllStreams()
        p.wakeup.unstreamAll()
        dcp = nil
    }

    // MARK: vBucket states (memcached SET_VBUCKET / GET_VBUCKET), admin only

    func setVBucket(_ frame: Frame) {
        guard state.principal == .admin else { return reply(frame, .accessDenied) }
        guard case .ok(let bucket) = currentBucket() else { return reply(frame, .noBucket) }
        let (engine, settings) = (bucket.engine, bucket.settings)
        let raw: UInt32?
        switch frame.extras.readableBytes {
        case 4: raw = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self)
        case 1: raw = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt8.self).map(UInt32.init)
        default: raw = nil
        }
        guard Int(frame.vbucket) < settings.numVBuckets, let raw,
            let s = DCPVBucketState(rawValue: UInt8(clamping: raw))
        else { return reply(frame, .invalidArguments) }
        engine.setVBucketState(VBucketID(frame.vbucket), VBucketState(s))
        reply(frame, .success)
    }

    func getVBucket(_ frame: Frame) {
        guard case .ok(let bucket) = currentBucket() else { return reply(frame, .noBucket) }
        let (engine, settings) = (bucket.engine, bucket.settings)
        guard Int(frame.vbucket) < settings.numVBuckets else { return reply(frame, .notMyVBucket) }
        let s = DCPVBucketState(engine.vbucketState(VBucketID(frame.vbucket)))
        emit {
            $0.writeResponseHeader(opcode: .getVBucket, status: .success, opaque: frame.opaque, valueLength: 4)
            $0.writeInteger(UInt32(s.rawValue))
        }
    }
}

extension VBucketState {
    init(_ s: DCPVBucketState) {
        switch s {
        case .active: self = .active
        case .replica: self = .replica
        case .pending: self = .pending
        case .dead: self = .dead
        }
    }
}

extension DCPVBucketState {
    init(_ s: VBucketState) {
        switch s {
        case .active: self = .active
        case .replica: self = .replica
        case .pending: self = .pending
        case .dead: self = .dead
        }
    }
}
