import NIOCore

/// OBSERVE (0x92): the legacy way a client polls whether its writes are persisted and replicated (persistTo /
/// replicateTo in SDKs that predate mutation tokens, e.g. libcouchbase 2's durability polling). The request's value
/// lists keys, each with its own vBucket (the header's vBucket is not used); the reply gives each key's state on
/// this node's copy and its CAS. Pure: parsing never traps, whatever a client sent.
///
/// Layout (kv_engine's `docs/BinaryProtocol.md`, OBSERVE; integers big-endian):
///
///     request value:  repeated  vbucket u16, key length u16, key
///     reply value:    repeated  vbucket u16, key length u16, key, key state u8, cas u64
///
/// The reply header's CAS field holds the persist and replication time estimates (upper and lower 32 bits, in
/// milliseconds); Settee sends 0 for both, which clients read as "no estimate".
public enum Observe {
    /// A key's state on the observed copy.
    public enum KeyState: UInt8, Sendable, Equatable {
        /// In memory, not yet on disk.
        case notPersisted = 0x00
        /// In memory and on disk.
        case persisted = 0x01
        /// No such key, or its deletion is on disk.
        case notFound = 0x80
        /// Deleted, and the deletion is not on disk yet.
        case logicallyDeleted = 0x81
    }

    /// One key of a request.
    public struct Key: Sendable, Equatable {
        public var vbucket: UInt16
        public var key: [UInt8]

        public init(vbucket: UInt16, key: [UInt8]) {
            self.vbucket = vbucket
            self.key = key
        }
    }

    /// One key of a reply.
    public struct Answer: Sendable, Equatable {
        public var vbucket: UInt16
        public var key: [UInt8]
        public var state: KeyState
        public var cas: UInt64

        public init(vbucket: UInt16, key: [UInt8], state: KeyState, cas: UInt64) {
            self.vbucket = vbucket
            self.key = key
            self.state = state
            self.cas = cas
        }
    }

    /// Why a request's value was refused.
    public enum ParseError: Error, Equatable {
        /// An entry cut short, an empty key, or a key longer than allowed.
        case malformed
        /// More than `maxKeys` keys (`Limits.observeMaxKeys`).
        case tooManyKeys
    }

    /// The keys of a request's value, in order. At most `maxKeys` of them, each 1...`maxKeyLength` bytes.
    public static func parse(_ value: ByteBuffer, maxKeys: Int, maxKeyLength: Int) throws(ParseError) -> [Key] {
        var v = value
        var keys: [Key] = []
        if v.readableBytes == 0 { throw .malformed }
        while v.readableBytes > 0 {
            guard let vbucket = v.readInteger(as: UInt16.self), let length = v.readInteger(as: UInt16.self),
                length > 0, Int(length) <= maxKeyLength, let key = v.readBytes(length: Int(length))
            else { throw .malformed }
            if keys.count == maxKeys { throw .tooManyKeys }
            keys.append(Key(vbucket: vbucket, key: key))
        }
        return keys
    }

    /// A request's value for `keys` (clients and tests).
    public static func requestValue(_ keys: [Key]) -> [UInt8] {
        var b = ByteBuffer()
        for k in keys {
            b.writeInteger(k.vbucket)
            b.writeInteger(UInt16(truncatingIfNeeded: k.key.count))
            b.writeBytes(k.key)
        }
        return Array(b.readableBytesView)
    }

    /// The reply value's length in bytes.
    public static func encodedLength(_ answers: [Answer]) -> Int {
        answers.reduce(0) { $0 + 13 + $1.key.count }
    }

    /// Writes the reply value (not the frame header) into `buffer`.
    public static func write(_ answers: [Answer], into buffer: inout ByteBuffer) {
        for a in answers {
            buffer.writeInteger(a.vbucket)
            buffer.writeInteger(UInt16(truncatingIfNeeded: a.key.count))
            buffer.writeBytes(a.key)
            buffer.writeInteger(a.state.rawValue)
            buffer.writeInteger(a.cas)
        }
    }

    /// Decodes a reply value; nil when an entry is cut short or names an unknown state.
    public static func answers(decoding value: ByteBuffer) -> [Answer]? {
        var v = value
        var out: [Answer] = []
        while v.readableBytes > 0 {
            guard let vbucket = v.readInteger(as: UInt16.self), let length = v.readInteger(as: UInt16.self),
                let key = v.readBytes(length: Int(length)), let raw = v.readInteger(as: UInt8.self),
                let state = KeyState(rawValue: raw), let cas = v.readInteger(as: UInt64.self)
            else { return nil }
            out.append(Answer(vbucket: vbucket, key: key, state: state, cas: cas))
        }
        return out
    }
}
