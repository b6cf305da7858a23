import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeStreams

/// One replica vBucket's stream on a consumer connection: the pure `StreamConsumer` plus the items it
/// staged and what this copy has acknowledged to the producer. Event-loop confined (its connection's).
struct VBucketConsumer {
    var machine: StreamConsumer
    var staged: [ChangeRecord] = []
    /// Key + value bytes of `staged` (the connection bounds their sum).
    var stagedBytes = 0
    /// Accepted by the producer and not ended.
    var open = false
    /// What this copy holds and has acknowledged to the producer.
    var acks = ReplicaAcks()

    init(vb: VBucketID, engine: BucketEngine) {
        let resume = engine.resumePoint(vb)
        machine = StreamConsumer(
            vbucket: vb, resume: resume, failoverLog: resume == .empty ? nil : engine.failoverHistory(vb))
    }

    /// Feeds one event to the machine in place (a copy would make every staged append copy its arrays).
    mutating func step(_ event: (inout StreamConsumer) -> [ConsumerDirective]) -> [ConsumerDirective] {
        event(&machine)
    }

    /// What a replica keeps of a producer's change: whole values, the XATTR section included (ADR 0029); a
    /// deletion keeps only the XATTRs its tombstone carried, a prepare is held until its commit arrives.
    static func item(_ change: DCPChange) -> StreamItem {
        var kind = StreamItem.Kind.mutation
        var datatype = change.datatype
        var keepsValue = true
        var prepare = false
        var level: UInt8 = 0
        switch change.kind {
        case .mutation:
            break
        case .deletion, .expiration:
            kind = change.kind == .deletion ? .deletion : .expiration
            datatype &= Datatype.xattr.rawValue
        case .prepare(let deleted, let prepareLevel):
            kind = deleted ? .deletion : .mutation
            prepare = true
            level = prepareLevel
            // A durable deletion's value is the XATTRs its tombstone keeps (datatype 0x04), if any.
            keepsValue = !deleted || change.datatype & Datatype.xattr.rawValue != 0
        }
        return StreamItem(
            kind: kind, seqno: SeqNo(change.bySeqno), key: Array(change.key.readableBytesView),
            value: keepsValue ? Array(change.value.readableBytesView) : [], cas: CAS(change.cas),
            revSeqno: RevSeqNo(change.revSeqno), flags: change.flags, expiry: change.expiry,
            datatype: Datatype(rawValue: datatype), prepare: prepare, level: level)
    }

    static func record(_ item: StreamItem) -> ChangeRecord {
        let deleted = item.kind != .mutation
        // A tombstone keeps the XATTR section its producer sent (system attributes), nothing else.
        let tombstoneXattrs = deleted && item.datatype.contains(.xattr) && !item.value.isEmpty
        return ChangeRecord(
            key: item.key, value: deleted && !tombstoneXattrs ? [] : item.value,
            meta: ItemMetadata(
                cas: item.cas, revSeqno: item.revSeqno, bySeqno: item.seqno, flags: item.flags,
                expiry: deleted ? 0 : item.expiry,
                datatype: deleted ? (tombstoneXattrs ? .xattr : .raw) : item.datatype,
                deleted: deleted),
            prepare: item.prepare, level: item.level)
    }
}

/// A replica stream's acknowledged positions for majority durability (ADR 0055, 0066). Pure; event-loop confined.
struct ReplicaAcks: Equatable {
    /// End of the last committed snapshot that was consistent (a memory snapshot): what this copy acknowledges
    /// as held in memory.
    var memory: SeqNo = .zero
    /// The highest such end known persisted.
    var persisted: SeqNo = .zero
    /// Whether the stream has acknowledged anything to its producer yet.
    var announced = false

    /// What the producer hears of a consistent snapshot this copy applied.
    enum Announcement: Equatable {
        /// Nothing now: the next announcement carries the position.
        case none
        /// SEQNO_ACKNOWLEDGED now, from memory: the snapshot's prepares are all of levels a replica meets in
        /// memory (majority, majorityAndPersistOnMaster), so nothing waits for this copy's disk (ADR 0073).
        case memory
        /// SEQNO_ACKNOWLEDGED now, and again once `end` is persisted (a persistence waiter, which cuts the
        /// flusher's gather short): the snapshot holds a persistToMajority prepare (or one of unknown level), or
        /// it is the stream's first.
        case memoryThenPersisted
    }

    /// A consistent (memory) snapshot ending at `end` was applied: this copy now holds `end` in memory, and
    /// `memory` says so. Returns what the producer must hear of it (SEQNO_ACKNOWLEDGED now, and again once
    /// `end` is persisted when `needsPersistence`: it holds a persistToMajority prepare): only prepares are waited for (`DurabilityMonitor` waits on prepares' seqnos only, and
    /// one acknowledgement covers every seqno below it), so a snapshot without one, such as the commit that a
    /// prepare's acknowledgement caused, needs no acknowledgement of its own, nor a persistence waiter that cuts
    /// the flusher's gather short (ADR 0066). The first snapshot of a stream is always announced, so a prepare
    /// held before a reconnection whose acknowledgement was lost is released by the next change, as before; it
    /// also waits for persistence, since such a prepare may be a persistToMajority one.
    mutating func heldInMemory(_ end: SeqNo, holdsPrepare: Bool, needsPersistence: Bool) -> Announcement {
        memory = end  // what the copy holds now, also below an earlier end after a rollback
        guard holdsPrepare || !announced else { return .none }
        let first = !announced
        announced = true
        return needsPersistence || first ? .memoryThenPersisted : .memory
    }

    /// Whether a snapshot's `staged` items hold a prepare this copy must persist before acknowledging: a
    /// persistToMajority one (a level this version does not know counts as one), or any prepare when the producer
    /// did not say its levels are real (`levelsTrusted`: an older Settee node wrote level 1 for every prepare).
    static func needsPersistence(_ staged: [ChangeRecord], levelsTrusted: Bool) -> Bool {
        staged.contains { $0.prepare && (!levelsTrusted || $0.needsReplicaPersistence) }
    }

    /// `end`, announced by `heldInMemory`, is persisted; true when that moves the persisted position (announce it).
    mutating func persistedThrough(_ end: SeqNo) -> Bool {
        guard persisted < end else { return false }
        persisted = end
        return true
    }
}
