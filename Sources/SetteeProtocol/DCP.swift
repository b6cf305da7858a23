import NIOCore

// DCP (change streams on the wire), after kv_engine's docs/dcp/ and docs/BinaryProtocol.md. Producer →
// consumer messages travel as requests (magic 0x80) on the connection the consumer opened; the consumer
// answers NOOP and SET_VBUCKET_STATE, and acknowledges bytes with BUFFER_ACKNOWLEDGEMENT.

extension Opcode {
    public static let setVBucket = Opcode(0x3d)
    public static let getVBucket = Opcode(0x3e)
    public static let dcpOpen = Opcode(0x50)
    public static let dcpAddStream = Opcode(0x51)
    public static let dcpCloseStream = Opcode(0x52)
    public static let dcpStreamRequest = Opcode(0x53)
    public static let dcpGetFailoverLog = Opcode(0x54)
    public static let dcpStreamEnd = Opcode(0x55)
    public static let dcpSnapshotMarker = Opcode(0x56)
    public static let dcpMutation = Opcode(0x57)
    public static let dcpDeletion = Opcode(0x58)
    public static let dcpExpiration = Opcode(0x59)
    /// A durable write not committed yet (sync replication); the producer sends it to replicas only.
    public static let dcpPrepare = Opcode(0x60)
    public static let dcpSetVBucketState = Opcode(0x5b)
    public static let dcpNoop = Opcode(0x5c)
    public static let dcpBufferAcknowledgement = Opcode(0x5d)
    public static let dcpControl = Opcode(0x5e)
    public static let dcpSeqnoAcknowledged = Opcode(0x6a)
    public static let getReplica = Opcode(0x83)
}

extension Status {
    /// DCP stream request: the consumer must roll back to the 8-byte seqno in the value.
    public static let rollback = Status(0x23)
}

/// DCP_OPEN flags (extras bytes 4-7).
public enum DCPOpenFlags {
    public static let producer: UInt32 = 0x01
    /// INCLUDE_XATTRS: mutations carry their XATTR section (datatype bit 0x04) and deletions the XATTRs their
    /// tombstone kept; without it a consumer gets bodies only.
    public static let includeXattrs: UInt32 = 0x04
}

/// DCP_CONTROL keys this server's consumers send beyond kv_engine's own.
public enum DCPControlKey {
    public static let connectionBufferSize = "connection_buffer_size"
    /// A replica asks whether DCP_PREPARE's level byte is the prepare's real durability level (ADR 0073). A producer
    /// that sends real levels answers SUCCESS with the value `DCPControlKey.yes`; Settee producers before it wrote
    /// level 1 for every prepare and answer every control with an empty SUCCESS, so a consumer that hears no `yes`
    /// treats every prepare as persistToMajority (it waits for its disk before acknowledging, as before). Not
    /// kv_engine's `enable_sync_writes`: our producers always accepted that key without meaning it.
    public static let prepareLevels = "settee_prepare_levels"
    /// A replica asks for snapshot markers that carry the producer's purge seqno (ADR 0095): a producer that will
    /// send them answers SUCCESS with `DCPControlKey.yes`, and then marks each snapshot whose range holds purged
    /// tombstones with a 28-byte marker (`writeDCPSnapshotMarker(purgeSeqno:)`), so a copy filled from 0 knows the
    /// deletions it can never have been sent. Only Settee consumers ask; no one else ever gets such a marker.
    public static let purgeSeqnoMarkers = "settee_purge_seqno_markers"
    public static let yes = "true"
}

/// SNAPSHOT_MARKER flags.
public enum DCPSnapshotFlags {
    public static let memory: UInt32 = 0x01
    public static let disk: UInt32 = 0x02
    public static let checkpoint: UInt32 = 0x04
    public static let ack: UInt32 = 0x08
}

/// STREAM_END flags (why the stream ended).
public enum DCPStreamEndFlag: UInt32, Sendable {
    case ok = 0
    case closed = 1
    case stateChanged = 2
    case disconnected = 3
    case tooSlow = 4
    /// The consumer's position fell below the vBucket's purge seqno while it streamed (ADR 0095): asked again, it
    /// is told to roll back to 0 (kv_engine's `DcpStreamEndStatus::Rollback`).
    case rollback = 6
    /// Every collection a collection-filtered stream asked for was dropped (kv_engine's
    /// `DcpStreamEndStatus::FilterEmpty`, ADR 0138).
    case filterEmpty = 7
}

/// vBucket states as DCP and SET_VBUCKET encode them.
public enum DCPVBucketState: UInt8, Sendable {
    case active = 1, replica = 2, pending = 3, dead = 4
}

