extension JSON {
    /// Bytes this value takes once serialized, near enough to bound a response without serializing it: what the
    /// gateway's `_bulk_get` and the Lite listener's count against their byte bounds.
    public var approximateSerializedSize: Int {
        switch self {
        case .null, .bool: return 5
        case .integer, .number: return 12
        case .string(let s): return s.utf8.count + 2
        case .array(let items): return items.reduce(2) { $0 + $1.approximateSerializedSize + 1 }
        case .object(let members):
            return members.reduce(2) { $0 + $1.0.utf8.count + 4 + $1.1.approximateSerializedSize }
        }
    }
}
