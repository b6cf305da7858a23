import SetteeCore

/// Document flags of a sub-document request (kv_engine `docs/SubDocument.md`, "Doc Flags").
public struct SubdocDocFlags: OptionSet, Sendable, Equatable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// Create the document if missing (SET semantics); implies MKDIR_P on every path.
    public static let mkdoc = SubdocDocFlags(rawValue: 0x01)
    /// Create the document, failing if it exists (ADD semantics); implies MKDIR_P on every path.
    public static let add = SubdocDocFlags(rawValue: 0x02)
    /// Reach a deleted document's XATTRs.
    public static let accessDeleted = SubdocDocFlags(rawValue: 0x04)
    /// Create a missing document as a tombstone holding only the XATTRs written (kv_engine `CreateAsDeleted`):
    /// needs ACCESS_DELETED and MKDOC or ADD, and XATTR paths only. An existing document keeps its state.
    public static let createAsDeleted = SubdocDocFlags(rawValue: 0x08)
    /// Turn a tombstone into a live document (kv_engine `ReviveDocument`): needs ACCESS_DELETED, not with
    /// CREATE_AS_DELETED; a live document is SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS (0xd6).
    public static let reviveDocument = SubdocDocFlags(rawValue: 0x10)
}

/// Path flags of one spec.
public struct SubdocPathFlags: OptionSet, Sendable, Equatable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let mkdirP = SubdocPathFlags(rawValue: 0x01)
    public static let xattrPath = SubdocPathFlags(rawValue: 0x04)
    public static let expandMacros = SubdocPathFlags(rawValue: 0x10)
}

/// A request refused as a whole, with the status to answer.
public struct SubdocRequestError: Error, Sendable, Equatable {
    public var status: UInt16
    public init(status: UInt16) { self.status = status }
    /// EINVAL (0x04): extras, lengths or flags that do not fit the command.
    public static let invalidArguments = SubdocRequestError(status: 0x04)
    /// SUBDOC_XATTR_INVALID_FLAG_COMBO (0xce): EXPAND_MACROS on a lookup or on a body path.
    public static let xattrInvalidFlagCombination = SubdocRequestError(status: 0xce)
    /// SUBDOC_XATTR_CANT_MODIFY_VATTR (0xd2): a mutation of a virtual attribute (`$document`, …).
    public static let cannotModifyVirtualAttribute = SubdocRequestError(status: 0xd2)
    /// SUBDOC_INVALID_XATTR_ORDER (0xd4): an XATTR spec after a body spec (XATTR specs come first).
    public static let invalidXattrOrder = SubdocRequestError(status: 0xd4)
    /// SUBDOC_INVALID_COMBO (0xcb): a multi-path request with no spec, too many, or one it cannot carry.
    public static let invalidCombination = SubdocRequestError(status: SubdocError.invalidCombination.rawValue)
}

/// One path operation of a request.
public struct SubdocSpec: Sendable, Equatable {
    public enum Operation: Sendable, Equatable {
        case command(SubdocCommand)
        /// MULTI_LOOKUP's GET (0x00) with an empty path: the whole body.
        case wholeDocumentGet
        /// MULTI_MUTATION's SET (0x01) with an empty path: replaces the whole body.
        case wholeDocumentSet
        /// MULTI_MUTATION's DELETE (0x04) with an empty path: deletes the document.
        case wholeDocumentDelete
    }
    public var operation: Operation
    public var flags: SubdocPathFlags
    public var path: [UInt8]
    public var value: [UInt8]

    public init(operation: Operation, flags: SubdocPathFlags = [], path: [UInt8], value: [UInt8] = []) {
        self.operation = operation
        self.flags = flags
        self.path = path
        self.value = value
    }
}

/// A decoded sub-document request: a single-path command (0xc5–0xcf, 0xd2) or MULTI_LOOKUP (0xd0) /
/// MULTI_MUTATION (0xd1), from the frame's extras and value (kv_engine `docs/SubDocument.md`, "Wire
/// Protocol Format").
///
/// ```
/// single:  extras = path length u16, path flags u8, [expiry u32], [doc flags u8]   (3, 4, 7 or 8 bytes)
///          value  = path, then the command's value
/// lookup:  extras = [doc flags u8];  value = { opcode u8, flags u8, path length u16, path }…
/// mutate:  extras = [expiry u32], [doc flags u8];
///          value = { opcode u8, flags u8, path length u16, value length u32, path, value }…
/// ```
public struct SubdocRequest: Sendable, Equatable {
    public static let multiLookupOpcode: UInt8 = 0xd0
    public static let multiMutationOpcode: UInt8 = 0xd1

