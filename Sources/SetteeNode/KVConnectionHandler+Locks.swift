import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import Synchronization

extension KVConnectionHandler {
    /// kv_engine's NOT_LOCKED: UNLOCK_KEY of a document that is not locked.
    static let notLockedStatus = Status(0x0e)
    /// The CAS a GET reports for a locked document (kv_engine's `LOCKED_CAS`, -1).
    static let lockedCAS = UInt64.max

    /// GET_AND_LOCK (0x94: extras u32 lock seconds, key) and UNLOCK_KEY (0x95: key, header CAS = the
    /// lock CAS), with Couchbase's semantics (BucketEngine+Locks.swift).
    func lockOperation(_ frame: Frame) {
        guard let (engine, settings) = resolveBucket(for: frame) else { return }
        guard authorize(frame, bucket: settings.name) else { return }
        guard RequestShape.accepts(frame, maxKeyLength: Limits.maxKeyLength) else {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque,
                    value: ErrorText.invalidArguments)
            }
            return
        }
        if Int(frame.vbucket) >= settings.numVBuckets {
            emit { writeNotMyVBucket(frame, bucket: settings.name, into: &$0) }
            return
        }
        if slots.isEmpty {
            if case .done = runLock(frame, engine: engine, settings: settings, into: &out) { return }
        }
        // Behind a waiting response, or the value must come back from disk first.
        let slot = reserveSlot()
        var b = ByteBuffer()
        guard case .wouldBlock(let vb, let key) = runLock(frame, engine: engine, settings: settings, into: &b) else {
            complete(slot, b)
            return
        }
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        engine.fetch(vb, key) {
            loop.execute {
                let h = handler.value
                var again = ByteBuffer()
                if case .wouldBlock = h.runLock(frame, engine: engine, settings: settings, into: &again) {
                    again.writeResponseHeader(opcode: frame.opcode, status: .temporaryFailure, opaque: frame.opaque)
                }
                h.complete(slot, again)
            }
        }
    }

    private func runLock(
        _ frame: Frame, engine: BucketEngine, settings: BucketSettings, into b: inout ByteBuffer
    ) -> Outcome {
        let vb = VBucketID(frame.vbucket)
        let key = Array(frame.key.readableBytesView)
        do throws(EngineError) {
            if frame.opcode == .getLocked {
                guard let seconds = frame.extrasField(0, as: UInt32.self) else { throw EngineError.invalidArguments }
                let doc = try engine.getAndLock(vb, key, lockSeconds: seconds)
                node.counters.cmdGet.wrappingAdd(1, ordering: .relaxed)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            } else {
                try engine.unlock(vb, key, cas: CAS(frame.cas))
                b.writeResponseHeader(opcode: frame.opcode, status: .success, opaque: frame.opaque)
            }
        } catch {
            switch error {
            case .wouldBlock:
                return .wouldBlock(vb, key)
            case .notMyVBucket:
                writeNotMyVBucket(frame, bucket: settings.name, into: &b)
            case .temporaryFailure where frame.opcode == .unlockKey:
                b.writeResponse(
                    opcode: frame.opcode, status: Self.notLockedStatus, opaque: frame.opaque,
                    value: Array("Not locked".utf8))
            default:
                b.writeResponse(opcode: frame.opcode, status: error.status, opaque: frame.opaque, value: error.message)
            }
        }
        return .done
    }

    /// Lock rules for ordinary data operations, checked only while some document may be locked
    /// (`BucketEngine.mayHaveLocks`): a mutation of a locked document without the lock CAS is refused
    /// with LOCKED (0x09), and a GET or GET_META of one reports CAS -1. Returns true when it answered
    /// the frame.
    func answeredByLock(_ frame: Frame, engine: BucketEngine) -> Bool {
        let loud = frame.opcode.loud
        switch loud {
        case .get, .getk, .getMeta, .set, .replace, .delete, .increment, .decrement, .append, .prepend, .touch, .gat:
            break
        default: return false
        }
        let keyLength = frame.key.readableBytes
        guard keyLength > 0, keyLength <= Limits.maxKeyLength, Int(frame.vbucket) < engine.settings.numVBuckets
        else { return false }
        let vb = VBucketID(frame.vbucket)
        let key = Array(frame.key.readableBytesView)
        guard let lockCAS = engine.lockCAS(vb, key) else { return false }
        if loud == .get || loud == .getk {
            guard let doc = try? engine.get(vb, key) else { return false }
            var hidden = doc
            hidden.meta.cas = CAS(Self.lockedCAS)
            node.counters.cmdGet.wrappingAdd(1, ordering: .relaxed)
            emit { writeDocument(hidden, frame: frame, includeKey: loud == .getk, key: key, into: &$0) }
            return true
        }
        if loud == .getMeta {
            // The lock CAS is the holder's secret: GET_META shows -1 too, or any reader could unlock.
            let extrasLength = frame.extras.readableBytes
            guard extrasLength <= 1, frame.value.readableBytes == 0, let meta = try? engine.getMeta(vb, key) else {
                return false
            }
            let version = extrasLength == 1 ? (frame.extrasField(0, as: UInt8.self) ?? 1) : 1
            emit { b in
                b.writeResponseHeader(
                    opcode: frame.opcode, status: .success, opaque: frame.opaque, cas: Self.lockedCAS,
                    extrasLength: version >= 2 ? 21 : 20)
                b.writeInteger(UInt32(meta.deleted ? 1 : 0))
                b.writeInteger(meta.flags)
                b.writeInteger(meta.expiry)
                b.writeInteger(meta.revSeqno.rawValue)
                if version >= 2 { b.writeInteger(state.json ? meta.datatype.rawValue : 0) }
            }
            return true
        }
        if frame.cas == lockCAS.rawValue && loud != .touch && loud != .gat { return false }
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .locked, opaque: frame.opaque, value: Array("Document is locked".utf8))
        }
        return true
    }
}
