import Logging
import NIOCore
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeSubdoc
import Synchronization

/// Sub-document commands on the KV port (`docs/adr/0028-subdocument-operations.md`).
///
/// A sub-document request runs inside `execute`, like SET: the frame's shape, vBucket and durability are
/// checked by `dataOperation`, an evicted document is fetched and the request re-run, and a durable one
/// waits for its level through the same path. The decision is pure (`SubdocRequest.execute`); this file
/// reads the document, stores what it decided through the engine's CAS-checked `store`/`delete` (so
/// replication, persistence and change streams see an ordinary mutation), and writes the answer.
extension KVConnectionHandler {
    func executeSubdoc(
        _ frame: Frame, bucket: ResolvedBucket, infos: FrameInfos, into b: inout ByteBuffer
    ) -> Outcome {
        let engine = bucket.engine
        let op = frame.opcode
        let keyLength = frame.key.readableBytes
        guard keyLength > 0, keyLength <= Limits.maxKeyLength, (frame.datatype & ~Datatype.json.rawValue) == 0 else {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: ErrorText.invalidArguments)
            return .done
        }
        let request: SubdocRequest
        do {
            request = try SubdocRequest.decode(
                opcode: op.rawValue, extras: Array(frame.extras.readableBytesView),
                value: Array(frame.value.readableBytesView))
        } catch {
            b.writeResponseHeader(opcode: op, status: Status(error.status), opaque: frame.opaque)
            return .done
        }
        // ADD means "only if absent": a CAS cannot go with it (kv_engine answers EINVAL).
        if request.docFlags.contains(.add) && frame.cas != 0 {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: ErrorText.invalidArguments)
            return .done
        }
        // System XATTRs (`_…`) need SystemXattrWrite to edit (the whole request is EACCESS) and SystemXattrRead
        // to read (EACCESS per path), as kv_engine checks them (ADR 0029).
        let privileges = systemXattrPrivileges(bucket)
        if let refusal = request.systemXattrRefusal(privileges) {
            b.writeResponse(opcode: op, status: Status(refusal), opaque: frame.opaque, value: Array("No access".utf8))
            return .done
        }
        if Int(frame.vbucket) >= bucket.settings.numVBuckets {
            writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &b)
            return .done
        }
        let vb = VBucketID(frame.vbucket)
        let key = Array(frame.key.readableBytesView)
        let syncWrite: SyncWrite =
            infos.durabilityLevel.map {
                pendingMajority != nil || $0.requiresPersistenceOnActive ? SyncWrite(level: $0.rawValue) : false
            } ?? false

        // A mutation without a client CAS re-reads and re-applies itself when another write got in between.
        for _ in 0..<(request.isMutation ? Limits.subdocCASRetries : 1) {
            // ACCESS_DELETED reaches a tombstone too (its body is empty; its value is the XATTRs it kept).
            let document: Document?
            do {
                document =
                    request.docFlags.contains(.accessDeleted)
                    ? try engine.getIncludingDeleted(vb, key) : try engine.get(vb, key)
            } catch .keyNotFound {
                document = nil
            } catch .wouldBlock {
                return .wouldBlock(vb, key)
            } catch {
                writeSubdocEngineError(error, frame: frame, bucket: bucket, vb: vb, into: &b)
                return .done
            }
            if !request.isMutation { ops.cmdGet.wrappingAdd(1, ordering: .relaxed) }
            if request.isMutation && frame.cas != 0 {
                guard let document else {
                    b.writeResponseHeader(opcode: op, status: .keyNotFound, opaque: frame.opaque)
                    return .done
                }
                guard document.meta.cas.rawValue == frame.cas else {
                    b.writeResponseHeader(opcode: op, status: .keyExists, opaque: frame.opaque)
                    return .done
                }
            }
            // The stored value is the XATTR section (datatype bit 0x04) then the body (ADR 0029).
            let deleted = document?.meta.deleted ?? false
            let hasXattrs = document?.meta.datatype.contains(.xattr) ?? false
            var stored = XattrBlob()
            var body = document?.value ?? []
            if hasXattrs, let value = document?.value {
                if let (blob, rest) = XattrBlob.split(value) {
                    (stored, body) = (blob, rest)
                } else {
                    body = XattrSection.body(of: value, hasXattrs: true)
                }
            }
            let result: MutationResult
            let answer: [UInt8]
            // What virtual XATTRs show: the document's metadata and the vBucket's clock, which runs
            // logically ahead of the wall clock when a CAS is ahead of it. Only XATTR paths need it.
            let readsXattrs = request.specs.contains { $0.flags.contains(.xattrPath) }
            let metadata = (readsXattrs ? document : nil).map { d in
                let wall = node.clock.nowNanoseconds()
                return SubdocItemMetadata(
                    cas: d.meta.cas.rawValue, vbucketUUID: engine.failoverLog(vb).first?.uuid.rawValue ?? 0,
                    seqno: d.meta.bySeqno.rawValue, revSeqno: d.meta.revSeqno.rawValue, expiry: d.meta.expiry,
                    flags: d.meta.flags, valueBytes: body.count, isJSON: d.meta.datatype.contains(.json),
                    deleted: d.meta.deleted, hlcNowNanoseconds: max(wall, d.meta.cas.rawValue),
                    hlcIsLogical: d.meta.cas.rawValue > wall, hasXattrs: !stored.pairs.isEmpty)
            }
            do {
                switch request.execute(
                    on: document == nil ? nil : body, metadata: metadata, xattrs: stored, deleted: deleted,
                    privileges: privileges)
                {
                case .reply(let status, let replyBody):
                    // Lookups report the document's CAS, partial failures included (the SDK shows it).
                    let found = [
                        0, SubdocRequest.multiPathFailureStatus, SubdocRequest.successDeletedStatus,
                        SubdocRequest.multiPathFailureDeletedStatus,
                    ].contains(status)
                    let cas = !request.isMutation && found ? document?.meta.cas.rawValue ?? 0 : 0
                    let single = (status == 0 || status == SubdocRequest.successDeletedStatus) && !request.isMulti
                    let datatype: UInt8 = single && op == .subdocGet && state.json ? 1 : 0
                    b.writeResponse(
                        opcode: op, status: Status(status), opaque: frame.opaque, cas: cas, datatype: datatype,
                        value: replyBody)
                    return .done
                case .write(let write, let writeBody):
                    ops.cmdSet.wrappingAdd(1, ordering: .relaxed)
                    answer = writeBody
                    let cas = document?.meta.cas ?? CAS(0)
                    if write.deleted {
                        // No document read: CREATE_AS_DELETED makes the tombstone (KEY_EEXISTS if one appeared).
                        result = try engine.updateTombstone(
                            vb, key, xattrs: write.value, cas: cas, syncWrite: syncWrite, macros: write.macros,
                            create: document == nil)
                    } else {
                        var datatype: Datatype = write.isJSON ? .json : .raw
                        if write.hasXattrs { datatype.insert(.xattr) }
                        // Without an expiry in the request the document gets none, unless the client asked to
                        // keep it (preserve-TTL), as Couchbase does. A tombstone is recreated (or revived) like a new
                        // document, with ADD guarded by the tombstone's CAS.
                        result = try engine.store(
                            document == nil || deleted ? .add : .replace, vb, key, value: write.value,
                            flags: document?.meta.flags ?? 0,
                            expiry: expiry(request.expiry ?? 0, forKey: frame.key, bucket: bucket), datatype: datatype,
                            cas: cas, preserveExpiry: infos.preserveTTL, syncWrite: syncWrite,
                            preserveXattrs: false, macros: write.macros)
                    }
                case .remove(let keeping, let macros):
                    answer = []
                    result = try engine.delete(
                        vb, key, cas: document?.meta.cas ?? CAS(0), syncWrite: syncWrite, tombstoneXattrs: keeping,
                        macros: macros)
                }
            } catch .keyExists where frame.cas == 0 && !request.docFlags.contains(.add) {
                continue  // changed (or created) since we read it: again, on the new version
            } catch .keyNotFound where frame.cas == 0 && document != nil {
                continue  // deleted since we read it: again (MKDOC recreates it, otherwise KEY_ENOENT)
            } catch .wouldBlock {
                return .wouldBlock(vb, key)
            } catch {
                writeSubdocEngineError(error, frame: frame, bucket: bucket, vb: vb, into: &b)
                return .done
            }
            let extras = state.mutationSeqno ? 16 : 0
            b.writeResponseHeader(
                opcode: op, status: .success, opaque: frame.opaque, cas: result.cas.rawValue, extrasLength: extras,
                valueLength: answer.count)
            if extras > 0 {
                b.writeInteger(result.token.uuid.rawValue)
                b.writeInteger(result.token.seqno.rawValue)
            }
            b.writeBytes(answer)
            return persistIfNeeded(result, infos: infos)
        }
        // Lost the race every time: the client may retry.
        b.writeResponseHeader(opcode: op, status: .temporaryFailure, opaque: frame.opaque)
        return .done
    }

    /// The connection's SystemXattrRead / SystemXattrWrite on `bucket` (ADR 0029): the admin and bucket
    /// principals hold both, a user what its roles grant, an anonymous connection what ADR 0015 allows.
    func systemXattrPrivileges(_ bucket: ResolvedBucket) -> SystemXattrPrivileges {
        let grants: BucketGrants
        switch state.principal {
        case .admin?, .bucket(_)?: return .all
        case .user(_, let roles)?: grants = roles.grants(onBucket: bucket.settings.name)
        case nil: grants = BucketGrants.anonymous(bucketHasNoPassword: bucket.settings.authType == .none)
        }
        var privileges: SystemXattrPrivileges = []
        if grants.contains(.systemXattrRead) { privileges.insert(.read) }
        if grants.contains(.systemXattrWrite) { privileges.insert(.write) }
        return privileges
    }

    private func writeSubdocEngineError(
        _ error: EngineError, frame: Frame, bucket: ResolvedBucket, vb: VBucketID, into b: inout ByteBuffer
    ) {
        switch error {
        case .notMyVBucket:
            writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &b)
        case .ioFailure(let reason):
            logger.error(
                "storage failure",
                metadata: ["bucket": "\(bucket.settings.name)", "vb": "\(vb)", "reason": "\(reason)"])
            b.writeResponse(opcode: frame.opcode, status: .internalError, opaque: frame.opaque, value: error.message)
        default:
            b.writeResponse(
                opcode: frame.opcode, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                value: error.message)
        }
    }
}
