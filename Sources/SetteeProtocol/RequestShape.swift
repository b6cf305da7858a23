import NIOCore

/// Which sections a key-value request must carry, and how long each may be: the shape check memcached runs
/// before an operation (kv_engine's mcbp validators), as one table. A request of the wrong shape is answered
/// EINVAL (`Status.invalidArguments`) without touching the engine. Pure: lengths in, a verdict out.
///
/// | opcode (and its quiet form)      | extras  | key      | value     | CAS      |
/// |----------------------------------|---------|----------|-----------|----------|
/// | GET, GETK, DELETE, GET_REPLICA   | 0       | required | none      | any      |
/// | GET_META                         | 0 or 1  | required | none      | any      |
/// | SET, REPLACE                     | 8       | required | any       | any      |
/// | ADD                              | 8       | required | any       | zero     |
/// | INCREMENT, DECREMENT             | 20      | required | none      | any      |
/// | APPEND, PREPEND                  | 0       | required | any       | any      |
/// | TOUCH, GAT                       | 4       | required | none      | any      |
/// | OBSERVE_SEQNO                    | 0       | none     | 8 (uuid)  | any      |
/// | GET_LOCKED                       | 4       | required | none      | any      |
/// | UNLOCK_KEY                       | 0       | required | none      | non-zero |
/// | FLUSH                            | 0 or 4  | any      | any       | any      |
/// | SET/ADD/DEL_WITH_META            | 24/26/28/30 | required | any   | any      |
///
/// A required key is also at most `maxKeyLength` bytes (`Limits.maxKeyLength`).
public struct RequestShape: Sendable, Equatable {
    public enum Key: Sendable, Equatable {
        case none, required, any
    }
    public enum Value: Sendable, Equatable {
        case none, any
        case exactly(Int)
    }
    public enum CASRule: Sendable, Equatable {
        case any
        /// ADD means "only if absent": a CAS makes no sense with it.
        case zero
        /// UNLOCK_KEY names the lock by its CAS.
        case nonZero
    }

    /// The extras lengths accepted.
    public var extras: [Int]
    public var key: Key
    public var value: Value
    public var casRule: CASRule

    public init(extras: [Int], key: Key, value: Value, cas: CASRule = .any) {
        self.extras = extras
        self.key = key
        self.value = value
        self.casRule = cas
    }

    /// The shape of `opcode`'s requests (a quiet opcode has its loud form's); nil for an opcode this table does
    /// not cover (those are validated by their own handlers, or are not data requests).
    public static func of(_ opcode: Opcode) -> RequestShape? {
        switch opcode.loud {
        case .get, .getk, .delete, .getReplica: return RequestShape(extras: [0], key: .required, value: .none)
        case .getMeta: return RequestShape(extras: [0, 1], key: .required, value: .none)
        case .set, .replace: return RequestShape(extras: [8], key: .required, value: .any)
        case .add: return RequestShape(extras: [8], key: .required, value: .any, cas: .zero)
        case .increment, .decrement: return RequestShape(extras: [20], key: .required, value: .none)
        case .append, .prepend: return RequestShape(extras: [0], key: .required, value: .any)
        case .touch, .gat: return RequestShape(extras: [4], key: .required, value: .none)
        case .observeSeqno: return RequestShape(extras: [0], key: .none, value: .exactly(8))
        case .getLocked: return RequestShape(extras: [4], key: .required, value: .none)
        case .unlockKey: return RequestShape(extras: [0], key: .required, value: .none, cas: .nonZero)
        case .flush: return RequestShape(extras: [0, 4], key: .any, value: .any)
        case .setWithMeta, .addWithMeta, .delWithMeta:
            return RequestShape(extras: WithMetaRequest.extrasLengths, key: .required, value: .any)
        default: return nil
        }
    }

    /// Whether a request with these section lengths and CAS has this shape.
    public func accepts(extrasLength: Int, keyLength: Int, valueLength: Int, cas: UInt64, maxKeyLength: Int) -> Bool {
        guard extras.contains(extrasLength) else { return false }
        switch key {
        case .none: guard keyLength == 0 else { return false }
        case .required: guard keyLength > 0 && keyLength <= maxKeyLength else { return false }
        case .any: break
        }
        switch value {
        case .none: guard valueLength == 0 else { return false }
        case .exactly(let n): guard valueLength == n else { return false }
        case .any: break
        }
        switch casRule {
        case .any: return true
        case .zero: return cas == 0
        case .nonZero: return cas != 0
        }
    }

    /// Whether `frame` is a well-formed request of its opcode: false for an opcode the table does not cover.
    public static func accepts(_ frame: Frame, maxKeyLength: Int) -> Bool {
        guard let shape = of(frame.opcode) else { return false }
        return shape.accepts(
            extrasLength: frame.extras.readableBytes, keyLength: frame.key.readableBytes,
            valueLength: frame.value.readableBytes, cas: frame.cas, maxKeyLength: maxKeyLength)
    }
}
