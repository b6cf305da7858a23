import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage

/// OBSERVE (0x92): each listed key's state on this node's copy of its vBucket (`Observe`, `BucketEngine.observe`).
/// The keys carry their own vBuckets, so the frame's vBucket is not looked at. A key of a vBucket this node holds
/// neither as active nor as replica answers the whole request NOT_MY_VBUCKET with the map, as kv_engine does.
/// A key not on disk yet asks the flusher to write its vBucket now: an SDK polling for persistTo waits for its
/// write, not for the flusher's window (ADR 0107), as with OBSERVE_SEQNO.
extension KVConnectionHandler {
    func observe(_ frame: Frame) {
        guard let bucket = resolveBucket(for: frame) else { return }
        // OBSERVE reads; each key's collection is decided below (a scoped user, ADR 0141).
        let scopedRoles: [Role]?
        switch state.principal {
        case .user(_, let roles)? where !roles.grants(onBucket: bucket.settings.name).contains(.read):
            scopedRoles = roles
        default: scopedRoles = nil
        }
        let op = frame.opcode
        /// Answers the whole request with `status` and nothing else.
        func refuse(_ status: Status, datatype: UInt8 = 0, _ body: [UInt8]) {
            emit { $0.writeResponse(opcode: op, status: status, opaque: frame.opaque, datatype: datatype, value: body) }
        }
        guard frame.extras.readableBytes == 0, frame.key.readableBytes == 0 else {
            return refuse(.invalidArguments, ErrorText.invalidArguments)
        }
        let keys: [Observe.Key]
        do throws(Observe.ParseError) {
            keys = try Observe.parse(
                frame.value, maxKeys: Limits.observeMaxKeys,
                // A collection-aware client prefixes each key with its collection (up to 5 bytes of LEB128).
                maxKeyLength: Limits.maxKeyLength + (state.collections ? 5 : 0))
        } catch {
            let text = error == .tooManyKeys ? "more than \(Limits.observeMaxKeys) keys" : "malformed key list"
            return refuse(.invalidArguments, datatype: 1, ErrorText.context(text))
        }
        let engine = bucket.engine
        var answers: [Observe.Answer] = []
        answers.reserveCapacity(keys.count)
        var behind = Set<UInt16>()
        for k in keys {
            var documentKey = k.key
            if state.collections {
                switch observedEngineKey(k.key, bucket: bucket) {
                case .success(let engineKey): documentKey = engineKey
                case .failure(let r): return refuse(r.status, datatype: r.datatype, r.body)
                }
            } else if documentKey.first == CollectionKey.engineMarker {
                switch Self.observedDefaultKey(documentKey) {
                case .success(let engineKey): documentKey = engineKey
                case .failure(let r): return refuse(r.status, datatype: r.datatype, r.body)
                }
            }
            if let roles = scopedRoles,
                let r = keyspaceRefusal(roles.access(.read, bucket: bucket, engineKey: documentKey), bucket: bucket)
            {
                return refuse(r.status, datatype: r.datatype, r.body)
            }
            let observed: KeyObservation
            do throws(EngineError) {
                observed = try engine.observe(VBucketID(k.vbucket), documentKey)
            } catch {
                if error == .notMyVBucket {
                    emit { writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &$0) }
                    return
                }
                return refuse(error.status, datatype: error.messageDatatype, error.message)
            }
            let keyState: Observe.KeyState
            switch observed.state {
            case .notPersisted: keyState = .notPersisted
            case .persisted: keyState = .persisted
            case .notFound: keyState = .notFound
            case .deleted: keyState = .logicallyDeleted
            }
            if keyState == .notPersisted || keyState == .logicallyDeleted { behind.insert(k.vbucket) }
            answers.append(Observe.Answer(vbucket: k.vbucket, key: k.key, state: keyState, cas: observed.cas.rawValue))
        }
        for vb in behind { engine.persistSoon(VBucketID(vb)) }
        emit {
            $0.writeResponseHeader(
                opcode: op, status: .success, opaque: frame.opaque, valueLength: Observe.encodedLength(answers))
            Observe.write(answers, into: &$0)
        }
    }
}