    public var isMulti: Bool
    public var isMutation: Bool
    public var specs: [SubdocSpec]
    public var docFlags: SubdocDocFlags
    /// The expiry to give the document, when the request carries one.
    public var expiry: UInt32?
    /// A client's option, not part of the encoded request: send it with the preserve-TTL frame info (kv_engine's
    /// `PreserveTtl`, id 5), so a mutation without `expiry` keeps the document's expiry instead of clearing it. The
    /// gateway's imports set it: an application's TTL survives the gateway adding its metadata.
    public var preserveExpiry = false

    /// Whether `opcode` is a sub-document command this decoder takes.
    public static func handles(_ opcode: UInt8) -> Bool {
        opcode == multiLookupOpcode || opcode == multiMutationOpcode || SubdocCommand(rawValue: opcode) != nil
    }

    /// Whether `opcode` is a sub-document mutation (it needs write access and may carry durability).
    public static func isMutation(_ opcode: UInt8) -> Bool {
        if opcode == multiMutationOpcode { return true }
        guard let command = SubdocCommand(rawValue: opcode) else { return false }
        return !command.isLookup
    }

    public static func decode(opcode: UInt8, extras: [UInt8], value: [UInt8]) throws(SubdocRequestError)
        -> SubdocRequest
    {
        let request: SubdocRequest
        if opcode == multiLookupOpcode || opcode == multiMutationOpcode {
            request = try decodeMulti(mutation: opcode == multiMutationOpcode, extras: extras, value: value)
        } else if let command = SubdocCommand(rawValue: opcode) {
            request = try decodeSingle(command, extras: extras, value: value)
        } else {
            throw .invalidArguments
        }
        try request.checkFlags()
        return request
    }

    private static func decodeSingle(_ command: SubdocCommand, extras: [UInt8], value: [UInt8])
        throws(SubdocRequestError) -> SubdocRequest
    {
        guard [3, 4, 7, 8].contains(extras.count) else { throw .invalidArguments }
        let pathLength = Int(extras[0]) << 8 | Int(extras[1])
        let flags = SubdocPathFlags(rawValue: extras[2])
        var expiry: UInt32?
        var docFlags = SubdocDocFlags()
        if extras.count >= 7 { expiry = readUInt32(extras, at: 3) }
        if extras.count == 4 || extras.count == 8 { docFlags = SubdocDocFlags(rawValue: extras[extras.count - 1]) }
        guard pathLength <= value.count else { throw .invalidArguments }
        let path = Array(value[0..<pathLength])
        let body = Array(value[pathLength...])
        if !command.takesValue && !body.isEmpty { throw .invalidArguments }
        if command.isLookup && expiry != nil { throw .invalidArguments }
        return SubdocRequest(
            isMulti: false, isMutation: !command.isLookup,
            specs: [SubdocSpec(operation: .command(command), flags: flags, path: path, value: body)],
            docFlags: docFlags, expiry: expiry)
    }