/// The fixed extras of the DCP messages this server speaks, decoded from a frame's extras slice.
public enum DCPExtras {
    /// STREAM_REQ: flags, reserved, start, end, vBucket uuid, snapshot start, snapshot end (48 bytes).
    public struct StreamRequest: Sendable, Equatable {
        public var flags: UInt32
        public var start: UInt64
        public var end: UInt64
        public var uuid: UInt64
        public var snapStart: UInt64
        public var snapEnd: UInt64
        public init(flags: UInt32 = 0, start: UInt64, end: UInt64, uuid: UInt64, snapStart: UInt64, snapEnd: UInt64) {
            self.flags = flags
            self.start = start
            self.end = end
            self.uuid = uuid
            self.snapStart = snapStart
            self.snapEnd = snapEnd
        }
        public static let length = 48

        public init?(_ b: ByteBuffer) {
            guard b.readableBytes == Self.length else { return nil }
            var r = b
            guard
                let (flags, _, start, end, uuid, snapStart, snapEnd) = r.readMultipleIntegers(
                    as: (UInt32, UInt32, UInt64, UInt64, UInt64, UInt64, UInt64).self)
            else { return nil }
            self.init(flags: flags, start: start, end: end, uuid: uuid, snapStart: snapStart, snapEnd: snapEnd)
        }

        public func write(to b: inout ByteBuffer) {
            b.writeInteger(flags)
            b.writeInteger(UInt32(0))
            b.writeInteger(start)
            b.writeInteger(end)
            b.writeInteger(uuid)
            b.writeInteger(snapStart)
            b.writeInteger(snapEnd)
        }
    }

    /// MUTATION: by seqno, rev seqno, flags, expiration, lock time, nmeta, nru (31 bytes).
    public static let mutationLength = 31
    /// DELETION / EXPIRATION (no delete times): by seqno, rev seqno, nmeta (18 bytes).
    public static let deletionLength = 18
    /// PREPARE: by seqno, rev seqno, flags, expiration, lock time, nru, deleted, durability level (31 bytes).
    public static let prepareLength = 31
    /// SNAPSHOT_MARKER: start, end, flags (20 bytes).
    public static let snapshotMarkerLength = 20
    /// A marker with the producer's purge seqno after the flags (`DCPControlKey.purgeSeqnoMarkers`).
    public static let snapshotMarkerWithPurgeLength = 28
}

/// Writers of the producer's messages. `opaque` is the stream's (the consumer's STREAM_REQ opaque).
extension ByteBuffer {
    @inlinable
    public mutating func writeDCPSnapshotMarker(
        opaque: UInt32, vbucket: UInt16, start: UInt64, end: UInt64, flags: UInt32, purgeSeqno: UInt64? = nil
    ) {
        writeDCPHeader(
            .dcpSnapshotMarker, opaque: opaque, vbucket: vbucket,
            extras: purgeSeqno == nil ? DCPExtras.snapshotMarkerLength : DCPExtras.snapshotMarkerWithPurgeLength,
            key: 0, value: 0)
        writeInteger(start)
        writeInteger(end)
        writeInteger(flags)
        if let purgeSeqno { writeInteger(purgeSeqno) }
    }

    @inlinable
    public mutating func writeDCPMutation(
        opaque: UInt32, vbucket: UInt16, key: [UInt8], value: [UInt8], cas: UInt64, datatype: UInt8, bySeqno: UInt64,
        revSeqno: UInt64, flags: UInt32, expiry: UInt32
    ) {
        writeDCPHeader(
            .dcpMutation, opaque: opaque, vbucket: vbucket, cas: cas, datatype: datatype,
            extras: DCPExtras.mutationLength, key: key.count, value: value.count)
        writeInteger(bySeqno)
        writeInteger(revSeqno)
        writeInteger(flags)
        writeInteger(expiry)
        writeInteger(UInt32(0))  // lock time
        writeInteger(UInt16(0))  // nmeta
        writeInteger(UInt8(0))  // nru
        writeBytes(key)
        writeBytes(value)
    }

    /// SYSTEM_EVENT (0x5f): a collection or scope change at `bySeqno` in the vBucket (kv_engine
    /// `docs/dcp/documentation/commands/system_event.md`): extras by seqno (u64), event (u32), version (u8); the key
    /// and value as the event defines them. No reply.
    @inlinable
    public mutating func writeDCPSystemEvent(
        opaque: UInt32, vbucket: UInt16, bySeqno: UInt64, event: UInt32, version: UInt8, key: [UInt8], value: [UInt8]
    ) {
        writeDCPHeader(
            .dcpSystemEvent, opaque: opaque, vbucket: vbucket, extras: DCPExtras.systemEventLength, key: key.count,
            value: value.count)
        writeInteger(bySeqno)
        writeInteger(event)
        writeInteger(version)
        writeBytes(key)
        writeBytes(value)
    }

