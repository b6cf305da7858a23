import NIOCore
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeSubdoc

/// A MULTI_LOOKUP's answer: the document's CAS, whether it is a tombstone (read with ACCESS_DELETED), and one
/// result per spec.
public struct LookupInResult: Sendable, Equatable {
    public var cas: CAS
    public var deleted: Bool
    public var results: [SubdocRequest.LookupResult]
    public init(cas: CAS, deleted: Bool, results: [SubdocRequest.LookupResult]) {
        self.cas = cas
        self.deleted = deleted
        self.results = results
    }
}

/// A document with its extended attributes (`settee kv get --xattrs`).
public struct DocumentWithXattrs: Sendable, Equatable {
    public var body: [UInt8]
    /// Every stored attribute, system ones (`_…`) included, in stored order: name and JSON value.
    public var xattrs: [(name: String, value: [UInt8])]
    public var cas: CAS
    public init(body: [UInt8], xattrs: [(name: String, value: [UInt8])], cas: CAS) {
        self.body = body
        self.xattrs = xattrs
        self.cas = cas
    }
    public static func == (a: Self, b: Self) -> Bool {
        a.body == b.body && a.cas == b.cas && a.xattrs.map(\.name) == b.xattrs.map(\.name)
            && a.xattrs.map(\.value) == b.xattrs.map(\.value)
    }
}

/// Sub-document operations (docs/internals/subdoc.md): the smart client's MULTI_LOOKUP and MULTI_MUTATION.
extension BucketClient {
    /// Runs a MULTI_LOOKUP. Nil when the key does not exist (with ACCESS_DELETED: not even as a tombstone);
    /// per-path failures are in the results (the request as a whole succeeded).
    public func lookupIn(_ key: String, _ request: SubdocRequest) async throws -> LookupInResult? {
        try await lookupIn(key, collection: CollectionsManifest.defaultCollectionID, request)
    }

    /// `lookupIn` in collection `collection` (an id; 0 is `_default._default`).
    func lookupIn(_ key: String, collection: UInt32, _ request: SubdocRequest) async throws -> LookupInResult? {
        guard !request.isMutation, request.isMulti else {
            throw ClientError.invalidArguments("lookupIn takes a MULTI_LOOKUP")
        }
        let k = try operationKey(key, collection: collection)
        let req = RequestFrame(
            opcode: .subdocMultiLookup, extras: ByteBuffer(bytes: request.encodedExtras), key: k.wire,
            value: ByteBuffer(bytes: request.encodedValue))
        let r = try await execute(req, key: k.route, operation: "lookup_in")
        let status = r.status.rawValue
        let answered = [
            0, SubdocRequest.multiPathFailureStatus, SubdocRequest.successDeletedStatus,
            SubdocRequest.multiPathFailureDeletedStatus,
        ]
        guard answered.contains(status) else {
            if r.status == .keyNotFound { return nil }
            throw ClientError.from(status: r.status, opcode: .subdocMultiLookup, message: String(buffer: r.value))
                ?? .server(status: status, message: "")
        }
        guard let results = SubdocRequest.lookupResults(Array(r.value.readableBytesView)),
            results.count == request.specs.count
        else { throw ClientError.server(status: status, message: "malformed MULTI_LOOKUP answer") }
        let deleted =
            status == SubdocRequest.successDeletedStatus || status == SubdocRequest.multiPathFailureDeletedStatus
        return LookupInResult(cas: CAS(r.cas), deleted: deleted, results: results)
    }

    /// Runs a MULTI_MUTATION, with `cas` (non-zero) as its condition. KEY_EEXISTS (the CAS changed) is
    /// `.casMismatch` (`.keyExists` with the ADD document flag), KEY_ENOENT `.keyNotFound`, a failed path
    /// `.server` with MULTI_PATH_FAILURE's status and the failing spec in its message.
    public func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS = .zero) async throws -> MutationResult {
        try await mutateIn(key, collection: CollectionsManifest.defaultCollectionID, request, cas: cas)
    }

    /// `mutateIn` in collection `collection` (an id; 0 is `_default._default`).
    func mutateIn(_ key: String, collection: UInt32, _ request: SubdocRequest, cas: CAS) async throws
        -> MutationResult
    {
        guard request.isMutation, request.isMulti else {
            throw ClientError.invalidArguments("mutateIn takes a MULTI_MUTATION")
        }
        let k = try operationKey(key, collection: collection)
        let value = request.encodedValue
        guard value.count <= Limits.maxValueSize + Limits.subdocMaxXattrSize else { throw ClientError.valueTooLarge }
        let req = RequestFrame(
            opcode: .subdocMultiMutation, cas: cas.rawValue,
            framingExtras: request.preserveExpiry ? ByteBuffer(bytes: FrameInfoParser.preserveTTL) : ByteBuffer(),
            extras: ByteBuffer(bytes: request.encodedExtras), key: k.wire, value: ByteBuffer(bytes: value))
        let r = try await execute(req, key: k.route, operation: "mutate_in")
        if r.status.rawValue == SubdocRequest.multiPathFailureStatus {
            let failure = SubdocRequest.mutationFailure(Array(r.value.readableBytesView))
            throw ClientError.server(
                status: r.status.rawValue,
                message: failure.map { "spec \($0.index) failed with status 0x\(String($0.status, radix: 16))" }
                    ?? "a spec failed")
        }
        if r.status == .keyExists, request.docFlags.contains(.add) { throw ClientError.keyExists }
        if let e = ClientError.from(status: r.status, opcode: .subdocMultiMutation, message: String(buffer: r.value)) {
            throw e
        }
        let vb = currentConfig?.vbucket(forKey: k.route.readableBytesView).rawValue ?? 0
        var token: MutationToken?
        if r.extras.readableBytes >= 16, let uuid: UInt64 = r.extras.getInteger(at: r.extras.readerIndex),
            let seqno: UInt64 = r.extras.getInteger(at: r.extras.readerIndex + 8)
        {
            token = MutationToken(vbucket: VBucketID(vb), vbucketUUID: VBucketUUID(uuid), seqno: SeqNo(seqno))
        }
        return MutationResult(cas: CAS(r.cas), token: token)
    }

    /// The document's body and every extended attribute it stores: `$XTOC` names them, then one lookup reads
    /// them (at most `Limits.subdocMaxMultiPaths - 1` at a time) with the body. Nil when the key does not exist.
    public func getWithXattrs(_ key: String) async throws -> DocumentWithXattrs? {
        let toc = SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("$XTOC".utf8))
        let body = SubdocSpec(operation: .wholeDocumentGet, path: [])
        guard let first = try await lookupIn(key, .multiLookup([toc, body])) else { return nil }
        var names: [String] = []
        if first.results[0].status == 0, let items = (try? JSON.parse(first.results[0].value))?.arrayValue {
            names = items.compactMap(\.stringValue)
        }
        var xattrs: [(name: String, value: [UInt8])] = []
        var cas = first.cas
        var bodyBytes = first.results[1].value
        var start = 0
        while start < names.count {
            let chunk = Array(names[start..<min(names.count, start + Limits.subdocMaxMultiPaths - 1)])
            start += chunk.count
            let specs = chunk.map { SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array($0.utf8)) }
            guard let r = try await lookupIn(key, .multiLookup(specs + [body])) else { return nil }
            for (name, result) in zip(chunk, r.results) where result.status == 0 {
                xattrs.append((name, result.value))
            }
            cas = r.cas
            bodyBytes = r.results[r.results.count - 1].value
        }
        return DocumentWithXattrs(body: bodyBytes, xattrs: xattrs, cas: cas)
    }
}