    private static func decodeMulti(mutation: Bool, extras: [UInt8], value: [UInt8]) throws(SubdocRequestError)
        -> SubdocRequest
    {
        var expiry: UInt32?
        var docFlags = SubdocDocFlags()
        switch (mutation, extras.count) {
        case (_, 0): break
        case (_, 1): docFlags = SubdocDocFlags(rawValue: extras[0])
        case (true, 4): expiry = readUInt32(extras, at: 0)
        case (true, 5):
            expiry = readUInt32(extras, at: 0)
            docFlags = SubdocDocFlags(rawValue: extras[4])
        default: throw .invalidArguments
        }
        var specs: [SubdocSpec] = []
        var i = 0
        while i < value.count {
            guard specs.count < Limits.subdocMaxMultiPaths else { throw .invalidCombination }
            let header = mutation ? 8 : 4
            guard i + header <= value.count else { throw .invalidArguments }
            let opcode = value[i]
            let flags = SubdocPathFlags(rawValue: value[i + 1])
            let pathLength = Int(value[i + 2]) << 8 | Int(value[i + 3])
            let valueLength = mutation ? Int(readUInt32(value, at: i + 4)) : 0
            i += header
            // Both lengths come from the client: compare without adding them to an index that could overflow.
            guard pathLength <= value.count - i, valueLength <= value.count - i - pathLength else {
                throw .invalidArguments
            }
            let path = Array(value[i..<(i + pathLength)])
            i += pathLength
            let specValue = Array(value[i..<(i + valueLength)])
            i += valueLength
            let operation: SubdocSpec.Operation
            switch (mutation, opcode) {
            case (false, 0x00): operation = .wholeDocumentGet
            case (true, 0x01): operation = .wholeDocumentSet
            case (true, 0x04): operation = .wholeDocumentDelete
            default:
                guard let command = SubdocCommand(rawValue: opcode), command.isLookup != mutation else {
                    throw .invalidCombination
                }
                operation = .command(command)
            }
            switch operation {
            case .wholeDocumentGet, .wholeDocumentSet, .wholeDocumentDelete:
                guard path.isEmpty else { throw .invalidArguments }
            case .command(let command):
                if !command.takesValue && !specValue.isEmpty { throw .invalidArguments }
            }
            specs.append(SubdocSpec(operation: operation, flags: flags, path: path, value: specValue))
        }
        guard !specs.isEmpty else { throw .invalidCombination }
        // Deleting the document leaves nothing for another spec to edit: only XATTR specs (kept on the
        // tombstone when they are system attributes) may come before it.
        if let k = specs.firstIndex(where: { $0.operation == .wholeDocumentDelete }),
            k != specs.count - 1 || specs[..<k].contains(where: { !$0.flags.contains(.xattrPath) })
        {
            throw .invalidCombination
        }
        return SubdocRequest(isMulti: true, isMutation: mutation, specs: specs, docFlags: docFlags, expiry: expiry)
    }

    private func checkFlags() throws(SubdocRequestError) {
        let knownDoc: SubdocDocFlags = [.mkdoc, .add, .accessDeleted, .createAsDeleted, .reviveDocument]
        guard knownDoc.isSuperset(of: docFlags) else { throw .invalidArguments }
        if docFlags.contains(.mkdoc) && docFlags.contains(.add) { throw .invalidArguments }
        if !isMutation && !docFlags.isDisjoint(with: [.mkdoc, .add]) { throw .invalidArguments }
        // kv_engine's validators: both flags mutate, reach tombstones (ACCESS_DELETED) and exclude each other;
        // creating as deleted needs a creation semantics and writes nothing but XATTRs.
        if !docFlags.isDisjoint(with: [.createAsDeleted, .reviveDocument]) {
            guard isMutation, docFlags.contains(.accessDeleted) else { throw .invalidArguments }
            if docFlags.contains(.createAsDeleted) && docFlags.contains(.reviveDocument) { throw .invalidArguments }
        }
        if docFlags.contains(.createAsDeleted) {
            guard !docFlags.isDisjoint(with: [.mkdoc, .add]) else { throw .invalidArguments }
            guard specs.allSatisfy({ $0.flags.contains(.xattrPath) }) else { throw .invalidArguments }
        }
        for spec in specs {
            guard SubdocPathFlags([.mkdirP, .xattrPath, .expandMacros]).isSuperset(of: spec.flags) else {
                throw .invalidArguments
            }
            if !isMutation && spec.flags.contains(.mkdirP) { throw .invalidArguments }
            if spec.flags.contains(.expandMacros) && !spec.flags.contains(.xattrPath) {
                throw .xattrInvalidFlagCombination
            }
            guard spec.flags.contains(.xattrPath) else { continue }
            guard case .command = spec.operation else { throw .invalidArguments }
            if !isMutation && spec.flags.contains(.expandMacros) { throw .xattrInvalidFlagCombination }
            if isMutation && SubdocXattr.isVirtual(spec.path) { throw .cannotModifyVirtualAttribute }
        }
        // XATTRs are stored in front of the body and read or edited first: their specs come first.
        if let firstBody = specs.firstIndex(where: { !$0.flags.contains(.xattrPath) }),
            specs[firstBody...].contains(where: { $0.flags.contains(.xattrPath) })
        {
            throw .invalidXattrOrder
        }
    }

    private static func readUInt32(_ bytes: [UInt8], at i: Int) -> UInt32 {
        UInt32(bytes[i]) << 24 | UInt32(bytes[i + 1]) << 16 | UInt32(bytes[i + 2]) << 8 | UInt32(bytes[i + 3])
    }
}
