import NIOCore

/// A message a DCP producer sends on a consumer's connection (a request frame, magic 0x80), decoded and checked:
/// the one decoder behind a replica's `ConsumerConnection` (SetteeNode) and the smart client's change streams
/// (SetteeClient). Pure: a frame in, a typed message or a typed `DCPMessageError` out; every section length is
/// checked before a field is read and no field read can trap, whatever the producer sent.
///
/// Layouts (kv_engine's docs/dcp/, all integers big-endian):
///
///     SNAPSHOT_MARKER  extras 20: start u64, end u64, flags u32; no key, no value; or extras 28, the same then the
///                      producer's purge seqno u64 (a Settee consumer's `DCPControlKey.purgeSeqnoMarkers`)
///     MUTATION         extras ≥31: by seqno u64, rev seqno u64, flags u32, expiry u32, lock time u32, nmeta u16,
///                      nru u8; key; value (body, or XATTR section + body with datatype 0x04)
///     DELETION         extras ≥16: by seqno u64, rev seqno u64, then nmeta u16 (v1) or delete time (v2); key;
///                      value: the XATTRs the tombstone kept (datatype 0x04), usually empty
///     EXPIRATION       as DELETION
///     PREPARE          extras ≥31: by seqno, rev seqno, flags, expiry, lock time, nru u8, deleted u8, level u8
///     STREAM_END       extras 4: flag u32 (`DCPStreamEndFlag`, unknown values kept raw)
///     SET_VBUCKET_STATE extras 1: state u8 (1...4)
///     SEQNO_ADVANCED   extras 8: seqno u64
///     SYSTEM_EVENT     extras 13: by seqno u64, event u32, version u8; key; value
///     NOOP             nothing
///
/// Anything else a producer may send is `.other(opcode)`: a consumer ignores what it did not ask for.
public enum DCPMessage: Sendable, Equatable {
    case snapshotMarker(DCPSnapshotMarker)
    /// MUTATION, DELETION, EXPIRATION or PREPARE.
    case change(DCPChange)
    /// The stream ended; `rawFlag` is `DCPStreamEndFlag`'s raw value (a newer producer may send others).
    case streamEnd(rawFlag: UInt32)
    case noop
    case setVBucketState(DCPVBucketState)
    /// The vBucket's seqno moved past changes this stream does not carry.
    case seqnoAdvanced(UInt64)
    case systemEvent(DCPSystemEvent)
    /// A request this decoder does not read (the consumer ignores it).
    case other(Opcode)

    /// Decodes `frame`, a request from the producer. `maxKeyLength` bounds a change's key (`Limits.maxKeyLength`).
    public init(_ frame: Frame, maxKeyLength: Int) throws(DCPMessageError) {
        guard frame.magic == .clientRequest || frame.magic == .altClientRequest else {
            throw .notARequest(frame.magic.rawValue)
        }
        var fields = Fields(opcode: frame.opcode, extras: frame.extras)
        switch frame.opcode {
        case .dcpSnapshotMarker:
            let withPurge = frame.extras.readableBytes == DCPExtras.snapshotMarkerWithPurgeLength
            try fields.expect(
                extras: withPurge ? DCPExtras.snapshotMarkerWithPurgeLength : DCPExtras.snapshotMarkerLength,
                key: frame.key, value: frame.value)
            let (start, end, flags) = (try fields.u64(), try fields.u64(), try fields.u32())
            let purge = withPurge ? try fields.u64() : 0
            self = .snapshotMarker(DCPSnapshotMarker(start: start, end: end, flags: flags, purgeSeqno: purge))
        case .dcpMutation, .dcpDeletion, .dcpExpiration, .dcpPrepare:
            self = .change(try DCPChange(frame, fields: &fields, maxKeyLength: maxKeyLength))
        case .dcpStreamEnd:
            try fields.expect(extras: 4, key: frame.key, value: frame.value)
            self = .streamEnd(rawFlag: try fields.u32())
        case .dcpNoop:
            try fields.expect(extras: 0, key: frame.key, value: frame.value)
            self = .noop
        case .dcpSetVBucketState:
            try fields.expect(extras: 1, key: frame.key, value: frame.value)
            let raw = try fields.u8()
            guard let state = DCPVBucketState(rawValue: raw) else { throw .invalidField(frame.opcode, "state \(raw)") }
            self = .setVBucketState(state)
        case .dcpSeqnoAdvanced:
            try fields.expect(extras: 8, key: frame.key, value: frame.value)
            self = .seqnoAdvanced(try fields.u64())
        case .dcpSystemEvent:
            try fields.expect(extras: DCPExtras.systemEventLength)
            self = .systemEvent(
                DCPSystemEvent(
                    bySeqno: try fields.u64(), event: try fields.u32(), version: try fields.u8(), key: frame.key,
                    value: frame.value))
        default:
            self = .other(frame.opcode)
        }
    }

