import SetteeCore
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
