import NIOCore

/// The value of an OBSERVE_SEQNO (0x91) reply: how far one copy of a vBucket has persisted, under which history.
/// The one layout the node writes (SetteeNode's KV port) and the smart client reads (`ObservedSeqno`). Pure: no field
/// read can trap, whatever a peer sent.
///
/// Layout (kv_engine's `docs/BinaryProtocol.md`, OBSERVE_SEQNO; integers big-endian):
///
///     format u8 (0, or 1 when the uuid asked about is not the vBucket's current one), vbucket u16, vbucket uuid u64,
///     last persisted seqno u64, current seqno u64; format 1 then adds the old uuid u64 and its last seqno u64
public struct ObserveSeqnoReply: Sendable, Equatable {
    /// The history the asker named, when it is no longer the vBucket's current one (format 1).
    public struct FailedOver: Sendable, Equatable {
        public var oldUUID: UInt64
        /// The last seqno under `oldUUID`; 0 when the node does not keep it (the write may be lost).
        public var lastSeqno: UInt64

        public init(oldUUID: UInt64, lastSeqno: UInt64) {
            self.oldUUID = oldUUID
            self.lastSeqno = lastSeqno
        }
    }

    /// Bytes of a format-0 reply; format 1 adds `failedOverLength`.
    public static let length = 27
    public static let failedOverLength = 16

    public var vbucket: UInt16
    public var uuid: UInt64
    public var persistedSeqno: UInt64
    public var currentSeqno: UInt64
    /// Set in format 1.
    public var failedOver: FailedOver?

    public init(vbucket: UInt16, uuid: UInt64, persistedSeqno: UInt64, currentSeqno: UInt64, failedOver: FailedOver?) {
        self.vbucket = vbucket
        self.uuid = uuid
        self.persistedSeqno = persistedSeqno
        self.currentSeqno = currentSeqno
        self.failedOver = failedOver
    }

    /// The value's length in bytes.
    public var encodedLength: Int { Self.length + (failedOver == nil ? 0 : Self.failedOverLength) }

    /// Writes the value (not the frame header) into `buffer`.
    public func write(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(failedOver == nil ? 0 : 1))
        buffer.writeInteger(vbucket)
        buffer.writeInteger(uuid)
        buffer.writeInteger(persistedSeqno)
        buffer.writeInteger(currentSeqno)
        if let failedOver {
            buffer.writeInteger(failedOver.oldUUID)
            buffer.writeInteger(failedOver.lastSeqno)
        }
    }

    /// Decodes a reply's value; nil when it is shorter than its format needs or of an unknown format.
    public init?(decoding value: ByteBuffer) {
        var v = value
        guard let format = v.readInteger(as: UInt8.self), format <= 1,
            let vbucket = v.readInteger(as: UInt16.self), let uuid = v.readInteger(as: UInt64.self),
            let persisted = v.readInteger(as: UInt64.self), let current = v.readInteger(as: UInt64.self)
        else { return nil }
        var failedOver: FailedOver?
        if format == 1 {
            guard let old = v.readInteger(as: UInt64.self), let last = v.readInteger(as: UInt64.self) else {
                return nil
            }
            failedOver = FailedOver(oldUUID: old, lastSeqno: last)
        }
        self.init(
            vbucket: vbucket, uuid: uuid, persistedSeqno: persisted, currentSeqno: current, failedOver: failedOver)
    }
}
