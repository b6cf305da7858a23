/// The sub-document commands, by their memcached-binary opcode (kv_engine `docs/BinaryProtocol.md`).
/// The same codes name the specs inside MULTI_LOOKUP and MULTI_MUTATION.
public enum SubdocCommand: UInt8, Sendable, CaseIterable {
    case get = 0xc5
    case exists = 0xc6
    case dictAdd = 0xc7
    case dictUpsert = 0xc8
    case delete = 0xc9
    case replace = 0xca
    case arrayPushLast = 0xcb
    case arrayPushFirst = 0xcc
    case arrayInsert = 0xcd
    case arrayAddUnique = 0xce
    case counter = 0xcf
    case getCount = 0xd2

    /// Whether the command only reads.
    public var isLookup: Bool {
        switch self {
        case .get, .exists, .getCount: return true
        default: return false
        }
    }

    /// Whether the request carries a value after the path.
    public var takesValue: Bool {
        switch self {
        case .get, .exists, .getCount, .delete: return false
        default: return true
        }
    }
}
