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

    // GET_AND_LOCK (0x94: extras u32 lock seconds, key) and UNLOCK_KEY (0x95: key, header CAS = the lock CAS)
    // are data requests (`execute`), with Couchbase's semantics (BucketEngine+Locks.swift): they share the
    // ordered answer queue and the evicted-value fetch and retry of every other data request.

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
            ops.cmdGet.wrappingAdd(1, ordering: .relaxed)
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
