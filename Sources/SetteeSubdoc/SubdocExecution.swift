import SetteeCore
import SetteeJSON

/// What a sub-document mutation stores: the document's whole new value.
public struct SubdocWrite: Sendable, Equatable {
    /// The XATTR section (when `hasXattrs`), then the body; for a tombstone (`deleted`) the section only.
    public var value: [UInt8]
    /// The body is JSON.
    public var isJSON: Bool
    public var hasXattrs: Bool
    /// The document is a tombstone and stays one (XATTR specs with ACCESS_DELETED), or a missing document is
    /// created as one (CREATE_AS_DELETED): `value` is what it keeps.
    public var deleted: Bool
    /// `${Mutation.CAS}` / `${Mutation.seqno}` placeholders in `value`, filled in when it is stored.
    public var macros: [MutationMacro]

    public init(
        value: [UInt8], isJSON: Bool, hasXattrs: Bool = false, deleted: Bool = false, macros: [MutationMacro] = []
    ) {
        self.value = value
        self.isJSON = isJSON
        self.hasXattrs = hasXattrs
        self.deleted = deleted
        self.macros = macros
    }
}

/// What running a sub-document request against a document's current bytes decided.
public enum SubdocOutcome: Sendable, Equatable {
    /// Answer with `status` and `body`; nothing is stored.
    case reply(status: UInt16, body: [UInt8])
    /// Store `write`, then answer success with `body`.
    case write(SubdocWrite, body: [UInt8])
    /// Delete the document, keeping the XATTR section `keeping` (system attributes, possibly none) on the
    /// tombstone with its `macros` filled in, then answer success.
    case remove(keeping: [UInt8], macros: [MutationMacro])

    /// Store `document` (a body, no XATTRs; with the JSON datatype when `isJSON`), then answer `body`.
    public static func store(document: [UInt8], isJSON: Bool, body: [UInt8]) -> SubdocOutcome {
        .write(SubdocWrite(value: document, isJSON: isJSON), body: body)
    }

    /// Delete a document that has no XATTRs to keep.
    public static var delete: SubdocOutcome { .remove(keeping: [], macros: []) }
}

extension SubdocRequest {
    /// KEY_ENOENT, KEY_EEXISTS, E2BIG and MULTI_PATH_FAILURE, the statuses a whole request can end with;
    /// SUBDOC_SUCCESS_DELETED (0xcd) and MULTI_PATH_FAILURE_DELETED (0xd3) replace success and
    /// MULTI_PATH_FAILURE for a lookup on a tombstone.
    public static let keyNotFoundStatus: UInt16 = 0x01
    public static let keyExistsStatus: UInt16 = 0x02
    public static let tooBigStatus: UInt16 = 0x03
    public static let multiPathFailureStatus: UInt16 = 0xcc
    public static let successDeletedStatus: UInt16 = 0xcd
    public static let multiPathFailureDeletedStatus: UInt16 = 0xd3
    /// SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS (0xd6): REVIVE_DOCUMENT on a live document.
    public static let canOnlyReviveDeletedStatus: UInt16 = 0xd6

    /// Runs the request on `document` (the body; nil: there is none). Pure: the caller reads the document,
    /// applies the outcome through the engine's CAS-checked write (retrying on a concurrent change) and answers.
    ///
    /// Responses (kv_engine `docs/SubDocument.md`): a single path answers its status and value; MULTI_LOOKUP
    /// answers `{status u16, length u32, value}` per spec, with MULTI_PATH_FAILURE (0xcc) when any failed;
    /// MULTI_MUTATION answers `{index u8, status u16, length u32, value}` for each spec that returns a value
    /// (COUNTER), or on the first failure MULTI_PATH_FAILURE with just `{index u8, status u16}`.
    ///
    /// `metadata` describes the document for XATTR paths (virtual attributes, and whether the body is JSON),
    /// `xattrs` are the attributes stored in front of `document`; without metadata an XATTR lookup is not
    /// found. `deleted`: `document` is a tombstone (read with ACCESS_DELETED): its body is empty, XATTR specs
    /// read and edit what it kept, and it stays deleted unless a body spec recreates it (MKDOC / ADD).
    /// `privileges`: the requester's SystemXattrRead / Write (`SystemXattrPrivileges`); a lookup of a system
    /// attribute without read is EACCESS for that path (mutations are refused earlier, `systemXattrRefusal`).
    public func execute(
        on document: [UInt8]?, metadata: SubdocItemMetadata? = nil, xattrs: XattrBlob = XattrBlob(),
        deleted: Bool = false, privileges: SystemXattrPrivileges = .all
    ) -> SubdocOutcome {
        isMutation
            ? mutate(document, metadata: metadata, xattrs: xattrs, deleted: deleted)
            : lookUp(
                document, metadata: metadata, xattrs: xattrs, deleted: deleted,
                systemRead: privileges.contains(.read))
    }