    /// PREPARE: a durable write (or durable deletion, `deleted`) the consumer holds without exposing it until
    /// the commit (a later MUTATION / DELETION of the key) arrives.
    @inlinable
    public mutating func writeDCPPrepare(
        opaque: UInt32, vbucket: UInt16, key: [UInt8], value: [UInt8], cas: UInt64, datatype: UInt8, bySeqno: UInt64,
        revSeqno: UInt64, flags: UInt32, expiry: UInt32, deleted: Bool, level: UInt8
    ) {
        writeDCPHeader(
            .dcpPrepare, opaque: opaque, vbucket: vbucket, cas: cas, datatype: datatype,
            extras: DCPExtras.prepareLength, key: key.count, value: value.count)
        writeInteger(bySeqno)
        writeInteger(revSeqno)
        writeInteger(flags)
        writeInteger(expiry)
        writeInteger(UInt32(0))  // lock time
        writeInteger(UInt8(0))  // nru
        writeInteger(UInt8(deleted ? 1 : 0))
        writeInteger(level)
        writeBytes(key)
        writeBytes(value)
    }

    /// DELETION (or EXPIRATION with `opcode: .dcpExpiration`). `value` is the XATTR section the tombstone kept
    /// (datatype 0x04), for a stream opened with INCLUDE_XATTRS; empty otherwise.
    @inlinable
    public mutating func writeDCPDeletion(
        _ opcode: Opcode = .dcpDeletion, opaque: UInt32, vbucket: UInt16, key: [UInt8], cas: UInt64, bySeqno: UInt64,
        revSeqno: UInt64, value: [UInt8] = [], datatype: UInt8 = 0
    ) {
        writeDCPHeader(
            opcode, opaque: opaque, vbucket: vbucket, cas: cas, datatype: datatype, extras: DCPExtras.deletionLength,
            key: key.count, value: value.count)
        writeInteger(bySeqno)
        writeInteger(revSeqno)
        writeInteger(UInt16(0))
        writeBytes(key)
        writeBytes(value)
    }

    @inlinable
    /// SEQNO_ADVANCED (0x64, kv_engine `docs/dcp/documentation/commands/seqno-advanced.md`): the vBucket's seqno
    /// reached `seqno` through records this stream does not receive (another collection's); extras: the seqno, u64.
    /// Sent to collection-aware consumers only (HELLO Collections).
    public mutating func writeDCPSeqnoAdvanced(opaque: UInt32, vbucket: UInt16, seqno: UInt64) {
        writeDCPHeader(.dcpSeqnoAdvanced, opaque: opaque, vbucket: vbucket, extras: 8, key: 0, value: 0)
        writeInteger(seqno)
    }

    public mutating func writeDCPStreamEnd(opaque: UInt32, vbucket: UInt16, flag: DCPStreamEndFlag) {
        writeDCPHeader(.dcpStreamEnd, opaque: opaque, vbucket: vbucket, extras: 4, key: 0, value: 0)
        writeInteger(flag.rawValue)
    }

    @inlinable
    public mutating func writeDCPNoop(opaque: UInt32) {
        writeDCPHeader(.dcpNoop, opaque: opaque, vbucket: 0, extras: 0, key: 0, value: 0)
    }

    /// A failover log as STREAM_REQ and GET_FAILOVER_LOG responses carry it: (uuid, seqno) big-endian
    /// pairs, newest first.
    @inlinable
    public mutating func writeDCPFailoverLog(_ entries: [(uuid: UInt64, seqno: UInt64)]) {
        for e in entries {
            writeInteger(e.uuid)
            writeInteger(e.seqno)
        }
    }

    @inlinable
    mutating func writeDCPHeader(
        _ opcode: Opcode, opaque: UInt32, vbucket: UInt16, cas: UInt64 = 0, datatype: UInt8 = 0, extras: Int,
        key: Int, value: Int
    ) {
        writeInteger(Magic.clientRequest.rawValue)
        writeInteger(opcode.rawValue)
        writeInteger(UInt16(key))
        writeInteger(UInt8(extras))
        writeInteger(datatype)
        writeInteger(vbucket)
        writeInteger(UInt32(extras + key + value))
        writeInteger(opaque)
        writeInteger(cas)
    }
}

/// Reads a failover log from a STREAM_REQ / GET_FAILOVER_LOG response value; nil when malformed.
public func readDCPFailoverLog(_ value: ByteBuffer) -> [(uuid: UInt64, seqno: UInt64)]? {
    guard value.readableBytes > 0, value.readableBytes % 16 == 0 else { return nil }
    var out: [(uuid: UInt64, seqno: UInt64)] = []
    var r = value
    while let (uuid, seqno) = r.readMultipleIntegers(as: (UInt64, UInt64).self) {
        out.append((uuid, seqno))
    }
    return out
}
