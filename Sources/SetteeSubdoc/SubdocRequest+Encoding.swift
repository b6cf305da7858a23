import SetteeCore

/// The client's side of the multi-path wire forms: building MULTI_LOOKUP / MULTI_MUTATION requests and reading
/// their answers (kv_engine `docs/SubDocument.md`). `SubdocRequest.decode` reads what `encodedExtras` and
/// `encodedValue` write, so a client (the smart client, the gateway's embedded bucket) and the KV port agree
/// on one type.
extension SubdocRequest {
    /// A MULTI_LOOKUP of `specs` (at most `Limits.subdocMaxMultiPaths`; XATTR specs first).
    public static func multiLookup(_ specs: [SubdocSpec], docFlags: SubdocDocFlags = []) -> SubdocRequest {
        SubdocRequest(isMulti: true, isMutation: false, specs: specs, docFlags: docFlags, expiry: nil)
    }

    /// A MULTI_MUTATION of `specs` (at most `Limits.subdocMaxMultiPaths`; XATTR specs first, a whole-document
    /// DELETE last).
    public static func multiMutation(_ specs: [SubdocSpec], docFlags: SubdocDocFlags = [], expiry: UInt32? = nil)
        -> SubdocRequest
    {
        SubdocRequest(isMulti: true, isMutation: true, specs: specs, docFlags: docFlags, expiry: expiry)
    }

    /// The opcode of a multi-path request (0xd0 / 0xd1).
    public var multiOpcode: UInt8 { isMutation ? Self.multiMutationOpcode : Self.multiLookupOpcode }

    /// The frame's extras: `[expiry u32]` (mutations that carry one), then `[doc flags u8]` when any is set.
    public var encodedExtras: [UInt8] {
        var out: [UInt8] = []
        if isMutation, let expiry { Self.appendUInt32(expiry, to: &out) }
        if docFlags.rawValue != 0 { out.append(docFlags.rawValue) }
        return out
    }

    /// The frame's value: each spec as `opcode u8, flags u8, path length u16, [value length u32], path, [value]`.
    public var encodedValue: [UInt8] {
        var out: [UInt8] = []
        for spec in specs {
            let opcode: UInt8
            switch spec.operation {
            case .command(let command): opcode = command.rawValue
            case .wholeDocumentGet: opcode = 0x00
            case .wholeDocumentSet: opcode = 0x01
            case .wholeDocumentDelete: opcode = 0x04
            }
            out.append(opcode)
            out.append(spec.flags.rawValue)
            out.append(UInt8(truncatingIfNeeded: spec.path.count >> 8))
            out.append(UInt8(truncatingIfNeeded: spec.path.count))
            if isMutation { Self.appendUInt32(UInt32(truncatingIfNeeded: spec.value.count), to: &out) }
            out += spec.path
            if isMutation { out += spec.value }
        }
        return out
    }

    /// One spec's answer in a MULTI_LOOKUP reply.
    public struct LookupResult: Sendable, Equatable {
        /// 0, or the path's status (PATH_ENOENT 0xc0, ...).
        public var status: UInt16
        public var value: [UInt8]
        public init(status: UInt16, value: [UInt8]) {
            self.status = status
            self.value = value
        }
    }

    /// The per-spec answers of a MULTI_LOOKUP reply body (`{status u16, length u32, value}`…), or nil when the
    /// body does not parse (a short or overlong entry: a peer's bytes are never trusted to fit).
    public static func lookupResults(_ body: [UInt8]) -> [LookupResult]? {
        var out: [LookupResult] = []
        var i = 0
        while i < body.count {
            guard body.count - i >= 6, out.count < Limits.subdocMaxMultiPaths else { return nil }
            let status = UInt16(body[i]) << 8 | UInt16(body[i + 1])
            let length = Int(body[i + 2]) << 24 | Int(body[i + 3]) << 16 | Int(body[i + 4]) << 8 | Int(body[i + 5])
            i += 6
            guard length <= body.count - i else { return nil }
            out.append(LookupResult(status: status, value: Array(body[i..<(i + length)])))
            i += length
        }
        return out
    }

    /// The failing spec of a MULTI_MUTATION answered MULTI_PATH_FAILURE (`index u8, status u16`), nil when
    /// the body is shorter.
    public static func mutationFailure(_ body: [UInt8]) -> (index: Int, status: UInt16)? {
        guard body.count >= 3 else { return nil }
        return (Int(body[0]), UInt16(body[1]) << 8 | UInt16(body[2]))
    }

    private static func appendUInt32(_ value: UInt32, to out: inout [UInt8]) {
        for shift in [24, 16, 8, 0] { out.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }
}