    private func lookUp(
        _ document: [UInt8]?, metadata: SubdocItemMetadata?, xattrs: XattrBlob, deleted: Bool, systemRead: Bool
    ) -> SubdocOutcome {
        guard let document else { return .reply(status: Self.keyNotFoundStatus, body: []) }
        let parsed = Result { () throws(SubdocError) in try SubdocDocument(validating: document) }
        // A spec's answer: XATTR paths read the attributes (body validity does not matter), others the body.
        func look(_ command: SubdocCommand, _ spec: SubdocSpec) throws(SubdocError) -> [UInt8] {
            if spec.flags.contains(.xattrPath) {
                guard let metadata else { throw .pathNotFound }
                return try SubdocXattr.lookup(
                    command, path: spec.path, meta: metadata, stored: xattrs, body: document, systemRead: systemRead)
            }
            if deleted { throw .pathNotFound }  // a tombstone has no body
            return try parsed.get().lookup(command, path: SubdocPath.parse(spec.path))
        }
        let success = deleted ? Self.successDeletedStatus : 0
        if !isMulti, let spec = specs.first, case .command(let command) = spec.operation {
            do {
                return .reply(status: success, body: try look(command, spec))
            } catch {
                return .reply(status: error.rawValue, body: [])
            }
        }
        var body: [UInt8] = []
        var failed = false
        for spec in specs {
            var status: UInt16 = 0
            var value: [UInt8] = []
            switch spec.operation {
            case .wholeDocumentGet:
                value = document
            case .command(let command):
                do {
                    value = try look(command, spec)
                } catch {
                    status = error.rawValue
                }
            case .wholeDocumentSet, .wholeDocumentDelete:
                status = SubdocError.invalidCombination.rawValue
            }
            failed = failed || status != 0
            // Up to 16 specs may each answer the whole document: the reply may hold the item once (body and
            // XATTRs), as a GET's would, not sixteen times (E2BIG; the client splits its lookups).
            guard body.count + 6 + value.count <= Limits.subdocMaxLookupResponseBytes else {
                return .reply(status: Self.tooBigStatus, body: [])
            }
            Self.append(status, to: &body)
            Self.append(UInt32(truncatingIfNeeded: value.count), to: &body)
            body += value
        }
        let failure = deleted ? Self.multiPathFailureDeletedStatus : Self.multiPathFailureStatus
        return .reply(status: failed ? failure : success, body: body)
    }

    private func mutate(
        _ document: [UInt8]?, metadata: SubdocItemMetadata?, xattrs: XattrBlob, deleted: Bool
    ) -> SubdocOutcome {
        let creating = !docFlags.isDisjoint(with: [.mkdoc, .add])
        let reviving = docFlags.contains(.reviveDocument)
        if document == nil && !creating { return .reply(status: Self.keyNotFoundStatus, body: []) }
        if document != nil && !deleted && docFlags.contains(.add) {
            return .reply(status: Self.keyExistsStatus, body: [])
        }
        if reviving && document != nil && !deleted { return .reply(status: Self.canOnlyReviveDeletedStatus, body: []) }
        var raw = deleted ? nil : document
        var edited: SubdocDocument?
        var blob = xattrs
        var bodyTouched = false
        // Attributes edited with EXPAND_MACROS: their `"${…}"` strings are expanded once the body is final.
        var expanding: [[UInt8]] = []
        var body: [UInt8] = []
        for (index, spec) in specs.enumerated() {
            do throws(SubdocError) {
                switch spec.operation {
                case .wholeDocumentDelete:
                    guard document != nil, !deleted else { return .reply(status: Self.keyNotFoundStatus, body: []) }
                    // The tombstone keeps the system attributes, as edited by the XATTR specs before this one.
                    let (kept, macros) = Self.expandMacros(in: blob.systemOnly, names: expanding, body: [])
                    return .remove(keeping: kept.encoded(body: []), macros: macros)
                case .wholeDocumentSet:
                    raw = spec.value
                    edited = nil
                    bodyTouched = true
                case .wholeDocumentGet:
                    throw .invalidCombination
                case .command(let command) where spec.flags.contains(.xattrPath):
                    if spec.flags.contains(.expandMacros) { try SubdocMacros.check(spec.value) }
                    let result = try Self.mutateXattr(
                        &blob, command, path: spec.path, value: spec.value,
                        createParents: creating || spec.flags.contains(.mkdirP))
                    if spec.flags.contains(.expandMacros),
                        case .key(let name)? = try? SubdocPath.parse(
                            spec.path, xattr: true
                        ).components.first, !expanding.contains(name)
                    {
                        expanding.append(name)
                    }
                    Self.appendResult(result, index: index, multi: isMulti, to: &body)
                case .command(let command):
                    // A tombstone has no body to edit, unless the request recreates or revives it.
                    if deleted && !creating && !reviving { throw .pathNotFound }
                    let path = try SubdocPath.parse(spec.path)
                    var current: SubdocDocument
                    if let edited {
                        current = edited
                    } else if let raw {
                        current = try SubdocDocument(validating: raw)
                    } else {
                        current = SubdocDocument.emptyRoot(for: command, path: path)
                    }
                    let result = try current.mutate(
                        command, path: path, value: spec.value,
                        createParents: creating || spec.flags.contains(.mkdirP))
                    edited = current
                    bodyTouched = true
                    Self.appendResult(result, index: index, multi: isMulti, to: &body)
                }
            } catch {
                guard isMulti else { return .reply(status: error.rawValue, body: []) }
                var failure = [UInt8(truncatingIfNeeded: index)]
                Self.append(error.rawValue, to: &failure)
                return .reply(status: Self.multiPathFailureStatus, body: failure)
            }
        }
        // A tombstone whose XATTRs were edited stays one unless revived; a missing document created as deleted
        // becomes one; a document made by XATTR specs alone gets `{}`; a tombstone revived by XATTR specs alone
        // keeps its empty body (kv_engine).
        let staysDeleted =
            (deleted && !bodyTouched && !reviving) || (document == nil && docFlags.contains(.createAsDeleted))
        let bytes: [UInt8]
        let isJSON: Bool
        if staysDeleted || (deleted && reviving && !bodyTouched) {
            (bytes, isJSON) = ([], false)
        } else if let edited {
            (bytes, isJSON) = (edited.bytes, true)
        } else if let raw {
            let known = bodyTouched ? nil : metadata?.isJSON
            (bytes, isJSON) = (raw, known ?? ((try? JSON.parse(raw)) != nil))
        } else {
            (bytes, isJSON) = ([Ascii.openBrace, Ascii.closeBrace], true)
        }
        let (final, macros) = Self.expandMacros(in: blob, names: expanding, body: bytes)
        // User and system attributes have a limit each (kv_engine): past either the request is E2BIG.
        guard !final.exceedsLimits else {
            return .reply(status: Self.tooBigStatus, body: [])
        }
        let write = SubdocWrite(
            value: final.encoded(body: bytes), isJSON: isJSON, hasXattrs: !final.pairs.isEmpty,
            deleted: staysDeleted, macros: macros)
        return .write(write, body: body)
    }

