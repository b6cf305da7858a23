import SetteeJSON

/// What running a sub-document request against a document's current bytes decided.
public enum SubdocOutcome: Sendable, Equatable {
    /// Answer with `status` and `body`; nothing is stored.
    case reply(status: UInt16, body: [UInt8])
    /// Store `document` (with the JSON datatype when `isJSON`), then answer success with `body`.
    case store(document: [UInt8], isJSON: Bool, body: [UInt8])
    /// Delete the document, then answer success.
    case delete
}

extension SubdocRequest {
    /// KEY_ENOENT, KEY_EEXISTS and MULTI_PATH_FAILURE, the statuses a whole request can end with.
    public static let keyNotFoundStatus: UInt16 = 0x01
    public static let keyExistsStatus: UInt16 = 0x02
    public static let multiPathFailureStatus: UInt16 = 0xcc

    /// Runs the request on `document` (nil: there is none). Pure: the caller reads the document, applies the
    /// outcome through the engine's CAS-checked write (retrying on a concurrent change) and answers.
    ///
    /// Responses (kv_engine `docs/SubDocument.md`): a single path answers its status and value; MULTI_LOOKUP
    /// answers `{status u16, length u32, value}` per spec, with MULTI_PATH_FAILURE (0xcc) when any failed;
    /// MULTI_MUTATION answers `{index u8, status u16, length u32, value}` for each spec that returns a value
    /// (COUNTER), or on the first failure MULTI_PATH_FAILURE with just `{index u8, status u16}`.
    ///
    /// `metadata` describes the document for XATTR lookups (virtual attributes), `xattrs` are the attributes
    /// stored in front of `document` (the body); without metadata an XATTR path is not found.
    public func execute(
        on document: [UInt8]?, metadata: SubdocItemMetadata? = nil, xattrs: XattrBlob = XattrBlob()
    ) -> SubdocOutcome {
        isMutation ? mutate(document) : lookUp(document, metadata: metadata, xattrs: xattrs)
    }

    private func lookUp(_ document: [UInt8]?, metadata: SubdocItemMetadata?, xattrs: XattrBlob) -> SubdocOutcome {
        guard let document else { return .reply(status: Self.keyNotFoundStatus, body: []) }
        let parsed = Result { () throws(SubdocError) in try SubdocDocument(validating: document) }
        // A spec's answer: XATTR paths read the attributes (body validity does not matter), others the body.
        func look(_ command: SubdocCommand, _ spec: SubdocSpec) throws(SubdocError) -> [UInt8] {
            if spec.flags.contains(.xattrPath) {
                guard let metadata else { throw .pathNotFound }
                return try SubdocXattr.lookup(command, path: spec.path, meta: metadata, stored: xattrs, body: document)
            }
            return try parsed.get().lookup(command, path: SubdocPath.parse(spec.path))
        }
        if !isMulti, let spec = specs.first, case .command(let command) = spec.operation {
            do {
                return .reply(status: 0, body: try look(command, spec))
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
            Self.append(status, to: &body)
            Self.append(UInt32(truncatingIfNeeded: value.count), to: &body)
            body += value
        }
        return .reply(status: failed ? Self.multiPathFailureStatus : 0, body: body)
    }

    private func mutate(_ document: [UInt8]?) -> SubdocOutcome {
        let creating = !docFlags.isDisjoint(with: [.mkdoc, .add])
        if document == nil && !creating { return .reply(status: Self.keyNotFoundStatus, body: []) }
        if document != nil && docFlags.contains(.add) { return .reply(status: Self.keyExistsStatus, body: []) }
        var raw = document
        var edited: SubdocDocument?
        var body: [UInt8] = []
        for (index, spec) in specs.enumerated() {
            do throws(SubdocError) {
                switch spec.operation {
                case .wholeDocumentDelete:
                    guard document != nil else { return .reply(status: Self.keyNotFoundStatus, body: []) }
                    return .delete
                case .wholeDocumentSet:
                    raw = spec.value
                    edited = nil
                case .wholeDocumentGet:
                    throw .invalidCombination
                case .command(let command):
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
                    if !result.isEmpty {
                        if isMulti {
                            body.append(UInt8(truncatingIfNeeded: index))
                            Self.append(UInt16(0), to: &body)
                            Self.append(UInt32(truncatingIfNeeded: result.count), to: &body)
                        }
                        body += result
                    }
                }
            } catch {
                guard isMulti else { return .reply(status: error.rawValue, body: []) }
                var failure = [UInt8(truncatingIfNeeded: index)]
                Self.append(error.rawValue, to: &failure)
                return .reply(status: Self.multiPathFailureStatus, body: failure)
            }
        }
        if let edited { return .store(document: edited.bytes, isJSON: true, body: body) }
        let bytes = raw ?? []
        let isJSON = (try? JSON.parse(bytes)) != nil
        return .store(document: bytes, isJSON: isJSON, body: body)
    }

    private static func append(_ value: UInt16, to body: inout [UInt8]) {
        body.append(UInt8(truncatingIfNeeded: value >> 8))
        body.append(UInt8(truncatingIfNeeded: value))
    }

    private static func append(_ value: UInt32, to body: inout [UInt8]) {
        for shift in [24, 16, 8, 0] { body.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }
}