    /// Decodes the next whole frame in `buffer` as a producer's message (consuming it); nil when no whole frame is
    /// buffered yet. The frame decoder's errors (bad magic, inconsistent or oversized lengths) come out as
    /// `.frame`. A response frame is `.notARequest`: a consumer reads those itself (handshake, stream answers).
    public static func decode(
        _ buffer: inout ByteBuffer, maxBodyLength: Int, maxKeyLength: Int
    ) throws(DCPMessageError) -> (frame: Frame, message: DCPMessage)? {
        let frame: Frame?
        do { frame = try FrameDecoder.decode(&buffer, maxBodyLength: maxBodyLength) } catch { throw .frame(error) }
        guard let frame else { return nil }
        return (frame, try DCPMessage(frame, maxKeyLength: maxKeyLength))
    }
}

/// Why a producer's frame is not a DCP message this consumer can act on. The stream cannot be trusted after one
/// (a change skipped would be a change lost): the consumer drops the connection and resumes its streams from the
/// last whole snapshot.
public enum DCPMessageError: Error, Sendable, Equatable {
    /// The byte stream is not a sequence of frames.
    case frame(FrameDecodingError)
    /// A response (or server request) where a producer's message was expected; its magic.
    case notARequest(UInt8)
    /// The extras section has the wrong length for the opcode: (opcode, length sent).
    case extrasLength(Opcode, Int)
    /// The key is empty where one is required, longer than the limit, or present where none belongs.
    case keyLength(Opcode, Int)
    /// A value where none belongs: (opcode, length sent).
    case valueLength(Opcode, Int)
    /// A field outside its range.
    case invalidField(Opcode, String)
}

/// SNAPSHOT_MARKER: the items that follow, up to the next marker, have seqnos in `[start, end]`.
public struct DCPSnapshotMarker: Sendable, Equatable {
    public var start: UInt64
    public var end: UInt64
    /// `DCPSnapshotFlags` bits.
    public var flags: UInt32
    /// The producer's purge seqno (28-byte markers only, ADR 0095): tombstones at or below it may be missing from
    /// the snapshot. 0 in a plain marker.
    public var purgeSeqno: UInt64
    public init(start: UInt64, end: UInt64, flags: UInt32, purgeSeqno: UInt64 = 0) {
        self.start = start
        self.end = end
        self.flags = flags
        self.purgeSeqno = purgeSeqno
    }
    /// Whether the producer read the snapshot from memory (else from disk: a backfill).
    public var isMemory: Bool { flags & DCPSnapshotFlags.memory != 0 }
}

