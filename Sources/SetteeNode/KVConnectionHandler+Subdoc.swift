import Logging
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeSubdoc
import Synchronization

/// Sub-document commands and collections on the KV port (`docs/adr/0028-subdocument-operations.md`).
///
/// A sub-document request runs inside `execute`, like SET: the frame's shape, vBucket and durability are
/// checked by `dataOperation`, an evicted document is fetched and the request re-run, and a durable one
/// waits for its level through the same path. The decision is pure (`SubdocRequest.execute`); this file
/// reads the document, stores what it decided through the engine's CAS-checked `store`/`delete` (so
/// replication, persistence and change streams see an ordinary mutation), and writes the answer.
extension KVConnectionHandler {
    func executeSubdoc(
        _ frame: Frame, engine: BucketEngine, settings: BucketSettings, infos: FrameInfos, into b: inout ByteBuffer
    ) -> Outcome {
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
        if Int(frame.vbucket) >= settings.numVBuckets {
            writeNotMyVBucket(frame, bucket: settings.name, into: &b)
            return .done
        }
        let vb = VBucketID(frame.vbucket)
        let key = Array(frame.key.readableBytesView)
        let syncWrite = infos.durabilityLevel.map { pendingMajority != nil || $0.requiresPersistenceOnActive } ?? false

        // A mutation without a client CAS re-reads and re-applies itself when another write got in between.
        for _ in 0..<(request.isMutation ? Limits.subdocCASRetries : 1) {
            let document: Document?
            do {
                document = try engine.get(vb, key)
            } catch .keyNotFound {
                document = nil
            } catch .wouldBlock {
                return .wouldBlock(vb, key)
            } catch {
                writeSubdocEngineError(error, frame: frame, settings: settings, vb: vb, into: &b)
                return .done
            }
            if !request.isMutation { node.counters.cmdGet.wrappingAdd(1, ordering: .relaxed) }
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
            let result: MutationResult
            let body: [UInt8]
            // What virtual XATTRs show: the document's metadata and the vBucket's clock, which runs
            // logically ahead of the wall clock when a CAS is ahead of it. Only XATTR paths need it.
            let readsXattrs = request.specs.contains { $0.flags.contains(.xattrPath) }
            let metadata = (readsXattrs ? document : nil).map { d in
                let wall = node.clock.nowNanoseconds()
                return SubdocItemMetadata(
                    cas: d.meta.cas.rawValue, vbucketUUID: engine.failoverLog(vb).first?.uuid.rawValue ?? 0,
                    seqno: d.meta.bySeqno.rawValue, revSeqno: d.meta.revSeqno.rawValue, expiry: d.meta.expiry,
                    flags: d.meta.flags, valueBytes: d.value.count, isJSON: d.meta.datatype.contains(.json),
                    deleted: d.meta.deleted, hlcNowNanoseconds: max(wall, d.meta.cas.rawValue),
                    hlcIsLogical: d.meta.cas.rawValue > wall)
            }
            do {
                switch request.execute(on: document?.value, metadata: metadata) {
                case .reply(let status, let replyBody):
                    // Lookups report the document's CAS, partial failures included (the SDK shows it).
                    let cas =
                        !request.isMutation && (status == 0 || status == 0xcc) ? document?.meta.cas.rawValue ?? 0 : 0
                    let datatype: UInt8 = status == 0 && !request.isMulti && op == .subdocGet && state.json ? 1 : 0
                    b.writeResponse(
                        opcode: op, status: Status(status), opaque: frame.opaque, cas: cas, datatype: datatype,
                        value: replyBody)
                    return .done
                case .store(let value, let isJSON, let storeBody):
                    node.counters.cmdSet.wrappingAdd(1, ordering: .relaxed)
                    body = storeBody
                    // Without an expiry in the request the document gets none, unless the client asked to
                    // keep it (preserve-TTL), as Couchbase does.
                    result = try engine.store(
                        document == nil ? .add : .replace, vb, key, value: value, flags: document?.meta.flags ?? 0,
                        expiry: request.expiry ?? 0, datatype: isJSON ? .json : .raw,
                        cas: document?.meta.cas ?? CAS(0), preserveExpiry: infos.preserveTTL, syncWrite: syncWrite)
                case .delete:
                    body = []
                    result = try engine.delete(vb, key, cas: document?.meta.cas ?? CAS(0), syncWrite: syncWrite)
                }
            } catch .keyExists where frame.cas == 0 && !request.docFlags.contains(.add) {
                continue  // changed (or created) since we read it: again, on the new version
            } catch .keyNotFound where frame.cas == 0 && document != nil {
                continue  // deleted since we read it: again (MKDOC recreates it, otherwise KEY_ENOENT)
            } catch .wouldBlock {
                return .wouldBlock(vb, key)
            } catch {
                writeSubdocEngineError(error, frame: frame, settings: settings, vb: vb, into: &b)
                return .done
            }
            let extras = state.mutationSeqno ? 16 : 0
            b.writeResponseHeader(
                opcode: op, status: .success, opaque: frame.opaque, cas: result.cas.rawValue, extrasLength: extras,
                valueLength: body.count)
            if extras > 0 {
                b.writeInteger(result.token.uuid.rawValue)
                b.writeInteger(result.token.seqno.rawValue)
            }
            b.writeBytes(body)
            return persistIfNeeded(result, infos: infos)
        }
        // Lost the race every time: the client may retry.
        b.writeResponseHeader(opcode: op, status: .temporaryFailure, opaque: frame.opaque)
        return .done
    }

