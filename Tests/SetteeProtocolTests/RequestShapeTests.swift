import NIOCore
import SetteeCore
import SetteeProtocol
import Testing

/// The request shape table the KV port checks before running a data request (EINVAL otherwise), without a
/// server: each opcode's accepted extras, key, value and CAS, the quiet forms sharing their loud form's shape,
/// and the key-length limit.
@Suite struct RequestShapeTests {
    struct Case: Sendable, CustomStringConvertible {
        var opcode: Opcode
        var extras: Int
        var key: Int
        var value: Int
        var cas: UInt64 = 0
        var accepted: Bool
        var description: String {
            "0x\(String(opcode.rawValue, radix: 16)) extras \(extras) key \(key) value \(value) cas \(cas)"
        }
    }

    static let cases: [Case] = [
        // GET family: key only.
        Case(opcode: .get, extras: 0, key: 3, value: 0, accepted: true),
        Case(opcode: .getq, extras: 0, key: 3, value: 0, accepted: true),
        Case(opcode: .getkq, extras: 0, key: 3, value: 0, accepted: true),
        Case(opcode: .get, extras: 4, key: 3, value: 0, accepted: false),
        Case(opcode: .get, extras: 0, key: 0, value: 0, accepted: false),
        Case(opcode: .get, extras: 0, key: 3, value: 1, accepted: false),
        Case(opcode: .getReplica, extras: 0, key: 3, value: 0, accepted: true),
        Case(opcode: .delete, extras: 0, key: 3, value: 0, cas: 9, accepted: true),
        Case(opcode: .deleteq, extras: 0, key: 3, value: 2, accepted: false),
        // GET_META: optional version byte.
        Case(opcode: .getMeta, extras: 1, key: 3, value: 0, accepted: true),
        Case(opcode: .getMeta, extras: 2, key: 3, value: 0, accepted: false),
        // Stores: 8 extras (flags, expiry), any value; ADD refuses a CAS.
        Case(opcode: .set, extras: 8, key: 3, value: 100, cas: 5, accepted: true),
        Case(opcode: .setq, extras: 8, key: 3, value: 0, accepted: true),
        Case(opcode: .set, extras: 4, key: 3, value: 1, accepted: false),
        Case(opcode: .replace, extras: 8, key: 0, value: 1, accepted: false),
        Case(opcode: .add, extras: 8, key: 3, value: 1, accepted: true),
        Case(opcode: .addq, extras: 8, key: 3, value: 1, cas: 1, accepted: false),
        // Arithmetic: 20 extras, no value.
        Case(opcode: .increment, extras: 20, key: 3, value: 0, accepted: true),
        Case(opcode: .decrementq, extras: 20, key: 3, value: 0, accepted: true),
        Case(opcode: .increment, extras: 19, key: 3, value: 0, accepted: false),
        Case(opcode: .decrement, extras: 20, key: 3, value: 8, accepted: false),
        // APPEND/PREPEND: no extras.
        Case(opcode: .append, extras: 0, key: 3, value: 5, accepted: true),
        Case(opcode: .prependq, extras: 8, key: 3, value: 5, accepted: false),
        // TOUCH/GAT: 4 extras (expiry).
        Case(opcode: .touch, extras: 4, key: 3, value: 0, accepted: true),
        Case(opcode: .gatq, extras: 4, key: 3, value: 0, accepted: true),
        Case(opcode: .gat, extras: 0, key: 3, value: 0, accepted: false),
        // OBSERVE_SEQNO: no key, the 8-byte vBucket uuid as value.
        Case(opcode: .observeSeqno, extras: 0, key: 0, value: 8, accepted: true),
        Case(opcode: .observeSeqno, extras: 0, key: 1, value: 8, accepted: false),
        Case(opcode: .observeSeqno, extras: 0, key: 0, value: 7, accepted: false),
        // Locks: GET_LOCKED has the lock time, UNLOCK_KEY names the lock by CAS.
        Case(opcode: .getLocked, extras: 4, key: 3, value: 0, accepted: true),
        Case(opcode: .getLocked, extras: 0, key: 3, value: 0, accepted: false),
        Case(opcode: .unlockKey, extras: 0, key: 3, value: 0, cas: 7, accepted: true),
        Case(opcode: .unlockKey, extras: 0, key: 3, value: 0, cas: 0, accepted: false),
        // FLUSH: optional 4-byte delay, nothing else checked.
        Case(opcode: .flush, extras: 0, key: 0, value: 0, accepted: true),
        Case(opcode: .flushq, extras: 4, key: 0, value: 0, accepted: true),
        Case(opcode: .flush, extras: 8, key: 0, value: 0, accepted: false),
        // Not in the table: never accepted here.
        Case(opcode: .noop, extras: 0, key: 0, value: 0, accepted: false),
        Case(opcode: .hello, extras: 0, key: 3, value: 4, accepted: false),
    ]

    /// Proves each row of the table: the lengths and CAS given are accepted or refused as kv_engine's validators do.
    @Test(arguments: cases)
    func shape(_ c: Case) {
        let frame = Frame(
            magic: .clientRequest, opcode: c.opcode, cas: c.cas,
            extras: ByteBuffer(bytes: Array(repeating: 0, count: c.extras)),
            key: ByteBuffer(bytes: Array(repeating: 0x6b, count: c.key)),
            value: ByteBuffer(bytes: Array(repeating: 0, count: c.value)))
        #expect(RequestShape.accepts(frame, maxKeyLength: Limits.maxKeyLength) == c.accepted)
    }

    /// Proves a required key is bounded by the limit (250 bytes in, 251 out) and an optional one is not.
    @Test func keyLengthLimit() throws {
        let get = try #require(RequestShape.of(.get))
        #expect(get.accepts(extrasLength: 0, keyLength: 250, valueLength: 0, cas: 0, maxKeyLength: 250))
        #expect(!get.accepts(extrasLength: 0, keyLength: 251, valueLength: 0, cas: 0, maxKeyLength: 250))
        let flush = try #require(RequestShape.of(.flush))
        #expect(flush.accepts(extrasLength: 0, keyLength: 1000, valueLength: 0, cas: 0, maxKeyLength: 250))
    }

    /// Proves every quiet opcode has its loud form's shape.
    @Test func quietFormsShareTheirLoudShape() {
        let quiet: [Opcode] = [
            .getq, .getkq, .setq, .addq, .replaceq, .deleteq, .incrementq, .decrementq, .appendq, .prependq, .gatq,
            .flushq,
        ]
        for op in quiet {
            #expect(op.isQuiet)
            #expect(RequestShape.of(op) != nil && RequestShape.of(op) == RequestShape.of(op.loud))
        }
    }
}
