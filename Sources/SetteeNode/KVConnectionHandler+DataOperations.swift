import Logging
import NIOCore
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeSubdoc
import Synchronization

/// Result of running a data operation: finished (response written, or deliberately none), blocked
/// on a disk fetch of an evicted value, or waiting for its batch to be fsynced (durable write).
enum Outcome {
    case done
    case wouldBlock(VBucketID, [UInt8])
    case persist(VBucketID, SeqNo, timeoutMs: UInt16?)
    /// A durable write waiting for a majority of the vBucket's copies (replicaNumber > 0).
    case majority(VBucketID, SeqNo, DurabilityLevel, timeoutMs: UInt16?, monitor: DurabilityMonitor, copies: Int)
}

/// Data requests: GET and friends, stores, arithmetic, touch, meta, OBSERVE_SEQNO, GET_AND_LOCK and UNLOCK_KEY. `execute` runs one against the
/// engine synchronously on the event loop and writes its response; `dataOperation` puts it in order with the
/// connection's other answers and hands what must wait to `handleAsync` (`+Durability`).
extension KVConnectionHandler {
    /// A data request (GET, SET, ..., sub-document): the bucket, the caller's rights, a lock on the key, frame
    /// infos and a durable write's admission first, then `execute`, answered in order with the connection's other
    /// responses (or out of order for a waiting durable write under UnorderedExecution).
    func dataOperation(_ frame: Frame) {
        guard let bucket = resolveBucket(for: frame) else { return }
        // The engine is read from the connection's cached lookup (one reference, ADR 0071) at each use, not held in
        // a local: a local was a retain and a release per request of the engine, which every connection shares.
        guard authorize(frame, bucket: bucket) else { return }
        // The serving lease (ADR 0124): one atomic load and a clock read; the vBucket's state only when it lapsed.
        if !node.registry.servingLease.holds(), refusedWithoutLease(frame, bucket: bucket) { return }
        if BucketEngine.mayHaveLocks && answeredByLock(frame, engine: bucket.engine) { return }
        // Framing extras: durability and preserve-TTL.
        var infos = FrameInfos()
        if frame.framingExtras.readableBytes > 0 {
            do {
                infos = try FrameInfoParser.parse(frame.framingExtras)
            } catch {
                let status: Status = error == .malformed ? .invalidArguments : .notSupported
                emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
                return
            }
        }
        if let level = infos.durabilityLevel,
            !admitDurableWrite(frame, level: level, bucket: bucket)
        {
            return
        }
        defer { pendingMajority = nil }
        if slots.isEmpty && infos.durabilityLevel == nil {
            let outcome = execute(frame, bucket: bucket, infos: infos, into: &out)
            if case .done = outcome { return }
            handleAsync(
                outcome, frame: frame, bucket: bucket, infos: infos, slot: reserveSlot())
        } else if state.unorderedExecution && infos.durabilityLevel != nil {
            // Out of order: a durable write that has to wait answers when its level is met or it times out,
            // while everything after it answers at once (the client matches responses by opaque).
            var b = ByteBuffer()
            let outcome = execute(frame, bucket: bucket, infos: infos, into: &b)
            if case .done = outcome {
                emit { $0.writeBuffer(&b) }
                return
            }
            handleAsync(
                outcome, frame: frame, bucket: bucket, infos: infos,
                slot: reserveDetachedSlot(),
                response: b)
        } else {
            let slot = reserveSlot()
            var b = ByteBuffer()
            let outcome = execute(frame, bucket: bucket, infos: infos, into: &b)
            if case .done = outcome {
                complete(slot, b)
                return
            }
            handleAsync(
                outcome, frame: frame, bucket: bucket, infos: infos, slot: slot, response: b)
        }
    }

    func isMutation(_ op: Opcode) -> Bool {
        if op.isSubdoc { return !op.isSubdocLookup }
        switch op.loud {
        case .set, .add, .replace, .delete, .increment, .decrement, .append, .prepend: return true
        default: return false
        }
    }

