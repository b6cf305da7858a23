import NIOCore
import SetteeCore
import SetteeProtocol
import Testing

/// The one decoder of a producer's DCP messages (replica consumers and client change streams), without sockets:
/// what the producer's writers produce decodes to the fields written, and truncated, oversized or garbage frames
/// come out as typed errors, never a trap.
@Suite struct DCPMessageTests {
    static let maxKey = Limits.maxKeyLength

    /// Decodes every frame in `bytes` (which must hold whole frames only).
    static func messages(_ bytes: ByteBuffer) throws -> [DCPMessage] {
        var b = bytes
        var out: [DCPMessage] = []
        while let (_, m) = try DCPMessage.decode(&b, maxBodyLength: 1 << 20, maxKeyLength: maxKey) { out.append(m) }
        #expect(b.readableBytes == 0)
        return out
    }

    /// A frame built field by field, for shapes the producer's writers never make.
    static func frame(
        _ opcode: Opcode, magic: Magic = .clientRequest, extras: [UInt8] = [], key: [UInt8] = [], value: [UInt8] = []
    ) -> Frame {
        Frame(
            magic: magic, opcode: opcode, opaque: 7, extras: ByteBuffer(bytes: extras), key: ByteBuffer(bytes: key),
            value: ByteBuffer(bytes: value))
    }

