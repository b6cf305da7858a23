import NIOCore

/// Sub-document opcodes (kv_engine `docs/BinaryProtocol.md`, `docs/SubDocument.md`).
extension Opcode {
    public static let subdocGet = Opcode(0xc5)
    public static let subdocExists = Opcode(0xc6)
    public static let subdocDictAdd = Opcode(0xc7)
    public static let subdocDictUpsert = Opcode(0xc8)
    public static let subdocDelete = Opcode(0xc9)
    public static let subdocReplace = Opcode(0xca)
    public static let subdocArrayPushLast = Opcode(0xcb)
    public static let subdocArrayPushFirst = Opcode(0xcc)
    public static let subdocArrayInsert = Opcode(0xcd)
    public static let subdocArrayAddUnique = Opcode(0xce)
    public static let subdocCounter = Opcode(0xcf)
    public static let subdocMultiLookup = Opcode(0xd0)
    public static let subdocMultiMutation = Opcode(0xd1)
    public static let subdocGetCount = Opcode(0xd2)
    /// Collections (kv_engine `docs/Collections.md`).
    public static let getCollectionsManifest = Opcode(0xba)
    /// GET_SCOPE_ID: value (or key) `scope`; extras of the answer: u64 manifest uid, u32 scope id.
    public static let getScopeID = Opcode(0xbc)

    /// Every sub-document opcode this server answers.
    public var isSubdoc: Bool { rawValue >= 0xc5 && rawValue <= 0xd2 }

    /// Whether the sub-document opcode only reads (needs read access, takes no durability).
    public var isSubdocLookup: Bool {
        self == .subdocGet || self == .subdocExists || self == .subdocGetCount || self == .subdocMultiLookup
    }

    /// Whether the request's key names a document, so that with Collections negotiated it starts with the
    /// collection id (LEB128). Session, cluster, stats and DCP commands carry no such key.
    public var carriesDocumentKey: Bool {
        switch rawValue {
        // 0xa0...0xa5, 0xa8, 0xa9: GET_META, GETQ_META and the SET/ADD/DEL_WITH_META family (quiet ones too): a
        // collection-aware restore's with-meta writes carried their collection prefix into the default collection's
        // key space while these were left out.
        case 0x00...0x06, 0x09, 0x0c, 0x0d, 0x0e, 0x0f, 0x11...0x16, 0x19, 0x1a, 0x1c, 0x1d, 0x1e, 0x83, 0x94, 0x95,
            0xa0...0xa5, 0xa8, 0xa9, 0xc5...0xd2:
            return true
        default:
            return false
        }
    }
}

extension Status {
    public static let unknownScope = Status(0x8c)
    /// A multi-path request found its document but one or more paths failed (per-path statuses in the body).
    public static let subdocMultiPathFailure = Status(0xcc)
}