    /// Runs one data operation synchronously against the engine and writes its response (if any)
    /// into `b`. Never blocks: an evicted value yields `.wouldBlock` with nothing written.
    func execute(
        _ frame: Frame, bucket: ResolvedBucket, infos: FrameInfos, into b: inout ByteBuffer
    ) -> Outcome {
        // Read from the connection's `ResolvedBucket` here, not passed in: an argument loaded from it was retained and
        // released around the call, and every connection shares the engine (ADR 0087).
        let engine = bucket.engine
        if frame.opcode.isSubdoc {
            return executeSubdoc(frame, bucket: bucket, infos: infos, into: &b)
        }
        let op = frame.opcode
        let loud = op.loud
        let quiet = op.isQuiet
        let keyLength = frame.key.readableBytes
        let extrasLength = frame.extras.readableBytes

        // Shape checks, as memcached does them: wrong extras/key/value sizes are EINVAL.
        if !RequestShape.accepts(frame, maxKeyLength: Limits.maxKeyLength) {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: ErrorText.invalidArguments)
            return .done
        }
        // Snappy is not negotiated; XATTR values (section + body, ADR 0029) only from a connection that agreed
        // XATTR (0x06), on SET / ADD / REPLACE, and only with a well-formed section.
        let xattrValue = frame.datatype & Datatype.xattr.rawValue != 0
        let section = xattrValue ? XattrBlob.split(Array(frame.value.readableBytesView)) : nil
        if (frame.datatype & ~(Datatype.json.rawValue | Datatype.xattr.rawValue)) != 0
            || (xattrValue
                && !(state.xattr
                    && (loud == .set || loud == .add || loud == .replace || loud == .setWithMeta || loud == .addWithMeta
                        || loud == .delWithMeta)))
            || (xattrValue && section == nil)
        {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: Array("Invalid datatype".utf8))
            return .done
        }
        // User and system attributes have 1 MiB each (ADR 0029 amendment), on a SET as on a sub-document mutation.
        if section?.xattrs.exceedsLimits == true {
            b.writeResponse(opcode: op, status: .valueTooLarge, opaque: frame.opaque, value: ErrorText.tooLarge)
            return .done
        }
        // A value carrying system XATTRs (`_…`) needs SystemXattrWrite, as in kv_engine (ADR 0029); without it
        // the document's own system XATTRs survive the new section (`keepSystemXattrs` below).
        let mayWriteSystemXattrs =
            !xattrValue || systemXattrPrivileges(bucket).contains(.write)
        if !mayWriteSystemXattrs, !XattrSection.systemOnly(Array(frame.value.readableBytesView)).isEmpty {
            b.writeResponse(opcode: op, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
            return .done
        }
        let vbNumber = frame.vbucket
        if Int(vbNumber) >= bucket.settings.numVBuckets {
            writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &b)
            return .done
        }
        let vb = VBucketID(vbNumber)
        // Made only when needed: a GET hit reads the key in place from the frame.
        lazy var key: [UInt8] = keyLength > 0 ? Array(frame.key.readableBytesView) : []
        let cas = CAS(frame.cas)
        // A durable write that has to wait is applied as a prepare (hidden from readers until committed).
        let syncWrite: SyncWrite =
            infos.durabilityLevel.map {
                pendingMajority != nil || $0.requiresPersistenceOnActive ? SyncWrite(level: $0.rawValue) : false
            } ?? false

        do throws(EngineError) {
            switch loud {
            case .get, .getk:
                ops.cmdGet.wrappingAdd(1, ordering: .relaxed)
                // In place under the vBucket lock: the value is copied once, straight into the response.
                let json = state.json
                let includeKey = loud == .getk
                let collectionAware = state.collections
                let found = frame.key.withUnsafeReadableBytes { keyBytes in
                    Result { () throws(EngineError) in
                        try engine.withDocument(vb, keyBytes: keyBytes) { value, meta in
                            Self.writeDocument(
                                value: value, meta: meta, json: json, frame: frame, includeKey: includeKey,
                                key: keyBytes, collectionAware: collectionAware, into: &b)
                        }
                    }
                }
                try found.get()
                ops.getHits.wrappingAdd(1, ordering: .relaxed)
            case .getReplica:
                let doc = try engine.getReplica(vb, key)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            case .gat:
                ops.cmdGet.wrappingAdd(1, ordering: .relaxed)
                guard let wire = frame.extrasField(0, as: UInt32.self) else { throw EngineError.invalidArguments }
                let exp = expiry(wire, forKey: frame.key, bucket: bucket)
                let doc = try engine.getAndTouch(vb, key, expiry: exp)
                ops.getHits.wrappingAdd(1, ordering: .relaxed)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            case .touch:
                guard let wire = frame.extrasField(0, as: UInt32.self) else { throw EngineError.invalidArguments }
                let exp = expiry(wire, forKey: frame.key, bucket: bucket)
                let r = try engine.touch(vb, key, expiry: exp)
                b.writeResponseHeader(opcode: op, status: .success, opaque: frame.opaque, cas: r.cas.rawValue)
            case .set, .add, .replace:
                ops.cmdSet.wrappingAdd(1, ordering: .relaxed)
                guard let flags = frame.extrasField(0, as: UInt32.self) else { throw EngineError.invalidArguments }
                guard let wire = frame.extrasField(4, as: UInt32.self) else { throw EngineError.invalidArguments }
                let exp = expiry(wire, forKey: frame.key, bucket: bucket)
                let storeOp: StoreOperation = loud == .set ? .set : (loud == .add ? .add : .replace)
                // The JSON bit is the server's to set, from the body's bytes, whatever the request said or the
                // connection negotiated (kv_engine: "we do not trust what the client sent"); XATTR is the client's.
                let sectionBit = Datatype(rawValue: frame.datatype & Datatype.xattr.rawValue)
                let sectionBodyBit = section.map { s in s.body.withUnsafeBytes { Self.jsonBit(of: $0) } }
                let preserveTTL = infos.preserveTTL
                // The value is read in place from the frame and copied once, into the item (ADR 0048): the
                // engine keeps no reference to these bytes after the call. A body alone keeps the document's
                // XATTRs; a value with its own section replaces them.
                let stored = frame.value.withUnsafeReadableBytes { value in
                    Result { () throws(EngineError) in
                        let datatype = sectionBit.union(sectionBodyBit ?? Self.jsonBit(of: value))
                        return try engine.store(
                            storeOp, vb, key, valueBytes: value, flags: flags, expiry: exp, datatype: datatype,
                            cas: cas, preserveExpiry: preserveTTL, syncWrite: syncWrite, preserveXattrs: !xattrValue,
                            keepSystemXattrs: !mayWriteSystemXattrs)
                    }
                }
                return mutationDone(frame, try stored.get(), infos: infos, into: &b)
            case .delete:
                let r = try engine.delete(vb, key, cas: cas, syncWrite: syncWrite)
                return mutationDone(frame, r, infos: infos, into: &b)
            case .setWithMeta, .addWithMeta, .delWithMeta:
                // ADR 0147: the document's own CAS / revSeqno / flags / expiry (extras), the header CAS as guard;
                // conflict resolution by revSeqno then CAS unless SKIP_CONFLICT_RESOLUTION; ADD_WITH_META only where
                // no live document is. No durable form here.
                guard let request = WithMetaRequest.parse(extras: frame.extras), infos.durabilityLevel == nil else {
                    throw EngineError.invalidArguments
                }
                ops.cmdSet.wrappingAdd(1, ordering: .relaxed)
                let value = Array(frame.value.readableBytesView)
                let sectionBit = Datatype(rawValue: frame.datatype & Datatype.xattr.rawValue)
                let bodyBit = section.map { s in s.body.withUnsafeBytes { Self.jsonBit(of: $0) } }
                let deleted = loud == .delWithMeta
                let datatype =
                    deleted ? sectionBit : sectionBit.union(bodyBit ?? value.withUnsafeBytes { Self.jsonBit(of: $0) })
                let meta = IncomingMeta(
                    cas: CAS(request.cas), revSeqno: RevSeqNo(request.revSeqno), flags: request.flags,
                    expiry: request.expiry, datatype: datatype, deleted: deleted)
                let r = try engine.writeWithMeta(
                    vb, key, value: value, meta: meta, guardCAS: cas,
                    conflict: loud == .addWithMeta
                        ? .onlyIfAbsent
                        : request.options.contains(.skipConflictResolution) ? .skip : .revSeqnoThenCAS,
                    regenerateCAS: request.options.contains(.regenerateCAS))
                return mutationDone(frame, r, infos: infos, into: &b)
            case .append, .prepend:
                let value = Array(frame.value.readableBytesView)
                let r = try engine.concat(
                    loud == .append ? .append : .prepend, vb, key, value: value, cas: cas, syncWrite: syncWrite,
                    isJSON: { Self.jsonBit(of: $0) == .json })
                return mutationDone(frame, r, infos: infos, into: &b)
            case .increment, .decrement:
                guard let delta = frame.extrasField(0, as: UInt64.self),
                    let initial = frame.extrasField(8, as: UInt64.self),
                    let wire = frame.extrasField(16, as: UInt32.self)
                else { throw EngineError.invalidArguments }
                // 0xffffffff: do not create (the engine's rule); otherwise the collection's maxTTL applies.
                let exp = wire == UInt32.max ? wire : expiry(wire, forKey: frame.key, bucket: bucket)
                let (value, r) = try engine.arithmetic(
                    vb, key, delta: delta, initial: initial, expiry: exp, increment: loud == .increment, cas: cas,
                    syncWrite: syncWrite)
                if quiet && infos.durabilityLevel == nil { return .done }
                let extras = state.mutationSeqno ? 16 : 0
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, cas: r.cas.rawValue, extrasLength: extras,
                    valueLength: 8)
                if extras > 0 {
                    b.writeInteger(r.token.uuid.rawValue)
                    b.writeInteger(r.token.seqno.rawValue)
                }
                b.writeInteger(value)
                return persistIfNeeded(r, infos: infos)
            case .getMeta:
                let meta = try engine.getMeta(vb, key)
                let version = extrasLength == 1 ? (frame.extrasField(0, as: UInt8.self) ?? 1) : 1
                let extras = version >= 2 ? 21 : 20
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, cas: meta.cas.rawValue, extrasLength: extras)
                b.writeInteger(UInt32(meta.deleted ? 1 : 0))
                b.writeInteger(meta.flags)
                b.writeInteger(meta.expiry)
                b.writeInteger(meta.revSeqno.rawValue)
                if version >= 2 { b.writeInteger(state.json ? meta.datatype.rawValue : 0) }
            case .observeSeqno:
                let info = engine.seqnoInfo(vb)
                if info.state != .active && info.state != .replica {
                    writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &b)
                    return .done
                }
                guard let asked = frame.value.getInteger(at: frame.value.readerIndex, as: UInt64.self) else {
                    throw EngineError.invalidArguments
                }
                // A poller waits for persistence (an SDK's persistTo): not for the flusher's window (ADR 0107).
                if info.persistedSeqno < info.highSeqno { engine.persistSoon(vb) }
                // We do not keep the seqno at which an older uuid ended; a reply for another uuid says 0 there,
                // so the asker treats its write as possibly lost.
                let reply = ObserveSeqnoReply(
                    vbucket: vb.rawValue, uuid: info.uuid.rawValue, persistedSeqno: info.persistedSeqno.rawValue,
                    currentSeqno: info.highSeqno.rawValue,
                    failedOver: asked == info.uuid.rawValue ? nil : .init(oldUUID: asked, lastSeqno: 0))
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, valueLength: reply.encodedLength)
                reply.write(into: &b)
            case .getLocked:
                guard let seconds = frame.extrasField(0, as: UInt32.self) else { throw EngineError.invalidArguments }
                let doc = try engine.getAndLock(vb, key, lockSeconds: seconds)
                ops.cmdGet.wrappingAdd(1, ordering: .relaxed)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            case .unlockKey:
                try engine.unlock(vb, key, cas: cas)
                b.writeResponseHeader(opcode: op, status: .success, opaque: frame.opaque)
            default:
                // `dispatch` sends only data opcodes here; answer rather than trap if that ever changes.
                b.writeResponse(
                    opcode: op, status: .unknownCommand, opaque: frame.opaque, value: Array("Unknown command".utf8))
            }
        } catch {
            switch error {
            case .wouldBlock:
                return .wouldBlock(vb, key)
            case .keyNotFound where (loud == .get || loud == .getk || loud == .gat):
                ops.getMisses.wrappingAdd(1, ordering: .relaxed)
                if quiet { return .done }
                if loud == .getk {
                    b.writeResponseHeader(
                        opcode: op, status: .keyNotFound, opaque: frame.opaque, keyLength: key.count,
                        valueLength: error.message.count)
                    b.writeBytes(key)
                    b.writeBytes(error.message)
                } else {
                    b.writeResponse(opcode: op, status: .keyNotFound, opaque: frame.opaque, value: error.message)
                }
            case .notMyVBucket:
                writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &b)
            case .temporaryFailure where loud == .unlockKey:
                b.writeResponse(
                    opcode: op, status: Self.notLockedStatus, opaque: frame.opaque, value: Array("Not locked".utf8))
            case .ioFailure(let reason):
                logger.error(
                    "storage failure",
                    metadata: ["bucket": "\(bucket.settings.name)", "vb": "\(vb)", "reason": "\(reason)"])
                b.writeResponse(opcode: op, status: .internalError, opaque: frame.opaque, value: error.message)
            default:
                b.writeResponse(
                    opcode: op, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                    value: error.message)
            }
        }
        return .done
    }

    /// The datatype bit a body a client stores gets: `.json` when its bytes are one JSON text (`JSON.isWellFormed`),
    /// else `.raw`. A body above `Limits.maxValueSize` is not scanned: the engine refuses it.
    @inline(__always)
    static func jsonBit(of body: UnsafeRawBufferPointer) -> Datatype {
        body.count <= Limits.maxValueSize && JSON.isWellFormed(body) ? .json : .raw
    }

    func mutationDone(_ frame: Frame, _ r: MutationResult, infos: FrameInfos, into b: inout ByteBuffer) -> Outcome {
        if !(frame.opcode.isQuiet && infos.durabilityLevel == nil) {
            let extras = state.mutationSeqno ? 16 : 0
            let cas = frame.opcode.loud == .delete && !state.saidHello ? 0 : r.cas.rawValue
            b.writeResponseHeader(
                opcode: frame.opcode, status: .success, opaque: frame.opaque, cas: cas, extrasLength: extras)
            if extras > 0 {
                b.writeInteger(r.token.uuid.rawValue)
                b.writeInteger(r.token.seqno.rawValue)
            }
        }
        return persistIfNeeded(r, infos: infos)
    }

    /// A document's GET response: the body only, its XATTR section and the XATTR datatype bit stripped, as
    /// kv_engine answers GET (XATTRs are read with sub-document XATTR paths; ADR 0029).
    /// GETK's key is the client's wire key, not the engine key `key` (`CollectionKey.wireKey`): with
    /// `collectionAware` its LEB128 prefix, without it an escaped default key unescaped; written without a copy.
    static func writeDocument(
        value stored: UnsafeRawBufferPointer, meta: ItemMetadata, json: Bool, frame: Frame, includeKey: Bool,
        key: UnsafeRawBufferPointer, collectionAware: Bool, into b: inout ByteBuffer
    ) {
        var value = stored
        var datatype = meta.datatype
        if datatype.contains(.xattr) {
            value = UnsafeRawBufferPointer(rebasing: stored[(XattrSection.length(of: stored) ?? 0)...])
            datatype.remove(.xattr)
        }
        var wireKey = key
        var defaultPrefix = false
        if includeKey {
            if key.first == CollectionKey.engineMarker {
                wireKey = UnsafeRawBufferPointer(rebasing: key[min(key.count, collectionAware ? 1 : 2)...])
            } else {
                defaultPrefix = collectionAware
            }
        }
        b.writeResponseHeader(
            opcode: frame.opcode, status: .success, opaque: frame.opaque, cas: meta.cas.rawValue,
            datatype: json ? datatype.rawValue : 0,
            extrasLength: 4, keyLength: includeKey ? wireKey.count + (defaultPrefix ? 1 : 0) : 0,
            valueLength: value.count)
        b.writeInteger(meta.flags)
        if includeKey {
            if defaultPrefix { b.writeInteger(UInt8(0)) }  // LEB128 of the default collection's id
            b.writeBytes(wireKey)
        }
        b.writeBytes(value)
    }

    func writeDocument(_ doc: Document, frame: Frame, includeKey: Bool, key: [UInt8], into b: inout ByteBuffer) {
        let json = state.json
        let collectionAware = state.collections
        doc.value.withUnsafeBytes { value in
            key.withUnsafeBytes {
                Self.writeDocument(
                    value: value, meta: doc.meta, json: json, frame: frame, includeKey: includeKey, key: $0,
                    collectionAware: collectionAware, into: &b)
            }
        }
    }

    /// Answers NOT_MY_VBUCKET, with this node's bucket config, a request for a vBucket active here while this node
    /// holds no serving lease (ADR 0124): it may have been failed over while paused or cut off, and its first tick
    /// may not have run yet. NOT_MY_VBUCKET is what SDKs retry for every operation, mutations included (the request
    /// was not applied): at once on a newer config, else with backoff and their config poll, which finds the new
    /// active. Returns false (nothing answered) for a vBucket not active here, which the engine answers as always.
    func refusedWithoutLease(_ frame: Frame, bucket: ResolvedBucket) -> Bool {
        guard Int(frame.vbucket) < bucket.settings.numVBuckets,
            bucket.engine.vbucketState(VBucketID(frame.vbucket)) == .active
        else { return false }
        node.counters.leaseRefusals.wrappingAdd(1, ordering: .relaxed)
        emit { writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &$0) }
        return true
    }

    func writeNotMyVBucket(_ frame: Frame, bucket: String, into b: inout ByteBuffer) {
        node.counters.notMyVBucket.wrappingAdd(1, ordering: .relaxed)
        let config = node.registry.terseConfigJSON(bucket: bucket) ?? []
        b.writeResponse(
            opcode: frame.opcode, status: .notMyVBucket, opaque: frame.opaque, datatype: config.isEmpty ? 0 : 1,
            value: config)
    }
}

extension Frame {
    /// A fixed-width field of the request's extras at `offset`; nil past their end. `RequestShape.accepts`
    /// checked the opcode's extras width first, so callers answer EINVAL on nil rather than trap.
    func extrasField<T: FixedWidthInteger>(_ offset: Int, as: T.Type) -> T? {
        guard offset >= 0, offset + MemoryLayout<T>.size <= extras.readableBytes else { return nil }
        return extras.getInteger(at: extras.readerIndex + offset, as: T.self)
    }
}