    /// Runs a mutation spec on stored attribute `name` (the path's first component): the attribute is edited
    /// as the one member of an object `{"name": value}` (absent when it does not exist), so every command
    /// keeps its body semantics (DICT_UPSERT sets it, DELETE removes it, MKDIR_P creates it, ...).
    static func mutateXattr(
        _ blob: inout XattrBlob, _ command: SubdocCommand, path bytes: [UInt8], value: [UInt8], createParents: Bool
    ) throws(SubdocError) -> [UInt8] {
        let path = try SubdocPath.parse(bytes, xattr: true)
        guard case .key(let name)? = path.components.first else { throw .pathInvalid }
        try SubdocXattr.checkName(name)
        // The name becomes a JSON member name as is: no characters that would need escaping.
        guard !name.contains(Ascii.quote), !name.contains(Ascii.backslash) else { throw .pathInvalid }
        var wrapper: [UInt8] = [Ascii.openBrace]
        if let current = blob.value(of: name) {
            wrapper += [Ascii.quote] + name + [Ascii.quote, Ascii.colon] + current
        }
        wrapper.append(Ascii.closeBrace)
        var document = try SubdocDocument(validating: wrapper)
        let result = try document.mutate(command, path: path, value: value, createParents: createParents)
        if let new = try? document.lookup(.get, path: SubdocPath(components: [.key(name)])) {
            blob.set(name, to: new)
        } else {
            blob.remove(name)
        }
        return result
    }

    /// Expands the macros in attributes `names`: `${Mutation.value_crc32c}` at once (CRC-32C of `body`),
    /// `${Mutation.CAS}` and `${Mutation.seqno}` as placeholders whose offsets in the encoded value are returned.
    static func expandMacros(in blob: XattrBlob, names: [[UInt8]], body: [UInt8]) -> (XattrBlob, [MutationMacro]) {
        guard !names.isEmpty else { return (blob, []) }
        var blob = blob
        var pending: [([UInt8], Int, MutationMacro.Kind)] = []
        let crc = CRC32C.checksum(body)
        for name in names {
            guard let value = blob.value(of: name) else { continue }
            let (expanded, slots) = SubdocMacros.expand(value, crc32c: crc)
            blob.set(name, to: expanded)
            pending += slots.map { (name, $0.offset, $0.kind) }
        }
        let macros = pending.compactMap { name, offset, kind in
            blob.valueOffset(of: name).map { MutationMacro(offset: $0 + offset, kind: kind) }
        }
        return (blob, macros)
    }

    private static func appendResult(_ result: [UInt8], index: Int, multi: Bool, to body: inout [UInt8]) {
        guard !result.isEmpty else { return }
        if multi {
            body.append(UInt8(truncatingIfNeeded: index))
            append(UInt16(0), to: &body)
            append(UInt32(truncatingIfNeeded: result.count), to: &body)
        }
        body += result
    }

    private static func append(_ value: UInt16, to body: inout [UInt8]) {
        body.append(UInt8(truncatingIfNeeded: value >> 8))
        body.append(UInt8(truncatingIfNeeded: value))
    }

    private static func append(_ value: UInt32, to body: inout [UInt8]) {
        for shift in [24, 16, 8, 0] { body.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }
}
