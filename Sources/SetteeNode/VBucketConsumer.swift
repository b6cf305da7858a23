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
    /// Accepted by the producer and not ended.
    var open = false
    /// End of the last committed snapshot that was consistent (a memory snapshot): what this copy
    /// acknowledges as held in memory for majority durability.
    var ackedMemory: SeqNo = .zero
    var ackedPersisted: SeqNo = .zero

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
        switch change.kind {
        case .mutation:
            break
        case .deletion, .expiration:
            kind = change.kind == .deletion ? .deletion : .expiration
            datatype &= Datatype.xattr.rawValue
        case .prepare(let deleted, _):
            kind = deleted ? .deletion : .mutation
            prepare = true
            // A durable deletion's value is the XATTRs its tombstone keeps (datatype 0x04), if any.
            keepsValue = !deleted || change.datatype & Datatype.xattr.rawValue != 0
        }
        return StreamItem(
            kind: kind, seqno: SeqNo(change.bySeqno), key: Array(change.key.readableBytesView),
            value: keepsValue ? Array(change.value.readableBytesView) : [], cas: CAS(change.cas),
            revSeqno: RevSeqNo(change.revSeqno), flags: change.flags, expiry: change.expiry,
            datatype: Datatype(rawValue: datatype), prepare: prepare)
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
            prepare: item.prepare)
    }
}
