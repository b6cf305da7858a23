import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeNode

/// A replica's DCP connection bounds the bytes it stages across all its streams' open snapshots
/// (`Limits.dcpConsumerMaxStagedBytes`), beside the bound `StreamConsumer` puts on each snapshot.
@Suite struct ConsumerStagedBytesTests {
    /// Proves a producer that opens a snapshot on each of four replica vBuckets and sends three 128 KiB items in each,
    /// never ending them, cannot make the connection stage more than its bound (lowered here to seven such items): the
    /// two vBuckets whose second item would pass it have their streams closed and their items dropped, the first two
    /// keep theirs, and the closed streams reopen. Frames are fed to the connection directly, on an embedded loop; no
    /// socket (its sends go nowhere without a channel).
    @Test func stagingAcrossStreamsStopsAtTheConnectionBound() throws {
        let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        let dir = TemporaryDirectory("consumer-staged")
        defer { dir.remove() }
        let settings = BucketSettings(
            name: "demo", uuid: String(repeating: "ab", count: 16), ramQuotaMB: 256, numVBuckets: 4)
        let engine = try BucketEngine(
            settings: settings, directory: dir.path, logger: quiet)
        defer { engine.shutdown() }
        for vb in 0..<4 { engine.setVBucketState(VBucketID(UInt16(vb)), .replica) }
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        defer { try? pool.syncShutdownGracefully() }
        let loop = EmbeddedEventLoop()
        let connection = ConsumerConnection(
            bucket: "demo", source: NodeID("source@127.0.0.1"), selfNode: NodeID("replica@127.0.0.1"),
            host: "127.0.0.1", port: 1, loop: loop, engine: engine, credentials: { nil }, pool: pool,
            counters: ReplicationCounters(), logger: quiet)
        let value = [UInt8](repeating: 0x61, count: 128 * 1024)
        let perItem = 2 + value.count  // key "k<i>" and value
        connection.maxStagedBytes = 7 * perItem
        connection.phase = .ready
        connection.update(wanted: [0, 1, 2, 3], host: "127.0.0.1", port: 1)
        loop.run()
        #expect(connection.streams.keys.sorted() == [0, 1, 2, 3])

        for vb: UInt16 in 0..<4 {
            let opaque = ConsumerConnection.streamOpaqueBase | UInt32(vb)
            var log = ByteBuffer()
            log.writeDCPFailoverLog([(uuid: 7, seqno: 0)])
            var b = ByteBuffer()
            b.writeResponseHeader(
                opcode: .dcpStreamRequest, status: .success, opaque: opaque, datatype: 0, extrasLength: 0,
                valueLength: log.readableBytes)
            b.writeBuffer(&log)
            b.writeDCPSnapshotMarker(
                opaque: opaque, vbucket: vb, start: 1, end: UInt64(Int32.max), flags: DCPSnapshotFlags.memory)
            for i in 1...3 {
                b.writeDCPMutation(
                    opaque: opaque, vbucket: vb, key: Array("k\(i)".utf8), value: value, cas: UInt64(i), datatype: 0,
                    bySeqno: UInt64(i), revSeqno: 1, flags: 0, expiry: 0)
            }
            while let frame = try FrameDecoder.decode(&b, maxBodyLength: Limits.maxFrameBodySize) {
                #expect(connection.handle(frame))
            }
        }
        // 0 and 1 stage six items; 2's second would make eight, and so would 3's once 2's first was dropped.
        #expect(connection.stagedBytes == 6 * perItem)
        #expect(connection.stagedBytes <= connection.maxStagedBytes)
        #expect(connection.streams.keys.sorted() == [0, 1])
        #expect(connection.streams[0]?.staged.count == 3 && connection.streams[1]?.staged.count == 3)
        #expect(connection.streams.values.map(\.stagedBytes).reduce(0, +) == connection.stagedBytes)

        loop.advanceTime(by: .milliseconds(100))  // `reopenLater`
        #expect(connection.streams.keys.sorted() == [0, 1, 2, 3])
        #expect(connection.streams[2]?.machine.state == .requesting)
        #expect(connection.streams[3]?.machine.state == .requesting)
        try loop.syncShutdownGracefully()
    }
}
