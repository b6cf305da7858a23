import NIOCore
import SetteeProtocol
import Testing

@Suite struct DCPCodecTests {
    /// DCP messages written by the producer decode as frames with kv_engine's layouts: a mutation's 31
    /// extras bytes (seqnos, flags, expiry), a deletion's 18, a marker's 20, a stream end's 4.
    @Test func producerMessagesDecode() throws {
        var b = ByteBuffer()
        b.writeDCPSnapshotMarker(opaque: 9, vbucket: 3, start: 5, end: 8, flags: DCPSnapshotFlags.memory)
        b.writeDCPMutation(
            opaque: 9, vbucket: 3, key: Array("k".utf8), value: [1, 2], cas: 77, datatype: 1, bySeqno: 6, revSeqno: 2,
            flags: 0xdead_beef, expiry: 100)
        b.writeDCPDeletion(opaque: 9, vbucket: 3, key: Array("d".utf8), cas: 78, bySeqno: 8, revSeqno: 3)
        b.writeDCPStreamEnd(opaque: 9, vbucket: 3, flag: .stateChanged)

        let marker = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(marker.opcode == .dcpSnapshotMarker && marker.magic == .clientRequest && marker.opaque == 9)
        #expect(marker.extras.readableBytes == DCPExtras.snapshotMarkerLength)
        #expect(marker.extras.getInteger(at: marker.extras.readerIndex + 8, as: UInt64.self) == 8)

        let m = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(m.opcode == .dcpMutation && m.vbucket == 3 && m.cas == 77 && m.datatype == 1)
        #expect(m.extras.readableBytes == DCPExtras.mutationLength)
        #expect(m.extras.getInteger(at: m.extras.readerIndex, as: UInt64.self) == 6)
        #expect(m.extras.getInteger(at: m.extras.readerIndex + 8, as: UInt64.self) == 2)
        #expect(m.extras.getInteger(at: m.extras.readerIndex + 16, as: UInt32.self) == 0xdead_beef)
        #expect(m.extras.getInteger(at: m.extras.readerIndex + 20, as: UInt32.self) == 100)
        #expect(Array(m.key.readableBytesView) == Array("k".utf8) && Array(m.value.readableBytesView) == [1, 2])

        let d = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(
            d.opcode == .dcpDeletion && d.extras.readableBytes == DCPExtras.deletionLength && d.value.readableBytes == 0
        )

        let end = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(end.opcode == .dcpStreamEnd && end.extras.getInteger(at: end.extras.readerIndex, as: UInt32.self) == 2)
        #expect(b.readableBytes == 0)
    }

    /// Stream-request extras round-trip through their 48-byte form; failover logs through 16-byte pairs,
    /// and malformed ones are rejected.
    @Test func streamRequestAndFailoverLog() {
        let x = DCPExtras.StreamRequest(flags: 4, start: 10, end: UInt64.max, uuid: 0xabc, snapStart: 8, snapEnd: 12)
        var b = ByteBuffer()
        x.write(to: &b)
        #expect(b.readableBytes == DCPExtras.StreamRequest.length)
        #expect(DCPExtras.StreamRequest(b) == x)
        #expect(DCPExtras.StreamRequest(ByteBuffer(bytes: [0, 1])) == nil)

        var log = ByteBuffer()
        log.writeDCPFailoverLog([(uuid: 5, seqno: 100), (uuid: 4, seqno: 0)])
        let entries = readDCPFailoverLog(log)
        #expect(entries?.count == 2 && entries?[0].uuid == 5 && entries?[0].seqno == 100 && entries?[1].uuid == 4)
        #expect(readDCPFailoverLog(ByteBuffer(bytes: [1, 2, 3])) == nil)
        #expect(readDCPFailoverLog(ByteBuffer()) == nil)
    }
}