    /// Proves every message the producer writes decodes to what was written: marker bounds and memory flag,
    /// mutation seqnos/flags/expiry/CAS/datatype/key/value, deletion and expiration with a tombstone's XATTR
    /// value, a durable deletion's prepare with its level, the stream end's flag and NOOP.
    /// Proves the Settee consumer's 28-byte marker (ADR 0095) carries the purge seqno after the flags, and a plain
    /// marker decodes with purge seqno 0.
    @Test func markerWithPurgeSeqnoRoundTrips() throws {
        var b = ByteBuffer()
        b.writeDCPSnapshotMarker(opaque: 9, vbucket: 3, start: 1, end: 80, flags: DCPSnapshotFlags.disk, purgeSeqno: 42)
        b.writeDCPSnapshotMarker(opaque: 9, vbucket: 3, start: 81, end: 90, flags: DCPSnapshotFlags.memory)
        let m = try Self.messages(b)
        #expect(
            m == [
                .snapshotMarker(DCPSnapshotMarker(start: 1, end: 80, flags: DCPSnapshotFlags.disk, purgeSeqno: 42)),
                .snapshotMarker(DCPSnapshotMarker(start: 81, end: 90, flags: DCPSnapshotFlags.memory)),
            ])
    }

    @Test func producerMessagesRoundTrip() throws {
        var b = ByteBuffer()
        b.writeDCPSnapshotMarker(opaque: 9, vbucket: 3, start: 5, end: 8, flags: DCPSnapshotFlags.memory)
        b.writeDCPMutation(
            opaque: 9, vbucket: 3, key: Array("k".utf8), value: [1, 2], cas: 77, datatype: 1, bySeqno: 6, revSeqno: 2,
            flags: 0xdead_beef, expiry: 100)
        b.writeDCPDeletion(
            opaque: 9, vbucket: 3, key: Array("d".utf8), cas: 78, bySeqno: 7, revSeqno: 3, value: [0, 0, 0, 0],
            datatype: 4)
        b.writeDCPDeletion(
            .dcpExpiration, opaque: 9, vbucket: 3, key: Array("e".utf8), cas: 79, bySeqno: 8, revSeqno: 4)
        b.writeDCPPrepare(
            opaque: 9, vbucket: 3, key: Array("p".utf8), value: [], cas: 80, datatype: 0, bySeqno: 9, revSeqno: 5,
            flags: 1, expiry: 2, deleted: true, level: 3)
        b.writeDCPStreamEnd(opaque: 9, vbucket: 3, flag: .stateChanged)
        b.writeDCPNoop(opaque: 1)

        let m = try Self.messages(b)
        #expect(m.count == 7)
        #expect(m[0] == .snapshotMarker(DCPSnapshotMarker(start: 5, end: 8, flags: DCPSnapshotFlags.memory)))
        guard case .snapshotMarker(let marker) = m[0] else { throw DCPTestError("not a marker") }
        #expect(marker.isMemory)
        #expect(
            m[1]
                == .change(
                    DCPChange(
                        kind: .mutation, bySeqno: 6, revSeqno: 2, flags: 0xdead_beef, expiry: 100, cas: 77, datatype: 1,
                        key: ByteBuffer(string: "k"), value: ByteBuffer(bytes: [1, 2]))))
        #expect(
            m[2]
                == .change(
                    DCPChange(
                        kind: .deletion, bySeqno: 7, revSeqno: 3, cas: 78, datatype: 4, key: ByteBuffer(string: "d"),
                        value: ByteBuffer(bytes: [0, 0, 0, 0]))))
        guard case .change(let expiration) = m[3] else { throw DCPTestError("not a change") }
        #expect(expiration.kind == .expiration && expiration.bySeqno == 8 && expiration.value.readableBytes == 0)
        guard case .change(let prepare) = m[4] else { throw DCPTestError("not a change") }
        #expect(prepare.kind == .prepare(deleted: true, level: 3) && prepare.flags == 1 && prepare.expiry == 2)
        #expect(m[5] == .streamEnd(rawFlag: DCPStreamEndFlag.stateChanged.rawValue))
        #expect(m[6] == .noop)
    }

    /// Proves the messages no writer here makes decode from kv_engine's layouts: SET_VBUCKET_STATE, SEQNO_ADVANCED,
    /// SYSTEM_EVENT, a v2 deletion's 21 extras bytes, and an opcode the decoder does not read (`.other`).
    @Test func otherProducerMessages() throws {
        #expect(
            try DCPMessage(Self.frame(.dcpSetVBucketState, extras: [2]), maxKeyLength: 250)
                == .setVBucketState(.replica))
        #expect(
            try DCPMessage(Self.frame(.dcpSeqnoAdvanced, extras: [0, 0, 0, 0, 0, 0, 1, 0]), maxKeyLength: 250)
                == .seqnoAdvanced(256))
        let event = try DCPMessage(
            Self.frame(.dcpSystemEvent, extras: [0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 2], key: [0x61], value: [1]),
            maxKeyLength: 250)
        guard case .systemEvent(let e) = event else { throw DCPTestError("not a system event") }
        #expect(e.bySeqno == 9 && e.event == 1 && e.version == 2 && e.key == ByteBuffer(bytes: [0x61]))
        let v2 = try DCPMessage(
            Self.frame(.dcpDeletion, extras: Array(repeating: 1, count: 21), key: [0x6b]), maxKeyLength: 250)
        guard case .change(let deletion) = v2 else { throw DCPTestError("not a change") }
        #expect(deletion.kind == .deletion && deletion.bySeqno == 0x0101_0101_0101_0101)
        #expect(try DCPMessage(Self.frame(Opcode(0x5a), extras: [1, 2, 3]), maxKeyLength: 250) == .other(Opcode(0x5a)))
    }

    /// Proves each wrong length is refused with the error naming it: extras one byte short or long of each fixed
    /// layout, a change without a key or with one over the limit, a marker or stream end carrying a key or value.
    @Test(arguments: [
        (Opcode.dcpSnapshotMarker, 19, 0, 0, DCPMessageError.extrasLength(.dcpSnapshotMarker, 19)),
        (Opcode.dcpSnapshotMarker, 21, 0, 0, DCPMessageError.extrasLength(.dcpSnapshotMarker, 21)),
        (Opcode.dcpSnapshotMarker, 27, 0, 0, DCPMessageError.extrasLength(.dcpSnapshotMarker, 27)),
        (Opcode.dcpSnapshotMarker, 29, 0, 0, DCPMessageError.extrasLength(.dcpSnapshotMarker, 29)),
        (Opcode.dcpSnapshotMarker, 28, 0, 2, DCPMessageError.valueLength(.dcpSnapshotMarker, 2)),
        (Opcode.dcpSnapshotMarker, 20, 1, 0, DCPMessageError.keyLength(.dcpSnapshotMarker, 1)),
        (Opcode.dcpSnapshotMarker, 20, 0, 3, DCPMessageError.valueLength(.dcpSnapshotMarker, 3)),
        (Opcode.dcpMutation, 30, 1, 0, DCPMessageError.extrasLength(.dcpMutation, 30)),
        (Opcode.dcpMutation, 31, 0, 5, DCPMessageError.keyLength(.dcpMutation, 0)),
        (Opcode.dcpMutation, 31, 251, 0, DCPMessageError.keyLength(.dcpMutation, 251)),
        (Opcode.dcpPrepare, 30, 1, 0, DCPMessageError.extrasLength(.dcpPrepare, 30)),
        (Opcode.dcpDeletion, 15, 1, 0, DCPMessageError.extrasLength(.dcpDeletion, 15)),
        (Opcode.dcpExpiration, 0, 1, 0, DCPMessageError.extrasLength(.dcpExpiration, 0)),
        (Opcode.dcpStreamEnd, 0, 0, 0, DCPMessageError.extrasLength(.dcpStreamEnd, 0)),
        (Opcode.dcpStreamEnd, 4, 0, 1, DCPMessageError.valueLength(.dcpStreamEnd, 1)),
        (Opcode.dcpNoop, 1, 0, 0, DCPMessageError.extrasLength(.dcpNoop, 1)),
        (Opcode.dcpSetVBucketState, 2, 0, 0, DCPMessageError.extrasLength(.dcpSetVBucketState, 2)),
        (Opcode.dcpSeqnoAdvanced, 7, 0, 0, DCPMessageError.extrasLength(.dcpSeqnoAdvanced, 7)),
        (Opcode.dcpSystemEvent, 12, 0, 0, DCPMessageError.extrasLength(.dcpSystemEvent, 12)),
    ])
    func wrongLengthsAreTypedErrors(opcode: Opcode, extras: Int, key: Int, value: Int, error: DCPMessageError) {
        let frame = Self.frame(
            opcode, extras: Array(repeating: 0, count: extras), key: Array(repeating: 0x6b, count: key),
            value: Array(repeating: 0, count: value))
        #expect(throws: error) { try DCPMessage(frame, maxKeyLength: Self.maxKey) }
    }

    /// Proves field values outside their range and frames that are not producer requests are refused: a vBucket
    /// state of 0 or 5, a prepare's `deleted` byte of 2, a response frame.
    @Test func outOfRangeFieldsAndResponses() {
        #expect(throws: DCPMessageError.invalidField(.dcpSetVBucketState, "state 0")) {
            try DCPMessage(Self.frame(.dcpSetVBucketState, extras: [0]), maxKeyLength: 250)
        }
        #expect(throws: DCPMessageError.invalidField(.dcpSetVBucketState, "state 5")) {
            try DCPMessage(Self.frame(.dcpSetVBucketState, extras: [5]), maxKeyLength: 250)
        }
        var prepare = Array(repeating: UInt8(0), count: DCPExtras.prepareLength)
        prepare[29] = 2
        #expect(throws: DCPMessageError.invalidField(.dcpPrepare, "deleted 2")) {
            try DCPMessage(Self.frame(.dcpPrepare, extras: prepare, key: [0x6b]), maxKeyLength: 250)
        }
        #expect(throws: DCPMessageError.notARequest(0x81)) {
            try DCPMessage(Self.frame(.dcpMutation, magic: .clientResponse), maxKeyLength: 250)
        }
    }

    /// Proves a byte stream decodes frame by frame: a truncated frame is "not yet" (nil, nothing consumed) at every
    /// cut, a garbage first byte and an oversized body are `.frame` errors.
    @Test func truncatedAndGarbageStreams() throws {
        var whole = ByteBuffer()
        whole.writeDCPMutation(
            opaque: 1, vbucket: 0, key: Array("key".utf8), value: Array(repeating: 7, count: 40), cas: 1, datatype: 0,
            bySeqno: 1, revSeqno: 1, flags: 0, expiry: 0)
        for cut in 0..<whole.readableBytes {
            var part = whole.getSlice(at: 0, length: cut) ?? ByteBuffer()
            #expect(try DCPMessage.decode(&part, maxBodyLength: 1 << 20, maxKeyLength: Self.maxKey) == nil)
            #expect(part.readableBytes == cut)
        }
        var garbage = ByteBuffer(bytes: [0x42] + Array(repeating: 0, count: 30))
        #expect(throws: DCPMessageError.frame(.unknownMagic(0x42))) {
            try DCPMessage.decode(&garbage, maxBodyLength: 1 << 20, maxKeyLength: Self.maxKey)
        }
        var big = whole
        let error = #expect(throws: DCPMessageError.self) {
            try DCPMessage.decode(&big, maxBodyLength: 10, maxKeyLength: Self.maxKey)
        }
        guard case .frame(.bodyTooLarge)? = error else {
            Issue.record("an oversized body is \(String(describing: error))")
            return
        }
    }

    /// Proves random frames never trap: 20,000 seeded frames with random opcodes among the DCP ones and random
    /// section lengths decode or throw.
    @Test func randomFramesNeverTrap() {
        var rng = SplitMix64(seed: 0x5e77ee)
        let opcodes: [Opcode] = [
            .dcpSnapshotMarker, .dcpMutation, .dcpDeletion, .dcpExpiration, .dcpPrepare, .dcpStreamEnd, .dcpNoop,
            .dcpSetVBucketState, .dcpSeqnoAdvanced, .dcpSystemEvent, Opcode(0x5a),
        ]
        var decoded = 0
        for _ in 0..<20_000 {
            let op = opcodes[Int(rng.next() % UInt64(opcodes.count))]
            let bytes = { (n: Int) in (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
            let frame = Self.frame(
                op, extras: bytes(Int(rng.next() % 40)), key: bytes(Int(rng.next() % 4)),
                value: bytes(Int(rng.next() % 4)))
            if (try? DCPMessage(frame, maxKeyLength: Self.maxKey)) != nil { decoded += 1 }
        }
        #expect(decoded > 0)
    }
}

struct DCPTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
