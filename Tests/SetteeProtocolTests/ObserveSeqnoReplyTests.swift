import NIOCore
import SetteeProtocol
import Testing

/// OBSERVE_SEQNO reply values: the one layout the node writes and the smart client reads.
@Suite struct ObserveSeqnoReplyTests {
    static func bytes(_ v: UInt64, _ width: Int) -> [UInt8] {
        (0..<width).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
    }

    static let format0 = [0] + bytes(17, 2) + bytes(0xDEAD_BEEF, 8) + bytes(40, 8) + bytes(42, 8)
    static let format1 = [1] + Array(format0.dropFirst()) + bytes(7, 8) + bytes(0, 8)

    /// Proves both formats are written byte for byte as the layout says, and read back to the same value.
    @Test(arguments: [
        (
            format0,
            ObserveSeqnoReply(vbucket: 17, uuid: 0xDEAD_BEEF, persistedSeqno: 40, currentSeqno: 42, failedOver: nil)
        ),
        (
            format1,
            ObserveSeqnoReply(
                vbucket: 17, uuid: 0xDEAD_BEEF, persistedSeqno: 40, currentSeqno: 42,
                failedOver: .init(oldUUID: 7, lastSeqno: 0))
        ),
    ])
    func writesAndReadsTheLayout(wire: [UInt8], reply: ObserveSeqnoReply) {
        var b = ByteBuffer()
        reply.write(into: &b)
        #expect(Array(b.readableBytesView) == wire)
        #expect(reply.encodedLength == wire.count)
        #expect(ObserveSeqnoReply(decoding: ByteBuffer(bytes: wire)) == reply)
    }

    /// Proves every truncation of either format, an unknown format and an empty value decode to nil, not a trap.
    @Test func refusesShortAndUnknownValues() {
        for wire in [Self.format0, Self.format1] {
            for n in 0..<wire.count {
                #expect(ObserveSeqnoReply(decoding: ByteBuffer(bytes: Array(wire.prefix(n)))) == nil)
            }
        }
        #expect(ObserveSeqnoReply(decoding: ByteBuffer(bytes: [2] + Array(Self.format0.dropFirst()))) == nil)
    }
}
