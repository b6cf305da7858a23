import SetteeClient
import SetteeCore
import SetteeStorage
import SetteeSubdoc

/// Sub-document requests on the embedded bucket, decided by the same pure `SubdocRequest.execute` the KV port
/// runs (docs/internals/subdoc.md) and stored through the engine's CAS-checked writes, so a database with
/// shared bucket access behaves the same on `walrus:` as on a cluster bucket (docs/adr/0037).
extension EmbeddedBucket {
    public func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult? {
        let (vb, k) = location(key)
        let engine = self.engine
        let accessDeleted = request.docFlags.contains(.accessDeleted)
        let answer = try await withFetch(vb, k) {
            () throws(EngineError) -> Result<LookupInResult?, GatewayBucketError> in
            let doc: Document
            do throws(EngineError) {
                doc = accessDeleted ? try engine.getIncludingDeleted(vb, k) : try engine.get(vb, k)
            } catch .keyNotFound {
                return .success(nil)
            }
            let (xattrs, body) = Self.split(doc)
            let metadata = Self.metadata(doc, body: body, xattrs: xattrs, engine: engine, vb: vb)
            guard
                case .reply(let status, let reply) = request.execute(
                    on: body, metadata: metadata, xattrs: xattrs, deleted: doc.meta.deleted)
            else { return .failure(.failed("not a lookup")) }
            if status == SubdocRequest.keyNotFoundStatus { return .success(nil) }
            let deleted =
                status == SubdocRequest.successDeletedStatus || status == SubdocRequest.multiPathFailureDeletedStatus
            guard [0, SubdocRequest.multiPathFailureStatus].contains(status) || deleted,
                let results = SubdocRequest.lookupResults(reply)
            else { return .failure(.failed("sub-document lookup failed with status 0x\(String(status, radix: 16))")) }
            return .success(LookupInResult(cas: doc.meta.cas, deleted: deleted, results: results))
        }
        return try answer.get()
    }

    public func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS {
        let (vb, k) = location(key)
        let engine = self.engine
        let accessDeleted = request.docFlags.contains(.accessDeleted)
        let answer = try await withFetch(vb, k) { () throws(EngineError) -> Result<CAS, GatewayBucketError> in
            let doc: Document?
            do throws(EngineError) {
                doc = accessDeleted ? try engine.getIncludingDeleted(vb, k) : try engine.get(vb, k)
            } catch .keyNotFound {
                doc = nil
            }
            if !cas.isZero {
                guard let doc else { return .failure(.notFound) }
                guard doc.meta.cas == cas else { return .failure(.exists) }
            }
            let deleted = doc?.meta.deleted ?? false
            var xattrs = XattrBlob()
            var body: [UInt8] = []
            if let doc { (xattrs, body) = Self.split(doc) }
            let metadata = doc.map { Self.metadata($0, body: body, xattrs: xattrs, engine: engine, vb: vb) }
            // The CAS read above guards the write, as the KV port's sub-document path does.
            let readCAS = doc?.meta.cas ?? .zero
            do throws(EngineError) {
                switch request.execute(
                    on: doc == nil ? nil : body, metadata: metadata, xattrs: xattrs, deleted: deleted)
                {
                case .reply(let status, _):
                    switch status {
                    case SubdocRequest.keyNotFoundStatus: return .failure(.notFound)
                    case SubdocRequest.keyExistsStatus: return .failure(.exists)
                    case SubdocRequest.tooBigStatus: return .failure(.tooBig)
                    default:
                        return .failure(
                            .failed("sub-document mutation failed with status 0x\(String(status, radix: 16))"))
                    }
                case .write(let write, _):
                    if write.deleted {
                        return .success(
                            try engine.updateTombstone(
                                vb, k, xattrs: write.value, cas: readCAS, macros: write.macros, create: doc == nil
                            ).cas)
                    }
                    var datatype: Datatype = write.isJSON ? .json : .raw
                    if write.hasXattrs { datatype.insert(.xattr) }
                    return .success(
                        try engine.store(
                            doc == nil || deleted ? .add : .replace, vb, k, value: write.value,
                            flags: doc?.meta.flags ?? 0, expiry: request.expiry ?? 0, datatype: datatype,
                            cas: readCAS, preserveExpiry: request.preserveExpiry, preserveXattrs: false,
                            macros: write.macros
                        ).cas)
                case .remove(let keeping, let macros):
                    return .success(
                        try engine.delete(vb, k, cas: readCAS, tombstoneXattrs: keeping, macros: macros).cas)
                }
            } catch .keyExists {
                return .failure(.exists)
            } catch .keyNotFound {
                return .failure(.notFound)
            }
        }
        return try answer.get()
    }

    /// The stored attributes and the body of a document (a tombstone's body is empty).
    private static func split(_ doc: Document) -> (XattrBlob, [UInt8]) {
        guard doc.meta.datatype.contains(.xattr) else { return (XattrBlob(), doc.meta.deleted ? [] : doc.value) }
        guard let (blob, body) = XattrBlob.split(doc.value) else { return (XattrBlob(), doc.body) }
        return (blob, doc.meta.deleted ? [] : body)
    }

    private static func metadata(
        _ doc: Document, body: [UInt8], xattrs: XattrBlob, engine: BucketEngine, vb: VBucketID
    ) -> SubdocItemMetadata {
        let wall = SystemWallClock().nowNanoseconds()
        return SubdocItemMetadata(
            cas: doc.meta.cas.rawValue, vbucketUUID: engine.failoverLog(vb).first?.uuid.rawValue ?? 0,
            seqno: doc.meta.bySeqno.rawValue, revSeqno: doc.meta.revSeqno.rawValue, expiry: doc.meta.expiry,
            flags: doc.meta.flags, valueBytes: body.count, isJSON: doc.meta.datatype.contains(.json),
            deleted: doc.meta.deleted, hlcNowNanoseconds: max(wall, doc.meta.cas.rawValue),
            hlcIsLogical: doc.meta.cas.rawValue > wall, hasXattrs: !xattrs.pairs.isEmpty)
    }
}