/// One document change: MUTATION, DELETION, EXPIRATION or PREPARE. `key` and `value` are slices of the frame.
public struct DCPChange: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case mutation
        case deletion
        case expiration
        /// A durable write not committed yet (`deleted`: a durable deletion); `level` is its durability level.
        case prepare(deleted: Bool, level: UInt8)
    }

    public var kind: Kind
    public var bySeqno: UInt64
    public var revSeqno: UInt64
    /// Zero for deletions and expirations.
    public var flags: UInt32
    /// Zero for deletions and expirations.
    public var expiry: UInt32
    public var cas: UInt64
    public var datatype: UInt8
    public var key: ByteBuffer
    /// The body (with its XATTR section when datatype has 0x04); a deletion's is the XATTRs its tombstone kept.
    public var value: ByteBuffer

    public init(
        kind: Kind, bySeqno: UInt64, revSeqno: UInt64, flags: UInt32 = 0, expiry: UInt32 = 0, cas: UInt64,
        datatype: UInt8, key: ByteBuffer, value: ByteBuffer
    ) {
        self.kind = kind
        self.bySeqno = bySeqno
        self.revSeqno = revSeqno
        self.flags = flags
        self.expiry = expiry
        self.cas = cas
        self.datatype = datatype
        self.key = key
        self.value = value
    }

    fileprivate init(_ frame: Frame, fields: inout DCPMessage.Fields, maxKeyLength: Int) throws(DCPMessageError) {
        let op = frame.opcode
        let keyLength = frame.key.readableBytes
        guard keyLength > 0, keyLength <= maxKeyLength else { throw .keyLength(op, keyLength) }
        let minimum: Int
        switch op {
        case .dcpMutation: minimum = DCPExtras.mutationLength
        case .dcpPrepare: minimum = DCPExtras.prepareLength
        default: minimum = DCPExtras.deletionMinimumLength
        }
        try fields.expect(atLeast: minimum)
        bySeqno = try fields.u64()
        revSeqno = try fields.u64()
        cas = frame.cas
        datatype = frame.datatype
        key = frame.key
        value = frame.value
        switch op {
        case .dcpMutation:
            kind = .mutation
            flags = try fields.u32()
            expiry = try fields.u32()
        case .dcpPrepare:
            flags = try fields.u32()
            expiry = try fields.u32()
            try fields.skip(5)  // lock time, nru
            let deleted = try fields.u8()
            guard deleted <= 1 else { throw .invalidField(op, "deleted \(deleted)") }
            kind = .prepare(deleted: deleted == 1, level: try fields.u8())
        default:
            kind = op == .dcpDeletion ? .deletion : .expiration
            flags = 0
            expiry = 0
        }
    }
}

/// SYSTEM_EVENT (collections): decoded so a consumer can skip it knowingly; Settee's producer sends none.
public struct DCPSystemEvent: Sendable, Equatable {
    public var bySeqno: UInt64
    public var event: UInt32
    public var version: UInt8
    public var key: ByteBuffer
    public var value: ByteBuffer
}

extension Opcode {
    public static let dcpSystemEvent = Opcode(0x5f)
    public static let dcpSeqnoAdvanced = Opcode(0x64)
}

extension DCPExtras {
    /// DELETION / EXPIRATION extras of every version start with by seqno and rev seqno (16 bytes).
    public static let deletionMinimumLength = 16
    /// SYSTEM_EVENT: by seqno, event, version (13 bytes).
    public static let systemEventLength = 13
}

extension DCPMessage {
    /// Reads a message's extras front to back; a read past the end is an error, never a trap.
    fileprivate struct Fields {
        let opcode: Opcode
        var extras: ByteBuffer

        mutating func expect(extras length: Int, key: ByteBuffer? = nil, value: ByteBuffer? = nil)
            throws(DCPMessageError)
        {
            guard extras.readableBytes == length else { throw .extrasLength(opcode, extras.readableBytes) }
            if let key, key.readableBytes != 0 { throw .keyLength(opcode, key.readableBytes) }
            if let value, value.readableBytes != 0 { throw .valueLength(opcode, value.readableBytes) }
        }

        mutating func expect(atLeast length: Int) throws(DCPMessageError) {
            guard extras.readableBytes >= length else { throw .extrasLength(opcode, extras.readableBytes) }
        }

        mutating func u64() throws(DCPMessageError) -> UInt64 { try read(UInt64.self) }
        mutating func u32() throws(DCPMessageError) -> UInt32 { try read(UInt32.self) }
        mutating func u8() throws(DCPMessageError) -> UInt8 { try read(UInt8.self) }

        mutating func skip(_ n: Int) throws(DCPMessageError) {
            guard extras.readSlice(length: n) != nil else { throw .extrasLength(opcode, extras.readableBytes) }
        }

        private mutating func read<T: FixedWidthInteger>(_: T.Type) throws(DCPMessageError) -> T {
            guard let v = extras.readInteger(as: T.self) else { throw .extrasLength(opcode, extras.readableBytes) }
            return v
        }
    }
}
