/// A memcached-binary command code. Values from kv_engine's `docs/BinaryProtocol.md`.
public struct Opcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public init(_ rawValue: UInt8) { self.rawValue = rawValue }

    public static let get = Opcode(0x00)
    public static let set = Opcode(0x01)
    public static let add = Opcode(0x02)
    public static let replace = Opcode(0x03)
    public static let delete = Opcode(0x04)
    public static let increment = Opcode(0x05)
    public static let decrement = Opcode(0x06)
    public static let quit = Opcode(0x07)
    public static let flush = Opcode(0x08)
    public static let getq = Opcode(0x09)
    public static let noop = Opcode(0x0a)
    public static let version = Opcode(0x0b)
    public static let getk = Opcode(0x0c)
    public static let getkq = Opcode(0x0d)
    public static let append = Opcode(0x0e)
    public static let prepend = Opcode(0x0f)
    public static let stat = Opcode(0x10)
    public static let setq = Opcode(0x11)
    public static let addq = Opcode(0x12)
    public static let replaceq = Opcode(0x13)
    public static let deleteq = Opcode(0x14)
    public static let incrementq = Opcode(0x15)
    public static let decrementq = Opcode(0x16)
    public static let quitq = Opcode(0x17)
    public static let flushq = Opcode(0x18)
    public static let appendq = Opcode(0x19)
    public static let prependq = Opcode(0x1a)
    public static let verbosity = Opcode(0x1b)
    public static let touch = Opcode(0x1c)
    public static let gat = Opcode(0x1d)
    public static let gatq = Opcode(0x1e)
    public static let hello = Opcode(0x1f)
    public static let saslListMechs = Opcode(0x20)
    public static let saslAuth = Opcode(0x21)
    public static let saslStep = Opcode(0x22)
    public static let selectBucket = Opcode(0x89)
    public static let observeSeqno = Opcode(0x91)
    public static let observe = Opcode(0x92)
    public static let getLocked = Opcode(0x94)
    public static let unlockKey = Opcode(0x95)
    public static let getMeta = Opcode(0xa0)
    /// SET_WITH_META: a store carrying the document's own CAS, revSeqno, flags and expiry (XDCR, restore).
    public static let setWithMeta = Opcode(0xa2)
    /// DEL_WITH_META: a deletion leaving a tombstone with the given CAS and revSeqno.
    public static let delWithMeta = Opcode(0xa8)
    /// ADD_WITH_META: SET_WITH_META only where no live document is.
    public static let addWithMeta = Opcode(0xa4)
    public static let getClusterConfig = Opcode(0xb5)
    public static let getCollectionID = Opcode(0xbb)
    public static let getErrorMap = Opcode(0xfe)

    /// Server-push opcode (magic 0x82): a new cluster map.
    public static let clustermapChangeNotification = Opcode(0x01)

    /// Quiet variants suppress the success (or, for gets, the miss) response.
    @inlinable public var isQuiet: Bool {
        switch rawValue {
        case 0x09, 0x0d, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1e: return true
        default: return false
        }
    }

    /// The loud opcode a quiet one stands for (GETQ → GET, SETQ → SET, …); itself otherwise.
    @inlinable public var loud: Opcode {
        switch rawValue {
        case 0x09: return .get
        case 0x0d: return .getk
        case 0x11: return .set
        case 0x12: return .add
        case 0x13: return .replace
        case 0x14: return .delete
        case 0x15: return .increment
        case 0x16: return .decrement
        case 0x17: return .quit
        case 0x18: return .flush
        case 0x19: return .append
        case 0x1a: return .prepend
        case 0x1e: return .gat
        default: return self
        }
    }

    public var description: String { "0x" + String(rawValue, radix: 16) }
}
