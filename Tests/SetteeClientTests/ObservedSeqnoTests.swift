import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import Testing

/// OBSERVE_SEQNO replies as the node writes them (`ObserveSeqnoReply`), read into the smart client's typed value for
/// the gateway's full-commit barrier (ADR 0039).
@Suite struct ObservedSeqnoTests {
    /// Proves a reply in format 0 and in format 1 (failed over) reads to the node's fields, and that a short reply is
    /// nil rather than a trap.
    @Test func readsWhatTheNodeWrites() {
        for failedOver in [false, true] {
            let reply = ObserveSeqnoReply(
                vbucket: 17, uuid: 0xDEAD_BEEF, persistedSeqno: 40, currentSeqno: 42,
                failedOver: failedOver ? .init(oldUUID: 7, lastSeqno: 0) : nil)
            var b = ByteBuffer()
            reply.write(into: &b)
            #expect(
                ObservedSeqno.decode(b)
                    == ObservedSeqno(
                        vbucket: VBucketID(17), uuid: VBucketUUID(0xDEAD_BEEF), persistedSeqno: SeqNo(40),
                        currentSeqno: SeqNo(42), failedOver: failedOver))
            #expect(ObservedSeqno.decode(b.getSlice(at: 0, length: 26) ?? ByteBuffer()) == nil)
        }
        #expect(ObservedSeqno.decode(ByteBuffer()) == nil)
    }
}