    private func writeSubdocEngineError(
        _ error: EngineError, frame: Frame, settings: BucketSettings, vb: VBucketID, into b: inout ByteBuffer
    ) {
        switch error {
        case .notMyVBucket:
            writeNotMyVBucket(frame, bucket: settings.name, into: &b)
        case .ioFailure(let reason):
            logger.error(
                "storage failure", metadata: ["bucket": "\(settings.name)", "vb": "\(vb)", "reason": "\(reason)"])
            b.writeResponse(opcode: frame.opcode, status: .internalError, opaque: frame.opaque, value: error.message)
        default:
            b.writeResponse(
                opcode: frame.opcode, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                value: error.message)
        }
    }

    // MARK: collections

    /// With Collections negotiated a document key starts with its collection id: strips it for the default
    /// collection, answers UNKNOWN_COLLECTION for any other (nil: answered).
    func inDefaultCollection(_ frame: Frame) -> Frame? {
        guard let (id, length) = Self.collectionPrefix(of: frame.key) else {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque,
                    value: ErrorText.invalidArguments)
            }
            return nil
        }
        guard id == DefaultCollection.id else {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .unknownCollection, opaque: frame.opaque, datatype: 1,
                    value: DefaultCollection.unknownBody)
            }
            return nil
        }
        var scoped = frame
        scoped.key.moveReaderIndex(forwardBy: length)
        return scoped
    }

    /// The collection id at the front of a key (unsigned LEB128): its value and length in bytes. Nil when
    /// malformed: more than 5 bytes (a u32 needs at most 5 groups of 7 bits), or no byte without the
    /// continuation bit.
    static func collectionPrefix(of key: ByteBuffer) -> (id: UInt32, length: Int)? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        for (k, byte) in key.readableBytesView.prefix(5).enumerated() {
            value |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 {
                guard value <= UInt64(UInt32.max) else { return nil }
                return (UInt32(value), k + 1)
            }
            shift += 7
        }
        return nil
    }

    /// GET_COLLECTIONS_MANIFEST (0xba) and GET_COLLECTION_ID (0xbb): the default collection only.
    func collectionOperation(_ frame: Frame) {
        guard case .ok = currentBucket() else {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .noBucket, opaque: frame.opaque) }
            return
        }
        if frame.opcode == .getCollectionsManifest {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .success, opaque: frame.opaque, datatype: 1,
                    value: DefaultCollection.manifestJSON)
            }
            return
        }
        // The path comes in the value (or, from older clients, the key).
        let path = String(buffer: frame.value.readableBytes > 0 ? frame.value : frame.key)
        let resolution = DefaultCollection.resolve(path)
        switch resolution {
        case .collection(let id):
            emit {
                $0.writeResponseHeader(opcode: frame.opcode, status: .success, opaque: frame.opaque, extrasLength: 12)
                $0.writeInteger(DefaultCollection.manifestUID)
                $0.writeInteger(id)
            }
        case .unknownScope, .unknownCollection:
            let status: Status = resolution == .unknownScope ? .unknownScope : .unknownCollection
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: status, opaque: frame.opaque, datatype: 1,
                    value: DefaultCollection.unknownBody)
            }
        case .invalid:
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque,
                    value: ErrorText.invalidArguments)
            }
        }
    }
}
