import SetteeClient
import SetteeCore
import Testing

/// OBSERVE_SEQNO replies as the KV port writes them (`KVConnectionHandler+DataOperations.swift`), decoded for the
/// gateway's full-commit barrier (ADR 0039).
@Suite struct ObservedSeqnoTests {
    static func bytes(_ v: UInt64, _ width: Int) -> [UInt8] {
        (0..<width).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
    }

    /// Proves format 0 and format 1 (failed over) decode to the fields written, and that a short reply or an unknown
    /// format is nil rather than a trap.
    @Test func decodesBothFormatsAndRefusesShortOnes() {
        let body0 = [0] + Self.bytes(17, 2) + Self.bytes(0xDEAD_BEEF, 8) + Self.bytes(40, 8) + Self.bytes(42, 8)
        #expect(
            ObservedSeqno.decode(body0)
                == ObservedSeqno(
                    vbucket: VBucketID(17), uuid: VBucketUUID(0xDEAD_BEEF), persistedSeqno: SeqNo(40),
                    currentSeqno: SeqNo(42), failedOver: false))
        let body1 = [1] + Array(body0.dropFirst()) + Self.bytes(7, 8) + Self.bytes(0, 8)
        #expect(ObservedSeqno.decode(body1)?.failedOver == true)
        #expect(ObservedSeqno.decode(Array(body0.prefix(26))) == nil)
        #expect(ObservedSeqno.decode([2] + Array(body0.dropFirst())) == nil)
        #expect(ObservedSeqno.decode([]) == nil)
    }
}
