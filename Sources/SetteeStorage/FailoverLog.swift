import SetteeCore

/// A vBucket's failover log: (uuid, seqno) entries, newest first. A new entry (random uuid, current
/// high seqno) starts a new history: on creation, on becoming active, after an unclean shutdown.
struct FailoverLog: Equatable {
    struct Entry: Equatable {
        var uuid: VBucketUUID
        var seqno: SeqNo
    }

    private(set) var entries: [Entry]

    init(entries: [Entry]) {
        precondition(!entries.isEmpty, "a failover log has at least one entry")
        self.entries = entries
    }

    /// A fresh log for a new vBucket.
    static func fresh<G: RandomNumberGenerator>(using rng: inout G) -> FailoverLog {
        FailoverLog(entries: [Entry(uuid: randomUUID(&rng), seqno: .zero)])
    }

    var current: VBucketUUID { entries[0].uuid }

    /// Starts a new history at `seqno`, dropping the oldest entries beyond `Limits.maxFailoverEntries`.
    mutating func branch<G: RandomNumberGenerator>(at seqno: SeqNo, using rng: inout G) {
        var uuid = Self.randomUUID(&rng)
        while entries.contains(where: { $0.uuid == uuid }) { uuid = Self.randomUUID(&rng) }
        entries.insert(Entry(uuid: uuid, seqno: seqno), at: 0)
        if entries.count > Limits.maxFailoverEntries { entries.removeLast(entries.count - Limits.maxFailoverEntries) }
    }

    private static func randomUUID<G: RandomNumberGenerator>(_ rng: inout G) -> VBucketUUID {
        // 0 means "no history" on the wire (DCP stream request); never hand it out.
        var v: UInt64 = 0
        while v == 0 { v = rng.next() }
        return VBucketUUID(v)
    }

    /// Disk form: 16 bytes per entry, uuid then seqno, little-endian, newest first.
    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * 16)
        for e in entries {
            for v in [e.uuid.rawValue, e.seqno.rawValue] {
                for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
            }
        }
        return out
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) -> FailoverLog? {
        guard bytes.count >= 16, bytes.count % 16 == 0 else { return nil }
        var entries: [Entry] = []
        var off = 0
        func u64(_ at: Int) -> UInt64 {
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(bytes[at + i]) << (8 * UInt64(i)) }
            return v
        }
        while off < bytes.count {
            entries.append(Entry(uuid: VBucketUUID(u64(off)), seqno: SeqNo(u64(off + 8))))
            off += 16
        }
        return FailoverLog(entries: entries)
    }
}
