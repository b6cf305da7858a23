import SetteeCore
import SetteeStreams

// Storage uses the change streams' `FailoverLog` (one type for the whole system); this adds what only
// storage needs: random histories and the disk encoding of the `vbucket_state.failover` column.
extension FailoverLog {
    /// A fresh log for a new vBucket: one random history from seqno 0.
    static func fresh<G: RandomNumberGenerator>(using rng: inout G) -> FailoverLog {
        FailoverLog(initialUUID: randomUUID(&rng, avoiding: []))
    }

    /// The uuid of the current history (what mutation tokens carry).
    var current: VBucketUUID { newest.uuid }

    /// Starts a new random history at `seqno` (the vBucket's high seqno), dropping the oldest entries beyond
    /// `Limits.maxFailoverEntries`. Entries beginning after `seqno` are dropped first: a replica promoted
    /// before it caught up may have adopted branch points it never reached, and the new history starts
    /// from what it holds (so the newest entry never lies above the high seqno).
    mutating func branch<G: RandomNumberGenerator>(at seqno: SeqNo, using rng: inout G) {
        if newest.seqno > seqno { rollBack(to: seqno) }
        add(uuid: Self.randomUUID(&rng, avoiding: entries.map(\.uuid)), at: seqno)
    }

    private static func randomUUID<G: RandomNumberGenerator>(_ rng: inout G, avoiding: [VBucketUUID]) -> VBucketUUID {
        // 0 means "no history" on the wire (DCP stream request); never hand it out.
        var v: UInt64 = 0
        while v == 0 || avoiding.contains(VBucketUUID(v)) { v = rng.next() }
        return VBucketUUID(v)
    }

    /// Disk form: 16 bytes per entry, uuid then seqno, little-endian, newest first.
    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * 16)
        func append(_ v: UInt64) {
            for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
        }
        for e in entries {
            append(e.uuid.rawValue)
            append(e.seqno.rawValue)
        }
        return out
    }

    /// Decodes the disk form; nil when malformed (bad length, no entry, seqnos out of history order).
    static func decode(_ bytes: UnsafeRawBufferPointer) -> FailoverLog? {
        // At most the cap's entries are ever written: a longer blob is refused before any entry is built.
        guard bytes.count >= 16, bytes.count % 16 == 0, bytes.count <= Limits.maxFailoverEntries * 16 else {
            return nil
        }
        var entries: [FailoverEntry] = []
        var off = 0
        func u64(_ at: Int) -> UInt64 {
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(bytes[at + i]) << (8 * UInt64(i)) }
            return v
        }
        while off < bytes.count {
            entries.append(FailoverEntry(uuid: VBucketUUID(u64(off)), seqno: SeqNo(u64(off + 8))))
            off += 16
        }
        for (newer, older) in zip(entries, entries.dropFirst()) where newer.seqno < older.seqno { return nil }
        return FailoverLog(entries: entries)
    }
}
